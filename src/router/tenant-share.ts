// A tenant's share of the router: its `events_per_second` (a token bucket of one second's worth) and its
// `queued_deliveries` (src/router/tenant-backlog.ts), from the tenant limits every process holds in memory
// (src/tenants/limits.ts). The router asks before routing a tenant's next event; an event over a limit
// waits, in order, instead of being refused (src/router/router.ts).
import { DEFAULT_TENANT_LIMITS, type TenantLimit, type TenantLimits } from '../tenants/limits.ts';
import type { TenantId } from '../domain/ids.ts';
import type { TenantBacklog } from './tenant-backlog.ts';

export interface OverLimit {
  limit: TenantLimit;
  value: number;
  /** When to ask again. */
  retryMs: number;
}

export interface TenantShare {
  /** Undefined when the tenant's next event may go now (it takes one of its events a second); else what holds it. */
  check(tenant: string): OverLimit | undefined;
}

/** Buckets that refilled are forgotten every this many checks: memory follows the tenants publishing now. */
const SWEEP_EVERY = 1000;
/** A limit of 0 (or a backlog over its quota) is looked at again this often: the limits reload every 5 s. */
const RECHECK_MS = 1000;

export function createTenantShare(deps: {
  limits?: { current(tenant: TenantId): TenantLimits };
  backlog: Pick<TenantBacklog, 'queued'>;
  now?: () => number;
}): TenantShare {
  const now = deps.now ?? (() => performance.now());
  const buckets = new Map<string, { tokens: number; at: number; rate: number }>();
  let checks = 0;

  return {
    check(tenant) {
      const limits = deps.limits?.current(tenant as TenantId) ?? DEFAULT_TENANT_LIMITS;
      if (deps.backlog.queued(tenant) >= limits.queuedDeliveries) {
        return { limit: 'queuedDeliveries', value: limits.queuedDeliveries, retryMs: RECHECK_MS };
      }
      const rate = limits.eventsPerSecond;
      const t = now();
      if (++checks % SWEEP_EVERY === 0) {
        for (const [k, b] of buckets) if (b.tokens + ((t - b.at) * b.rate) / 1000 >= b.rate) buckets.delete(k);
      }
      const burst = rate > 0 ? Math.max(1, rate) : 0;
      let b = buckets.get(tenant);
      if (!b) buckets.set(tenant, (b = { tokens: burst, at: t, rate }));
      b.tokens = Math.min(burst, b.tokens + ((t - b.at) * rate) / 1000);
      b.at = t;
      b.rate = rate;
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return undefined;
      }
      return { limit: 'eventsPerSecond', value: rate, retryMs: rate > 0 ? Math.max(1, Math.ceil(((1 - b.tokens) * 1000) / rate)) : RECHECK_MS };
    },
  };
}
