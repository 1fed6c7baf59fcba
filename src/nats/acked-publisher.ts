// JetStream publishes awaited through one reply subscription: what `js.publish` does, without its
// per-publish request machinery. nats.js makes every JetStream publish a request of its own: a mux entry,
// a deferred, a timer, a TextDecoder for the answer, and on every answer an Error with a stack trace
// (RequestOne.cancel builds a "cancelled" RequestError even after success): ~4 % of the service's CPU in
// the issue 5 throughput profile, where the router publishes one message per delivery (and the delivery
// role one per failed attempt). Here a publish is
// a plain PUB with a reply subject under one wildcard subscription, the answer is matched by a counter,
// and one timer sweeps for answers that never come. The server's answer means the same as for
// `js.publish`: stored (or a duplicate of a stored message, by Nats-Msg-Id), or an API error.
import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/nats-core';

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
}

interface Waiting {
  resolve: (at: StoredAt) => void;
  reject: (e: Error) => void;
  deadline: number;
}

interface PubAckAnswer {
  stream?: string;
  seq?: number;
  error?: { code?: number; err_code?: number; description?: string };
}

export function createAckedPublisher(nc: NatsConnection, opts: { timeoutMs: number; inboxPrefix?: string }): AckedPublisher {
  const prefix = createInbox(opts.inboxPrefix);
  const waiting = new Map<number, Waiting>();
  let next = 0;
  let closed = false;

  const settle = (m: Msg): void => {
    const id = Number(m.subject.slice(prefix.length + 1));
    const w = waiting.get(id);
    if (!w) return; // timed out already
    waiting.delete(id);
    if (m.data.length === 0 && m.headers?.code === 503) {
      w.reject(new PublishRejectedError('no responders: no stream listens on the subject', 503));
      return;
    }
    let answer: PubAckAnswer;
    try {
      answer = JSON.parse(m.string()) as PubAckAnswer;
    } catch {
      w.reject(new PublishRejectedError('invalid publish acknowledgement'));
      return;
    }
    if (answer.error) {
      const code = answer.error.err_code ?? answer.error.code;
      w.reject(new PublishRejectedError(`${answer.error.description ?? 'publish rejected'}${code === undefined ? '' : ` (${code})`}`, code));
    } else if (!answer.stream) {
      w.reject(new PublishRejectedError('invalid publish acknowledgement'));
    } else {
      w.resolve({ stream: answer.stream, seq: answer.seq ?? 0 });
    }
  };

  const sub: Subscription = nc.subscribe(`${prefix}.*`, {
    callback: (err, m) => {
      if (!err) settle(m);
    },
  });

  const failAll = (reason: string) => {
    for (const w of waiting.values()) w.reject(new PublishRejectedError(reason));
    waiting.clear();
  };

  // Map order is publish order and every publish has the same timeout: expired ones are at the front.
  const sweep = setInterval(() => {
    const now = performance.now();
    for (const [id, w] of waiting) {
      if (w.deadline > now) break;
      waiting.delete(id);
      w.reject(new PublishRejectedError(`no publish acknowledgement within ${opts.timeoutMs}ms`));
    }
  }, Math.max(10, Math.min(1000, opts.timeoutMs / 4)));
  sweep.unref();

  void sub.closed.then(() => failAll('connection closed'), () => failAll('connection closed'));

  return {
    publish(subject, body, headers) {
      if (closed) return Promise.reject(new PublishRejectedError('publisher closed'));
      const id = next++;
      return new Promise<StoredAt>((resolve, reject) => {
        waiting.set(id, { resolve, reject, deadline: performance.now() + opts.timeoutMs });
        try {
          nc.publish(subject, body, headers ? { reply: `${prefix}.${id}`, headers } : { reply: `${prefix}.${id}` });
        } catch (e) {
          waiting.delete(id);
          reject(e instanceof Error ? e : new PublishRejectedError(String(e)));
        }
      });
    },
    close() {
      if (closed) return;
      closed = true;
      clearInterval(sweep);
      sub.unsubscribe();
      failAll('publisher closed');
    },
  };
}
