// The API's roles in a thread of their own (src/supervisor/api-thread.ts): the API answers while the main
// thread's event loop is blocked; a thread that ends on its own is started again, and readiness says so
// meanwhile; what its start-up cannot heal ends `serve` with that one line; the ops listener of `serve`
// covers both threads (the API thread's counters in /metrics, each family once; its checks in /readyz).
// Real NATS, Postgres and HTTP.
// Not under TEST_DIRECT_DELIVERY (but `serve`, whose helper follows it): the thread's supervision is the same on either path.
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { silentLogger } from '../src/log.ts';
import { startApiThread } from '../src/supervisor/api-thread.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { runCli } from './helpers/cli.ts';
import { eventually } from './helpers/service.ts';
import { serveChild } from './helpers/serve.ts';
import { generateKeys, initSodium, instanceEnv } from './faults/harness.ts';

let nats: NatsServer;
let db: TestDatabase;
let env: Record<string, string>;
const children: ChildProcess[] = [];

test.before(async () => {
  await initSodium();
  nats = await startNatsServer();
  db = await createTestDatabase('api_thread');
  env = instanceEnv({ natsUrl: nats.url, databaseUrl: db.url, keys: generateKeys(), extra: { PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_DELIVERY_SHARDS: '2' } });
});

test.after.always(async () => {
  for (const c of children) c.kill('SIGKILL');
  await nats?.dispose();
  await db?.drop();
});

const apiKey = async (tenant: string) => {
  const run = await runCli(['api-keys', 'create', '--tenant', tenant, '--json'], { ...process.env, ...env });
  if (run.code !== 0) throw new Error(`api-keys create: ${run.stderr}`);
  return String((JSON.parse(run.stdout) as { key: string }).key);
};

// Another process asks the API for `ms` and reports when each request was sent and answered (Date.now()).
const CLIENT = `
const [url, key, ms] = process.argv.slice(1);
const until = Date.now() + Number(ms);
const seen = [];
while (Date.now() < until) {
  const sent = Date.now();
  const status = await fetch(url, { headers: { authorization: 'Bearer ' + key } }).then(async (r) => { await r.text(); return r.status; }, () => 0);
  seen.push({ sent, answered: Date.now(), status });
  await new Promise((r) => setTimeout(r, 20));
}
process.stdout.write(JSON.stringify(seen));
`;

test.serial("the API answers while the main thread's event loop is blocked", async (t) => {
  const key = await apiKey('tenant_blocked');
  const thread = startApiThread({ config: loadConfig({ ...env, HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_LOG_LEVEL: 'warn' }), log: silentLogger, restarts: createServiceMetrics().roleRestarts });
  try {
    const apiUrl = await thread.up;
    t.truthy(apiUrl);
    const child = spawn(process.execPath, ['--input-type=module', '-e', CLIENT, `${apiUrl}/v1/webhooks`, key, '4000'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    let out = '';
    child.stdout.on('data', (c: Buffer) => { out += c.toString('utf8'); });
    const exited = new Promise<void>((r) => child.once('close', () => r()));
    await new Promise((r) => setTimeout(r, 1000));
    // This thread does nothing for 2 s: no timer, no I/O callback, no microtask runs here meanwhile.
    const blockedFrom = Date.now();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2000);
    const blockedUntil = Date.now();
    await exited;
    const seen = JSON.parse(out) as { sent: number; answered: number; status: number }[];
    const during = seen.filter((r) => r.sent > blockedFrom + 100 && r.answered < blockedUntil - 100);
    t.log(`${seen.length} requests, ${during.length} sent and answered while the main thread was blocked for ${blockedUntil - blockedFrom} ms`);
    t.true(during.length > 0, JSON.stringify(seen));
    t.true(during.every((r) => r.status === 200), JSON.stringify(during));
  } finally {
    await thread.stop();
  }
});

test.serial('a thread that ends on its own is started again, counted, and not ready meanwhile', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'api-thread-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const metrics = createServiceMetrics();
  const thread = startApiThread({
    config: { ...loadConfig(env), host: 'exit-once', dataDir }, log: silentLogger, restarts: metrics.roleRestarts,
    firstDelayMs: 1000, entry: new URL('./helpers/api-thread-stub.ts', import.meta.url),
  });
  try {
    t.is(await thread.up, 'http://stub');
    const down = await eventually(async () => {
      const r = await thread.ops.handle('/readyz');
      return r?.status === 503 ? r : undefined;
    }, 10_000, 'not ready while down');
    t.regex(down.body, /down, being started again: api-thread/);
    t.is((await thread.ops.handle('/healthz'))?.status, 200, 'alive: the main thread goes on');
    await eventually(async () => ((await thread.ops.handle('/readyz'))?.status === 200 ? true : undefined), 10_000, 'ready again');
    t.is(metrics.roleRestarts.get({ role: 'api-thread' }), 1);
  } finally {
    await thread.stop();
  }
});

