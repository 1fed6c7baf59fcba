// `hookstream endpoints create|update|list`: endpoints from the command line, through the same endpoint
// store (create, update) and projection (list) as the API.
import { EndpointStatus, type EndpointInput, type EndpointState } from '../../domain/endpoint.ts';
import { isEndpointId, type EndpointId } from '../../domain/ids.ts';
import { createEndpoints, type Endpoints } from '../../endpoints/index.ts';
import { listEndpoints, type EndpointRow } from '../../endpoints/queries.ts';
import { loadKeys } from '../../crypto/keys.ts';
import { requireString, requireTenant, table, UsageError, type Command, type OptionValues } from '../command.ts';
import { withAdmin, withDatabase, withNats } from '../context.ts';

type Shown = Omit<EndpointState, 'secrets' | 'activeSince' | 'orderedSince' | 'directAfter' | 'keyedUntil'> | EndpointRow;

const view = (e: Shown) => ({
  id: e.id, url: e.url, events: e.events, description: e.description, status: e.status,
  signature_scheme: e.signatureScheme, ...(e.signingPublicKey ? { signing_public_key: e.signingPublicKey } : {}),
  rate_limit: e.rateLimit, ordering: e.ordering, disabled_reason: e.disabledReason, disabled_at: e.disabledAt,
  created_at: e.createdAt, updated_at: e.updatedAt,
});

/** `disabled (gone since …)` for people; the plain status otherwise. */
const statusText = (e: Shown) =>
  (e.status === EndpointStatus.Disabled ? `disabled (${e.disabledReason ?? '?'} since ${e.disabledAt ?? '?'})` : e.status);

/** --rate-limit: a number is checked with the other fields (1..10,000, one 422-like message); `none` clears it. */
function rateLimitOption(values: OptionValues): { rate_limit?: unknown } {
  const v = values['rate-limit'];
  if (v === undefined) return {};
  if (v === 'none') return { rate_limit: null };
  if (typeof v !== 'string' || !/^\d+$/.test(v)) throw new UsageError('--rate-limit must be a whole number of deliveries per second (1-10000) or none');
  return { rate_limit: Number(v) };
}

const RATE_LIMIT_HELP = '  --rate-limit N      at most N deliveries per second (1-10000); `none` for no limit';
const ORDERING_HELP = [
  '  --ordering none|key  key: each ordering key\'s events in order (Hookstream-Ordering-Key header, else the',
  '                      user or organization of identity events); none (default): unordered',
].join('\n');

/** --ordering: checked with the other fields (the store's one message for a bad value). */
const orderingOption = (values: OptionValues): { ordering?: unknown } => (values['ordering'] === undefined ? {} : { ordering: values['ordering'] });

/** The ENDPOINT_ID positional, checked. */
function endpointIdOf(positionals: string[]): EndpointId {
  const id = positionals[0]!;
  if (!isEndpointId(id)) throw new UsageError('ENDPOINT_ID must be a webhook_… id');
  return id;
}

async function withEndpoints<T>(fn: (endpoints: Endpoints) => Promise<T>): Promise<T> {
  return withNats(async ({ config, log, js, jsm }) => {
    const keys = await loadKeys(config, log, { master: true, deadLetterPublic: false, deadLetterSecret: false });
    const endpoints = createEndpoints({ js, jsm, masterKey: keys.masterKey!, allowPrivateTargets: config.allowPrivateTargets, partitions: config.eventPartitions, log });
    try {
      return await fn(endpoints);
    } finally {
      // The command's state is saved behind it: written before the connection closes.
      await endpoints.store.flush();
    }
  });
}

