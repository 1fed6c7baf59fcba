// The OpenAPI document against the API it describes: every registered route is in the document and
// every operation in the document is a registered route; references resolve; the accepted body
// fields are the ones the handlers accept. (Responses are checked against it in every API test.)
import test from 'ava';
import { createApi, PUBLIC_PATHS } from '../src/api/app.ts';
import { OPENAPI_DOCUMENT } from '../src/api/openapi.ts';
import { ENDPOINT_CREATE_IN_FIELDS, ENDPOINT_IN_FIELDS, ROTATE_SECRET_IN_FIELDS } from '../src/api/wire.ts';
import type { EndpointStore } from '../src/endpoints/store.ts';
import type { Database } from '../src/db/orm.ts';
import type { SecretSealer } from '../src/crypto/sodium.ts';
import { silentLogger } from '../src/log.ts';
import { schemaProblems } from './helpers/api-client.ts';

type Node = Record<string, any>;
const doc = OPENAPI_DOCUMENT as unknown as Node;
const METHODS = ['get', 'put', 'post', 'patch', 'delete', 'options', 'head', 'trace'];

// The app is only built, never served: no dependency is touched.
const { routes } = createApi({ publicUrl: () => 'http://127.0.0.1',
  orm: undefined as unknown as Database, store: undefined as unknown as EndpointStore, waitForProjection: async () => {},
  checkUrl: () => undefined, rateLimitPerSecond: 1, log: silentLogger, sealer: undefined as unknown as SecretSealer,
});

const registered = routes.map((r) => `${r.method} ${r.path.replace(/:([A-Za-z_]+)/g, '{$1}')}`).sort();
const documented = Object.entries(doc['paths'] as Node)
  .flatMap(([path, item]) => Object.keys(item).filter((k) => METHODS.includes(k)).map((m) => `${m.toUpperCase()} ${path}`))
  .sort();

test('every registered route is documented, and every documented operation is registered', (t) => {
  t.true(registered.length >= 9);
  t.deepEqual(registered.filter((r) => !documented.includes(r)), [], 'routes missing from the document');
  t.deepEqual(documented.filter((d) => !registered.includes(d)), [], 'documented operations that are not routes');
  t.is(new Set(registered).size, registered.length, 'no route registered twice');
});

test('every $ref resolves', (t) => {
  const refs: string[] = [];
  const walk = (n: unknown) => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n && typeof n === 'object') {
      for (const [k, v] of Object.entries(n)) {
        if (k === '$ref' && typeof v === 'string') refs.push(v);
        else walk(v);
      }
    }
  };
  walk(doc);
  t.true(refs.length > 10);
  for (const ref of refs) {
    const target = ref.replace(/^#\//, '').split('/').reduce<Node | undefined>((o, k) => o?.[k], doc);
    t.truthy(target, ref);
  }
});

test('operations: unique ids, declared path parameters, auth errors on authenticated ones', (t) => {
  const ids = new Set<string>();
  for (const [path, item] of Object.entries(doc['paths'] as Node)) {
    const pathParams = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
    for (const method of Object.keys(item).filter((k) => METHODS.includes(k))) {
      const op = item[method];
      t.truthy(op.operationId, `${method} ${path}`);
      t.false(ids.has(op.operationId), `duplicate operationId ${op.operationId}`);
      ids.add(op.operationId);
      const declared = [...(item.parameters ?? []), ...(op.parameters ?? [])].filter((p: Node) => p['in'] === 'path').map((p: Node) => p['name']);
      t.deepEqual(declared.sort(), [...pathParams].sort(), `path parameters of ${method} ${path}`);
      const isPublic = PUBLIC_PATHS.has(path);
      t.is(Array.isArray(op.security) && op.security.length === 0, isPublic, `security of ${method} ${path}`);
      if (!isPublic) for (const status of ['401', '429', '500']) t.truthy(op.responses[status], `${status} on ${method} ${path}`);
      t.true(Object.keys(op.responses).some((s) => s.startsWith('2')), `a success response on ${method} ${path}`);
    }
  }
});

