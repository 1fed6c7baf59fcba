// The endpoint commands under the tenant's quotas (limits.ts): every command a tenant makes spends one of
// its writes a second, refused (and counted) before it costs NATS anything; a create, or a restore, that
// would take the tenant past its endpoints is refused too. The store wrapped here serves the API and the
// portal alike; the command line and the delivery role's disable are the operator's and the service's,
// not a tenant's, and use the store itself.
import type { MikroORM } from '@mikro-orm/postgresql';
import { createRateLimiter } from '../api/rate-limit.ts';
import { withoutStack } from '../api/errors.ts';
import { EndpointStatus } from '../domain/endpoint.ts';
import type { TenantId } from '../domain/ids.ts';
import type { EndpointStore } from '../endpoints/store.ts';
import { ErrorCode, HookstreamError } from '../errors.ts';
import type { Counter } from '../metrics.ts';
import { LIMIT_NAMES, type TenantLimit, type TenantLimitsStore } from './limits.ts';

/** A tenant reached one of its limits; `limit` names it as the API does (`endpoints`, `writes_per_second`). */
export class QuotaExceededError extends HookstreamError {
  override readonly name = 'QuotaExceededError';
  readonly limit: string;
  readonly value: number;
  constructor(limit: TenantLimit, value: number, message: string, retryAfterSeconds?: number) {
    super(ErrorCode.QuotaExceeded, message, retryAfterSeconds === undefined ? {} : { retryAfterSeconds });
    this.limit = LIMIT_NAMES[limit];
    this.value = value;
  }
}

export const isQuotaExceeded = (e: unknown): e is QuotaExceededError => e instanceof QuotaExceededError;

/** Endpoints of the tenant that are not deleted, as the projection holds them. */
async function endpointsHeld(orm: MikroORM, tenant: TenantId): Promise<number> {
  const rows = await orm.em.fork().execute<{ n: number }[]>("select count(*)::int as n from endpoints where tenant = ? and status <> 'deleted'", [tenant]);
  return rows[0]?.n ?? 0;
}

export function withTenantQuotas(store: EndpointStore, deps: {
  orm: MikroORM;
  limits: TenantLimitsStore;
  /** `hookstream_tenant_limit_hits_total`, by limit. */
  hits?: Counter;
  /** Clock of the writes limiter in milliseconds (tests freeze it). */
  now?: () => number;
}): EndpointStore & { write(tenant: TenantId): Promise<void> } {
  const writes = createRateLimiter({ perSecond: 1, now: deps.now });
  const refuse = (e: QuotaExceededError): never => {
    deps.hits?.inc({ limit: e.limit });
    throw e;
  };
  const write = async (tenant: TenantId) => {
    const { writesPerSecond } = await deps.limits.get(tenant);
    const taken = writes.take(tenant, writesPerSecond);
    if (!taken.ok) {
      // Without a stack, as every refusal of ordinary traffic (api/errors.ts): a flooding tenant makes many.
      refuse(withoutStack(() => new QuotaExceededError('writesPerSecond', writesPerSecond,
        `this tenant may make ${writesPerSecond} endpoint writes a second; retry in ${taken.retryAfterSeconds} s`, taken.retryAfterSeconds)));
    }
  };
  // Counted from the projection, which may lag a command or two: concurrent creates can pass the limit by
  // as many as run at once, never more.
  const room = async (tenant: TenantId) => {
    const { endpoints } = await deps.limits.get(tenant);
    if (await endpointsHeld(deps.orm, tenant) >= endpoints) {
      refuse(new QuotaExceededError('endpoints', endpoints, `this tenant has its ${endpoints} endpoints; delete one, or ask the operator for more`));
    }
  };

  return {
    ...store,
    write,
    async create(tenant, fields, opts) {
      await write(tenant);
      await room(tenant);
      return store.create(tenant, fields, opts);
    },
    async update(tenant, id, patch) {
      await write(tenant);
      return store.update(tenant, id, patch);
    },
    async delete(tenant, id) {
      await write(tenant);
      return store.delete(tenant, id);
    },
    async restore(tenant, id) {
      await write(tenant);
      // Only a deleted endpoint comes back as one more; any other restore is the store's to answer (409).
      if ((await store.get(tenant, id)).status === EndpointStatus.Deleted) await room(tenant);
      return store.restore(tenant, id);
    },
    async rotateSecret(tenant, id, graceMs) {
      await write(tenant);
      return store.rotateSecret(tenant, id, graceMs);
    },
  };
}
