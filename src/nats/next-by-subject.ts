// The sequence of the next message a stream stores on a subject, from a sequence on: the ordering gate's
// one question (issue 21), asked once per keyed delivery. A plain request on one reply subscription
// (src/nats/replies.ts) that reads only the sequence: nats.js's jsm.streams.getMessage builds a request of
// its own each time and decodes the whole stored message (measured on 2.9.10: ~100 µs of client CPU per
// read against ~35 µs here). `$JS.API.STREAM.MSG.GET.<stream>` with `next_by_subj` (nats-server 2.9 on).
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { createReplies } from './replies.ts';

export interface NextBySubject {
  /** The sequence of the oldest message stored on `subject` at or after `from`, or null when there is none. */
  next(stream: string, subject: string, from: number): Promise<number | null>;
  close(): void;
}

export class NextBySubjectError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NextBySubjectError';
  }
}

/** nats-server's answer when no message matches (10037). */
const NO_MESSAGE_FOUND = 10037;
// The stored message's fields come in the order subject, seq, hdrs, data: its seq is near the start.
const SEQ = /"seq":(\d+)/;
const ERR_CODE = /"err_code":(\d+)/;
const utf8 = new TextDecoder();

function readSeq(m: Msg): number | null {
  if (m.data.length === 0) throw new NextBySubjectError(`no answer from the stream (status ${m.headers?.code ?? '?'})`);
  // Only the start of the answer: the seq comes before the body, an error is short.
  const head = utf8.decode(m.data.subarray(0, 1024));
  if (head.includes('"error"')) {
    if (Number(ERR_CODE.exec(head)?.[1]) === NO_MESSAGE_FOUND) return null;
    throw new NextBySubjectError(`stream message get failed: ${head.slice(0, 200)}`);
  }
  const seq = Number(SEQ.exec(head)?.[1]);
  if (!Number.isSafeInteger(seq)) throw new NextBySubjectError('stream message get answered without a sequence');
  return seq;
}

export function createNextBySubject(nc: NatsConnection, opts: { timeoutMs: number; inboxPrefix?: string }): NextBySubject {
  const replies = createReplies(nc, { ...opts, read: readSeq, fail: (why) => new NextBySubjectError(`no answer: ${why}`) });
  return {
    next: (stream, subject, from) => replies.request(`$JS.API.STREAM.MSG.GET.${stream}`, JSON.stringify({ seq: from, next_by_subj: subject })),
    close: replies.close,
  };
}
