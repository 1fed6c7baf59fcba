// An endpoint's history stays bounded (src/endpoints/store.ts, COMPACT_EVERY): after enough commands the
// command side appends endpoint.compacted (the whole state) and purges the events before it. A directory
// that was following, a fold from the start, and a directory that starts from a snapshot taken before the
// compaction all hold what the command side holds, and none mistakes the purge for a removal (no fold
// anew). The projection and its rebuild are checked in test/endpoint-read.test.ts.
import test, { type ExecutionContext } from 'ava';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { endpointsStream } from './helpers/endpoints-stream.ts';
import { startEndpointDirectory } from '../src/endpoints/directory.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import { COMPACT_EVERY } from '../src/endpoints/store.ts';
import { foldAllEndpoints } from '../src/endpoints/reseal.ts';
import { writeSnapshot } from '../src/endpoints/snapshot.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createLogger } from '../src/log.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { ENDPOINT_STATES_STREAM, ENDPOINTS_STREAM, endpointStateSubject, endpointSubject } from '../streams/endpoints.ts';

async function directory(t: ExecutionContext, deps: Awaited<ReturnType<typeof endpointsStream>>) {
  const lines: string[] = [];
  const d = await startEndpointDirectory({ ...deps, log: createLogger({ level: 'info', write: (l) => lines.push(l) }), options: { snapshotEvery: 0, healMs: 60_000 } });
  t.teardown(() => d.stop());
  return { d, anew: () => lines.filter((l) => l.includes('folds the stream anew')) };
}

test('past COMPACT_EVERY commands the history is replaced by its state; every directory agrees and none folds anew', async (t) => {
  await initSodium();
  const deps = await endpointsStream(t);
  const { store } = createEndpoints({ ...deps, masterKey: generateKeys().masterKey, allowPrivateTargets: true });
  const tenant = 'tenant_compact' as TenantId;
  const following = await directory(t, deps);
  const { endpoint } = await store.create(tenant, { url: 'https://hooks.example.com/c', events: ['user.*'] });
  const other = (await store.create(tenant, { url: 'https://hooks.example.com/d', events: ['*'] })).endpoint;
  await store.rotateSecret(tenant, endpoint.id, 60_000);
  for (let i = 0; i < COMPACT_EVERY - 10; i++) await store.update(tenant, endpoint.id, { description: `before ${i}` });
  await following.d.sync();
  // A snapshot taken before the compaction: a directory starting from it counted those events itself.
  await writeSnapshot(deps.js, following.d.snapshot());
  for (let i = 0; i < COMPACT_EVERY + 20; i++) await store.update(tenant, endpoint.id, { description: `after ${i}` });
  const last = await store.update(tenant, endpoint.id, { ordering: 'key' });
  // The events a compaction replaces are removed behind the command that made it.
  await store.flush();

  const subject = endpointSubject(endpoint.id);
  const held = (await deps.jsm.streams.info(ENDPOINTS_STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
  t.true(held > 0 && held <= COMPACT_EVERY, `the subject holds ${held} messages after ${2 * COMPACT_EVERY + 12} commands`);
  const first = await deps.jsm.streams.getMessage(ENDPOINTS_STREAM, { seq: 0, next_by_subj: subject } as unknown as { seq: number });
  t.is(first?.json<{ type: string }>().type, 'endpoint.compacted');

  const expected = await store.get(tenant, endpoint.id);
  t.like(expected, { description: last.endpoint.description, ordering: 'key', secrets: last.endpoint.secrets, version: last.seq });
  const fromSnapshot = await directory(t, deps);
  for (const { d } of [following, fromSnapshot]) {
    await d.sync();
    t.deepEqual(d.get(endpoint.id), expected);
    t.is(d.get(other.id)?.url, 'https://hooks.example.com/d');
  }
  const whole = await foldAllEndpoints(deps.js, deps.jsm);
  t.deepEqual(whole.get(endpoint.id), expected, 'a fold from the start of what the stream holds');
  // A sync compares the messages it applied with what the stream holds: a purge mistaken for a removal
  // would show as a fold anew.
  for (const { d, anew } of [following, fromSnapshot]) {
    await d.sync();
    t.deepEqual(anew(), []);
  }

  // Without its saved state, the compacted event (the subject's first) names the tenant.
  await deps.jsm.streams.purge(ENDPOINT_STATES_STREAM, { filter: endpointStateSubject(endpoint.id) });
  await t.throwsAsync(store.get('tenant_other' as TenantId, endpoint.id), { message: /not found/ });
  t.deepEqual(await store.get(tenant, endpoint.id), expected);
});

test('a compaction deletes the events before it with secure erase: a rotated-out sealed secret is left in no store file', async (t) => {
  await initSodium();
  const deps = await endpointsStream(t);
  const { store } = createEndpoints({ ...deps, masterKey: generateKeys().masterKey, allowPrivateTargets: true });
  const tenant = 'tenant_compact_secure' as TenantId;
  const { endpoint } = await store.create(tenant, { url: 'https://hooks.example.com/s', events: ['*'] });
  const subject = endpointSubject(endpoint.id);
  const created = await deps.jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: subject });
  const sealedFirst = [...created!.string().matchAll(/"(?:secret|sealed)":"([^"]+)"/g)].map((x) => x[1]!);
  t.true(sealedFirst.length >= 1);
  const holding = (needle: string) => readdirSync(deps.storeDir, { recursive: true, encoding: 'utf8' }).map((f) => join(deps.storeDir, f))
    .filter((f) => statSync(f, { throwIfNoEntry: false })?.isFile() && readFileSync(f).includes(Buffer.from(needle)));
  t.true(sealedFirst.every((v) => holding(v).length > 0), 'on disk before');
  // Rotated out with no grace: the compacted state no longer holds it.
  await store.rotateSecret(tenant, endpoint.id, 0);
  for (let i = 0; i < COMPACT_EVERY + 5; i++) await store.update(tenant, endpoint.id, { description: `d${i}` });
  await store.flush();
  const first = await deps.jsm.streams.getMessage(ENDPOINTS_STREAM, { seq: 0, next_by_subj: subject } as unknown as { seq: number });
  t.is(first?.json<{ type: string }>().type, 'endpoint.compacted');
  t.false(sealedFirst.some((v) => first!.string().includes(v)), 'not in the compacted state');
  t.deepEqual(sealedFirst.flatMap(holding), [], 'in no store file');
});
