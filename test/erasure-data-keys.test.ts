// The data keys of crypto-shredding (src/erasure/data-keys.ts) on a real nats-server: bodies come out of
// seal in the order they were asked for even while a key is being made; two routers meeting a subject at once
// keep one key; another process opens what one sealed; an unsealed body is delivered as it is; a body under
// a destroyed key, or altered, does not open; a process forgets a destroyed key when told.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer } from './helpers/nats-server.ts';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createDataKeys, DataKeyErasedError, destroyDataKeys, isSealedBody } from '../src/erasure/data-keys.ts';
import { DATA_KEYS_STREAM, ensureDataKeysStream } from '../streams/data-keys.ts';

async function setup(t: import('ava').ExecutionContext) {
  await initSodium();
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await ensureDataKeysStream(jsm);
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000, inboxPrefix: '_INBOX_test' });
  t.teardown(() => publisher.close());
  const masterKey = generateKeys().masterKey;
  const make = (creating: boolean, opensWhatItSeals = false) => {
    const k = createDataKeys({ nc, jsm, masterKey, opensWhatItSeals, ...(creating ? { publisher } : {}) });
    t.teardown(() => k.close());
    return k;
  };
  return { nc, jsm, make };
}

const text = (b: Uint8Array) => Buffer.from(b).toString('utf8');

test('seal keeps the order it was asked in while a key is made; another process opens what it sealed', async (t) => {
  const { make } = await setup(t);
  const router = make(true);
  const first = await router.seal('t1', { userId: 'warm' }, '{"n":0}');
  t.true(isSealedBody(first));
  // Keys in memory: at once.
  t.false(router.seal('t1', { userId: 'warm' }, '{"n":1}') instanceof Promise);
  const order: string[] = [];
  const a = Promise.resolve(router.seal('t1', { userId: 'new_user', organizationId: 'new_org' }, '{"n":2}')).then((b) => { order.push('a'); return b; });
  const b = router.seal('t1', { userId: 'warm' }, '{"n":3}');
  t.true(b instanceof Promise, 'behind a seal still waiting for its keys');
  const bDone = Promise.resolve(b).then((x) => { order.push('b'); return x; });
  const [sa, sb] = await Promise.all([a, bDone]);
  t.deepEqual(order, ['a', 'b']);
  const delivery = make(false);
  t.is(text(await delivery.open(sa)), '{"n":2}');
  t.is(text(await delivery.open(sb)), '{"n":3}');
  t.is(text(await delivery.open(Buffer.from('{"plain":true}'))), '{"plain":true}', 'an unsealed body as it is');
  const under = await router.seal('t1', {}, '{"no":"subject"}');
  t.is(text(await delivery.open(under)), '{"no":"subject"}', 'an event naming no subject: the tenant key alone');
  const altered = Uint8Array.from(sa);
  altered[altered.length - 1]! ^= 1;
  await t.throwsAsync(async () => delivery.open(altered), { instanceOf: DataKeyErasedError });
});

test('a process that seals and delivers opens a new subject\'s body at once; erased, it opens it no more', async (t) => {
  const { nc, jsm, make } = await setup(t);
  const both = make(true, true);
  const routerOnly = make(true);
  const sealed = await both.seal('t4', { userId: 'first_seen' }, 'hello');
  const opened = both.open(sealed);
  t.false(opened instanceof Promise, 'the key it sealed under, not derived again');
  t.is(text(opened as Uint8Array), 'hello');
  const other = await routerOnly.seal('t4', { userId: 'also_new' }, 'later');
  t.true(routerOnly.open(other) instanceof Promise, 'a router alone keeps no key for opening');
  t.is(text(await routerOnly.open(other)), 'later');
  await destroyDataKeys({ jsm, nc }, 't4', await both.refsOf('t4', [{ kind: 'user', id: 'first_seen' }]));
  await t.throwsAsync(async () => both.open(sealed), { instanceOf: DataKeyErasedError });
});

test('two routers meeting a subject at once keep one key', async (t) => {
  const { jsm, make } = await setup(t);
  const [r1, r2] = [make(true), make(true)];
  const [s1, s2] = await Promise.all([r1.seal('t2', { userId: 'u' }, 'one'), r2.seal('t2', { userId: 'u' }, 'two')]);
  t.is(text(await r2.open(s1)), 'one');
  t.is(text(await r1.open(s2)), 'two');
  t.is((await jsm.streams.info(DATA_KEYS_STREAM)).state.messages, 2, 'the tenant key and the user key, once each');
});

test('a destroyed key opens nothing sealed under it, in a process that had it and in a new one; the others still open', async (t) => {
  const { nc, jsm, make } = await setup(t);
  const router = make(true);
  const delivery = make(false);
  const gone = await router.seal('t3', { userId: 'erased', organizationId: 'org' }, 'gone');
  const kept = await router.seal('t3', { userId: 'kept', organizationId: 'org' }, 'kept');
  t.is(text(await delivery.open(gone)), 'gone');
  const refs = await delivery.refsOf('t3', [{ kind: 'user', id: 'erased' }]);
  t.is(await destroyDataKeys({ jsm, nc }, 't3', refs), 1);
  await t.throwsAsync(async () => delivery.open(gone), { instanceOf: DataKeyErasedError });
  await t.throwsAsync(async () => make(false).open(gone), { instanceOf: DataKeyErasedError });
  t.is(text(await delivery.open(kept)), 'kept');
  // The subject's next event gets a new key, which does not open what the old one sealed.
  const again = await router.seal('t3', { userId: 'erased', organizationId: 'org' }, 'new');
  t.is(text(await delivery.open(again)), 'new');
  await t.throwsAsync(async () => delivery.open(gone), { instanceOf: DataKeyErasedError });
  // The whole tenant.
  await destroyDataKeys({ jsm, nc }, 't3', 'all');
  await t.throwsAsync(async () => delivery.open(kept), { instanceOf: DataKeyErasedError });
});