test('request bodies document exactly the fields the handlers accept', (t) => {
  const props = (name: string) => Object.keys(doc['components']['schemas'][name]['properties']).sort();
  t.deepEqual(props('EndpointIn'), [...ENDPOINT_CREATE_IN_FIELDS].sort());
  t.deepEqual(props('EndpointPatch'), [...ENDPOINT_IN_FIELDS].sort());
  t.deepEqual(props('RotateSecretIn'), [...ROTATE_SECRET_IN_FIELDS].sort());
  for (const name of ['EndpointIn', 'EndpointPatch', 'RotateSecretIn']) t.false(doc['components']['schemas'][name]['additionalProperties']);
});

test('the schema check used by the API tests does reject what the document forbids', (t) => {
  const endpoint = {
    id: 'webhook_01m82berktzg6gq4amwtxqvwrb', url: 'https://a.example.com', events: ['user.*'], description: null,
    status: 'active', signature_scheme: 'v1', rate_limit: null, ordering: 'none', disabled_reason: null, disabled_at: null,
    created_at: '2026-11-22T19:24:16.890Z', updated_at: '2026-11-22T19:24:16.890Z',
  };
  const schema = { $ref: '#/components/schemas/Endpoint' };
  t.deepEqual(schemaProblems(schema, endpoint), []);
  // v1a endpoints show their public key; v1 endpoints never carry one, and no endpoint a secret.
  const publicKey = `whpk_${Buffer.alloc(32, 9).toString('base64')}`;
  t.deepEqual(schemaProblems(schema, { ...endpoint, signature_scheme: 'v1a', signing_public_key: publicKey }), []);
  t.true(schemaProblems(schema, { ...endpoint, signature_scheme: 'v1a' }).length > 0, 'v1a without its public key');
  t.true(schemaProblems(schema, { ...endpoint, signing_public_key: publicKey }).length > 0, 'a public key on a v1 endpoint');
  const created = { $ref: '#/components/schemas/EndpointCreated' };
  t.deepEqual(schemaProblems(created, { ...endpoint, signing_secret: 'whsec_abcd' }), []);
  t.true(schemaProblems(created, endpoint).length > 0, 'a v1 create answer without its secret');
  t.true(schemaProblems(created, { ...endpoint, signature_scheme: 'v1a', signing_public_key: publicKey, signing_secret: 'whsec_abcd' }).length > 0, 'a secret in a v1a create answer');
  t.true(schemaProblems(schema, { ...endpoint, signing_secret: 'whsec_x' }).length > 0, 'no secret in an endpoint');
  t.true(schemaProblems(schema, { ...endpoint, status: 'paused' }).length > 0);
  // Issue 10: a rate limit within 1..10,000, and a disabled endpoint with its reason and time.
  t.deepEqual(schemaProblems(schema, { ...endpoint, rate_limit: 5 }), []);
  t.true(schemaProblems(schema, { ...endpoint, rate_limit: 0 }).length > 0);
  t.true(schemaProblems(schema, { ...endpoint, rate_limit: 1.5 }).length > 0);
  t.deepEqual(schemaProblems(schema, { ...endpoint, status: 'disabled', disabled_reason: 'gone', disabled_at: '2026-11-23T10:00:00.000Z' }), []);
  t.true(schemaProblems(schema, { ...endpoint, status: 'disabled', disabled_reason: 'tired', disabled_at: '2026-11-23T10:00:00.000Z' }).length > 0);
  const { rate_limit: _r, ...withoutRateLimit } = endpoint;
  t.true(schemaProblems(schema, withoutRateLimit).length > 0);
  t.true(schemaProblems(schema, { ...endpoint, events: ['user.exploded'] }).length > 0);
  const { url: _u, ...withoutUrl } = endpoint;
  t.true(schemaProblems(schema, withoutUrl).length > 0);
});
