// ROUTED: what the router has stored of each event's fan-out, so an event routed again (its ack lost with
// a killed instance or a NATS restart, or retried after NATS trouble) republishes only what is missing.
// The DELIVERIES streams' Nats-Msg-Id window cannot tell: it forgets a delivery once it is acked (removed
// from its work queue), and a restarted nats-server rebuilds it from the messages still stored (measured,
// issue 17: 6-8 % duplicates when NATS restarted while a restarted instance caught up).
// `routed.<bucket>`, bucket = EVENTS sequence / ROUTED_BUCKET: a redelivered event reads its bucket's markers.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ROUTED_STREAM = 'ROUTED';
/** EVENTS sequences per marker subject. */
export const ROUTED_BUCKET = 4096;
export const routedSubject = (eventSeq: number) => `routed.${Math.floor(eventSeq / ROUTED_BUCKET)}`;
/** Longer than the router's longest wait between two deliveries of an event (src/router/verdict.ts). */
const ROUTED_MAX_AGE_MS = 3 * 3600_000;

/**
 * Wire shape, version 1: `done` events had their whole fan-out stored; `partial` lists endpoints whose
 * delivery is known to be stored: written by the router when a fan-out failed part-way, and by the
 * delivery role for each delivery answered 2xx, just before its ack (src/delivery/stored-acks.ts).
 */
export interface RoutedMarker {
  v: 1;
  /** Inclusive ranges of EVENTS sequences. */
  done?: [number, number][];
  /** EVENTS sequence → endpoints (`<id>@<version>`) whose delivery is stored. */
  partial?: Record<string, string[]>;
}

export async function ensureRoutedStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ROUTED_STREAM,
    subjects: ['routed.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(ROUTED_MAX_AGE_MS),
    // The delivery role writes about 30 bytes per delivery: a bound for sustained rates (the oldest
    // markers go first; losing one only risks a duplicate should its event be routed again).
    max_bytes: 1024 * 1024 * 1024,
    duplicate_window: nanos(60_000),
  }, opts);
}
