// `hookstream tenants limits show|set`: a tenant's quotas (src/tenants/limits.ts). Written in Postgres
// directly, like api-keys revoke, and audited under the operator; running services pick a change up
// within 5 s.
import { isTenantId, TENANT_ID_RULE, type TenantId } from '../../domain/ids.ts';
import {
  createTenantLimitsStore, DEFAULT_TENANT_LIMITS, DEFAULTS_TENANT, LIMIT_NAMES, MAX_LIMIT, TENANT_LIMITS, type TenantLimit, type TenantLimits,
} from '../../tenants/limits.ts';
import { table, UsageError, type Command } from '../command.ts';
import { cliOperator, withDatabase } from '../context.ts';

const OPTION: Record<TenantLimit, string> = {
  endpoints: 'endpoints', writesPerSecond: 'writes-per-second', queuedDeliveries: 'queued-deliveries', eventsPerSecond: 'events-per-second',
};

/** snake_case, as the API writes fields. */
const limitsOut = (l: Partial<TenantLimits>) => Object.fromEntries(TENANT_LIMITS.filter((k) => l[k] !== undefined).map((k) => [LIMIT_NAMES[k], l[k]]));

function tenantOf(value: unknown): TenantId | typeof DEFAULTS_TENANT {
  if (value === DEFAULTS_TENANT) return DEFAULTS_TENANT;
  if (typeof value !== 'string' || value === '') throw new UsageError(`--tenant is required (a tenant id, or ${DEFAULTS_TENANT} for the defaults of every tenant)`);
  if (!isTenantId(value)) throw new UsageError(`--tenant must be ${TENANT_ID_RULE}, or ${DEFAULTS_TENANT}`);
  return value;
}

export const tenantsLimitsShow: Command = {
  name: 'tenants limits show',
  summary: "Show a tenant's quotas, or the defaults and every override",
  help: [
    'Options:',
    "  --tenant T   this tenant's limits in effect (its overrides over the defaults)",
    '',
    'Without --tenant: the built-in defaults, and every override (* changes the defaults of every tenant).',
  ].join('\n'),
  options: { tenant: { type: 'string' } },
  async run({ values, out }) {
    const tenant = values['tenant'] === undefined ? undefined : tenantOf(values['tenant']);
    const shown = await withDatabase(async (em) => {
      const store = createTenantLimitsStore({ em });
      const overrides = await store.list();
      if (tenant === undefined || tenant === DEFAULTS_TENANT) return { overrides };
      return { overrides: overrides.filter((o) => o.tenant === tenant || o.tenant === DEFAULTS_TENANT), limits: await store.get(tenant) };
    });
    const overrides = shown.overrides.map((o) => ({ tenant: o.tenant, limits: limitsOut(o.limits), updated_at: o.updatedAt, updated_by: o.updatedBy }));
    const data = shown.limits
      ? { tenant, limits: limitsOut(shown.limits), overrides }
      : { defaults: limitsOut(DEFAULT_TENANT_LIMITS), overrides };
    out.data(data, () => {
      const rows = TENANT_LIMITS.map((k) => [LIMIT_NAMES[k], (shown.limits ?? DEFAULT_TENANT_LIMITS)[k]]);
      const head = shown.limits ? `limits of ${tenant}:` : 'built-in defaults:';
      const over = overrides.length === 0 ? 'no overrides' : table(['TENANT', 'OVERRIDES', 'UPDATED', 'BY'], overrides.map((o) => [
        o.tenant, Object.entries(o.limits).map(([k, v]) => `${k}=${v}`).join(' ') || '(none)', o.updated_at, o.updated_by,
      ]));
      return `${head}\n${table(['LIMIT', 'VALUE'], rows)}\n\n${over}`;
    });
  },
};

export const tenantsLimitsSet: Command = {
  name: 'tenants limits set',
  summary: "Override some of a tenant's quotas (or the defaults, --tenant '*'); audited",
  help: [
    'Options:',
    "  --tenant T                 the tenant, or '*' for the defaults of every tenant",
    ...TENANT_LIMITS.map((k) => `  --${OPTION[k]} N`.padEnd(29) + `${LIMIT_NAMES[k]}: 0 to ${MAX_LIMIT}, or "default" (built-in ${DEFAULT_TENANT_LIMITS[k]})`),
    '',
    'Running services apply a change within 5 s. Endpoint writes a second count per API instance.',
  ].join('\n'),
  options: Object.fromEntries([['tenant', { type: 'string' }], ...TENANT_LIMITS.map((k) => [OPTION[k], { type: 'string' }])]),
  async run({ values, out }) {
    const tenant = tenantOf(values['tenant']);
    const partial: { [K in TenantLimit]?: number | null } = {};
    for (const k of TENANT_LIMITS) {
      const v = values[OPTION[k]];
      if (v === undefined) continue;
      if (v === 'default') partial[k] = null;
      else if (typeof v === 'string' && /^\d+$/.test(v) && Number(v) <= MAX_LIMIT) partial[k] = Number(v);
      else throw new UsageError(`--${OPTION[k]} must be a whole number from 0 to ${MAX_LIMIT}, or "default"`);
    }
    if (Object.keys(partial).length === 0) throw new UsageError(`name at least one limit: ${TENANT_LIMITS.map((k) => `--${OPTION[k]}`).join(', ')}`);
    const by = cliOperator();
    const limits = await withDatabase((em) => createTenantLimitsStore({ em }).set(tenant, partial, by));
    out.data({ tenant, limits: limitsOut(limits) }, () => `limits of ${tenant} now: ${Object.entries(limitsOut(limits)).map(([k, v]) => `${k}=${v}`).join(' ')}`);
  },
};
