// The router reads its drain records with plain MSG.GET requests (src/nats/next-by-subject.ts,
// createNextMessages): the answers must mean what nats.js's getMessage makes of them.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats, SERVICE_INBOX_PREFIX } from '../src/nats/connect.ts';
import { createNextMessages, NextBySubjectError } from '../src/nats/next-by-subject.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'RECORDS', subjects: ['records.>', 'other.>'] });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

test('the next message on a subject from a sequence on, its subject and body; null past the last', async (t) => {
  const reads = createNextMessages(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
  t.teardown(() => reads.close());
  const js = (await jetstreamManager(nc)).jetstream();
  const a = await js.publish('records.tenant_a', JSON.stringify({ v: 1, phase: 'starting' }));
  await js.publish('other.x', 'not a record');
  const b = await js.publish('records.tenant_b', new Uint8Array([0, 1, 2, 255]));
  const first = await reads.next('RECORDS', 'records.>', 1);
  t.deepEqual({ ...first!, data: new TextDecoder().decode(first!.data) }, { seq: a.seq, subject: 'records.tenant_a', data: '{"v":1,"phase":"starting"}' });
  const second = await reads.next('RECORDS', 'records.>', a.seq + 1);
  t.is(second!.seq, b.seq);
  t.is(second!.subject, 'records.tenant_b');
  t.deepEqual([...second!.data], [0, 1, 2, 255]);
  t.is(await reads.next('RECORDS', 'records.>', b.seq + 1), null);
  // The same answers as nats.js's reader.
  const jsm = await jetstreamManager(nc);
  const theirs = await jsm.streams.getMessage('RECORDS', { seq: a.seq + 1, next_by_subj: 'records.>' } as never);
  t.is(theirs!.seq, second!.seq);
  t.is(theirs!.subject, second!.subject);
});

test('no such stream: an error with JetStream\'s code (10059)', async (t) => {
  const reads = createNextMessages(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
  t.teardown(() => reads.close());
  const e = await t.throwsAsync(reads.next('NO_SUCH_STREAM', 'x.>', 1), { instanceOf: NextBySubjectError });
  t.is(e!.code, 10059);
});
