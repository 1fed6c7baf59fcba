import type { EndpointState } from '../../domain/endpoint.ts';
import { createEndpointStore } from '../../endpoints/store.ts';
import { loadKeys } from '../../crypto/keys.ts';
import { SecretSealer } from '../../crypto/sodium.ts';
import { checkTargetUrl } from '../../delivery/target-policy.ts';
import { requireString, requireTenant, type Command } from '../command.ts';
import { withNats } from '../context.ts';

const view = (e: EndpointState) => ({
  id: e.id, url: e.url, events: e.events, description: e.description, status: e.status,
  signature_scheme: e.signatureScheme, ...(e.signingPublicKey ? { signing_public_key: e.signingPublicKey } : {}),
  created_at: e.createdAt, updated_at: e.updatedAt,
});

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
    '',
    'The signing secret is shown once; it can be replaced later with rotate-secret.',
  ].join('\n'),
  options: {
    tenant: { type: 'string' }, url: { type: 'string' }, events: { type: 'string' }, description: { type: 'string' },
    'signature-scheme': { type: 'string' },
  },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const url = requireString(values, 'url');
    const events = requireString(values, 'events').split(',').map((e) => e.trim()).filter(Boolean);
    const result = await withNats(async ({ config, log, js, jsm }) => {
      const keys = await loadKeys(config, log, { master: true, deadLetterPublic: false, deadLetterSecret: false });
      const store = createEndpointStore({
        js, jsm, sealer: new SecretSealer(keys.masterKey!), checkUrl: (u) => checkTargetUrl(u, config.allowPrivateTargets),
      });
      return store.create(tenant, { url, events, description: values['description'], signature_scheme: values['signature-scheme'] });
    });
    const secret = result.signingSecret;
    out.data({ ...view(result.endpoint), ...(secret === undefined ? {} : { signing_secret: secret }) }, () => [
      `created ${result.endpoint.id} for ${tenant}`,
      `  url:            ${result.endpoint.url}`,
      `  events:         ${result.endpoint.events.join(', ')}`,
      secret === undefined
        ? `  public key:     ${result.endpoint.signingPublicKey}   (v1a; verify with: hookstream listen --public-key …)`
        : `  signing secret: ${secret}   (shown once)`,
    ].join('\n'));
  },
};