export const endpointsCreate: Command = {
  name: 'endpoints create',
  summary: 'Subscribe an endpoint URL to events; prints the endpoint and its signing secret (or public key)',
  help: [
    'Options:',
    '  --tenant T          tenant id',
    '  --url URL           https URL (http and private addresses only with HOOKSTREAM_ALLOW_PRIVATE_TARGETS=1)',
    '  --events LIST       comma-separated event names or wildcards: user.*, organization.*, organizationMembership.*, *',
    '  --description TEXT  optional',
    '  --signature-scheme v1|v1a  v1 (default): HMAC with a whsec_ secret, shown once;',
    '                      v1a: ed25519; hookstream keeps the private key and prints the whpk_ public key',
    RATE_LIMIT_HELP,
    ORDERING_HELP,
    '',
    'The signing secret is shown once; it can be replaced later with rotate-secret.',
  ].join('\n'),
  options: {
    tenant: { type: 'string' }, url: { type: 'string' }, events: { type: 'string' }, description: { type: 'string' },
    'signature-scheme': { type: 'string' }, 'rate-limit': { type: 'string' }, ordering: { type: 'string' },
  },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const url = requireString(values, 'url');
    const events = requireString(values, 'events').split(',').map((e) => e.trim()).filter(Boolean);
    const input: EndpointInput = {
      url, events, description: values['description'], signature_scheme: values['signature-scheme'], ...rateLimitOption(values),
      ...orderingOption(values),
    };
    const result = await withEndpoints((e) => e.store.create(tenant, e.parseNew(input)));
    const secret = result.signingSecret;
    out.data({ ...view(result.endpoint), ...(secret === undefined ? {} : { signing_secret: secret }) }, () => [
      `created ${result.endpoint.id} for ${tenant}`,
      `  url:            ${result.endpoint.url}`,
      `  events:         ${result.endpoint.events.join(', ')}`,
      ...(result.endpoint.rateLimit === null ? [] : [`  rate limit:     ${result.endpoint.rateLimit}/s`]),
      ...(result.endpoint.ordering === 'none' ? [] : [`  ordering:       ${result.endpoint.ordering}`]),
      secret === undefined
        ? `  public key:     ${result.endpoint.signingPublicKey}   (v1a; verify with: hookstream listen --public-key …)`
        : `  signing secret: ${secret}   (shown once)`,
    ].join('\n'));
  },
};

export const endpointsUpdate: Command = {
  name: 'endpoints update',
  summary: "Change an endpoint's url, events, description, rate limit or ordering",
  help: [
    'Options:',
    '  --tenant T          tenant id (the endpoint must be this tenant\'s)',
    '  --url URL           new URL',
    '  --events LIST       new comma-separated event names or wildcards',
    '  --description TEXT  new description',
    RATE_LIMIT_HELP,
    ORDERING_HELP,
    '',
    'Options left out stay as they are. A disabled endpoint stays disabled (restore it through the API).',
  ].join('\n'),
  options: {
    tenant: { type: 'string' }, url: { type: 'string' }, events: { type: 'string' }, description: { type: 'string' },
    'rate-limit': { type: 'string' }, ordering: { type: 'string' },
  },
  positionals: { min: 1, max: 1, names: 'ENDPOINT_ID' },
  async run({ values, positionals, out }) {
    const tenant = requireTenant(values);
    const id = endpointIdOf(positionals);
    const input: EndpointInput = {
      ...(values['url'] !== undefined ? { url: values['url'] } : {}),
      ...(typeof values['events'] === 'string' ? { events: values['events'].split(',').map((e) => e.trim()).filter(Boolean) } : {}),
      ...(values['description'] !== undefined ? { description: values['description'] } : {}),
      ...rateLimitOption(values),
      ...orderingOption(values),
    };
    if (Object.keys(input).length === 0) throw new UsageError('nothing to change: pass --url, --events, --description, --rate-limit or --ordering');
    const result = await withEndpoints((e) => e.store.update(tenant, id, e.parsePatch(input)));
    const e = result.endpoint;
    out.data(view(e), () => [
      `updated ${e.id}`,
      `  url:         ${e.url}`,
      `  events:      ${e.events.join(', ')}`,
      `  rate limit:  ${e.rateLimit === null ? 'none' : `${e.rateLimit}/s`}`,
      `  ordering:    ${e.ordering}`,
      `  status:      ${statusText(e)}`,
    ].join('\n'));
  },
};

export const endpointsList: Command = {
  name: 'endpoints list',
  summary: "A tenant's endpoints, newest first, with their status (disabled: why and since when)",
  help: [
    'Options:',
    '  --tenant T     tenant id',
    '  --limit N      at most N endpoints (1-100, default 100)',
    '',
    'Reads the Postgres projection, as the API does.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, limit: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const limit = values['limit'] === undefined ? 100 : Number(values['limit']);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new UsageError('--limit must be a whole number from 1 to 100');
    const page = await withDatabase((em) => listEndpoints(em, tenant, { limit }));
    out.data({ data: page.rows.map(view), has_more: page.hasMore }, () => (page.rows.length === 0
      ? `no endpoints for ${tenant}`
      : table(['ID', 'STATUS', 'RATE LIMIT', 'ORDERING', 'EVENTS', 'URL'], page.rows.map((e) => [
        e.id, statusText(e), e.rateLimit === null ? null : `${e.rateLimit}/s`, e.ordering, e.events.join(','), e.url,
      ]))));
  },
};

