// What erasure leaves on disk, checked as an auditor would: the nats-server store files are read byte by
// byte for each erased event's unique marker. Events of one user are delivered to one endpoint, dead-
// lettered at another and queued for a disabled third; delivery bodies are sealed under the user's data key
// (src/erasure/data-keys.ts), so no queue ever holds the marker in plain text, and after `erase` the key is
// gone from the store files too: a sealed copy kept from before (as an acknowledged delivery's bytes stay
// in its queue's block) no longer opens. EVENTS, REJECTED, ATTEMPTS, ERASURE_INDEX and queued deliveries
// are overwritten by secure erase; Postgres holds no plain text. EVENTS is split into partitions
// (HOOKSTREAM_EVENT_PARTITIONS), so the copies nats-server makes of each event are on disk too, and go.
import test from 'ava';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { createDataKeys, DataKeyErasedError, isSealedBody } from '../src/erasure/data-keys.ts';
import { DATA_KEYS_STREAM } from '../streams/data-keys.ts';
import { deliveryAddress } from '../streams/deliveries.ts';

let h: TestService;
let admin: AdminClient;

test.before(async () => {
  // Partitions without direct delivery: it reads a sealed delivery in a work queue (pinned).
  h = await startTestService('erasure_disk', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_RETRY_SCHEDULE: '100ms,100ms', HOOKSTREAM_EVENT_PARTITIONS: '4' });
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
});
test.after.always(() => h?.closeAll());

/** Occurrences of `marker` per store file (path relative to the store directory). */
function onDisk(marker: string | Uint8Array): Map<string, number> {
  const out = new Map<string, number>();
  const needle = Buffer.from(marker);
  for (const f of readdirSync(h.nats.storeDir, { recursive: true, encoding: 'utf8' })) {
    const path = join(h.nats.storeDir, f);
    if (!statSync(path, { throwIfNoEntry: false })?.isFile()) continue;
    const bytes = readFileSync(path);
    let n = 0;
    for (let i = bytes.indexOf(needle); i !== -1; i = bytes.indexOf(needle, i + 1)) n++;
    if (n > 0) out.set(relative(h.nats.storeDir, path), n);
  }
  return out;
}

const streamOf = (file: string) => /streams\/([^/]+)\//.exec(file)?.[1] ?? file;

test('after erase no copy of the payload is left on disk in plain text, and the sealed copies no longer open', async (t) => {
  const tenant = 'tenant_erase_disk';
  const ok = await h.receiver(() => 204);
  const failing = await h.receiver(() => 500);
  const held = await h.receiver(() => 204);
  await h.store.create(tenant as TenantId, { url: ok.url, events: ['*'] });
  const dying = await h.store.create(tenant as TenantId, { url: failing.url, events: ['*'] });
  const heldId = (await h.store.create(tenant as TenantId, { url: held.url, events: ['*'] })).endpoint.id;
  await h.store.disable(heldId, 'gone');
  const markers = Array.from({ length: 5 }, (_, i) => `MARKER${i}x${Date.now().toString(36)}`);
  for (const marker of markers) await h.publish(tenant, 'user.updated', { userId: 'user_disk', note: marker });
  await h.publish(tenant, 'user.nonsense', { userId: 'user_disk', note: `${markers[0]}rejected` });
  await h.publish(tenant, 'user.updated', { userId: 'user_other', note: 'KEPTMARKER' });
  await ok.waitFor(6);
  await eventually(async () => ((await admin.listDeadLetters({ endpoint: dying.endpoint.id })).data.length === 6 ? true : undefined), 30_000, 'six dead letters');
  const before = markers.map(onDisk);
  t.true(before.every((m) => [...m.keys()].some((f) => streamOf(f) === 'EVENTS')), 'on disk before, as published');
  t.false(before.some((m) => [...m.keys()].some((f) => /^DELIVERIES_/.test(streamOf(f)))), 'never in plain text in a delivery queue');
  // A sealed copy as an auditor could carve it out of a block: the disabled endpoint's queued delivery.
  const { jsm, nc } = h.service;
  const held_ = deliveryAddress(heldId, h.config.deliveryShards);
  const queued = await jsm.streams.getMessage(held_.stream, { next_by_subj: held_.subject, seq: 1 } as never);
  t.true(isSealedBody(queued!.data));
  const keys = createDataKeys({ nc, jsm, masterKey: h.keys.masterKey });
  t.teardown(() => keys.close());
  t.true(Buffer.from(await keys.open(queued!.data)).toString().includes(markers[0]!), 'it opens before the erasure');
  const [ref] = await keys.refsOf(tenant, [{ kind: 'user', id: 'user_disk' }]);
  const wrapped = (await jsm.streams.getMessage(DATA_KEYS_STREAM, { last_by_subj: `data_keys.${tenant}.${ref}` }))!.data;
  t.true(onDisk(wrapped).size > 0, "the user's key is in DATA_KEYS' store file");

  const r = await admin.eraseSubject({ tenant, user: 'user_disk' });
  t.like(r.stores, { dead_letters: { erased: 5 }, rejected: { erased: 1 } });
  const left = new Map<string, number>();
  for (const marker of [...markers, `${markers[0]}rejected`]) {
    for (const [file, n] of onDisk(marker)) left.set(streamOf(file), (left.get(streamOf(file)) ?? 0) + n);
  }
  t.log(`copies left after erase: ${JSON.stringify(Object.fromEntries(left))} (${process.env['NATS_SERVER_BIN'] ?? 'nats-server'})`);
  t.deepEqual(Object.fromEntries(left), {}, 'no plain-text copy in any store file');
  t.is(r.stores.data_keys.destroyed, 1);
  t.deepEqual(Object.fromEntries(onDisk(wrapped)), {}, "the user's key is overwritten in the store file");
  // The sealed copy kept from before does not open, in this process or any other.
  await t.throwsAsync(async () => keys.open(queued!.data), { instanceOf: DataKeyErasedError }, 'a process that held the key forgot it');
  const fresh = createDataKeys({ nc, jsm, masterKey: h.keys.masterKey });
  t.teardown(() => fresh.close());
  await t.throwsAsync(async () => fresh.open(queued!.data), { instanceOf: DataKeyErasedError });
  // Postgres: only the other user's dead letter is left (sealed), and nothing holds the payload in plain text.
  const em = h.service.orm!.em.fork();
  t.is((await em.execute('select id from dead_letters where tenant = ?', [tenant])).length, 1);
  for (const table of ['audit_log', 'erasure_index', 'endpoints']) {
    const rows = await em.execute<unknown[]>(`select * from ${table}`);
    t.false(markers.some((m) => JSON.stringify(rows).includes(m)), table);
  }
  // The other user's event is still there.
  t.true(onDisk('KEPTMARKER').size > 0);
});
