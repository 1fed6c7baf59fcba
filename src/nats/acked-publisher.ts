// JetStream publishes awaited through one reply subscription: what `js.publish` does, without its
// per-publish request machinery. nats.js makes every JetStream publish a request of its own: a mux entry,
// a deferred, a timer, a TextDecoder for the answer, and on every answer an Error with a stack trace
// (RequestOne.cancel builds a "cancelled" RequestError even after success): ~4 % of the service's CPU in
// the issue 5 throughput profile, where the router publishes one message per delivery (and the delivery
// role one per failed attempt). Here a publish is
// a plain PUB with a reply subject under one wildcard subscription (src/nats/replies.ts). The server's answer means the same as for
// `js.publish`: stored (or a duplicate of a stored message, by Nats-Msg-Id), or an API error; except a
// duplicate at sequence 0, which is not taken as stored (readPubAck).
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { createReplies } from './replies.ts';

/** The answer of JetStream to a publish, when it is not stored. */
export class PublishRejectedError extends Error {
  readonly code: number | undefined;
  constructor(message: string, code?: number) {
    super(message);
    this.name = 'PublishRejectedError';
    this.code = code;
  }
}

/** Where JetStream stored a message (for a duplicate by Nats-Msg-Id, where the original is). */
export interface StoredAt {
  stream: string;
  seq: number;
}

export interface AckedPublisher {
  /** Resolves once JetStream has stored the message (or found it a duplicate by Nats-Msg-Id). */
  publish(subject: string, body: string | Uint8Array, headers?: MsgHdrs): Promise<StoredAt>;
  /** Rejects whatever is still waiting and stops listening. */
  close(): void;
  /** Takes no new publish, waits for the acknowledgements still due (each within its timeout), then closes. */
  drain(): Promise<void>;
}

interface PubAckAnswer {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  error?: { code?: number; err_code?: number; description?: string };
}

/**
 * The puback's place, or throws why the publish was not stored. `{"duplicate":true,"seq":0}` is a server
 * that found the Nats-Msg-Id in its window before the first copy was stored (a clustered stream with the
 * first publish still being proposed): that copy may yet be lost with a leader change, and nats-server
 * 2.10.27 lost 1-2 deliveries of the fault suite that way. Not stored, then: the caller publishes again
 * under the same id, which the server then answers with the first copy's sequence or stores.
 */
function readPubAck(m: Msg): StoredAt {
  if (m.data.length === 0 && m.headers?.code === 503) throw new PublishRejectedError('no responders: no stream listens on the subject', 503);
  let answer: PubAckAnswer;
  try {
    answer = JSON.parse(m.string()) as PubAckAnswer;
  } catch {
    throw new PublishRejectedError('invalid publish acknowledgement');
  }
  if (answer.error) {
    const code = answer.error.err_code ?? answer.error.code;
    throw new PublishRejectedError(`${answer.error.description ?? 'publish rejected'}${code === undefined ? '' : ` (${code})`}`, code);
  }
  if (!answer.stream) throw new PublishRejectedError('invalid publish acknowledgement');
  if (answer.duplicate && !answer.seq) throw new PublishRejectedError('duplicate of a publish not stored yet (sequence 0); publish it again');
  return { stream: answer.stream, seq: answer.seq ?? 0 };
}

export function createAckedPublisher(nc: NatsConnection, opts: { timeoutMs: number; inboxPrefix?: string }): AckedPublisher {
  const replies = createReplies(nc, {
    ...opts,
    read: readPubAck,
    fail: (why) => new PublishRejectedError(why === 'timeout' ? `no publish acknowledgement within ${opts.timeoutMs}ms` : why === 'closed' ? 'publisher closed' : 'connection closed'),
  });
  return { publish: replies.request, close: replies.close, drain: replies.drain };
}
