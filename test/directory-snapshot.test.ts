// Start-up from a snapshot (issue 23): a directory starts from the latest snapshot and folds only the
// events after it, and holds exactly what a fold of the whole stream holds; a snapshot it cannot trust
// (digest, a chunk gone, a malformed state, past the stream's end) is not used; an event removed from the
// stream after the snapshot makes the directory fold from the start, as it would without a snapshot.
import test, { type ExecutionContext } from 'ava';
import type { JetStreamClient } from '@nats-io/jetstream';
import { endpointsStream } from './helpers/endpoints-stream.ts';
import { eventually } from './helpers/service.ts';
import { startEndpointDirectory, type DirectoryOptions, type EndpointDirectory } from '../src/endpoints/directory.ts';
import { foldAllEndpoints } from '../src/endpoints/reseal.ts';
import { latestSnapshotSeq, writeSnapshot } from '../src/endpoints/snapshot.ts';
import { createLogger } from '../src/log.ts';
import { newEndpointId, type EndpointId } from '../src/domain/ids.ts';
import { endpointSubject } from '../streams/endpoints.ts';
import { ENDPOINT_SNAPSHOTS_STREAM, SNAPSHOT_MANIFEST_SUBJECT } from '../streams/endpoint-snapshots.ts';

const at = () => new Date().toISOString();
const created = (id: string, tenant: string) => JSON.stringify({
  v: 1, type: 'endpoint.created', id, tenant, url: `https://example.com/${id}`, events: ['*'], description: null, secret: 'sealed', at: at(),
});
const described = (id: string, description: string) => JSON.stringify({ v: 1, type: 'endpoint.updated', id, description, at: at() });

async function directory(t: ExecutionContext, deps: Awaited<ReturnType<typeof endpointsStream>>, options: DirectoryOptions = { snapshotEvery: 0 }) {
  const lines: { msg: string; [k: string]: unknown }[] = [];
  const d = await startEndpointDirectory({ ...deps, log: createLogger({ level: 'info', write: (l) => lines.push(JSON.parse(l) as (typeof lines)[number]) }), options });
  t.teardown(() => d.stop());
  return { d, lines, loaded: lines.find((l) => l.msg === 'endpoint directory loaded')! };
}

/** `n` endpoints with three descriptions each: 4n events. */
async function history(js: JetStreamClient, n: number): Promise<EndpointId[]> {
  const ids = Array.from({ length: n }, () => newEndpointId());
  for (const id of ids) await js.publish(endpointSubject(id), created(id, `tenant_${id.slice(-1)}`));
  for (let round = 1; round <= 3; round++) for (const id of ids) await js.publish(endpointSubject(id), described(id, `v${round}`));
  return ids;
}

const sorted = (d: EndpointDirectory) => [...d.all()].sort((a, b) => a.id.localeCompare(b.id));
const fullFold = async (deps: Awaited<ReturnType<typeof endpointsStream>>) => [...(await foldAllEndpoints(deps.js, deps.jsm)).values()].sort((a, b) => a.id.localeCompare(b.id));

test('a directory writes a snapshot every N events; the next one starts from it, folds only what came after, and holds what a full fold holds', async (t) => {
  const deps = await endpointsStream(t);
  const ids = await history(deps.js, 10);
  const first = await directory(t, deps, { snapshotEvery: 20, healMs: 100 });
  t.is(first.loaded['from_snapshot'], undefined, 'no snapshot yet: the whole stream');
  await eventually(async () => ((await latestSnapshotSeq(deps.jsm)) === 40 ? true : undefined), 10_000, 'a snapshot at 40');
  t.like(first.lines.find((l) => l.msg === 'endpoint directory snapshot written'), { seq: 40, endpoints: 10 });
  // After the snapshot: a change, a delete, a restore and a new endpoint.
  await deps.js.publish(endpointSubject(ids[0]!), described(ids[0]!, 'after'));
  await deps.js.publish(endpointSubject(ids[1]!), JSON.stringify({ v: 1, type: 'endpoint.deleted', id: ids[1], at: at() }));
  const late = newEndpointId();
  await deps.js.publish(endpointSubject(late), created(late, 'tenant_late'));

  const second = await directory(t, deps);
  t.like(second.loaded, { from_snapshot: 40, folded_after_it: 3, seq: 43, endpoints: 11 });
  t.deepEqual(sorted(second.d), await fullFold(deps), 'the same view as a fold of the whole stream');
  t.like(second.d.get(ids[0]!), { description: 'after', version: 41 });
  t.is(second.d.get(ids[1]!)!.status, 'deleted');
  t.deepEqual([...second.d.activeFor(`tenant_${ids[1]!.slice(-1)}` as never)].map((s) => s.id).includes(ids[1]!), false, 'the tenant index is rebuilt from it too');
  // It goes on folding live.
  await deps.js.publish(endpointSubject(ids[2]!), described(ids[2]!, 'live'));
  await second.d.sync();
  t.is(second.d.get(ids[2]!)!.description, 'live');
});

