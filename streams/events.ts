// EVENTS: what producers publish, `events.<tenant>.<event name>`, kept for a week so a router that
// was down catches up. The router reads it through one durable consumer.
//
// With HOOKSTREAM_EVENT_PARTITIONS set (the delivery path's next shape, docs/architecture.md), EVENTS'
// ingest transform stores each event as `events.<tenant>.<p>.<event name>`, p the tenant's partition, and
// nats-server copies each partition's events into EVENTS_<p> (a source filtered to the partition).
import { AckPolicy, DeliverPolicy, DiscardPolicy, JetStreamApiCodes, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { nanos, type MsgHdrs } from '@nats-io/nats-core';
import { ConfigError } from '../src/errors.ts';
import { ensureCappedStream, ensureConsumer, ensureStream, isApiError, type EnsureOptions } from './ensure.ts';
import { DELIVERY_MAX_CONSUMERS } from './deliveries.ts';

export const EVENTS_STREAM = 'EVENTS';
export const EVENTS_SUBJECTS = 'events.>';
export const ROUTER_CONSUMER = 'router';
/** Largest message EVENTS stores (headers included): producers get an error for a larger event. */
export const EVENTS_MAX_MSG_SIZE = 256 * 1024;
/**
 * Deliveries of one event to the router, at most. The router gives every event a verdict well before
 * (src/router/verdict.ts); the bound is what stops an event that crashes it every time.
 */
export const ROUTER_MAX_DELIVER = 10;

/**
 * The last EVENTS sequence up to which the router has handled every event (acked or terminated), from its
 * consumer's info. Holding nothing, it has handled all it was given (its ack floor stays behind when the
 * end was deleted or skipped). Erasure (issue 22) and the ordering gate's barrier (issue 21) wait on it.
 */
export const routerFloor = (c: { num_ack_pending: number; ack_floor: { stream_seq: number }; delivered: { stream_seq: number } }): number =>
  c.num_ack_pending === 0 ? Math.max(c.ack_floor.stream_seq, c.delivered.stream_seq) : c.ack_floor.stream_seq;

export const eventSubject = (tenant: string, eventName: string) => `events.${tenant}.${eventName}`;

/**
 * EVENTS' creation time (ms): a webhook-id names it with the event's sequence (src/domain/webhook-id.ts),
 * so every reader of an event, the router or a consumer of a copy of it, names it alike without reading
 * the event's own time, and a recreated EVENTS, whose sequences start again, never repeats an id.
 */
export const eventsEpochMs = async (jsm: JetStreamManager): Promise<number> => (await eventsStart(jsm)).epochMs;

/** EVENTS' creation time and, with direct delivery, its window: what the router and the delivery role read at their start. */
export async function eventsStart(jsm: JetStreamManager): Promise<{ epochMs: number; directSince: number | undefined; directUntil: number | undefined }> {
  const si = await jsm.streams.info(EVENTS_STREAM);
  return { epochMs: Date.parse(si.created), ...directWindowOf(si.config) };
}

/** HOOKSTREAM_EVENT_PARTITIONS at most: each partition's source reads every event of EVENTS. */
export const MAX_EVENT_PARTITIONS = 64;
const EVENTS_MAX_AGE_MS = 7 * 24 * 3600_000;

export const partitionStream = (p: number) => `EVENTS_${p}`;
export const isPartitionStream = (name: string) => /^EVENTS_\d+$/.test(name);

/** EVENTS' ingest transform into `partitions` partitions: one for every event name's length; the tenant keeps its token. */
export const partitionTransform = (partitions: number) => ({ src: 'events.*.>', dest: `events.{{wildcard(1)}}.{{partition(${partitions},1)}}.>` });

/** How many partitions EVENTS' transform makes (0: none). */
export function partitionsOf(config: Pick<StreamConfig, 'subject_transform'>): number {
  const m = /^events\.\{\{wildcard\(1\)\}\}\.\{\{partition\((\d+),1\)\}\}\.>$/.exec(config.subject_transform?.dest ?? '');
  return m ? Number(m[1]) : 0;
}

/** Where EVENTS' metadata keeps when direct delivery started (ms, HOOKSTREAM_DIRECT_DELIVERY). */
const DIRECT_SINCE = 'hookstream_direct_since';
/** Where it keeps when direct delivery stops (ms): written ahead, by the first start with it off. */
const DIRECT_UNTIL = 'hookstream_direct_until';

/**
 * How far ahead the switch-off is written: every process that decides events re-reads the window every few
 * seconds (src/delivery/direct-window.ts), and one whose last read is older than this, less a margin for
 * clocks, holds its decisions. Rounded up to a whole DIRECT_UNTIL_GRID_MS, so two instances that start with
 * it off at the same moment (both reading no `until`, each writing its own) almost always write the same time.
 */
export const DIRECT_UNTIL_LEAD_MS = 30_000;
const DIRECT_UNTIL_GRID_MS = 10_000;
/**
 * Turning direct delivery on again waits this long past `until` (as a drained consumer is deleted only
 * this long after its switch, src/delivery/consumers.ts): a copy of an event stored before it may still be
 * on its way into its partition stream.
 */
export const DIRECT_DRAIN_GRACE_MS = 60_000;

const metadataMs = (config: Pick<StreamConfig, 'metadata'>, key: string): number | undefined => {
  const ms = Number(config.metadata?.[key]);
  return Number.isSafeInteger(ms) && ms > 0 ? ms : undefined;
};

/**
 * When direct delivery started (ms since the epoch), from EVENTS' config; undefined: it never did. An event
 * stored before it is routed to every endpoint that takes it; from it on (until it stops, directUntil), only to
 * ordered ones: the others read their partition stream from then (streams/direct.ts).
 */
export const directSince = (config: Pick<StreamConfig, 'metadata'>): number | undefined => metadataMs(config, DIRECT_SINCE);

/** Direct delivery's window: events EVENTS stored in [since, until) are the direct consumers'; until undefined: it is on. */
export function directWindowOf(config: Pick<StreamConfig, 'metadata'>): { directSince: number | undefined; directUntil: number | undefined } {
  const since = directSince(config);
  return { directSince: since, directUntil: since === undefined ? undefined : metadataMs(config, DIRECT_UNTIL) };
}

/** Whether an event EVENTS stored at `at` (ms) is read by the direct consumers, in a window read whole. */
export const inDirectWindow = (w: { directSince: number | undefined; directUntil: number | undefined }, at: number): boolean =>
  w.directSince !== undefined && at >= w.directSince && (w.directUntil === undefined || at < w.directUntil);

/**
 * EVENTS' metadata for HOOKSTREAM_DIRECT_DELIVERY `on` at `now`, from what it holds (`current`):
 * - on, never on before: `since` now (as it always was: the first start with it on);
 * - off while on: `until` written ahead (DIRECT_UNTIL_LEAD_MS), kept once written;
 * - on again after it was turned off: only once `until` has passed by DIRECT_DRAIN_GRACE_MS and no
 *   endpoint's direct consumer is left (`directConsumersLeft`), with a new `since` written ahead as `until`
 *   was and no `until`; before then, a ConfigError saying when.
 * Undefined: nothing to change.
 */
export async function directMetadata(
  current: Record<string, string> | undefined, on: boolean, now: number, directConsumersLeft: () => Promise<number>,
): Promise<Record<string, string> | undefined> {
  const { directSince: since, directUntil: until } = directWindowOf({ metadata: current });
  const ahead = () => String(Math.ceil((now + DIRECT_UNTIL_LEAD_MS) / DIRECT_UNTIL_GRID_MS) * DIRECT_UNTIL_GRID_MS);
  if (since === undefined) return on ? { ...current, [DIRECT_SINCE]: String(now) } : undefined;
  if (!on) return until === undefined ? { ...current, [DIRECT_UNTIL]: ahead() } : undefined;
  if (until === undefined) return undefined;
  const left = await directConsumersLeft();
  const from = until + DIRECT_DRAIN_GRACE_MS;
  if (now < from || left > 0) {
    throw new ConfigError('HOOKSTREAM_DIRECT_DELIVERY', `is 1 but direct delivery was turned off at ${new Date(until).toISOString()}: it can be turned on again once `
      + `${now < from ? `${new Date(from).toISOString()} has passed and ` : ''}every endpoint's direct consumer has drained and been deleted (${left} left; `
      + 'a disabled endpoint keeps its own until it is restored or deleted); until then set it to 0');
  }
  const { [DIRECT_UNTIL]: _gone, ...rest } = current ?? {};
  return { ...rest, [DIRECT_SINCE]: ahead() };
}

/** The EVENTS sequence a partition stream's copy was made from: the second word of its Nats-Stream-Source header. */
export function sourcedSeq(h: MsgHdrs | undefined): number | undefined {
  const seq = Number(h?.get('Nats-Stream-Source')?.split(' ')[1]);
  return Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
}

/**
 * EVENTS, its router consumer and, with `partitions` (HOOKSTREAM_EVENT_PARTITIONS, fixed once set), the
 * transform and the partition streams, which come first so none misses an event (each source reads EVENTS
 * from its start). `direct`: HOOKSTREAM_DIRECT_DELIVERY (`on`) and its window written into EVENTS' metadata
 * (directMetadata, `consumersLeft` counting the endpoints' direct consumers); once it was ever on, the
 * partition streams keep each copy `retentionMs` (HOOKSTREAM_QUEUE_RETENTION): an endpoint's place in them
 * is its queue, which must hold a disabled endpoint's events as long as a work queue does. Returns whether
 * direct delivery was ever on (its consumers' dead letters and producer marks are still wanted).
 */
export async function ensureEventsStream(
  jsm: JetStreamManager, opts?: EnsureOptions, partitions = 0,
  direct?: { on: boolean; retentionMs: number; consumersLeft: () => Promise<number> },
): Promise<{ everDirect: boolean }> {
  let current: StreamConfig | undefined;
  try {
    current = (await jsm.streams.info(EVENTS_STREAM)).config;
  } catch (e) {
    if (!isApiError(e, JetStreamApiCodes.StreamNotFound)) throw e;
  }
  const made = current ? partitionsOf(current) : 0;
  if (made > 0 && made !== partitions) {
    throw new ConfigError('HOOKSTREAM_EVENT_PARTITIONS', `is ${partitions} but EVENTS is split into ${made} partitions, which is fixed once set: set it to ${made}`);
  }
  // Without `direct` (tools, tests), the window is left as it is.
  const on = direct?.on ?? false;
  const metadata = direct ? await directMetadata(current?.metadata, on, Date.now(), direct.consumersLeft) : undefined;
  // Once on, the partition streams keep direct delivery's settings: their consumers drain what the window held.
  const everDirect = on || (current ? directSince(current) !== undefined : false);
  const retentionMs = everDirect ? direct?.retentionMs : undefined;
  for (let p = 0; p < partitions; p++) {
    const def = {
      name: partitionStream(p),
      sources: [{ name: EVENTS_STREAM, filter_subject: `events.*.${p}.>` }],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      // As long as EVENTS, or a queued delivery with direct delivery; no max_msg_size (EVENTS bounds the
      // events, the copy adds its source header).
      max_age: nanos(retentionMs ?? EVENTS_MAX_AGE_MS),
      duplicate_window: nanos(100),
      // With direct delivery, one consumer per endpoint of the partition's tenants (2.15 caps a stream at
      // 1,000 unless it says otherwise; streams/deliveries.ts).
      ...(everDirect ? { max_consumers: DELIVERY_MAX_CONSUMERS } : {}),
    };
    await ensureCappedStream(jsm, def, opts);
  }
  await ensureStream(jsm, {
    name: EVENTS_STREAM,
    subjects: [EVENTS_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(EVENTS_MAX_AGE_MS),
    max_msg_size: EVENTS_MAX_MSG_SIZE,
    // The minimum nats-server allows. Nats-Msg-Id dedupe here would span tenants (one tenant's id would
    // drop another's event); the router dedupes per tenant instead (src/router/dedupe.ts).
    duplicate_window: nanos(100),
    ...(partitions > 0 ? { subject_transform: partitionTransform(partitions) } : {}),
    // Direct delivery's window (with whatever else the server keeps there): directMetadata.
    ...(metadata ? { metadata } : {}),
  }, opts);
  await ensureConsumer(jsm, EVENTS_STREAM, {
    durable_name: ROUTER_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: EVENTS_SUBJECTS,
    // The router acks only after the fan-out is stored; a crashed router's events come back after this.
    ack_wait: nanos(30_000),
    // No backoff: the router picks each retry's delay itself with nak(delay).
    max_deliver: ROUTER_MAX_DELIVER,
    max_ack_pending: 4096,
  }, undefined, opts);
  return { everDirect };
}
