// Graceful shutdown as an orchestrator does it: `hookstream serve` as a child process, SIGTERM in the
// middle of a burst, then a fresh start on the same NATS and database. Every attempt in flight at SIGTERM
// is finished (the receiver sees no request cut off), the process exits 0, and after the restart every
// event has reached the endpoint: nothing lost.
import test from 'ava';
import type { ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { eventually } from './helpers/service.ts';
import { serveChild } from './helpers/serve.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { TenantId } from '../src/domain/ids.ts';

const TOTAL = 200;

let nats: NatsServer;
let db: TestDatabase;
let nc: NatsConnection;
let env: Record<string, string>;
const children: ChildProcess[] = [];

/** A receiver that takes a while to answer, so a burst keeps attempts in flight; it notes requests cut off. */
interface SlowReceiver {
  url: string;
  /** userId of every request answered, in order. */
  answered: string[];
  /** Requests whose connection closed before the answer was sent. */
  cutOff: number;
  inFlight: number;
  server: Server;
}

async function slowReceiver(delayMs: number): Promise<SlowReceiver> {
  const r: SlowReceiver = { url: '', answered: [], cutOff: 0, inFlight: 0, server: undefined as unknown as Server };
  r.server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      r.inFlight++;
      let done = false;
      res.on('close', () => {
        r.inFlight--;
        if (!done) r.cutOff++;
      });
      setTimeout(() => {
        done = true;
        r.answered.push((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data: { userId: string } }).data.userId);
        res.writeHead(200).end('ok');
      }, delayMs);
    });
  });
  await new Promise<void>((resolve) => r.server.listen(0, '127.0.0.1', () => resolve()));
  r.url = `http://127.0.0.1:${(r.server.address() as AddressInfo).port}/hook`;
  return r;
}

/** Start `hookstream serve`; resolves once it logged that it started. */
const serve = () => serveChild({ ...process.env, ...env }, children);

test.before(async () => {
  await initSodium();
  nats = await startNatsServer();
  db = await createTestDatabase('shutdown');
  const keys = generateKeys();
  env = {
    NATS_URL: nats.url, DATABASE_URL: db.url, HOST: '127.0.0.1', PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0',
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_MAX_IN_FLIGHT: '8',
    // Retries far apart enough that none is needed in this test: every attempt answers 200.
    HOOKSTREAM_RETRY_SCHEDULE: '2s,4s', HOOKSTREAM_ATTEMPT_TIMEOUT: '10s', HOOKSTREAM_LOG_LEVEL: 'info',
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
  };
  nc = await connectNats({ url: nats.url, name: 'shutdown-test' });
});

test.after.always(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await nc?.drain();
  await nats?.dispose();
  await db?.drop();
});

test('SIGTERM mid-burst: in-flight attempts finish, the process exits 0, and the next start delivers the rest', async (t) => {
  const r = await slowReceiver(40);
  try {
    const first = await serve();
    const js = jetstream(nc);
    const { store } = createEndpoints({
      js, jsm: await jetstreamManager(nc), masterKey: env['HOOKSTREAM_MASTER_KEY']!, allowPrivateTargets: true,
    });
    const tenant = 'tenant_sigterm' as TenantId;
    await store.create(tenant, { url: r.url, events: ['user.*'] });
    for (let i = 0; i < TOTAL; i++) await js.publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: `user_${i}` }));

    await eventually(() => (r.answered.length >= 30 ? true : undefined), 30_000, 'the burst under way');
    first.child.kill('SIGTERM');
    const code = await first.exited;
    t.is(code, 0, first.log.slice(-5).join('\n'));
    t.true(first.log.some((l) => l.includes('"shutting down"') && l.includes('SIGTERM')));
    t.true(first.log.some((l) => l.includes('"stopped"')));
    t.is(r.cutOff, 0, 'no attempt was cut off mid-request');
    t.is(r.inFlight, 0);
    const beforeRestart = new Set(r.answered).size;
    t.true(beforeRestart < TOTAL, `stopped mid-burst (${beforeRestart} of ${TOTAL} delivered)`);

    const second = await serve();
    await eventually(() => (new Set(r.answered).size >= TOTAL ? true : undefined), 60_000, 'every event delivered after the restart');
    const expected = Array.from({ length: TOTAL }, (_, i) => `user_${i}`).sort();
    t.deepEqual([...new Set(r.answered)].sort(), expected, 'every event delivered');
    t.is(r.answered.length, TOTAL, 'and none twice: attempts finished at SIGTERM were acked before the connection closed');
    second.child.kill('SIGTERM');
    t.is(await second.exited, 0);
    t.is(r.cutOff, 0);
    t.false(second.log.some((l) => l.includes('"level":"error"')), second.log.filter((l) => l.includes('"level":"error"')).join('\n'));
  } finally {
    r.server.closeAllConnections();
    await new Promise<void>((resolve) => r.server.close(() => resolve()));
  }
});
