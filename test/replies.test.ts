// Requests on one wildcard reply subscription (src/nats/replies.ts), the hand-rolled request/reply under
// every JetStream publish of the router and every head read of the ordering gate, against a real
// nats-server: each answer reaches its own request whatever the order, stray or forged answers reach none,
// and a request never waits for ever (timeout, its connection closed, close()).
import test from 'ava';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createReplies, type NoAnswer } from '../src/nats/replies.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer({ jetstream: false });
  nc = await connectNats({ url: nats.url });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

class NoAnswerError extends Error {
  readonly why: NoAnswer;
  constructor(why: NoAnswer) {
    super(`no answer: ${why}`);
    this.why = why;
  }
}

const text = (m: Msg) => new TextDecoder().decode(m.data);
const repliesOn = (conn: NatsConnection, timeoutMs = 5000) => createReplies<string>(conn, {
  timeoutMs,
  read: (m) => { const s = text(m); if (s.startsWith('bad')) throw new Error(`refused: ${s}`); return s; },
  fail: (why) => new NoAnswerError(why),
});
const whyOf = (e: unknown) => (e instanceof NoAnswerError ? e.why : String(e));

test('answers given in reverse order each reach the request they answer', async (t) => {
  const held: Msg[] = [];
  const sub = nc.subscribe('rev.>', { callback: (_e, m) => {
    held.push(m);
    if (held.length === 5) for (const h of held.reverse()) h.respond(`answer to ${h.subject}`);
  } });
  t.teardown(() => sub.unsubscribe());
  const replies = repliesOn(nc);
  t.teardown(() => replies.close());
  const answers = await Promise.all([0, 1, 2, 3, 4].map((i) => replies.request(`rev.${i}`, 'q')));
  t.deepEqual(answers, [0, 1, 2, 3, 4].map((i) => `answer to rev.${i}`));
});

test('stray answers on the reply subscription (an id never issued, not a number, a second answer) reach no request', async (t) => {
  const sub = nc.subscribe('stray', { callback: (_e, m) => {
    const prefix = m.reply!.slice(0, m.reply!.lastIndexOf('.'));
    for (const forged of [`${prefix}.999999`, `${prefix}.abc`, `${prefix}.-1`, `${prefix}.1e3`]) nc.publish(forged, 'forged');
    nc.flush().then(() => { m.respond(`real ${text(m)}`); m.respond('late second answer'); }, () => {});
  } });
  t.teardown(() => sub.unsubscribe());
  const replies = repliesOn(nc);
  t.teardown(() => replies.close());
  t.is(await replies.request('stray', 'one'), 'real one');
  t.is(await replies.request('stray', 'two'), 'real two');
});

test('an answer read as an error rejects that request alone', async (t) => {
  const sub = nc.subscribe('mixed', { callback: (_e, m) => { m.respond(text(m)); } });
  t.teardown(() => sub.unsubscribe());
  const replies = repliesOn(nc);
  t.teardown(() => replies.close());
  const [good, bad, after] = await Promise.allSettled([replies.request('mixed', 'fine'), replies.request('mixed', 'bad one'), replies.request('mixed', 'still fine')]);
  t.deepEqual(good, { status: 'fulfilled', value: 'fine' });
  t.is(bad.status, 'rejected');
  t.regex(String((bad as PromiseRejectedResult).reason), /refused: bad one/);
  t.deepEqual(after, { status: 'fulfilled', value: 'still fine' });
});

test('a request nobody answers rejects as timed out; its answer coming later is dropped, and later requests work', async (t) => {
  let delayed: Msg | undefined;
  const sub = nc.subscribe('slow', { callback: (_e, m) => { if (text(m) === 'first') delayed = m; else m.respond(text(m)); } });
  t.teardown(() => sub.unsubscribe());
  const replies = repliesOn(nc, 300);
  t.teardown(() => replies.close());
  const first = await replies.request('slow', 'first').then(() => 'answered', whyOf);
  t.is(first, 'timeout');
  delayed?.respond('too late');
  t.is(await replies.request('slow', 'second'), 'second');
});

test('close() rejects what waits and every later request', async (t) => {
  const replies = repliesOn(nc);
  const waiting = replies.request('nobody.listens', 'q').then(() => 'answered', whyOf);
  replies.close();
  t.is(await waiting, 'closed');
  t.is(await replies.request('nobody.listens', 'q').then(() => 'answered', whyOf), 'closed');
  replies.close(); // twice is harmless
});

test('drain() waits for the answers still due, refuses new requests, then closes', async (t) => {
  let held: Msg | undefined;
  const sub = nc.subscribe('drain.slow', { callback: (_e, m) => { held = m; } });
  t.teardown(() => sub.unsubscribe());
  const replies = repliesOn(nc);
  const waiting = replies.request('drain.slow', 'q').then((v) => v, whyOf);
  await nc.flush();
  let drained = false;
  // Twice, as two stops might: both end together.
  const draining = Promise.all([replies.drain(), replies.drain()]).then(() => { drained = true; });
  t.is(await replies.request('drain.slow', 'later').then(() => 'answered', whyOf), 'closed');
  await new Promise((r) => setTimeout(r, 100));
  t.false(drained, 'drain waits for the answer still due');
  held!.respond('the answer');
  t.is(await waiting, 'the answer');
  await draining;
  t.true(drained);
  // Nothing waiting: drain closes at once; a request nobody answers ends drain at its timeout.
  await repliesOn(nc).drain();
  const short = repliesOn(nc, 200);
  const unanswered = short.request('drain.slow', 'never answered').then(() => 'answered', whyOf);
  await short.drain();
  t.is(await unanswered, 'timeout');
});

test('its connection closed: what waits is rejected at once, not at its timeout', async (t) => {
  const own = await connectNats({ url: nats.url });
  const replies = repliesOn(own, 60_000);
  t.teardown(() => replies.close());
  const waiting = replies.request('nobody.listens', 'q').then(() => 'answered', whyOf);
  await own.close();
  t.is(await waiting, 'disconnected');
});
