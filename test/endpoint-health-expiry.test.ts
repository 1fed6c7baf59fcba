// ENDPOINT_HEALTH records expire (issue 23): the stream has a max_age, so the record of an endpoint whose
// delete was missed is gone after it, from the stream and from memory, while a failing active endpoint's
// clock survives any length of time because the delivery role re-writes its record well within the age.
// A real nats-server and a real endpoint directory; the age is a few seconds here (7 days in service).
import test from 'ava';
import { nanos } from '@nats-io/nats-core';
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { endpointsStream } from './helpers/endpoints-stream.ts';
import { startEndpointDirectory, type EndpointDirectory } from '../src/endpoints/directory.ts';
import { startEndpointHealth, type EndpointHealth } from '../src/delivery/endpoint-health.ts';
import {
  ENDPOINT_HEALTH_MAX_AGE_MS, ENDPOINT_HEALTH_STREAM, endpointHealthSubject, ensureEndpointHealthStream, type EndpointHealthRecord,
} from '../streams/endpoint-health.ts';
import { endpointSubject } from '../streams/endpoints.ts';
import { ensureOpsStream } from '../streams/ops.ts';
import { createOpsEvents } from '../src/ops/events.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { createLogger } from '../src/log.ts';
import { newEndpointId, type EndpointId } from '../src/domain/ids.ts';
import type { DisabledReason } from '../src/domain/endpoint.ts';
import { eventually } from './helpers/service.ts';

const AGE_MS = 3500;
const DAY_MS = 24 * 3600_000;

async function setup(t: Parameters<typeof endpointsStream>[0], maxAgeMs = AGE_MS) {
  const { js, jsm } = await endpointsStream(t);
  await ensureOpsStream(jsm);
  await ensureEndpointHealthStream(jsm, undefined, maxAgeMs);
  const lines: string[] = [];
  const log = createLogger({ level: 'warn', write: (l) => lines.push(l) });
  const directory = await startEndpointDirectory({ js, jsm, log });
  t.teardown(() => directory.stop());
  const disabled: { id: EndpointId; reason: DisabledReason }[] = [];
  const metrics = createServiceMetrics();
  const startHealth = async (disableAfterMs: number): Promise<EndpointHealth> => {
    const health = await startEndpointHealth({
      js, jsm, directory, log, metrics, disableAfterMs, maxAgeMs,
      ops: createOpsEvents({ js, log, metrics }),
      // The decision is what these tests look at; the disable itself is endpoint-disable.test.ts's.
      store: { disable: async (id, reason) => { disabled.push({ id, reason }); return undefined; } },
    });
    t.teardown(() => health.stop());
    return health;
  };
  return { js, jsm, directory, lines, disabled, startHealth };
}

async function createEndpoint(js: JetStreamClient, directory: EndpointDirectory, id: EndpointId) {
  await js.publish(endpointSubject(id), JSON.stringify({
    v: 1, type: 'endpoint.created', id, tenant: 'tenant_h', url: `https://example.com/${id}`, events: ['*'], description: null, secret: 'sealed', at: new Date().toISOString(),
  }));
  await directory.sync();
  return directory.get(id)!;
}

const latest = async (jsm: JetStreamManager, id: EndpointId) => {
  const m = await jsm.streams.getMessage(ENDPOINT_HEALTH_STREAM, { last_by_subj: endpointHealthSubject(id) }).catch(() => null);
  return m ? { seq: m.seq, record: m.json<EndpointHealthRecord>() } : null;
};

test('the record of an endpoint nobody delivers for expires, and memory forgets its clock', async (t) => {
  const { js, jsm, directory, disabled, startHealth } = await setup(t);
  // Failing for ten days, and its delete was missed: the directory does not know it.
  const ghost = newEndpointId();
  const record: EndpointHealthRecord = { v: 1, endpoint: ghost, failing_since: new Date(Date.now() - 10 * DAY_MS).toISOString(), at: new Date().toISOString() };
  await js.publish(endpointHealthSubject(ghost), JSON.stringify(record));
  const health = await startHealth(60_000);

  await eventually(async () => ((await latest(jsm, ghost)) === null ? true : undefined), 4 * AGE_MS, 'the record expired');
  t.is((await jsm.streams.info(ENDPOINT_HEALTH_STREAM)).state.messages, 0);
  // The clock went from memory too: a failure of the same id (created now) starts a new clock instead of
  // disabling at once for ten days of failures.
  await new Promise((r) => setTimeout(r, AGE_MS / 5)); // the next look over the clocks
  const state = await createEndpoint(js, directory, ghost);
  const at = Date.now();
  health.onAttemptResult(state, { ok: false, status: 500, at });
  const fresh = await eventually(() => latest(jsm, ghost).then((l) => l ?? undefined), 5000, 'a new clock recorded');
  t.is(fresh.record.failing_since, new Date(at).toISOString());
  t.deepEqual(disabled, []);
});