test('a snapshot that cannot be trusted is not used: the whole stream is folded, with a warning', async (t) => {
  const deps = await endpointsStream(t);
  await history(deps.js, 4);
  const good = (await directory(t, deps)).d.snapshot();
  const cases: [string, () => Promise<unknown>, RegExp][] = [
    ['a state with U+0000', () => writeSnapshot(deps.js, { ...good, seq: good.seq - 1, states: good.states.map((s, i) => (i === 0 ? { ...s, description: 'x\u0000y' } : s)) }), /malformed: a text field holds U\+0000/],
    ['a state from after the snapshot', () => writeSnapshot(deps.js, { ...good, seq: good.seq - 2 }), /malformed: not an endpoint state/],
    ['a snapshot past the stream\'s end', () => writeSnapshot(deps.js, { ...good, seq: good.seq + 100 }), /past the stream's end/],
    ['a digest that does not match', async () => {
      const m = (await deps.jsm.streams.getMessage(ENDPOINT_SNAPSHOTS_STREAM, { last_by_subj: SNAPSHOT_MANIFEST_SUBJECT }))!;
      await deps.js.publish(SNAPSHOT_MANIFEST_SUBJECT, JSON.stringify({ ...m.json<object>(), seq: good.seq, sha256: '00' }));
    }, /digest does not match/],
    ['a chunk gone', async () => {
      const m = (await deps.jsm.streams.getMessage(ENDPOINT_SNAPSHOTS_STREAM, { last_by_subj: SNAPSHOT_MANIFEST_SUBJECT }))!;
      await deps.js.publish(SNAPSHOT_MANIFEST_SUBJECT, JSON.stringify({ ...m.json<object>(), chunks: [999_999] }));
    }, /chunk 999999 is gone/],
  ];
  for (const [what, write, reason] of cases) {
    await write();
    const { d, lines, loaded } = await directory(t, deps);
    t.is(loaded['from_snapshot'], undefined, what);
    t.regex(String(lines.find((l) => l.msg === 'endpoint directory snapshot not used; folding the whole stream')?.['reason']), reason, what);
    t.deepEqual(sorted(d), await fullFold(deps), what);
  }
});

test('an event removed from the stream after the snapshot: the directory folds from the start, as without one', async (t) => {
  const deps = await endpointsStream(t);
  const [id] = await history(deps.js, 2);
  const snap = (await directory(t, deps)).d.snapshot();
  await writeSnapshot(deps.js, snap);
  // The last description of `id` (v3, sequence 7) is deleted: the stream now says v2.
  t.is(snap.states.find((s) => s.id === id)!.description, 'v3');
  await deps.jsm.streams.deleteMessage('ENDPOINTS', 7);
  const { d, lines } = await directory(t, deps);
  t.truthy(lines.find((l) => l.msg === 'endpoint directory folds the stream anew'));
  t.is(d.get(id!)!.description, 'v2');
  t.deepEqual(sorted(d), await fullFold(deps));
});

test('a snapshot that cannot be written is said once, and tried again only after as many events again', async (t) => {
  const deps = await endpointsStream(t);
  await deps.jsm.streams.delete(ENDPOINT_SNAPSHOTS_STREAM); // as a server whose nats.conf refuses it would
  await history(deps.js, 3);
  const { d, lines } = await directory(t, deps, { snapshotEvery: 5, healMs: 50 });
  const refused = () => lines.filter((l) => l.msg.startsWith('endpoint directory snapshot not written'));
  await eventually(async () => (refused().length > 0 ? true : undefined), 10_000, 'the refusal');
  await new Promise((r) => setTimeout(r, 1000)); // about twenty heal rounds
  t.is(refused().length, 1, 'not at every sync');
  t.is(d.lastSeq(), 12, 'the directory itself is fine');
});
