// What the console's Overview and Endpoints pages show (issue 19), for any admin client: endpoints of every
// tenant with their status, failing clock and backlog (admin.endpoints.list), one endpoint's health with its
// rates and latencies from the delivery log (admin.endpoints.health), and a summary of the whole instance
// with the failing endpoints first and a day of attempts per minute (admin.overview). Read from the
// endpoint projection, the consumers' info (with direct delivery, an endpoint's consumer of its partition
// stream too), ENDPOINT_HEALTH, the dead letters, REJECTED, OPS and the
// delivery log: nothing here changes anything.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamManager, StoredMsg } from '@nats-io/jetstream';
import { endpointBacklog, listEndpointBacklogs, sumBacklogs } from '../../streams/deliveries.ts';
import { directConsumerInfo, listDirectBacklogs } from '../../streams/direct.ts';
import { ENDPOINT_HEALTH_STREAM, endpointHealthSubject, type EndpointHealthRecord } from '../../streams/endpoint-health.ts';
import { OPS_STREAM } from '../../streams/ops.ts';
import { REJECTED_STREAM } from '../../streams/rejected.ts';
import { EndpointRecord } from '../db/entities.ts';
import { recordToRow } from '../db/endpoint-rows.ts';
import { countDeadLetters } from '../deadletter/store.ts';
import type { EndpointHealthOut, EndpointListOut, EndpointOut, OverviewOut } from './protocol.ts';
import { endpointStats, failingEndpoints, perMinute } from '../deliverylog/rates.ts';
import { notFound } from '../errors.ts';
import { AuditAction, listAudit } from '../audit/store.ts';
import { DisabledReason } from '../domain/endpoint.ts';
import { rejectedOut } from './rejected-events.ts';
import type { EndpointListQuery } from './requests.ts';

const DAY_MS = 24 * 3600_000;
/** REJECTED records read back for the last 24 h at most; beyond it the counts say `capped`. */
const MAX_REJECTED_SCAN = 1000;
const LATEST_OPS_EVENTS = 10;
const TOP_BACKLOGS = 10;
const TOP_FAILING = 10;

/** An endpoint's state in a few words, for people. */
function stateOf(e: EndpointOut): string {
  if (e.status === 'disabled') return `disabled (${e.disabled_reason ?? '?'} since ${e.disabled_at ?? '?'})`;
  if (e.status !== 'active') return e.status;
  if (e.failing_since) return `failing since ${e.failing_since}`;
  if (e.rate_limit !== null && (e.backlog?.pending ?? 0) > 0) return `rate limited (${e.rate_limit}/s), ${e.backlog!.pending} waiting`;
  return 'active';
}

const json = (m: StoredMsg | null): unknown => {
  try { return m ? m.json<unknown>() : undefined; } catch { return undefined; }
};

