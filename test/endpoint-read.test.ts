// Reading one endpoint for a tenant (issue 8, point 7): another tenant's id is answered with the same
// work as a missing id (the same NATS requests, counted on the wire), and a malformed message on an
// endpoint's subject is skipped and logged instead of failing every command on that endpoint. A command's
// read costs the same two message gets at the 300th write as at the first and leaves no consumer behind,
// also when it is refused (409); a command starts from the state its process kept (a state another process
// has moved on from costs one conflicting append and a fresh read); a state saved before events it lacks
// is brought up to date. The state is saved behind the command (the command answers once its event is appended), one save at a time per
// endpoint, and a save that lands after its endpoint's history was erased removes itself.
import test from 'ava';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { eventually, startHarness, type Harness } from './helpers/service.ts';
import { getEndpoint } from '../src/endpoints/queries.ts';
import { COMPACT_EVERY } from '../src/endpoints/store.ts';
import { rebuildEndpointProjection } from '../projections/endpoints.ts';
import { apiClient } from './helpers/api-client.ts';
import { connectNats } from '../src/nats/connect.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { OwnedEndpointStore } from '../src/endpoints/store.ts';
import { saveEndpointState } from '../src/endpoints/read.ts';
import type { NewEndpoint } from '../src/domain/endpoint.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { createLogger } from '../src/log.ts';
import { ENDPOINT_STATES_STREAM, ENDPOINTS_STREAM, endpointStateSubject, endpointSubject } from '../streams/endpoints.ts';
import { newEndpointId, type EndpointId, type TenantId } from '../src/domain/ids.ts';

let h: Harness;
let nc: NatsConnection;
let store: OwnedEndpointStore;
/** Every subject this file's own connection publishes to (requests included), in order; hence serial tests. */
const sent: string[] = [];
const logged: string[] = [];

test.before(async () => {
  h = await startHarness('endpoint-read', { HOOKSTREAM_ROLES: 'api,projector' });
  nc = await connectNats({ url: h.nats.url });
  // Count at the protocol: every request, pull and ack a client makes goes out through this one method.
  const protocol = (nc as unknown as { protocol: { publish: (subject: string, ...rest: unknown[]) => void } }).protocol;
  const publish = protocol.publish.bind(protocol);
  protocol.publish = (subject: string, ...rest: unknown[]) => { sent.push(subject); publish(subject, ...rest); };
  store = createEndpoints({
    js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }), masterKey: h.keys.masterKey, allowPrivateTargets: true,
    log: createLogger({ write: (line) => logged.push(line) }),
  }).store;
});
/** A store of its own, as another service instance has. */
const storeOfAnotherProcess = async () => createEndpoints({
  js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }), masterKey: h.keys.masterKey, allowPrivateTargets: true, log: createLogger({ write: () => {} }),
}).store;

test.after.always(async () => {
  await nc?.close();
  await h?.close();
});

const body: NewEndpoint = { url: 'https://hooks.example.com/a', events: ['user.*'] };

/** The subjects published while `fn` runs and the error it threw. */
async function trace(fn: () => Promise<unknown>): Promise<{ subjects: string[]; error: unknown }> {
  // A closed ordered consumer of an earlier fold may still send its last pull: let it go out first.
  await new Promise((r) => setTimeout(r, 100));
  await nc.flush();
  const from = sent.length;
  let error: unknown;
  try { await fn(); } catch (e) { error = e; }
  return { subjects: sent.slice(from), error };
}

