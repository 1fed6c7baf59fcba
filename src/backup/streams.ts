// The NATS streams a backup keeps: ENDPOINTS, the endpoints' source of truth with their sealed signing
// secrets and v1a keys (nothing else holds them), and OPS, the week of operational events. Everything else
// in NATS is derived (states, snapshots, health) or work in flight (events, queued deliveries, attempts),
// which a restore cannot bring back consistently: see docs/operations.md, Backup and restore.
import { headers } from '@nats-io/nats-core';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { OPS_STREAM } from '../../streams/ops.ts';
import { DATA_KEYS_STREAM } from '../../streams/data-keys.ts';

// DATA_KEYS too, first (restored before any endpoint, so no router has made a key meanwhile): without it
// the dead letters in Postgres no longer open (their bodies are sealed under data keys). A backup taken
// before an erasure therefore still holds the erased subject's key (docs/erasure-and-retention.md).
export const BACKED_UP_STREAMS = [DATA_KEYS_STREAM, ENDPOINTS_STREAM, OPS_STREAM] as const;

/** One stored message as a line of a backup file. */
export interface StoredMessage {
  subject: string;
  headers: Record<string, string[]>;
  /** The body, base64. */
  data: string;
  /** When the stream stored it (a restore stores it again, now). */
  time: string;
}

/** Every message of `stream` in order, as it is when the read starts (later ones are left for the next backup). */
export async function* readStream(js: JetStreamClient, jsm: JetStreamManager, stream: string): AsyncGenerator<StoredMessage> {
  const { state } = await jsm.streams.info(stream);
  if (state.messages === 0) return;
  const consumer = await js.consumers.get(stream);
  const messages = await consumer.consume();
  try {
    for await (const m of messages) {
      const stored: Record<string, string[]> = {};
      for (const key of m.headers?.keys() ?? []) stored[key] = m.headers!.values(key);
      yield { subject: m.subject, headers: stored, data: Buffer.from(m.data).toString('base64'), time: m.timestamp };
      if (m.seq >= state.last_seq) return;
    }
  } finally {
    messages.stop();
  }
}

/** How many messages `stream` holds. */
export async function streamMessages(jsm: JetStreamManager, stream: string): Promise<number> {
  return (await jsm.streams.info(stream)).state.messages;
}

/** Store the messages again, in their order, on their own subjects; one publish at a time keeps the order. */
export async function writeStream(js: JetStreamClient, messages: AsyncIterable<StoredMessage>): Promise<number> {
  let n = 0;
  for await (const m of messages) {
    const h = headers();
    // The writers' optimistic-concurrency checks (expected last sequence) held against the old stream.
    for (const [key, values] of Object.entries(m.headers)) if (!/^nats-expected-/i.test(key)) for (const v of values) h.append(key, v);
    await js.publish(m.subject, Buffer.from(m.data, 'base64'), { headers: h });
    n++;
  }
  return n;
}