export function createOverview(deps: { orm: MikroORM; jsm: JetStreamManager; shards: number; partitions?: number | undefined; direct?: boolean | undefined }) {
  const { orm, jsm, shards } = deps;
  /** With direct delivery, the partitions whose streams hold the endpoints' direct consumers; else 0. */
  const directPartitions = deps.direct ? deps.partitions ?? 0 : 0;

  async function backlogOf(e: { id: string; tenant: string }): Promise<EndpointOut['backlog']> {
    // Null without a consumer: deleted, or not reconciled by a delivery instance yet. An ordered endpoint's
    // backlog is its two consumers' (issue 21); with direct delivery, its consumer of its partition stream
    // adds its own (its new events wait there).
    const [queued, direct] = await Promise.all([
      endpointBacklog(jsm, e.id, shards).catch(() => null),
      directPartitions > 0 ? directConsumerInfo(jsm, e, directPartitions).catch(() => null) : null,
    ]);
    if (!direct) return queued;
    return { pending: (queued?.pending ?? 0) + direct.num_pending, ack_pending: (queued?.ack_pending ?? 0) + direct.num_ack_pending };
  }

  async function failingSince(id: string): Promise<string | null> {
    const m = await jsm.streams.getMessage(ENDPOINT_HEALTH_STREAM, { last_by_subj: endpointHealthSubject(id) }).catch(() => null);
    const r = json(m) as Partial<EndpointHealthRecord> | undefined;
    return typeof r?.failing_since === 'string' ? r.failing_since : null;
  }

  const endpointOut = async (r: EndpointRecord): Promise<EndpointOut> => {
    const e = recordToRow(r);
    return {
      id: e.id, tenant: e.tenant, url: e.url, events: e.events, description: e.description, status: e.status,
      disabled_reason: e.disabledReason, disabled_at: e.disabledAt, rate_limit: e.rateLimit,
      failing_since: await failingSince(e.id), backlog: await backlogOf(e),
    };
  };

  async function listEndpoints(q: EndpointListQuery): Promise<EndpointListOut> {
    const where = { ...(q.tenant ? { tenant: q.tenant } : {}), ...(q.status ? { status: q.status } : {}), ...(q.cursor ? { id: { $lt: q.cursor } } : {}) };
    const records = await orm.em.fork().find(EndpointRecord, where, { orderBy: { id: 'desc' }, limit: q.limit + 1, disableIdentityMap: true });
    const data = await Promise.all(records.slice(0, q.limit).map(endpointOut));
    return { data, next_cursor: records.length > q.limit ? data[data.length - 1]!.id : null };
  }

  /** Endpoints with their rates, latencies, last error and state (issue 31), in the order of `ids`. */
  async function healthOf(ids: string[]): Promise<EndpointHealthOut[]> {
    const records = await orm.em.fork().find(EndpointRecord, { id: { $in: ids } }, { disableIdentityMap: true });
    const byId = new Map(records.map((r) => [r.id as string, r]));
    const stats = await endpointStats(orm.em.fork(), ids);
    const out: EndpointHealthOut[] = [];
    for (const id of ids) {
      const r = byId.get(id);
      const s = stats.get(id);
      if (!r || !s) continue;
      const e = await endpointOut(r);
      out.push({ ...e, state: stateOf(e) + await disabledBy(e), ...s });
    }
    return out;
  }

  /** Who disabled an endpoint its operators disabled, and why (the audit log's latest disable of it). */
  async function disabledBy(e: EndpointOut): Promise<string> {
    if (e.disabled_reason !== DisabledReason.Operator) return '';
    const [entry] = await listAudit(orm.em.fork(), { action: AuditAction.EndpointDisable, target: e.id }, { limit: 1 });
    return entry ? ` by ${entry.operator}: ${entry.detail ?? ''}` : '';
  }

  async function endpointHealth(id: string): Promise<EndpointHealthOut> {
    const [health] = await healthOf([id]);
    if (!health) throw notFound(`endpoint ${id}`);
    return { ...health, per_minute: await perMinute(orm.em.fork(), id) };
  }

  async function rejectedLastDay(since: number): Promise<OverviewOut['rejected_24h']> {
    const { state } = await jsm.streams.info(REJECTED_STREAM);
    const out: OverviewOut['rejected_24h'] = { total: 0, by_reason: {}, capped: false };
    for (let seq = state.last_seq, scanned = 0; seq >= state.first_seq && seq > 0; seq--, scanned++) {
      if (scanned === MAX_REJECTED_SCAN) { out.capped = true; break; }
      const m = await jsm.streams.getMessage(REJECTED_STREAM, { seq }).catch(() => null);
      if (!m) continue;
      if (m.time.getTime() < since) break;
      const { reason } = rejectedOut(m);
      out.total++;
      out.by_reason[reason] = (out.by_reason[reason] ?? 0) + 1;
    }
    return out;
  }

  async function latestOpsEvents(): Promise<OverviewOut['ops_events']> {
    const { state } = await jsm.streams.info(OPS_STREAM);
    const out: OverviewOut['ops_events'] = [];
    for (let seq = state.last_seq; seq >= state.first_seq && seq > 0 && out.length < LATEST_OPS_EVENTS; seq--) {
      const e = json(await jsm.streams.getMessage(OPS_STREAM, { seq }).catch(() => null)) as Record<string, unknown> | undefined;
      if (!e || typeof e['type'] !== 'string') continue;
      const text = (k: string) => (typeof e[k] === 'string' ? e[k] : null);
      out.push({ type: e['type'], tenant: text('tenant'), endpoint: text('endpoint'), at: text('at'), webhook_id: text('webhook_id'), reason: text('reason') });
    }
    return out;
  }

  // One consumer listing per DELIVERIES stream (128 by default), and per partition stream with direct
  // delivery: shared by the pages asked within 5 s.
  let backlogs: { at: number; value: Promise<OverviewOut['backlogs']> } | undefined;
  function topBacklogs(): Promise<OverviewOut['backlogs']> {
    if (!backlogs || performance.now() - backlogs.at > 5000) {
      const value = listBacklogs();
      backlogs = { at: performance.now(), value };
      value.catch(() => { if (backlogs?.value === value) backlogs = undefined; });
    }
    return backlogs.value;
  }

  async function listBacklogs(): Promise<OverviewOut['backlogs']> {
    const all = sumBacklogs(await listEndpointBacklogs(jsm, shards), await listDirectBacklogs(jsm, directPartitions))
      .filter((b) => b.pending + b.ack_pending > 0);
    return all.sort((a, b) => b.pending + b.ack_pending - (a.pending + a.ack_pending)).slice(0, TOP_BACKLOGS);
  }

  async function overview(): Promise<OverviewOut> {
    const since = Date.now() - DAY_MS;
    const counts = await orm.em.fork().execute<{ status: string; n: number }[]>('select status, count(*)::int as n from endpoints group by status');
    const [backlogs, deadLetters, rejected, opsEvents, failing, minutes] = await Promise.all([
      topBacklogs(), countDeadLetters(orm.em.fork(), { since: new Date(since) }), rejectedLastDay(since), latestOpsEvents(),
      failingEndpoints(orm.em.fork(), TOP_FAILING).then(healthOf), perMinute(orm.em.fork(), ''),
    ]);
    return {
      endpoints_by_status: Object.fromEntries(counts.map((c) => [c.status, c.n])),
      backlogs, dead_letters_24h: deadLetters, rejected_24h: rejected, ops_events: opsEvents,
      failing_endpoints: failing, per_minute: minutes,
    };
  }

  return { listEndpoints, overview, endpointHealth };
}
