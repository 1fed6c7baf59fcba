// The next message a stream stores on a subject, from a sequence on, as its sequence and its event
// sequence header: the ordering gate's question (issue 21). A plain request on one reply subscription
// (src/nats/replies.ts) that reads only those two: nats.js's jsm.streams.getMessage builds a request of
// its own each time and decodes the whole stored message (measured on 2.9.10: ~100 µs of client CPU per
// read against ~35 µs here). `$JS.API.STREAM.MSG.GET.<stream>` with `next_by_subj`.
import { Match, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { headerBlock } from './wire-headers.ts';
import { createReplies } from './replies.ts';

export interface Stored {
  seq: number;
  /** Its `hookstream-event-seq` header (the EVENTS sequence of a delivery's event), when it has one. */
  eventSeq: number | undefined;
}

export interface NextBySubject {
  /** The oldest message stored on `subject` at or after `from`, or null when there is none. */
  next(stream: string, subject: string, from: number): Promise<Stored | null>;
  /**
   * The message stored at `seq`, or null when it is gone: how the gate checks again what it has read once.
   * By sequence, not by subject: below 2.10 a subject's index could skip a stored message
   * (test/server-floor.test.ts).
   */
  at(stream: string, seq: number): Promise<Stored | null>;
  /** The last message stored on `subject`, or null when there is none. */
  last(stream: string, subject: string): Promise<Stored | null>;
  close(): void;
}

export class NextBySubjectError extends Error {
  /** JetStream's error code when the server answered with one (10059: no such stream). */
  readonly code: number | undefined;
  constructor(message: string, code?: number) {
    super(message);
    this.name = 'NextBySubjectError';
    this.code = code;
  }
}

/** nats-server's answer when no message matches (10037; a direct get's status 404). */
const NO_MESSAGE_FOUND = 10037;
const NO_MESSAGE_STATUS = 404;
const EVENT_SEQ_HEADER = 'hookstream-event-seq';
// The stored message's fields come in the order subject, seq, hdrs, data: both are near the start.
const SEQ = /"seq":(\d+)/;
const HDRS = /"hdrs":"([A-Za-z0-9+/=]*)"/;
const EVENT_SEQ = /\r\nhookstream-event-seq: *(\d+)\r\n/i;
const ERR_CODE = /"err_code":(\d+)/;
const utf8 = new TextDecoder();

function readStored(m: Msg): Stored | null {
  if (m.data.length === 0) throw new NextBySubjectError(`no answer from the stream (status ${m.headers?.code ?? '?'})`);
  // Only the start of the answer: seq and headers come before the body, an error is short.
  const head = utf8.decode(m.data.subarray(0, 4096));
  if (head.includes('"error"')) {
    if (Number(ERR_CODE.exec(head)?.[1]) === NO_MESSAGE_FOUND) return null;
    throw new NextBySubjectError(`stream message get failed: ${head.slice(0, 200)}`);
  }
  const seq = Number(SEQ.exec(head)?.[1]);
  if (!Number.isSafeInteger(seq)) throw new NextBySubjectError('stream message get answered without a sequence');
  const hdrs = HDRS.exec(head)?.[1];
  const eventSeq = hdrs ? Number(EVENT_SEQ.exec(Buffer.from(hdrs, 'base64').toString('latin1'))?.[1]) : NaN;
  return { seq, eventSeq: Number.isSafeInteger(eventSeq) ? eventSeq : undefined };
}

/** A stored message with its subject and body (no headers): what the router's drain records' read takes. */
export interface StoredMessage {
  seq: number;
  subject: string;
  data: Uint8Array;
}

interface MsgGetAnswer {
  message?: { subject?: string; seq?: number; data?: string };
  error?: { code?: number; err_code?: number; description?: string };
}

function readMessage(m: Msg): StoredMessage | null {
  if (m.data.length === 0) throw new NextBySubjectError(`no answer from the stream (status ${m.headers?.code ?? '?'})`);
  let answer: MsgGetAnswer;
  try {
    answer = JSON.parse(utf8.decode(m.data)) as MsgGetAnswer;
  } catch {
    throw new NextBySubjectError('stream message get answered with invalid JSON');
  }
  if (answer.error) {
    const code = answer.error.err_code ?? answer.error.code;
    if (code === NO_MESSAGE_FOUND) return null;
    throw new NextBySubjectError(`stream message get failed: ${answer.error.description ?? 'error'}${code === undefined ? '' : ` (${code})`}`, code);
  }
  const { seq, subject, data } = answer.message ?? {};
  if (!Number.isSafeInteger(seq) || typeof subject !== 'string') throw new NextBySubjectError('stream message get answered without a message');
  return { seq: seq!, subject, data: data ? Buffer.from(data, 'base64') : new Uint8Array(0) };
}

export interface NextMessages {
  /** The oldest message stored on `subject` (wildcards allowed) at or after `from`, or null when there is none. */
  next(stream: string, subject: string, from: number): Promise<StoredMessage | null>;
  close(): void;
}

/**
 * The same read for a whole message, where a caller reads it often: the router's drain records, read up to
 * every 2 ms while events arrive (src/router/drains.ts). nats.js's getMessage makes each read a request of
 * its own, with three errors and their stack traces (the request's context, its timer, and the "cancelled"
 * one it rejects its settled promise with), and a fourth for the usual answer, "no message".
 */
export function createNextMessages(nc: NatsConnection, opts: { timeoutMs: number; inboxPrefix?: string }): NextMessages {
  const replies = createReplies(nc, { ...opts, read: readMessage, fail: (why) => new NextBySubjectError(`no answer: ${why}`) });
  return {
    next: (stream, subject, from) => replies.request(`$JS.API.STREAM.MSG.GET.${stream}`, JSON.stringify({ seq: from, next_by_subj: subject })),
    close: replies.close,
  };
}

const STATUS = /^NATS\/1\.0(?: +(\d{3}) *([^\r]*))?\r\n/;
const NATS_SEQUENCE = /\r\nNats-Sequence: *(\d+)\r\n/;

/**
 * A direct get's answer: the stored message with its place in headers, or a status (404: none). Read
 * from the header block's bytes (src/nats/wire-headers.ts): nats.js's decoder rebuilds every header.
 */
export function readDirect(m: Msg): Stored | null {
  const block = headerBlock(m);
  if (block === null) return readDirectHeaders(m);
  const text = block === undefined ? '' : utf8.decode(block);
  const status = STATUS.exec(text);
  if (!status) throw new NextBySubjectError('direct get answered without headers');
  if (status[1] !== undefined) {
    if (Number(status[1]) === NO_MESSAGE_STATUS) return null;
    throw new NextBySubjectError(`direct get failed: ${status[1]} ${status[2] ?? ''}`.trim());
  }
  return stored(Number(NATS_SEQUENCE.exec(text)?.[1]), Number(EVENT_SEQ.exec(text)?.[1]));
}

/** The same through nats.js's decoder, should its message no longer show the header block. */
function readDirectHeaders(m: Msg): Stored | null {
  const h = m.headers;
  if (h?.code === NO_MESSAGE_STATUS) return null;
  if (!h || h.hasError) throw new NextBySubjectError(`direct get failed: ${h ? `${h.code} ${h.description}` : 'no headers'}`);
  return stored(Number(h.get('Nats-Sequence')), Number(h.get(EVENT_SEQ_HEADER, Match.IgnoreCase) || NaN));
}

function stored(seq: number, eventSeq: number): Stored {
  if (!Number.isSafeInteger(seq) || seq <= 0) throw new NextBySubjectError('direct get answered without a sequence');
  return { seq, eventSeq: Number.isSafeInteger(eventSeq) ? eventSeq : undefined };
}

/**
 * `direct`: read with `$JS.API.DIRECT.GET.<stream>` (the stream allows direct gets), which nats-server
 * answers in the requester's connection with the stored message as it is, instead of through the
 * JetStream API with the message in base64 JSON: half the server's CPU per read (measured on 2.10.27).
 * Only on a stream without replicas: a replica may answer a direct get before it has what its leader
 * stored.
 */
export function createNextBySubject(nc: NatsConnection, opts: { timeoutMs: number; inboxPrefix?: string; direct?: boolean }): NextBySubject {
  const replies = createReplies(nc, { ...opts, read: opts.direct ? readDirect : readStored, fail: (why) => new NextBySubjectError(`no answer: ${why}`) });
  const api = opts.direct ? '$JS.API.DIRECT.GET.' : '$JS.API.STREAM.MSG.GET.';
  return {
    next: (stream, subject, from) => replies.request(`${api}${stream}`, JSON.stringify({ seq: from, next_by_subj: subject })),
    at: (stream, seq) => replies.request(`${api}${stream}`, JSON.stringify({ seq })),
    last: (stream, subject) => replies.request(`${api}${stream}`, JSON.stringify({ last_by_subj: subject })),
    close: replies.close,
  };
}