export const endpointsRetryNow: Command = {
  name: 'endpoints retry-now',
  summary: "Attempt an endpoint's waiting retries now instead of at their next step (after its receiver was fixed)",
  help: [
    'Every delivery instance hands the deliveries of ENDPOINT_ID that it left waiting for a retry back to',
    'NATS for an attempt now; each keeps its attempt count (the attempt made now is its next one). New',
    'deliveries never wait behind retries, so this is only for the ones that already failed. Retries left',
    'by an instance that has since stopped keep their schedule. Asks the admin subject, as the operator user.',
  ].join('\n'),
  options: {},
  positionals: { min: 1, max: 1, names: 'ENDPOINT_ID' },
  async run({ positionals, out }) {
    const id = endpointIdOf(positionals);
    const r = await withAdmin((admin) => admin.retryNow({ endpoint: id }));
    out.data(r, () => `${r.brought_forward} waiting ${r.brought_forward === 1 ? 'delivery' : 'deliveries'} of ${r.endpoint_id} brought forward (${r.instances} delivery ${r.instances === 1 ? 'instance' : 'instances'} answered)`);
  },
};

const pct = (r: number | null) => (r === null ? '-' : `${(r * 100).toFixed(1)}%`);
const msOf = (n: number | null) => (n === null ? '-' : `${Math.round(n)}ms`);

export const endpointsHealth: Command = {
  name: 'endpoints health',
  summary: "An endpoint's state, success ratio, p50/p99 latency and attempts over the last hour and day, last error and backlog",
  help: [
    'Read from the delivery log (attempts per minute; latencies of the latest 10,000 attempts of each window),',
    "the endpoint's consumer (backlog) and its health record (failing since). Asks the admin subject",
    '(admin.endpoints.health), as the operator user.',
  ].join('\n'),
  options: {},
  positionals: { min: 1, max: 1, names: 'ENDPOINT_ID' },
  async run({ positionals, out }) {
    const id = endpointIdOf(positionals);
    const { per_minute: _minutes, ...h } = await withAdmin((admin) => admin.endpointHealth({ endpoint: id }));
    out.data(h, () => [
      `${h.id} (${h.tenant}): ${h.state}`,
      `  url:         ${h.url}`,
      `  backlog:     ${h.backlog ? `${h.backlog.pending} waiting, ${h.backlog.ack_pending} in flight or retrying` : '-'}`,
      `  last error:  ${h.last_error ? `${h.last_error.at}  ${h.last_error.status_code ?? ''} ${h.last_error.error ?? ''}`.trimEnd() : '-'}`,
      table(['WINDOW', 'ATTEMPTS', 'OK', 'FAILED', 'SUCCESS', 'P50', 'P99'], ([['last hour', h.last_hour], ['last day', h.last_day]] as const).map(([w, s]) =>
        [w, s.attempts, s.ok, s.failed, pct(s.success_ratio), msOf(s.p50_ms), msOf(s.p99_ms)])),
    ].join('\n'));
  },
};

/** `endpoints disable|enable|delete --id ID [--reason TEXT]`: an operator's action, audited under their name. */
function endpointAction(verb: 'disable' | 'enable' | 'delete', summary: string, effect: string): Command {
  const needsReason = verb !== 'enable';
  return {
    name: `endpoints ${verb}`,
    summary,
    help: [
      'Options:',
      '  --id ID          the endpoint (webhook_…)',
      ...(needsReason ? ['  --reason TEXT    why (1-200 characters), kept in the audit log with the operator\'s name'] : []),
      '',
      effect,
      'Asks the admin subject (admin.endpoints.' + verb + ') as the operator user; the admin role must run as the',
      "service user (the admin role alone, as nats.conf's admin user, may not change endpoints).",
    ].join('\n'),
    options: { id: { type: 'string' }, ...(needsReason ? { reason: { type: 'string' } } : {}) },
    async run({ values, out }) {
      const id = requireString(values, 'id');
      if (!isEndpointId(id)) throw new UsageError('--id must be a webhook_… id');
      const reason = needsReason ? requireString(values, 'reason') : undefined;
      const r = await withAdmin((admin) => (verb === 'enable' ? admin.enableEndpoint({ endpoint: id })
        : verb === 'disable' ? admin.disableEndpoint({ endpoint: id, reason: reason! }) : admin.deleteEndpoint({ endpoint: id, reason: reason! })));
      out.data(r, () => `${r.endpoint_id} (${r.tenant}) is now ${r.status}${r.disabled_reason ? ` (${r.disabled_reason})` : ''}`);
    },
  };
}

export const endpointsDisable = endpointAction('disable', 'Disable an endpoint: nothing is sent to it, new deliveries wait in its queue until it is enabled',
  'Deliveries already queued and those routed meanwhile are kept and sent once the endpoint is enabled.');
export const endpointsEnable = endpointAction('enable', 'Enable a disabled endpoint again (whoever disabled it): its queued deliveries are sent',
  'Works for endpoints disabled by an operator, for a 410 Gone or for failing too long.');
export const endpointsDelete = endpointAction('delete', "Delete an endpoint for its tenant: its queue is dropped and nothing more is sent",
  'The tenant can restore it through the API (POST /v1/webhooks/:id/restore); queued deliveries are not kept.');