test.serial("a start-up that needs an operator rejects `up` with the thread's error", async (t) => {
  const metrics = createServiceMetrics();
  const thread = startApiThread({
    config: { ...loadConfig(env), host: 'fatal' }, log: silentLogger, restarts: metrics.roleRestarts,
    entry: new URL('./helpers/api-thread-stub.ts', import.meta.url),
  });
  await t.throwsAsync(thread.up, { message: /PORT: cannot listen/ });
  t.is(metrics.roleRestarts.get({ role: 'api-thread' }), 0, 'not started again');
  await thread.stop();
});

const freePortHeld = async () => {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise<void>((r) => server.close(() => r())) };
};

test.serial("serve: the ops listener answers for both threads; the API's port in use ends serve with one line", async (t) => {
  const key = await apiKey('tenant_ops');
  const s = await serveChild({ ...process.env, ...env, HOOKSTREAM_AUTH_FAILURE_BURST: '1' }, children);
  const apiUrl = /"api listening".*?"url":"(http:\/\/[^"]+)"/.exec(s.log.join('\n'))?.[1];
  const opsUrl = /"ops listening".*?"url":"(http:\/\/[^"]+)"/.exec(s.log.join('\n'))?.[1];
  t.truthy(apiUrl, s.log.join('\n'));
  t.truthy(opsUrl);
  t.true(s.log.some((l) => l.includes('"hookstream started"') && l.includes('"api_thread":"api,console,projector"')));
  // Failed authentications past the burst: counted in the API's thread.
  for (let i = 0; i < 4; i++) await fetch(`${apiUrl}/v1/webhooks`, { headers: { authorization: 'Bearer hs_live_nope' } }).then((r) => r.text());
  t.is((await fetch(`${apiUrl}/v1/webhooks`, { headers: { authorization: `Bearer ${key}` } })).status, 200);
  const metrics = await (await fetch(`${opsUrl}/metrics`)).text();
  t.regex(metrics, /hookstream_auth_throttled_total\{surface="api"\} [1-9]/);
  const types = metrics.split('\n').filter((l) => l.startsWith('# TYPE '));
  t.is(new Set(types).size, types.length, 'no family twice');
  const ready = await eventually(async () => {
    const r = await fetch(`${opsUrl}/readyz`);
    return r.status === 200 ? (await r.json()) as { checks: { name: string }[] } : undefined;
  }, 30_000, '/readyz 200');
  const names = ready.checks.map((c) => c.name);
  t.true(names.includes('projection') && names.includes('directory'), names.join(','));
  t.is(new Set(names).size, names.length);
  s.child.kill('SIGTERM');
  t.is(await s.exited, 0);

  const held = await freePortHeld();
  t.teardown(() => held.close());
  const failed = serveChild({ ...process.env, ...env, PORT: String(held.port) }, children);
  const err = await failed.then(() => undefined, (e: unknown) => e as Error);
  t.truthy(err, 'serve did not start');
  t.regex(err!.message, /exited with 1/);
  t.regex(err!.message, /cannot listen on 127\.0\.0\.1:\d+ \(EADDRINUSE\)/);
});
