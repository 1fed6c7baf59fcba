// Per-tenant quotas: what one tenant may hold or spend, so that it cannot take what the others need.
// Defaults apply to every tenant; an operator may override any of them for one tenant, or change the
// defaults themselves (the row of tenant `*`). Overrides live in Postgres (tenant_limits) and every
// process holds them all in memory, reloaded every few seconds: the table holds only the exceptions, so
// a lookup on a hot path (the router, an API write) is a map read, never a query.
import type { EntityManager } from '@mikro-orm/postgresql';
import { AUDIT_OK, AuditAction, recordAudit } from '../audit/store.ts';
import type { TenantId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

export interface TenantLimits {
  /** Endpoints a tenant may have that are not deleted. */
  endpoints: number;
  /** Endpoint writes (create, update, delete, restore, rotate-secret, the portal's test events) a second, per API instance. */
  writesPerSecond: number;
  /** Deliveries a tenant may have queued and not yet delivered (enforced by the router). */
  queuedDeliveries: number;
  /** Events a second a tenant's producers may publish (enforced by the router). */
  eventsPerSecond: number;
}
export type TenantLimit = keyof TenantLimits;
export const TENANT_LIMITS: readonly TenantLimit[] = ['endpoints', 'writesPerSecond', 'queuedDeliveries', 'eventsPerSecond'];

/** The names the API, the metrics and the command line use (snake_case, as the API writes fields). */
export const LIMIT_NAMES: Record<TenantLimit, string> = {
  endpoints: 'endpoints',
  writesPerSecond: 'writes_per_second',
  queuedDeliveries: 'queued_deliveries',
  eventsPerSecond: 'events_per_second',
};

export const DEFAULT_TENANT_LIMITS: Readonly<TenantLimits> = Object.freeze({
  endpoints: 100,
  writesPerSecond: 20,
  queuedDeliveries: 100_000,
  eventsPerSecond: 1_000,
});

/** The tenant whose row overrides the defaults of every tenant. */
export const DEFAULTS_TENANT = '*';
/** Highest value a limit may be set to (a limit is an integer ≥ 0; 0 refuses everything). */
export const MAX_LIMIT = 1_000_000_000;

/** One row of tenant_limits: the overrides of one tenant (or of the defaults, `*`). */
export interface TenantLimitsOverride {
  tenant: string;
  limits: Partial<TenantLimits>;
  updatedAt: string;
  updatedBy: string;
}

export interface TenantLimitsStore {
  /**
   * A tenant's limits: the defaults with its overrides. Waits for a load only when there is no copy yet (or
   * it is a minute old); a stale copy answers at once while it reloads, so a request never waits on it.
   */
  get(tenant: TenantId): Promise<TenantLimits>;
  /** The same from the copy in memory, without waiting (a reload is started when it is stale). */
  current(tenant: TenantId): TenantLimits;
  /** Override some limits of a tenant (or `*`); `null` goes back to the default. Audited. */
  set(tenant: TenantId | typeof DEFAULTS_TENANT, partial: { [K in TenantLimit]?: number | null }, operator: string): Promise<TenantLimits>;
  /** Every override, defaults row first. */
  list(): Promise<TenantLimitsOverride[]>;
  /** Reload now. */
  refresh(): Promise<void>;
}

const COLUMNS: Record<TenantLimit, string> = {
  endpoints: 'endpoints', writesPerSecond: 'writes_per_second', queuedDeliveries: 'queued_deliveries', eventsPerSecond: 'events_per_second',
};

interface Row {
  tenant: string;
  endpoints: number | null;
  writes_per_second: number | null;
  queued_deliveries: number | null;
  events_per_second: number | null;
  updated_at: Date | string;
  updated_by: string;
}

function overrideOf(r: Row): TenantLimitsOverride {
  const limits: Partial<TenantLimits> = {};
  for (const k of TENANT_LIMITS) {
    const v = r[COLUMNS[k] as keyof Row];
    if (v !== null && v !== undefined) limits[k] = Number(v);
  }
  return { tenant: r.tenant, limits, updatedAt: new Date(r.updated_at).toISOString(), updatedBy: r.updated_by };
}

/** Why `value` cannot be a limit, or undefined. */
export function limitValueProblem(value: unknown): string | undefined {
  if (value === null) return undefined;
  return Number.isSafeInteger(value) && (value as number) >= 0 && (value as number) <= MAX_LIMIT ? undefined : `must be an integer from 0 to ${MAX_LIMIT}`;
}

/** A copy older than this is reloaded before it answers (a database that stays down leaves the last one in use). */
const MUST_RELOAD_MS = 60_000;

/** What a process holds of the limits: every override in memory, reloaded every `refreshMs` by `read`. */
function limitsCopy(read: () => Promise<Row[]>, opts: { refreshMs?: number; log?: Logger; now?: () => number }) {
  const refreshMs = opts.refreshMs ?? 5_000;
  const now = opts.now ?? (() => performance.now());
  let overrides = new Map<string, Partial<TenantLimits>>();
  let loadedAt = -Infinity;
  let loading: Promise<void> | undefined;
  let warned = false;

  const load = async () => {
    const rows = await read();
    overrides = new Map(rows.map((r) => [r.tenant, overrideOf(r).limits]));
    loadedAt = now();
    warned = false;
  };
  // One reload at a time; a failed one keeps the last copy (the limits of a moment ago beat no service).
  const refresh = (): Promise<void> => (loading ??= load().catch((e: unknown) => {
    if (!warned) opts.log?.warn('tenant limits not reloaded; using the last known', { reason: describe(e) });
    warned = true;
    loadedAt = now() - refreshMs / 2; // not at once again
  }).finally(() => { loading = undefined; }));
  const stale = () => now() - loadedAt >= refreshMs;
  const compose = (tenant: string): TenantLimits => ({ ...DEFAULT_TENANT_LIMITS, ...overrides.get(DEFAULTS_TENANT), ...overrides.get(tenant) });

  return {
    load, refresh, compose,
    async get(tenant: TenantId): Promise<TenantLimits> {
      if (now() - loadedAt >= MUST_RELOAD_MS) await refresh();
      else if (stale()) void refresh();
      return compose(tenant);
    },
    current(tenant: TenantId): TenantLimits {
      if (stale()) void refresh();
      return compose(tenant);
    },
  };
}

const SELECT_ALL = 'select * from tenant_limits';

/**
 * The limits alone, read through one plain query (`query`: a pg pool's), for a router or delivery process
 * that runs no role with the ORM: until the database answers (or while it is away), the defaults or the
 * last copy apply, and nothing waits for it.
 */
export function createTenantLimitsReader(query: (sql: string) => Promise<{ rows: unknown[] }>, opts: { refreshMs?: number; log?: Logger; now?: () => number } = {}): Pick<TenantLimitsStore, 'get' | 'current' | 'refresh'> {
  const { get, current, refresh } = limitsCopy(async () => (await query(SELECT_ALL)).rows as Row[], opts);
  return { get, current, refresh };
}

/** `orm`: the ORM, or (the command line) one EntityManager as `{ em }`. */
export function createTenantLimitsStore(orm: { em: Pick<EntityManager, 'fork'> }, opts: { refreshMs?: number; log?: Logger; now?: () => number } = {}): TenantLimitsStore {
  const { load, refresh, compose, get, current } = limitsCopy(() => orm.em.fork().execute<Row[]>(SELECT_ALL), opts);

  return {
    get, current,
    async set(tenant, partial, operator) {
      const keys = TENANT_LIMITS.filter((k) => partial[k] !== undefined);
      if (keys.length === 0) throw new RangeError('no limit to set');
      for (const k of keys) {
        const problem = limitValueProblem(partial[k]);
        if (problem) throw new RangeError(`${LIMIT_NAMES[k]} ${problem}`);
      }
      const cols = keys.map((k) => COLUMNS[k]);
      const values = keys.map((k) => partial[k] ?? null);
      await orm.em.fork().transactional(async (tx) => {
        await tx.execute(
          `insert into tenant_limits (tenant, ${cols.join(', ')}, updated_at, updated_by) values (?, ${cols.map(() => '?').join(', ')}, now(), ?)
           on conflict (tenant) do update set ${cols.map((c) => `${c} = excluded.${c}`).join(', ')}, updated_at = now(), updated_by = excluded.updated_by`,
          [tenant, ...values, operator]);
        await recordAudit(tx, {
          operator, action: AuditAction.TenantLimitsSet, target: tenant, outcome: AUDIT_OK,
          detail: keys.map((k) => `${LIMIT_NAMES[k]}=${partial[k] ?? 'default'}`).join(' '),
        });
      });
      await load();
      return compose(tenant);
    },
    async list() {
      const rows = await orm.em.fork().execute<Row[]>(`select * from tenant_limits order by tenant = '${DEFAULTS_TENANT}' desc, tenant`);
      return rows.map(overrideOf);
    },
    refresh: () => refresh(),
  };
}
