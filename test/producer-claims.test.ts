// Direct delivery's deduplication of a producer's retried publish (src/delivery/producer-claims.ts), on a
// real nats-server with the PRODUCER_IDS stream as the service makes it: every process agrees which event
// holds a producer id, the earliest event takes the mark over from a later one whatever order processes
// claim in, tenants' ids never meet, and a claim that cannot be made sends the event.
import test from 'ava';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { createLogger } from '../src/log.ts';
import { createProducerClaims, type ProducerClaims } from '../src/delivery/producer-claims.ts';
import { scopedProducerId } from '../src/domain/producer-id.ts';
import { ensureProducerIdsStream, PRODUCER_IDS_STREAM, producerIdSubject } from '../streams/producer-ids.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;
let jsm: JetStreamManager;
const warnings: string[] = [];

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  jsm = await jetstreamManager(nc);
  await ensureProducerIdsStream(jsm);
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

/** One service process's claims, on a connection of its own. */
async function aProcess(t: { teardown(f: () => unknown): void }): Promise<ProducerClaims> {
  const own = await connectNats({ url: nats.url });
  const publisher = createAckedPublisher(own, { timeoutMs: 2000 });
  const reads = createNextBySubject(own, { timeoutMs: 2000 });
  t.teardown(async () => { publisher.close(); reads.close(); await own.close(); });
  return createProducerClaims({ publisher, reads, log: createLogger({ write: (line) => void warnings.push(line) }) });
}

const holderOf = async (id: string) => (await jsm.streams.getMessage(PRODUCER_IDS_STREAM, { last_by_subj: producerIdSubject(id) }))?.header.get('hookstream-event-seq');

test('the first event with an id holds it in every process; a retried publish is told so', async (t) => {
  const id = scopedProducerId('tenant_a', 'order-1');
  const [a, b] = [await aProcess(t), await aProcess(t)];
  t.is(await a.holder(id, 10), 10);
  t.is(a.holder(id, 10), 10, 'known in the process that claimed it, with no round trip');
  t.is(a.holder(id, 12), 10, 'a later event with the id in the same process');
  t.is(await b.holder(id, 12), 10, 'in another process, from the mark');
  t.is(await b.holder(id, 10), 10, 'the holder itself, in another process');
  t.is(await holderOf(id), '10');
});

test('an earlier event takes the mark over from a later one, so the first publish is never the one dropped', async (t) => {
  const id = scopedProducerId('tenant_a', 'order-2');
  const [a, b, c] = [await aProcess(t), await aProcess(t), await aProcess(t)];
  t.is(await a.holder(id, 21), 21, 'the later event read first');
  t.is(await b.holder(id, 20), 20, 'the earlier takes the mark over');
  t.is(await holderOf(id), '20');
  t.is(await c.holder(id, 21), 20, 'a third process drops the later one');
  t.is(await a.holder(id, 20), 20, 'the process that knew the later one as holder sends the earlier: it does not trust what it knew');
});

test('processes claiming at the same moment: the earliest event holds the mark once they are done', async (t) => {
  const id = scopedProducerId('tenant_a', 'order-3');
  const ps = await Promise.all(Array.from({ length: 6 }, () => aProcess(t)));
  const seqs = [35, 31, 34, 30, 33, 32];
  const holders = await Promise.all(ps.map((p, i) => p.holder(id, seqs[i]!)));
  t.is(holders[3], 30, 'the earliest event is sent');
  for (const [i, h] of holders.entries()) t.true(h <= seqs[i]!, 'no event is told a later one holds it');
  t.is(await holderOf(id), '30');
  t.is(await (await aProcess(t)).holder(id, 31), 30);
});

test('the same id of two tenants: two events, each its tenant\'s own', async (t) => {
  const p = await aProcess(t);
  t.not(scopedProducerId('tenant_a', 'same'), scopedProducerId('tenant_b', 'same'));
  t.is(await p.holder(scopedProducerId('tenant_a', 'same'), 40), 40);
  t.is(await p.holder(scopedProducerId('tenant_b', 'same'), 41), 41);
});

test.serial('no mark can be claimed (the stream is gone): the event is sent, with a warning, and the next claim tries again', async (t) => {
  const p = await aProcess(t);
  const id = scopedProducerId('tenant_a', 'order-4');
  await jsm.streams.delete(PRODUCER_IDS_STREAM);
  try {
    warnings.length = 0;
    t.is(await p.holder(id, 51), 51);
    t.is(await p.holder(id, 52), 52, 'a failed claim is not remembered');
    t.true(warnings.some((l) => l.includes('could not check an event\'s producer id')));
  } finally {
    await ensureProducerIdsStream(jsm);
  }
  t.is(await p.holder(id, 51), 51);
  t.is(await p.holder(id, 52), 51, 'checked again once the stream is back');
});
