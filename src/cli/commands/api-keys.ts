// `hookstream api-keys create|list|revoke`: a tenant's API keys for the management API. The key is
// printed once, by create; afterwards only its id and first characters are ever shown.
import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyInfo } from '../../apikeys/store.ts';
import { requireTenant, table, UsageError, type Command } from '../command.ts';
import { cliOperator, withDatabase } from '../context.ts';
import { AUDIT_OK, AuditAction, recordAudit } from '../../audit/store.ts';
import { textProblem } from '../../domain/text.ts';

/** The JSON shape of a key (snake_case, as the API writes its fields). */
const keyOut = (k: ApiKeyInfo) => ({
  id: k.id, tenant: k.tenant, name: k.name, prefix: k.prefix, created_at: k.createdAt, revoked_at: k.revokedAt,
});

export const apiKeysCreate: Command = {
  name: 'api-keys create',
  summary: 'Create an API key for a tenant; prints the key once',
  help: [
    'Options:',
    '  --tenant T   tenant id the key acts for',
    '  --name N     optional label, shown by api-keys list',
    '',
    'The key (hs_live_…) is shown only now: store it in a secrets manager. Use it as',
    '  Authorization: Bearer <key>',
  ].join('\n'),
  options: { tenant: { type: 'string' }, name: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const name = typeof values['name'] === 'string' && values['name'] !== '' ? values['name'] : null;
    if (name !== null && name.length > 200) throw new UsageError('--name must be at most 200 characters');
    const problem = name === null ? undefined : textProblem(name);
    if (problem) throw new UsageError(`--name ${problem}`);
    const created = await withDatabase((em) => createApiKey(em, tenant, name));
    out.data({ ...keyOut(created), key: created.key }, () => [
      `created ${created.id} for ${tenant}${name ? ` (${name})` : ''}`,
      `  key: ${created.key}   (shown once)`,
    ].join('\n'));
  },
};

export const apiKeysList: Command = {
  name: 'api-keys list',
  summary: "List a tenant's API keys (never the keys themselves)",
  help: 'Options:\n  --tenant T   tenant id',
  options: { tenant: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const keys = await withDatabase((em) => listApiKeys(em, tenant));
    out.data(keys.map(keyOut), () => keys.length === 0
      ? `no API keys for ${tenant}`
      : table(['ID', 'NAME', 'PREFIX', 'CREATED', 'REVOKED'], keys.map((k) => [k.id, k.name, `${k.prefix}…`, k.createdAt, k.revokedAt])));
  },
};

export const apiKeysRevoke: Command = {
  name: 'api-keys revoke',
  summary: 'Revoke an API key: requests with it get 401 from now on',
  help: 'Arguments:\n  ID   the key id (key_…) from api-keys list\n\nRevoking a revoked key changes nothing.',
  positionals: { min: 1, max: 1, names: 'ID' },
  async run({ positionals, out }) {
    const id = positionals[0]!;
    const by = cliOperator();
    const revoked = await withDatabase((em) => em.transactional(async (tx) => {
      const r = await revokeApiKey(tx, id);
      await recordAudit(tx, { operator: by, action: AuditAction.ApiKeyRevoke, target: r.id, outcome: AUDIT_OK, detail: `tenant ${r.tenant}` });
      return r;
    }));
    out.data(keyOut(revoked), () => `revoked ${revoked.id} of ${revoked.tenant} at ${revoked.revokedAt}`);
  },
};
