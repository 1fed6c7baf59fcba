// A message pulled from a JetStream consumer by src/nats/pull-feed.ts: its place (from the ack subject) and
// its four acknowledgements. nats.js builds its JsMsg only inside its own consume()/fetch(); the feed pulls
// by hand (pulls sized to free lanes), so the message is read here, the same way.
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { headerBlock, WireHeaders } from './wire-headers.ts';

export interface DeliveryInfo {
  stream: string;
  consumer: string;
  /** 1 on the first delivery, n on the n-th. */
  deliveryCount: number;
  streamSequence: number;
}

export interface PulledMsg {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: MsgHdrs | undefined;
  /** The ack subject (`$JS.ACK.…`): a nak published to it later brings this delivery's retry forward. */
  readonly reply: string;
  readonly seq: number;
  readonly info: DeliveryInfo;
  ack(): void;
  /** Without a delay the server redelivers at once; with one it waits (see src/delivery/next-attempt.ts). */
  nak(delayMs?: number): void;
  working(): void;
  term(): void;
}

/**
 * `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>` (nats-server 2.9), or with
 * `<domain>.<account hash>.` after `$JS.ACK.` and a random token at the end (2.10 and later).
 */
export function parseAckSubject(reply: string): DeliveryInfo | undefined {
  const t = reply.split('.');
  if (t[0] !== '$JS' || t[1] !== 'ACK') return undefined;
  const at = t.length === 9 ? 2 : t.length >= 11 ? 4 : -1;
  if (at < 0) return undefined;
  const deliveryCount = Number(t[at + 2]);
  const streamSequence = Number(t[at + 3]);
  if (!Number.isSafeInteger(deliveryCount) || !Number.isSafeInteger(streamSequence)) return undefined;
  return { stream: t[at]!, consumer: t[at + 1]!, deliveryCount, streamSequence };
}

/** A non-negative integer written in `s` from `from` to `to`, or -1: read without cutting a string out. */
function digitsAt(s: string, from: number, to: number): number {
  if (to <= from || to - from > 15) return -1;
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/**
 * parseAckSubject for the messages of one consumer: once one is read in full, the others' subjects start
 * the same way up to the consumer's name, so only their two numbers are read (no split into a dozen strings
 * per delivery), and every delivery shares the first one's stream and consumer names.
 */
export function ackSubjectReader(): (reply: string) => DeliveryInfo | undefined {
  let known: { prefix: string; stream: string; consumer: string } | undefined;
  return (reply) => {
    if (known && reply.startsWith(known.prefix)) {
      const at = known.prefix.length;
      const dot = reply.indexOf('.', at);
      const deliveryCount = dot < 0 ? -1 : digitsAt(reply, at, dot);
      const end = dot < 0 ? -1 : reply.indexOf('.', dot + 1);
      const streamSequence = end < 0 ? -1 : digitsAt(reply, dot + 1, end);
      if (deliveryCount >= 0 && streamSequence >= 0) return { stream: known.stream, consumer: known.consumer, deliveryCount, streamSequence };
    }
    const info = parseAckSubject(reply);
    if (info) {
      // Up to and including the consumer's token: `$JS.ACK.[<domain>.<hash>.]<stream>.<consumer>.`, the
      // 4th dot (nine tokens, 2.9) or the 6th.
      const dots = reply.split('.').length === 9 ? 4 : 6;
      let end = -1;
      for (let i = 0; i < dots; i++) end = reply.indexOf('.', end + 1);
      known = { prefix: reply.slice(0, end + 1), stream: info.stream, consumer: info.consumer };
    }
    return info;
  };
}

// Encoded once: one is published per delivery.
const ACK = new TextEncoder().encode('+ACK');
const WORKING = new TextEncoder().encode('+WPI');
const TERM = new TextEncoder().encode('+TERM');

class Pulled implements PulledMsg {
  readonly info: DeliveryInfo;
  readonly #msg: Msg;
  readonly #nc: NatsConnection;
  /** Read on first use. */
  #headers: MsgHdrs | undefined | null = null;

  constructor(nc: NatsConnection, msg: Msg, info: DeliveryInfo) {
    this.#nc = nc;
    this.#msg = msg;
    this.info = info;
  }

  get subject() { return this.#msg.subject; }
  get data() { return this.#msg.data; }
  get headers() {
    if (this.#headers !== null) return this.#headers;
    const block = headerBlock(this.#msg);
    return (this.#headers = block === null ? this.#msg.headers : block && new WireHeaders(block));
  }
  get reply() { return this.#msg.reply!; }
  get seq() { return this.info.streamSequence; }
  ack() { this.#nc.publish(this.reply, ACK); }
  nak(delayMs?: number) { nakSubject(this.#nc, this.reply, delayMs); }
  working() { this.#nc.publish(this.reply, WORKING); }
  term() { this.#nc.publish(this.reply, TERM); }
}

/** Nak a delivery by its ack subject (no delay: redelivered at once). */
export function nakSubject(nc: NatsConnection, reply: string, delayMs?: number): void {
  nc.publish(reply, delayMs === undefined ? '-NAK' : `-NAK ${JSON.stringify({ delay: Math.round(delayMs * 1e6) })}`);
}

/** The pulled message, or undefined when `msg` carries no JetStream ack subject. */
export function toPulledMsg(nc: NatsConnection, msg: Msg, read: (reply: string) => DeliveryInfo | undefined = parseAckSubject): PulledMsg | undefined {
  const info = msg.reply ? read(msg.reply) : undefined;
  return info ? new Pulled(nc, msg, info) : undefined;
}
