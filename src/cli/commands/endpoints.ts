import type { EndpointState } from '../../domain/endpoint.ts';
import { createEndpointStore } from '../../endpoints/store.ts';
import { loadKeys } from '../../crypto/keys.ts';
import { SecretSealer } from '../../crypto/sodium.ts';
import { checkTargetUrl } from '../../delivery/target-policy.ts';
import { requireString, requireTenant, type Command } from '../command.ts';
import { withNats } from '../context.ts';

const view = (e: EndpointState) => ({
  id: e.id, url: e.url, events: e.events, description: e.description, status: e.status,
  created_at: e.createdAt, updated_at: e.updatedAt,
});

export const endpointsCreate: Command = {
  name: 'endpoints create',
  summary: 'Subscribe an endpoint URL to events; prints the endpoint and its signing secret',
  help: [
    'Options:',
    '  --tenant T          tenant id',
    '  --url URL           https URL (http and private addresses only with HOOKSTREAM_ALLOW_PRIVATE_TARGETS=1)',
    '  --events LIST       comma-separated event names or wildcards: user.*, organization.*, organizationMembership.*, *',
    '  --description TEXT  optional',
    '',
    'The signing secret is shown once; it can be replaced later with rotate-secret.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, url: { type: 'string' }, events: { type: 'string' }, description: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const url = requireString(values, 'url');
    const events = requireString(values, 'events').split(',').map((e) => e.trim()).filter(Boolean);
    const result = await withNats(async ({ config, log, js, jsm }) => {
      const keys = await loadKeys(config, log, { master: true, deadLetterPublic: false, deadLetterSecret: false });
      const store = createEndpointStore({
        js, jsm, sealer: new SecretSealer(keys.masterKey!), checkUrl: (u) => checkTargetUrl(u, config.allowPrivateTargets),
      });
      return store.create(tenant, { url, events, description: values['description'] });
    });
    out.data({ ...view(result.endpoint), signing_secret: result.signingSecret }, () => [
      `created ${result.endpoint.id} for ${tenant}`,
      `  url:            ${result.endpoint.url}`,
      `  events:         ${result.endpoint.events.join(', ')}`,
      `  signing secret: ${result.signingSecret}   (shown once)`,
    ].join('\n'));
  },
};
