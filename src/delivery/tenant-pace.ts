// A tenant's `events_per_second` on the direct path (step 6 of the next delivery path, docs/architecture.md).
// The router paces a tenant's events before it queues them; an endpoint reading its tenant's partition stream
// directly is paced where it pulls instead: each of its lanes is handed at most the tenant's rate of copies a
// second (a token bucket of one second's worth, as the router's), and what is over it waits at the server,
// unpulled, in the endpoint's consumer. So a tenant's flood reaches each of its endpoints at its rate, as it
// did through the router, whatever its neighbours do. Every delivery instance pulls every endpoint's
// consumer, so each paces it at its share of the rate: the rate over the instances it hears from
// (src/delivery/delivery-instances.ts).
import type { TenantId } from '../domain/ids.ts';
import { DEFAULT_TENANT_LIMITS, type TenantLimits } from '../tenants/limits.ts';

export interface Pace {
  /** Copies the lane may be handed now (whole tokens). */
  available(): number;
  /** One copy handed out. */
  spend(): void;
  /** Milliseconds until the next token comes (a rate of 0 is looked at again in a second). */
  wait(): number;
}

/** A limit of 0 holds everything; the limits reload every 5 s. */
const RECHECK_MS = 1000;

export function createTenantPaces(deps: {
  limits?: { current(tenant: TenantId): TenantLimits } | undefined;
  /** Counted once each time a lane starts waiting for its tenant's rate. */
  hits?: { inc(): void };
  /** Delivery instances the rate is shared by (1 without). */
  instances?: () => number;
  now?: () => number;
}): { of(tenant: string): Pace } {
  const now = deps.now ?? (() => performance.now());
  const rateOf = (tenant: string) => (deps.limits?.current(tenant as TenantId) ?? DEFAULT_TENANT_LIMITS).eventsPerSecond / Math.max(1, deps.instances?.() ?? 1);
  // A second's worth, and at least one copy (a share below one a second still comes out).
  const capacity = (rate: number) => (rate > 0 ? Math.max(1, rate) : 0);

  return {
    of(tenant) {
      let rate = rateOf(tenant);
      let tokens = capacity(rate);
      let at = now();
      let waiting = false;
      const refill = () => {
        const t = now();
        rate = rateOf(tenant);
        tokens = Math.min(capacity(rate), tokens + ((t - at) * rate) / 1000);
        at = t;
      };
      return {
        available() {
          refill();
          const n = Math.floor(tokens);
          if (n === 0 && !waiting) deps.hits?.inc();
          waiting = n === 0;
          return n;
        },
        spend() {
          refill();
          tokens -= 1;
        },
        wait: () => (rate > 0 ? Math.max(1, Math.ceil(((1 - tokens) * 1000) / rate)) : RECHECK_MS),
      };
    },
  };
}