test.serial('another tenant\'s endpoint id costs exactly the NATS requests a missing id costs, and is the same 404', async (t) => {
  const { endpoint } = await store.create('tenant_owner' as TenantId, body);
  await store.update('tenant_owner' as TenantId, endpoint.id, { description: 'a second event on the subject' });
  await store.flush();
  const missing = newEndpointId();
  await trace(() => store.get('tenant_x' as TenantId, missing)); // warm up (the client's request mux)

  const foreign = await trace(() => store.get('tenant_x' as TenantId, endpoint.id));
  const absent = await trace(() => store.get('tenant_x' as TenantId, missing));
  t.deepEqual(foreign.subjects, ['$JS.API.STREAM.MSG.GET.ENDPOINT_STATES', '$JS.API.STREAM.MSG.GET.ENDPOINTS'], 'the saved state and the last event');
  t.deepEqual(absent.subjects, foreign.subjects);
  t.like(foreign.error, { code: 'not_found' });
  t.like(absent.error, { code: 'not_found' });
  for (const write of [
    () => store.update('tenant_x' as TenantId, endpoint.id, { description: 'x' }),
    () => store.delete('tenant_x' as TenantId, endpoint.id),
    () => store.rotateSecret('tenant_x' as TenantId, endpoint.id),
  ]) {
    const w = await trace(write);
    t.deepEqual(w.subjects, absent.subjects, 'writes check the tenant with the same requests');
    t.like(w.error, { code: 'not_found' });
  }

  // The owner gets its state with the same requests.
  const own = await trace(() => store.get('tenant_owner' as TenantId, endpoint.id));
  t.is(own.error, undefined);
  t.is(own.subjects.length, 2);

  // Over HTTP: the same status and envelope for both, apart from the id named in the message.
  const key = (await createApiKey(h.service.orm!.em.fork(), 'tenant_x' as TenantId, 'test')).key;
  const c = apiClient(h.service.api!.url, key, t);
  const a = await c.get(`/v1/webhooks/${endpoint.id}`);
  const b = await c.get(`/v1/webhooks/${missing}`);
  t.is(a.status, 404);
  t.is(b.status, 404);
  const strip = (r: { body: any }) => ({ ...r.body.error, message: String(r.body.error.message).replace(/webhook_[0-9a-z]+/, 'ID') });
  t.deepEqual(strip(a), strip(b));
});

test.serial('a malformed message on an endpoint\'s subject is skipped and logged; commands on the endpoint keep working', async (t) => {
  const tenant = 'tenant_bad' as TenantId;
  const { endpoint } = await store.create(tenant, body);
  const js = jetstream(nc);
  await js.publish(endpointSubject(endpoint.id), '{not json');
  await js.publish(endpointSubject(endpoint.id), JSON.stringify({ v: 1, type: 'endpoint.deleted', id: 'webhook_other', at: new Date().toISOString() }));
  const state = await store.get(tenant, endpoint.id);
  t.is(state.status, 'active');
  t.is(state.url, body.url);
  t.true(logged.filter((l) => l.includes('skipping endpoint event') && l.includes(endpoint.id)).length >= 2);
  // The next command expects the subject's real last sequence, so it does not conflict for ever.
  const updated = await store.update(tenant, endpoint.id, { description: 'after the bad messages' });
  t.is(updated.endpoint.description, 'after the bad messages');
  t.is((await store.get(tenant, endpoint.id)).description, 'after the bad messages');
});

test.serial('an id that is not an endpoint id makes no request at all', async (t) => {
  const r = await trace(() => store.get('tenant_x' as TenantId, 'webhook_*' as EndpointId));
  t.deepEqual(r.subjects, []);
  t.like(r.error, { code: 'not_found' });
});

const GETS = ['$JS.API.STREAM.MSG.GET.ENDPOINT_STATES', '$JS.API.STREAM.MSG.GET.ENDPOINTS'];
const consumers = async () => (await (await jetstreamManager(nc, { checkAPI: false })).streams.info(ENDPOINTS_STREAM)).state.consumer_count;

