// The admin role's reads of the delivery log: deliveries searched by tenant, endpoint, event type, user or
// organization, webhook-id, status and time (newest first); one delivery's attempts; and where an event
// went (events trace), which also says why an event reached no endpoint. A user's or organization's
// deliveries are found through the erasure index (the keyed hash of the id, src/erasure/subject-hash.ts),
// so the log itself keeps no user id.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamManager, StoredMsg } from '@nats-io/jetstream';
import { EVENTS_STREAM, ROUTER_CONSUMER, routerFloor } from '../../streams/events.ts';
import { REJECTED_STREAM, rejectedTenantSubject } from '../../streams/rejected.ts';
import { isEventName, matchesAny } from '../domain/catalogue.ts';
import { producerSubject } from '../domain/event-data.ts';
import { EndpointStatus } from '../domain/endpoint.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { EndpointRecord } from '../db/entities.ts';
import { recordToRow } from '../db/endpoint-rows.ts';
import { badRequest } from '../errors.ts';
import { subjectIndexRows } from '../erasure/index-store.ts';
import type { SubjectHasher, SubjectRef } from '../erasure/subject-hash.ts';
import { rejectedOut } from '../admin/rejected-events.ts';
import type {
  AttemptLogOut, DeliveriesListOut, DeliveryAttemptsOut, DeliveryLogOut, EventsTraceOut, EventVerdictOut, TracedEventOut,
} from '../admin/protocol.ts';
import type { DeliveryLogQuery, TraceQuery } from '../admin/requests.ts';
import { attemptsOf, searchDeliveries, type AttemptLogRow, type DeliveryLogRow } from './store.ts';

/** A user's latest events looked up at most (their webhook-ids filter the search). */
const MAX_SUBJECT_EVENTS = 5000;
/** REJECTED records of the tenant read at most by a trace. */
const MAX_REJECTED_SCAN = 1000;

const iso = (d: Date | string | null): string | null => (d === null ? null : new Date(d).toISOString());

export const deliveryOut = (r: DeliveryLogRow): DeliveryLogOut => ({
  webhook_id: r.webhook_id, endpoint_id: r.endpoint_id, tenant: r.tenant, event_type: r.event_type, status: r.outcome,
  attempts: r.attempts, first_attempt_at: iso(r.first_at)!, last_attempt_at: iso(r.last_at)!, status_code: r.status_code,
  latency_ms: r.duration_ms, error: r.error, next_attempt_at: iso(r.next_attempt_at),
});

const attemptOut = (r: AttemptLogRow): AttemptLogOut => ({
  endpoint_id: r.endpoint_id, webhook_id: r.webhook_id, tenant: r.tenant, event_type: r.event_type, attempt: r.attempt, at: iso(r.at)!,
  status: r.outcome, status_code: r.status_code, latency_ms: r.duration_ms, error_class: r.error_class, error: r.error,
  response_body: r.response_body, next_attempt_at: iso(r.next_attempt_at),
});

interface Cursor { at: string; w: string; e: string }

const encodeCursor = (r: DeliveryLogRow): string =>
  Buffer.from(JSON.stringify({ at: iso(r.last_at)!, w: r.webhook_id, e: r.endpoint_id } satisfies Cursor)).toString('base64url');

function decodeCursor(text: string): { at: Date; webhookId: string; endpoint: string } {
  let c: Partial<Cursor> | undefined;
  try { c = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<Cursor>; } catch { c = undefined; }
  const at = typeof c?.at === 'string' ? new Date(c.at) : undefined;
  if (!at || Number.isNaN(at.getTime()) || typeof c?.w !== 'string' || typeof c.e !== 'string') throw badRequest('cursor is not one this service handed out');
  return { at, webhookId: c.w, endpoint: c.e };
}

