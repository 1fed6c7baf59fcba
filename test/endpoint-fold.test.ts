// One fold of ENDPOINTS (issue 23): the directory, the command side's read, the secrets reseal and the
// Postgres projection skip the same events (one on another endpoint's subject, text a store cannot hold,
// a malformed field, not JSON), written with the service credential, and end in the same state; each
// reader goes on past them, and the directory and the projection count them.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { readEndpoint } from '../src/endpoints/read.ts';
import { foldAllEndpoints } from '../src/endpoints/reseal.ts';
import { endpointSubject } from '../streams/endpoints.ts';

let h: TestService;
const lines: string[] = [];

test.before(async () => {
  h = await startTestService('endpoint_fold', { HOOKSTREAM_LOG_LEVEL: 'info' }, { logWrite: (l) => lines.push(l) });
});

test.after.always(() => h?.closeAll());

test('every reader skips the same poison events and agrees on what is left', async (t) => {
  const r = await h.receiver();
  const a = (await h.store.create('tenant_fold_a' as TenantId, { url: r.url, events: ['user.*'], description: 'a' })).endpoint;
  const b = (await h.store.create('tenant_fold_b' as TenantId, { url: r.url, events: ['user.*'], description: 'b' })).endpoint;
  const at = new Date().toISOString();
  const directorySkippedBefore = h.service.metrics.directorySkipped.get();
  const projectionSkippedBefore = h.service.metrics.projectionSkipped.get({ projection: 'endpoints' });
  // Written as the service (or anyone holding its credential) could: none of these is an event of A's.
  const raw = async (id: EndpointId, body: string) => (await h.service.js.publish(endpointSubject(id), body)).seq;
  const poison = [
    await raw(a.id, JSON.stringify({ v: 1, type: 'endpoint.updated', id: b.id, description: 'hijacked', url: 'https://attacker.example/', at })),
    await raw(a.id, JSON.stringify({ v: 1, type: 'endpoint.updated', id: a.id, description: 'x\u0000y', at })),
    await raw(a.id, JSON.stringify({ v: 1, type: 'endpoint.updated', id: a.id, rate_limit: 0, at })),
    await raw(a.id, JSON.stringify({ v: 1, type: 'endpoint.updated', id: a.id, events: 'user.*', at })),
    await raw(a.id, 'not json'),
  ];
  // A real command after them: every reader goes on.
  const updated = await h.store.update('tenant_fold_a' as TenantId, a.id, { description: 'after' });

  await h.service.directory!.sync();
  const directory = [h.service.directory!.get(a.id)!, h.service.directory!.get(b.id)!];
  const read = [(await readEndpoint(h.service.js, h.service.jsm, a.id))!, (await readEndpoint(h.service.js, h.service.jsm, b.id))!];
  const all = await foldAllEndpoints(h.service.js, h.service.jsm);
  const resealView = [all.get(a.id)!, all.get(b.id)!];
  const rows = await eventually(async () => {
    const found = await h.service.orm!.em.fork().find(EndpointRecord, { id: { $in: [a.id, b.id] } }, { orderBy: { id: 'asc' } });
    return found.find((x) => x.id === a.id)?.description === 'after' ? found : undefined;
  }, 20_000, 'the projection past the poison events');
  const projected = [rows.find((x) => x.id === a.id)!, rows.find((x) => x.id === b.id)!];

  for (const [name, [sa, sb]] of [['directory', directory], ['read', read], ['reseal', resealView], ['projection', projected]] as const) {
    t.like(sa, { description: 'after', url: r.url, events: ['user.*'], rateLimit: null }, `${name}: A as its real events left it`);
    t.like(sb, { description: 'b', url: r.url }, `${name}: B untouched by an event on A's subject`);
  }
  t.is(directory[0]!.version, updated.endpoint.version);
  t.deepEqual(read[0], directory[0], 'the command side and the directory hold the same state');
  t.deepEqual(resealView[0], directory[0]);
  t.is(h.service.metrics.directorySkipped.get() - directorySkippedBefore, poison.length, 'the directory counts each');
  await eventually(async () => (h.service.metrics.projectionSkipped.get({ projection: 'endpoints' }) - projectionSkippedBefore === poison.length ? true : undefined),
    10_000, 'the projection counts each');
  const skippedByDirectory = lines.map((l) => JSON.parse(l) as { msg: string; role?: string; seq?: number })
    .filter((l) => l.msg === 'skipping endpoint event' && l.role === 'directory').map((l) => l.seq);
  t.deepEqual(skippedByDirectory, poison, 'logged once each, with its sequence');
});
