// Rates and latencies read from the delivery log for the console and `endpoints health`: attempts, ok and
// failed per endpoint over the last hour and day (attempt_rates, per minute), p50/p99 latency of the
// latest 10,000 attempts of each window (attempt_log), the last failure, and deliveries per minute for a
// day's chart. Each read is bounded whatever the delivery rate.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EndpointHealthOut, WindowStatsOut } from '../admin/protocol.ts';

type Sql = Pick<EntityManager, 'execute'>;

/** Attempts a latency percentile is computed from at most, newest first. */
const LATENCY_SAMPLE = 10_000;
export const HOUR_MS = 3600_000;
export const DAY_MS = 24 * HOUR_MS;

export type EndpointStats = Pick<EndpointHealthOut, 'last_hour' | 'last_day' | 'last_error'>;

const windowOf = (ok: number, failed: number, p: number[] | null | undefined): WindowStatsOut => ({
  attempts: ok + failed, ok, failed, success_ratio: ok + failed > 0 ? ok / (ok + failed) : null,
  p50_ms: p?.[0] ?? null, p99_ms: p?.[1] ?? null,
});

export async function endpointStats(sql: Sql, endpoints: readonly string[], now = Date.now()): Promise<Map<string, EndpointStats>> {
  const out = new Map<string, EndpointStats>();
  if (endpoints.length === 0) return out;
  const ids = `{${endpoints.join(',')}}`;
  const hour = new Date(now - HOUR_MS);
  const day = new Date(now - DAY_MS);
  const counts = await sql.execute<{ endpoint_id: string; ok_1h: string | null; failed_1h: string | null; ok_24h: string; failed_24h: string }[]>(`
    select endpoint_id, sum(ok) filter (where minute >= ?) as ok_1h, sum(failed) filter (where minute >= ?) as failed_1h,
      sum(ok) as ok_24h, sum(failed) as failed_24h
    from attempt_rates where endpoint_id = any(?::text[]) and minute >= ? group by endpoint_id`, [hour, hour, ids, day]);
  const latencies = await sql.execute<{ id: string; win: string; p: number[] | null }[]>(`
    select e.id, w.win, p.p from unnest(?::text[]) as e(id)
    cross join (values ('hour', ?::timestamptz), ('day', ?::timestamptz)) as w(win, since)
    cross join lateral (
      select percentile_cont(array[0.5, 0.99]) within group (order by duration_ms) as p
      from (select duration_ms from attempt_log where endpoint_id = e.id and at >= w.since and outcome <> 'dropped' order by at desc limit ${LATENCY_SAMPLE}) x
    ) p`, [ids, hour, day]);
  const errors = await sql.execute<{ id: string; at: Date; status_code: number | null; error: string | null }[]>(`
    select e.id, l.at, l.status_code, l.error from unnest(?::text[]) as e(id)
    cross join lateral (select at, status_code, error from attempt_log where endpoint_id = e.id and outcome <> 'ok' order by at desc limit 1) l`, [ids]);
  const p = new Map(latencies.map((l) => [`${l.id} ${l.win}`, l.p]));
  const c = new Map(counts.map((r) => [r.endpoint_id, r]));
  const e = new Map(errors.map((r) => [r.id, r]));
  for (const id of endpoints) {
    const r = c.get(id);
    const err = e.get(id);
    out.set(id, {
      last_hour: windowOf(Number(r?.ok_1h ?? 0), Number(r?.failed_1h ?? 0), p.get(`${id} hour`)),
      last_day: windowOf(Number(r?.ok_24h ?? 0), Number(r?.failed_24h ?? 0), p.get(`${id} day`)),
      last_error: err ? { at: new Date(err.at).toISOString(), status_code: err.status_code, error: err.error } : null,
    });
  }
  return out;
}

/** Attempts per minute, ok and failed, over the last day: one endpoint's, or every endpoint's (''). Oldest first, minutes without attempts left out. */
export async function perMinute(sql: Sql, endpoint: string, now = Date.now()): Promise<{ minute: string; ok: number; failed: number }[]> {
  const rows = await sql.execute<{ minute: Date; ok: number; failed: number }[]>(
    'select minute, ok, failed from attempt_rates where endpoint_id = ? and minute >= ? order by minute', [endpoint, new Date(now - DAY_MS)]);
  return rows.map((r) => ({ minute: new Date(r.minute).toISOString(), ok: r.ok, failed: r.failed }));
}

/** The endpoints with failed attempts in the last hour, the worst success ratio first. */
export async function failingEndpoints(sql: Sql, limit: number, now = Date.now()): Promise<string[]> {
  const rows = await sql.execute<{ endpoint_id: string }[]>(`
    select endpoint_id from attempt_rates where endpoint_id <> '' and minute >= ? group by endpoint_id having sum(failed) > 0
    order by sum(failed)::float8 / (sum(ok) + sum(failed)) desc, sum(failed) desc limit ?`, [new Date(now - HOUR_MS), limit]);
  return rows.map((r) => r.endpoint_id);
}
