// ROUTER_DRAINS: one record per tenant whose events the router drains from EVENTS at the tenant's rate
// instead of reading them through its shared consumer (src/router/drains.ts). `router_drains.<tenant>`, the
// last message the record (max one per subject); written only with the subject's expected last sequence,
// so of two routers only one starts, moves or owns a tenant's drain. A few records, a few bytes each.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ROUTER_DRAINS_STREAM = 'ROUTER_DRAINS';
export const ROUTER_DRAINS_SUBJECTS = 'router_drains.>';
export const routerDrainSubject = (tenant: string) => `router_drains.${tenant}`;

/**
 * A tenant's drain, version 1. `starting`: events of the tenant wait in the routers until `draining` says
 * from where; `draining`: its events from `from` on are the drain's, the routers' consumer acks them
 * unrouted; `ending`: the drain caught up, the routers hold its new events until `ended` says up to where
 * the drain routed (`until`, exclusive); events from there on are routed by the consumer again.
 */
export interface DrainRecord {
  v: 1;
  phase: 'starting' | 'draining' | 'ending' | 'ended';
  from?: number;
  until?: number;
  /** The next EVENTS sequence the drain routes (every earlier event of the drain is routed). */
  next?: number;
  /** The router process that drains; renewed every few seconds while it does. */
  owner: string;
}

/** Ended records are forgotten after a day; a live drain renews its record every few seconds. */
const MAX_AGE_MS = 24 * 3600_000;

export async function ensureRouterDrainsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ROUTER_DRAINS_STREAM,
    subjects: [ROUTER_DRAINS_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_msgs_per_subject: 1,
    max_age: nanos(MAX_AGE_MS),
    max_msg_size: 4096,
    duplicate_window: nanos(1000),
  }, opts);
}
