// A message pulled from a JetStream consumer by src/nats/pull-feed.ts: its place (from the ack subject) and
// its four acknowledgements. nats.js builds its JsMsg only inside its own consume()/fetch(); the feed pulls
// by hand (pulls sized to free lanes), so the message is read here, the same way.
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';

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

// Encoded once: one is published per delivery.
const ACK = new TextEncoder().encode('+ACK');
const WORKING = new TextEncoder().encode('+WPI');
const TERM = new TextEncoder().encode('+TERM');

class Pulled implements PulledMsg {
  readonly info: DeliveryInfo;
  readonly #msg: Msg;
  readonly #nc: NatsConnection;

  constructor(nc: NatsConnection, msg: Msg, info: DeliveryInfo) {
    this.#nc = nc;
    this.#msg = msg;
    this.info = info;
  }

  get subject() { return this.#msg.subject; }
  get data() { return this.#msg.data; }
  get headers() { return this.#msg.headers; }
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
export function toPulledMsg(nc: NatsConnection, msg: Msg): PulledMsg | undefined {
  const info = msg.reply ? parseAckSubject(msg.reply) : undefined;
  return info ? new Pulled(nc, msg, info) : undefined;
}