test.serial('a command starts from the state its process kept, and a read costs the same two message gets at the 300th write as at the first; 300 refused restores leave no consumer', async (t) => {
  const tenant = 'tenant_busy' as TenantId;
  const { endpoint } = await store.create(tenant, body);
  const subject = endpointSubject(endpoint.id);
  const before = await consumers();
  const other = await storeOfAnotherProcess();
  const first = await trace(() => other.update(tenant, endpoint.id, { description: 'write 1' }));
  t.deepEqual(first.subjects.slice(0, 3), [...GETS, subject], 'a process that kept no state reads it, then appends');
  // This process's state is the one before write 1: its append conflicts, and the command is decided again on a fresh read.
  const stale = await trace(() => store.update(tenant, endpoint.id, { description: 'write 2' }));
  t.is(stale.error, undefined);
  t.deepEqual(stale.subjects.slice(0, 4), [subject, ...GETS, subject]);
  for (let i = 3; i < 300; i++) await store.update(tenant, endpoint.id, { description: `write ${i}` });
  const kept = await trace(() => store.update(tenant, endpoint.id, { description: 'write 300' }));
  t.is(kept.subjects[0], subject, 'from the state it kept: the append, and no read before it');
  await store.flush();
  const cold = await trace(async () => (await storeOfAnotherProcess()).update(tenant, endpoint.id, { description: 'write 301' }));
  t.deepEqual(cold.subjects.slice(0, 3), first.subjects.slice(0, 3), 'the same requests: the read does not grow with the history');
  for (let i = 0; i < 300; i++) {
    const refused = await trace(() => store.restore(tenant, endpoint.id));
    t.like(refused.error, { code: 'conflict' });
    // A refusal is never answered from a kept state: decided again on the streams' state.
    if (i === 0) t.deepEqual(refused.subjects, GETS);
  }
  t.true(await consumers() <= before, 'no consumer was created for a read');
  await store.flush();
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const states = endpointStateSubject(endpoint.id);
  t.is((await jsm.streams.info(ENDPOINT_STATES_STREAM, { subjects_filter: states })).state.subjects?.[states], 1, 'one saved state per endpoint');
  t.is((await store.get(tenant, endpoint.id)).description, 'write 301');

  // Compacted on the way (COMPACT_EVERY): the projection, and a rebuild of it, hold the same endpoint.
  const events = (await jsm.streams.info(ENDPOINTS_STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
  t.true(events <= COMPACT_EVERY, `${events} events kept of 302`);
  const row = async () => {
    await eventually(async () => ((await getEndpoint(h.service.orm!.em.fork(), tenant, endpoint.id))?.description === 'write 301' ? true : undefined), 30_000, 'the projection');
    return getEndpoint(h.service.orm!.em.fork(), tenant, endpoint.id);
  };
  const projected = await row();
  await rebuildEndpointProjection({ js: jetstream(nc), orm: h.service.orm!, log: createLogger({ write: () => {} }) });
  t.deepEqual(await row(), projected);
});

test.serial('a saved state that lacks events, or is missing, is brought up to date by a fold of what it lacks', async (t) => {
  const tenant = 'tenant_legacy' as TenantId;
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const { endpoint } = await store.create(tenant, body);
  // Events another writer appended without saving a state (an older version of the service, a crash between the two).
  const last = (await jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: endpointSubject(endpoint.id) }))!.seq;
  await js.publish(endpointSubject(endpoint.id), JSON.stringify({ v: 1, type: 'endpoint.updated', id: endpoint.id, description: 'behind', at: new Date().toISOString() }), { expect: { lastSubjectSequence: last } });
  t.is((await store.get(tenant, endpoint.id)).description, 'behind');
  t.is((await store.get('tenant_x' as TenantId, endpoint.id).catch((e: unknown) => e) as { code?: string }).code, 'not_found');
  // No saved state at all: the whole (short) history is folded once, then saved.
  await jsm.streams.purge(ENDPOINT_STATES_STREAM, { filter: endpointStateSubject(endpoint.id) });
  const updated = await store.update(tenant, endpoint.id, { description: 'folded' });
  t.is(updated.endpoint.description, 'folded');
  await store.flush();
  const again = await trace(() => store.get(tenant, endpoint.id));
  t.deepEqual(again.subjects, GETS, 'saved again: the next read folds nothing');
});

const stateCount = async (id: EndpointId) => {
  const subject = endpointStateSubject(id);
  return (await (await jetstreamManager(nc, { checkAPI: false })).streams.info(ENDPOINT_STATES_STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
};

test.serial('a kept state is used for a minute at most: after that the next command reads the streams again', async (t) => {
  let now = Date.now();
  const clocked = createEndpoints({
    js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }), masterKey: h.keys.masterKey, allowPrivateTargets: true, now: () => new Date(now),
  }).store;
  const tenant = 'tenant_kept' as TenantId;
  const { endpoint } = await clocked.create(tenant, body);
  const subject = endpointSubject(endpoint.id);
  now += 59_000;
  t.is((await trace(() => clocked.update(tenant, endpoint.id, { description: 'within the minute' }))).subjects[0], subject);
  now += 61_000;
  t.deepEqual((await trace(() => clocked.update(tenant, endpoint.id, { description: 'past it' }))).subjects.slice(0, 3), [...GETS, subject]);
  await clocked.flush();
});