export function createDeliveryLog(deps: { orm: MikroORM; jsm: JetStreamManager; subjectHasher: SubjectHasher; webhookIds: WebhookIdCodec }) {
  const { orm, jsm } = deps;

  /** The subject's events in the erasure index, newest first. */
  async function eventsOf(tenant: string, subject: SubjectRef, limit: number) {
    const rows = await subjectIndexRows(orm.em.fork(), tenant, deps.subjectHasher.all(subject), Number.MAX_SAFE_INTEGER);
    return rows.reverse().slice(0, limit);
  }

  async function list(q: DeliveryLogQuery): Promise<DeliveriesListOut> {
    const webhookIds = q.subject && q.tenant ? (await eventsOf(q.tenant, q.subject, MAX_SUBJECT_EVENTS)).map((r) => r.webhook_id) : undefined;
    if (webhookIds?.length === 0) return { data: [], next_cursor: null };
    const rows = await searchDeliveries(orm.em.fork(), {
      ...(q.tenant ? { tenant: q.tenant } : {}), ...(q.endpoint ? { endpoint: q.endpoint } : {}), ...(q.event ? { event: q.event } : {}),
      ...(q.webhookId ? { webhookId: q.webhookId } : {}), ...(webhookIds ? { webhookIds } : {}), ...(q.status ? { status: q.status } : {}),
      ...(q.since ? { since: q.since } : {}), ...(q.until ? { until: q.until } : {}),
    }, { limit: q.limit + 1, ...(q.cursor ? { before: decodeCursor(q.cursor) } : {}) });
    const page = rows.slice(0, q.limit);
    return { data: page.map(deliveryOut), next_cursor: rows.length > q.limit ? encodeCursor(page[page.length - 1]!) : null };
  }

  async function attempts(webhookId: string, endpoint?: string): Promise<DeliveryAttemptsOut> {
    return { webhook_id: webhookId, data: (await attemptsOf(orm.em.fork(), webhookId, endpoint)).map(attemptOut) };
  }

  // ---- events trace ----

  const storedEvent = async (seq: number): Promise<StoredMsg | null> => jsm.streams.getMessage(EVENTS_STREAM, { seq }).catch(() => null);
  const typeOf = (m: StoredMsg | null): string | null => (m ? producerSubject(m.subject).split('.').slice(2).join('.') || null : null);

  /** The tenant's rejected events (newest first, bounded) whose body holds `quoted`, or whose EVENTS seq is `seq`. */
  async function rejectedOf(tenant: string, match: (m: StoredMsg) => boolean, wanted = Number.MAX_SAFE_INTEGER): Promise<StoredMsg[]> {
    const out: StoredMsg[] = [];
    const newest = await jsm.streams.getMessage(REJECTED_STREAM, { last_by_subj: rejectedTenantSubject(tenant) }).catch(() => null);
    if (!newest) return out;
    const first = (await jsm.streams.info(REJECTED_STREAM)).state.first_seq;
    for (let seq = newest.seq, scanned = 0; seq >= first && scanned < MAX_REJECTED_SCAN; seq--, scanned++) {
      const m = seq === newest.seq ? newest : await jsm.streams.getMessage(REJECTED_STREAM, { seq }).catch(() => null);
      if (m && m.subject === rejectedTenantSubject(tenant) && match(m)) out.push(m);
      if (out.length >= wanted) break;
    }
    return out;
  }

  /** Why an event of `type` stored at `at` reached no endpoint of `tenant`, from the endpoints as they are now. */
  async function whyNotRouted(tenant: string, type: string | null, seq: number, at: number | null): Promise<string> {
    const router = await jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER).catch(() => undefined);
    if (router && routerFloor(router) < seq) return 'not routed yet: the router has not reached it';
    const endpoints = (await orm.em.fork().find(EndpointRecord, { tenant }, { disableIdentityMap: true })).map(recordToRow);
    if (endpoints.length === 0) return `no subscriber: tenant ${tenant} has no endpoints`;
    if (type === null || !isEventName(type)) return 'no delivery recorded, and the event is no longer in EVENTS to tell why';
    const subscribed = endpoints.filter((e) => matchesAny(e.events, type));
    if (subscribed.length === 0) return `filtered by event type: none of the tenant's ${endpoints.length} endpoint(s) subscribes to ${type}`;
    const active = subscribed.filter((e) => e.status === EndpointStatus.Active);
    if (active.length === 0) {
      return `endpoint disabled or deleted: ${subscribed.map((e) => `${e.id} ${e.status}${e.disabledReason ? ` (${e.disabledReason})` : ''}`).join(', ')}`;
    }
    if (at !== null && active.every((e) => Date.parse(e.createdAt) > at)) return `no subscriber when it was routed: ${active.map((e) => e.id).join(', ')} created later`;
    return 'no delivery recorded (an endpoint that subscribed then was disabled, deleted or changed since)';
  }

  async function traced(tenant: string, webhookId: string, seq: number, queuedTo: string[] | undefined): Promise<TracedEventOut> {
    const m = await storedEvent(seq);
    // The event's time from the event itself: an id names EVENTS' creation time (ids made before, the event's).
    const at = m ? m.time.getTime() : null;
    const type = typeOf(m);
    const rows = await searchDeliveries(orm.em.fork(), { webhookId }, { limit: 1000 });
    const byEndpoint = new Map(rows.map((r) => [r.endpoint_id, r]));
    const endpoints = [...new Set([...(queuedTo ?? []), ...byEndpoint.keys()])];
    const base = { webhook_id: webhookId, tenant, event_type: type ?? rows[0]?.event_type ?? null, at: iso(at === null ? null : new Date(at)) };
    if (endpoints.length === 0) {
      const rejected = await rejectedOf(tenant, (r) => rejectedOut(r).events_seq === seq);
      const reason = rejected[0] ? `rejected by the router: ${rejectedOut(rejected[0]).reason}` : await whyNotRouted(tenant, base.event_type, seq, at);
      return { ...base, verdict: 'not_routed', summary: `not routed: ${reason}`, deliveries: [] };
    }
    const deliveries = endpoints.map((id) => {
      const r = byEndpoint.get(id);
      const state = !r ? 'queued' : r.outcome === 'ok' ? 'delivered' : r.outcome === 'failed' ? 'retrying' : r.outcome;
      return { endpoint_id: id, state, attempts: r?.attempts ?? 0, last_attempt_at: iso(r?.last_at ?? null), status_code: r?.status_code ?? null };
    });
    const counts = new Map<string, number>();
    for (const d of deliveries) counts.set(d.state, (counts.get(d.state) ?? 0) + 1);
    const summary = `routed to ${deliveries.length} endpoint${deliveries.length === 1 ? '' : 's'}: ${deliveries.map((d) => `${d.endpoint_id} ${d.state}`).join(', ')}`
      + ` (${[...counts].map(([s, n]) => `${n} ${s}`).join(', ')})`;
    return { ...base, verdict: 'routed', summary, deliveries };
  }

  async function trace(q: TraceQuery): Promise<EventsTraceOut> {
    if (q.webhookId) {
      const decoded = deps.webhookIds.decode(q.webhookId);
      if (!decoded) throw badRequest(`${q.webhookId} is not a webhook-id this service handed out (or its key was rotated away)`);
      const m = await storedEvent(decoded.seq);
      const logged = (await searchDeliveries(orm.em.fork(), { webhookId: q.webhookId }, { limit: 1 }))[0];
      const tenant = (m ? m.subject.split('.')[1] : undefined) ?? logged?.tenant ?? q.tenant;
      if (!tenant) return { data: [] };
      return { data: [await traced(tenant, q.webhookId, decoded.seq, undefined)] };
    }
    const tenant = q.tenant!;
    const subject = q.subject!;
    const data: TracedEventOut[] = [];
    for (const row of await eventsOf(tenant, subject, q.limit)) {
      data.push(await traced(tenant, row.webhook_id, row.events_seq, row.deliveries.map((d) => d[2])));
    }
    // Rejected events are never indexed: the tenant's rejected bodies that hold the id.
    const quoted = JSON.stringify(subject.id);
    for (const r of await rejectedOf(tenant, (m) => Buffer.from(m.data).toString('utf8').includes(quoted))) {
      const o = rejectedOut(r);
      data.push({
        webhook_id: null, tenant, event_type: o.event, at: o.event_time ?? o.rejected_at, verdict: 'not_routed',
        summary: `not routed: rejected by the router: ${o.reason}${o.detail ? ` (${o.detail})` : ''}`, deliveries: [],
      });
    }
    data.sort((a, b) => (b.at ?? '').localeCompare(a.at ?? ''));
    return { data: data.slice(0, q.limit) };
  }

  /**
   * The router's verdict on the tenant's event at EVENTS `seq`. The router's floor is read before REJECTED:
   * a rejection is stored before the event is terminated, so an event past the floor and not in REJECTED
   * was routed.
   */
  async function verdict(tenant: string, seq: number): Promise<EventVerdictOut> {
    const m = await storedEvent(seq);
    if (m && m.subject.split('.')[1] !== tenant) throw badRequest(`EVENTS #${seq} is not an event of ${tenant}`);
    const router = await jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER).catch(() => undefined);
    const rejected = (await rejectedOf(tenant, (r) => rejectedOut(r).events_seq === seq, 1))[0];
    if (rejected) {
      const o = rejectedOut(rejected);
      return { verdict: 'rejected', endpoints: null, reason: o.reason, detail: o.detail };
    }
    if (!router || routerFloor(router) < seq) return { verdict: 'pending', endpoints: null, reason: null, detail: null };
    const type = typeOf(m);
    const at = m ? m.time.getTime() : Number.MAX_SAFE_INTEGER;
    const endpoints = type === null || !isEventName(type) ? [] : (await orm.em.fork().find(EndpointRecord, { tenant }, { disableIdentityMap: true })).map(recordToRow)
      .filter((e) => e.status === EndpointStatus.Active && matchesAny(e.events, type) && Date.parse(e.createdAt) <= at);
    return { verdict: 'routed', endpoints: endpoints.length, reason: null, detail: null };
  }

  return { list, attempts, trace, verdict };
}