test('a failing active endpoint\'s clock outlives the age (re-written), across instances and a restart', async (t) => {
  const { js, jsm, directory, lines, disabled, startHealth } = await setup(t);
  const live = await createEndpoint(js, directory, newEndpointId());
  // Two delivery instances share the clock; both take turns at re-writing it.
  const a = await startHealth(60_000);
  await startHealth(60_000);
  const since = Date.now();
  a.onAttemptResult(live, { ok: false, status: 500, at: since });
  const first = await eventually(() => latest(jsm, live.id).then((l) => l ?? undefined), 5000, 'the clock recorded');

  // Three ages: the record is there at every look, still failing since the first failure.
  const until = Date.now() + 3 * AGE_MS;
  let last = first;
  while (Date.now() < until) {
    const now = await latest(jsm, live.id);
    if (!now) return t.fail('the live endpoint\'s record expired');
    t.is(now.record.failing_since, new Date(since).toISOString());
    last = now;
    await new Promise((r) => setTimeout(r, 200));
  }
  t.true(last.seq > first.seq, 're-written');
  t.true(Date.parse(last.record.at) > since + 2 * AGE_MS, 'recently');
  t.true((await jsm.streams.info(ENDPOINT_HEALTH_STREAM)).state.messages === 1);
  t.deepEqual(lines.filter((l) => l.includes('could not re-write')), [], 'a lost turn (the other instance was first) is no warning');

  // A new instance reads the clock: with HOOKSTREAM_DISABLE_AFTER 5 s, its first failure disables.
  const restarted = await startHealth(5000);
  restarted.onAttemptResult(live, { ok: false, status: 500, at: Date.now() });
  await eventually(() => (disabled.length > 0 ? true : undefined), 5000, 'a disable');
  t.deepEqual(disabled, [{ id: live.id, reason: 'failing' }]);
});

test('a success ends the re-writing: the clock does not come back', async (t) => {
  const { js, jsm, directory, startHealth } = await setup(t);
  const ep = await createEndpoint(js, directory, newEndpointId());
  const a = await startHealth(60_000);
  const b = await startHealth(60_000);
  a.onAttemptResult(ep, { ok: false, status: 500, at: Date.now() });
  await eventually(() => latest(jsm, ep.id).then((l) => l ?? undefined), 5000, 'the clock recorded');
  await new Promise((r) => setTimeout(r, AGE_MS / 2));
  b.onAttemptResult(ep, { ok: true, status: 204, at: Date.now() });
  await eventually(() => latest(jsm, ep.id).then((l) => (l?.record.failing_since === null ? true : undefined)), 5000, 'the success recorded');
  const until = Date.now() + AGE_MS;
  while (Date.now() < until) {
    const l = await latest(jsm, ep.id);
    t.is(l?.record.failing_since ?? null, null);
    await new Promise((r) => setTimeout(r, 200));
  }
});

test('an attempt that ends after its endpoint was deleted records no clock', async (t) => {
  const { js, jsm, directory, startHealth } = await setup(t);
  const ep = await createEndpoint(js, directory, newEndpointId());
  const health = await startHealth(60_000);
  await js.publish(endpointSubject(ep.id), JSON.stringify({ v: 1, type: 'endpoint.deleted', id: ep.id, at: new Date().toISOString() }));
  await directory.sync();
  health.onAttemptResult(ep, { ok: false, status: 500, at: Date.now() });
  await health.stop(); // waits for the writes it started
  t.is(await latest(jsm, ep.id), null);
});

// The stream as versions before issue 23 made it.
const addUnbounded = (jsm: JetStreamManager) => jsm.streams.add({
  name: ENDPOINT_HEALTH_STREAM, subjects: ['endpoint_health.>'], retention: RetentionPolicy.Limits, storage: StorageType.File,
  discard: DiscardPolicy.Old, max_msgs_per_subject: 1, max_msg_size: 1024,
});

test('an existing ENDPOINT_HEALTH without max_age gets it in place, records kept; a later change of age applies too', async (t) => {
  const { js, jsm } = await endpointsStream(t);
  await addUnbounded(jsm);
  const id = newEndpointId();
  await js.publish(endpointHealthSubject(id), JSON.stringify({ v: 1, endpoint: id, failing_since: new Date().toISOString(), at: new Date().toISOString() }));

  await ensureEndpointHealthStream(jsm);
  let info = await jsm.streams.info(ENDPOINT_HEALTH_STREAM);
  t.is(info.config.max_age, nanos(ENDPOINT_HEALTH_MAX_AGE_MS));
  t.is(info.config.duplicate_window, nanos(120_000));
  t.is(info.state.messages, 1, 'the record kept');
  await ensureEndpointHealthStream(jsm);
  t.is((await jsm.streams.info(ENDPOINT_HEALTH_STREAM)).config.max_age, nanos(ENDPOINT_HEALTH_MAX_AGE_MS), 'nothing to change the second time');

  await ensureEndpointHealthStream(jsm, undefined, 1500);
  info = await jsm.streams.info(ENDPOINT_HEALTH_STREAM);
  t.is(info.config.max_age, nanos(1500));
  t.is(info.config.duplicate_window, nanos(1500));
  await eventually(async () => ((await latest(jsm, id)) === null ? true : undefined), 10_000, 'the record expired under the shorter age');
  t.pass();
});

test('the upgrade keeps failing clocks older than the new age: they are re-written before it applies', async (t) => {
  const { js, jsm } = await endpointsStream(t);
  await addUnbounded(jsm);
  const failing = newEndpointId();
  const healthy = newEndpointId();
  const since = new Date(Date.now() - 30 * DAY_MS).toISOString();
  await js.publish(endpointHealthSubject(failing), JSON.stringify({ v: 1, endpoint: failing, failing_since: since, at: new Date().toISOString() }));
  await js.publish(endpointHealthSubject(healthy), JSON.stringify({ v: 1, endpoint: healthy, failing_since: null, at: new Date().toISOString() }));
  await new Promise((r) => setTimeout(r, 2000)); // both older than the age below
  await ensureEndpointHealthStream(jsm, undefined, 1500);
  const kept = await latest(jsm, failing);
  t.is(kept?.record.failing_since, since, 'the failing clock survived the new age');
  t.is(await latest(jsm, healthy), null, 'a healthy record has nothing to keep');
});