test.serial('a command answers once its event is appended; its state is saved behind it, the newest of a burst once flushed', async (t) => {
  const tenant = 'tenant_behind' as TenantId;
  const { endpoint } = await store.create(tenant, body);
  await store.flush();
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  // By a store that kept no state, so the write reads it.
  const other = await storeOfAnotherProcess();
  const write = await trace(() => other.update(tenant, endpoint.id, { description: 'answered first' }));
  t.is(write.error, undefined);
  // Up to its answer: the reads and the append, and at most the save's first publish; the secure delete of
  // the state before it needs the save's answers, so it cannot have gone out yet.
  t.deepEqual(write.subjects.slice(0, 3), [...GETS, endpointSubject(endpoint.id)]);
  t.false(write.subjects.some((s) => s.startsWith('$JS.API.STREAM.MSG.DELETE')), `no secure delete before the answer: ${write.subjects.join(' ')}`);
  await other.flush();
  t.is(await stateCount(endpoint.id), 1, 'the state before it was deleted');
  // A burst on one endpoint, none waiting for a save: the read of each is still right (it folds what the
  // saved state lacks), and once flushed the one state left is the last command's.
  let last = 0;
  for (let i = 0; i < 20; i++) last = (await store.update(tenant, endpoint.id, { description: `burst ${i}` })).seq;
  t.is((await store.get(tenant, endpoint.id)).description, 'burst 19');
  await store.flush();
  t.is(await stateCount(endpoint.id), 1);
  const saved = (await jsm.streams.getMessage(ENDPOINT_STATES_STREAM, { last_by_subj: endpointStateSubject(endpoint.id) }))!.json<{ state: { version: number; description: string } }>().state;
  t.is(saved.version, last);
  t.is(saved.description, 'burst 19');
  const read = await trace(() => store.get(tenant, endpoint.id));
  t.deepEqual(read.subjects, GETS, 'the next read folds nothing');
});

test.serial("a state saved after its endpoint's history was erased deletes itself: no copy of its sealed secret stays", async (t) => {
  const tenant = 'tenant_erased' as TenantId;
  const { endpoint } = await store.create(tenant, body);
  await store.flush();
  const state = await store.get(tenant, endpoint.id);
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  // What a tenant's erasure does: the events go, then the saved states.
  await jsm.streams.purge(ENDPOINTS_STREAM, { filter: endpointSubject(endpoint.id) });
  await jsm.streams.purge(ENDPOINT_STATES_STREAM, { filter: endpointStateSubject(endpoint.id) });
  // A save still running behind a command of another process lands afterwards.
  await saveEndpointState(jetstream(nc), jsm, state);
  t.is(await stateCount(endpoint.id), 0);
  // While the history is there, a save stays.
  const other = (await store.create(tenant, body)).endpoint;
  await store.flush();
  await saveEndpointState(jetstream(nc), jsm, await store.get(tenant, other.id));
  t.is(await stateCount(other.id), 1);
});

test.serial('read in the middle of a compaction (the saved state\'s event deleted, earlier events not yet): the endpoint is found, folded from the compaction', async (t) => {
  const tenant = 'tenant_compacting' as TenantId;
  const { endpoint } = await store.create(tenant, body);
  for (let i = 0; i < 5; i++) await store.update(tenant, endpoint.id, { description: `before ${i}` });
  await store.flush();
  const state = await store.get(tenant, endpoint.id);
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const subject = endpointSubject(endpoint.id);
  const events: number[] = [];
  for (let seq = 0; ;) {
    const m = await jsm.streams.getMessage(ENDPOINTS_STREAM, { seq: seq + 1, next_by_subj: subject } as never).catch(() => null);
    if (!m) break;
    events.push(m.seq);
    seq = m.seq;
  }
  // What a compaction does, stopped part way: its event (the whole state) appended, then the secure deletes
  // of the events before it, in parallel batches: here the first and the last (the one the saved state
  // stands for) are gone, the ones between not yet.
  const { version: _v, eventsSince: _n, ...carried } = state;
  await jetstream(nc).publish(subject, JSON.stringify({ v: 1, type: 'endpoint.compacted', id: endpoint.id, state: { ...carried, description: 'compacted' }, removes: events.length, at: new Date().toISOString() }), { expect: { lastSubjectSequence: state.version } });
  await jsm.streams.deleteMessage(ENDPOINTS_STREAM, events[0]!, true);
  await jsm.streams.deleteMessage(ENDPOINTS_STREAM, events.at(-1)!, true);

  t.is((await store.get(tenant, endpoint.id)).description, 'compacted');
  await t.throwsAsync(store.get('tenant_other' as TenantId, endpoint.id), { message: /not found|no endpoint/i });
  // The command side, for the owner: its next command lands after the compaction.
  t.is((await store.update(tenant, endpoint.id, { description: 'after' })).endpoint.description, 'after');
});
