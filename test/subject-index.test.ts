// The ordering gate (src/delivery/ordered-gate.ts) finds a key's stored deliveries with `next_by_subj`,
// through the stream's subject index. nats-server 2.9 keeps a subject's first sequence but not its last
// once the last message is removed: with three messages on a subject, the last removed and then the first,
// the one left is no longer found. A key's deliveries are removed so when one of an earlier event was
// stored after a later one (a late store, after a router restart). 2.10 and later find it. This file holds
// that behaviour to ORDERING_FLOOR, and the start-up warning that names it.
import test from 'ava';
import { jetstreamManager, RetentionPolicy } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats, SERVICE_INBOX_PREFIX } from '../src/nats/connect.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { belowFloor, ORDERING_FLOOR } from '../src/nats/server-version.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { startTestService } from './helpers/fixture.ts';

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

test('a key\'s last delivery removed, then its first: next_by_subj finds the one left from ORDERING_FLOOR on, not below', async (t) => {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'KEYS', subjects: ['keys.>'], retention: RetentionPolicy.Workqueue });
  const js = jsm.jetstream();
  const seqs: number[] = [];
  for (let i = 0; i < 3; i++) {
    await js.publish('keys.other', 'another subject between them');
    seqs.push((await js.publish('keys.k', String(i))).seq);
  }
  await jsm.streams.deleteMessage('KEYS', seqs[2]!, false);
  await jsm.streams.deleteMessage('KEYS', seqs[0]!, false);
  const heads = createNextBySubject(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
  t.teardown(() => heads.close());
  // By sequence it is there on every version; the count per subject is right too.
  t.is((await heads.at('KEYS', seqs[1]!))?.seq, seqs[1]);
  t.deepEqual((await jsm.streams.info('KEYS', { subjects_filter: 'keys.k' })).state.subjects, { 'keys.k': 1 });
  const version = nc.info?.version;
  const found = await heads.next('KEYS', 'keys.k', 0);
  if (belowFloor(version, ORDERING_FLOOR)) t.is(found, null, `nats-server ${version} hides it (if it no longer does, say so in docs/ordered-delivery.md)`);
  else t.is(found?.seq, seqs[1], `nats-server ${version} finds it`);
});

test('start-up warns about per-key order on a server below ORDERING_FLOOR, and only there', async (t) => {
  const lines: { level: string; msg: string; version?: string }[] = [];
  const h = await startTestService('subject_index', { HOOKSTREAM_LOG_LEVEL: 'warn' }, { logWrite: (line) => lines.push(JSON.parse(line) as { level: string; msg: string }) });
  t.teardown(() => h.closeAll());
  const version = h.service.nc.info?.version;
  const warned = lines.filter((l) => l.level === 'warn' && /ordering "key" need nats-server 2\.10 or newer/.test(l.msg));
  // Said once per server version in a process: this is the first start in this file's.
  if (belowFloor(version, ORDERING_FLOOR)) t.deepEqual(warned.map((l) => l.version), [version]);
  else t.deepEqual(warned, []);
});
