// The erasure-index read model (issue 22): ERASURE_INDEX folded into the Postgres table erasure_index, one
// row per routed event per subject hash (src/erasure/index-store.ts), so erasure finds one user's copies
// through the table's key. Batches the router wrote (version 2) and the single entries of version 1 are
// both read. Only hookstream's service may publish on `erasure.>` (nats.conf), but every value is checked
// all the same before it reaches Postgres: a message that does not fit is skipped alone (issue 23).
import { ERASURE_BATCH_SUBJECT, ERASURE_INDEX_STREAM, type ErasureIndexEntry, type IndexedEvent } from '../streams/erasure-index.ts';
import { isEndpointId, isTenantId } from '../src/domain/ids.ts';
import { deleteAllIndexRows, insertIndexRows } from '../src/erasure/index-store.ts';
import { Projection } from './checkpoint.ts';
import type { Decoded, Projector, ProjectorDeps, ReadModel, StreamMessage } from './engine.ts';
import { appendFold, startTrimmedProjector } from './buffered.ts';

export type ErasureIndexProjector = Projector;

const HASH = /^[0-9a-f]{32}$/;
const WEBHOOK_ID = /^msg_[0-9A-Za-z]{1,64}$/;
const STREAM = /^[A-Z][A-Z0-9_]{0,63}$/;
const V1_SUBJECT = /^erasure\.([^.]+)\.([^.]+)$/;

const isSeq = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) > 0;
const isDelivery = (d: unknown): d is [string, number, string] =>
  Array.isArray(d) && d.length === 3 && typeof d[0] === 'string' && STREAM.test(d[0]) && isSeq(d[1]) && isEndpointId(d[2]);

/** Why `e` is not an entry this service could have written, or undefined. */
function invalid(e: Partial<IndexedEvent>): string | undefined {
  if (!isTenantId(e.tenant)) return 'tenant is not a tenant id';
  if (!Array.isArray(e.hashes) || e.hashes.length === 0 || e.hashes.length > 16 || !e.hashes.every((h) => typeof h === 'string' && HASH.test(h))) return 'hashes are not subject hashes';
  if (!isSeq(e.events_seq)) return 'events_seq is not a sequence';
  if (typeof e.webhook_id !== 'string' || !WEBHOOK_ID.test(e.webhook_id)) return 'webhook_id is not a webhook id';
  if (!Array.isArray(e.deliveries) || !e.deliveries.every(isDelivery)) return 'deliveries are not [stream, seq, endpoint] triples';
  return undefined;
}

/** The events a message of ERASURE_INDEX names; or why it is skipped. */
export function decodeIndexMessage(m: Pick<StreamMessage, 'subject' | 'data'>): Decoded<IndexedEvent[]> {
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(m.data).toString('utf8'));
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  const o = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  let events: Partial<IndexedEvent>[];
  if (m.subject === ERASURE_BATCH_SUBJECT && o.v === 2 && Array.isArray(o.entries)) events = o.entries as Partial<IndexedEvent>[];
  else if (o.v === 1 && V1_SUBJECT.test(m.subject)) {
    const [, tenant, hash] = V1_SUBJECT.exec(m.subject)!;
    const v1 = o as Partial<ErasureIndexEntry>;
    events = [{ tenant, hashes: [hash!], events_seq: v1.events_seq, webhook_id: v1.webhook_id, deliveries: v1.deliveries }];
  } else return { ok: false, reason: 'not an erasure index batch (version 2) or entry (version 1)' };
  for (const [i, e] of events.entries()) {
    const why = typeof e === 'object' && e !== null ? invalid(e) : 'not an object';
    if (why) return { ok: false, reason: `entry ${i}: ${why}` };
  }
  return { ok: true, message: events as IndexedEvent[] };
}

const indexFold = () => appendFold<IndexedEvent>(insertIndexRows);

export const erasureIndexReadModel: ReadModel<IndexedEvent[]> = {
  name: Projection.ErasureIndex,
  stream: ERASURE_INDEX_STREAM,
  kind: 'erasure index',
  decode: decodeIndexMessage,
  load: async () => indexFold(),
  empty: indexFold,
  clear: (em) => deleteAllIndexRows(em),
};

/**
 * Keep the erasure_index table up to date with the ERASURE_INDEX stream (see startProjector), and purge
 * from the stream what the projection has applied: the stream is only the buffer between the routers and
 * the table (a batch names many tenants: it cannot be erased for one), so no tenant's entries stay in it
 * once they are rows.
 */
export const startErasureIndexProjector = (deps: ProjectorDeps, opts: { trimEveryMs?: number } = {}): Promise<ErasureIndexProjector> =>
  startTrimmedProjector(erasureIndexReadModel, deps, opts);
