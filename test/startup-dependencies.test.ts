// `hookstream serve` and its dependencies at start-up: Postgres down is waited for (readiness says so, one
// log line), then the service starts by itself; what no wait can heal (NATS refusing the credentials, a
// nats-server without JetStream) ends it at once with one line. And a stop with NATS gone is bounded by
// HOOKSTREAM_SHUTDOWN_TIMEOUT.
// Not under TEST_DIRECT_DELIVERY: Postgres, credentials and JetStream are checked before either delivery path starts.
import test from 'ava';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { startPostgresServer, type PostgresServer } from './helpers/postgres-server.ts';
import { eventually } from './helpers/service.ts';
import { generateKeys, initSodium, instanceEnv, startServe, type Served } from './faults/harness.ts';

let keys: ReturnType<typeof generateKeys>;
const served: Served[] = [];
const servers: NatsServer[] = [];
const dirs: string[] = [];

test.before(async () => {
  await initSodium();
  keys = generateKeys();
});

test.after.always(async () => {
  for (const s of served) await s.kill('SIGKILL');
  for (const n of servers) await n.dispose();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const readyz = async (port: number): Promise<{ status: number; body: string } | undefined> => {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/readyz`);
    return { status: r.status, body: await r.text() };
  } catch {
    return undefined; // not listening yet
  }
};

const lines = (s: Served, text: string) => s.output.split('\n').filter((l) => l.includes(text));

test('Postgres down at start-up: readiness names it, one log line, and the service starts once it is back', async (t) => {
  t.timeout(150_000);
  const nats = await startNatsServer();
  servers.push(nats);
  const pg: PostgresServer = await startPostgresServer();
  t.teardown(() => pg.dispose());
  await pg.stop();
  const opsPort = await freePort();
  const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: pg.url('hookstream_startup_pg'), keys, extra: { OPS_PORT: String(opsPort) } }));
  served.push(s);

  const waiting = await eventually(async () => {
    const r = await readyz(opsPort);
    return r && r.status === 503 && r.body.includes('waiting for Postgres') ? r : undefined;
  }, 60_000, '/readyz naming Postgres');
  t.regex(waiting.body, /cannot connect to Postgres/);
  t.is((await fetch(`http://127.0.0.1:${opsPort}/healthz`)).status, 200, 'alive while it waits');
  // Several retries (0.5 s, 1 s, 2 s, …) pass; still one line.
  await new Promise((r) => setTimeout(r, 4000));
  t.false(s.exited, s.output);
  t.is(lines(s, 'start-up is waiting for').length, 1, s.output);

  await pg.start();
  await eventually(() => (s.exited || s.output.includes('hookstream started') ? true : undefined), 60_000, 'started');
  t.false(s.exited, s.output);
  t.is(lines(s, 'start-up went through after waiting').length, 1);
  await eventually(async () => ((await readyz(opsPort))?.status === 200 ? true : undefined), 60_000, '/readyz 200');
  const metrics = await (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text();
  t.regex(metrics, /hookstream_startup_retries_total\{waiting_for="Postgres"\} [1-9]/);
  // The attempts share the process's metrics: each family once, however many attempts there were.
  const types = metrics.split('\n').filter((l) => l.startsWith('# TYPE '));
  t.is(new Set(types).size, types.length, 'no metric family twice');
  await s.kill('SIGTERM');
  t.is(s.exitCode, 0, s.output.slice(-2000));
});

test('NATS refusing the credentials ends start-up at once with one line', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hookstream-auth-'));
  dirs.push(dir);
  const conf = join(dir, 'auth.conf');
  writeFileSync(conf, 'authorization { user: hookstream, password: right }\n');
  const nats = await startNatsServer({ config: conf });
  servers.push(nats);
  const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: 'postgres://postgres@127.0.0.1:1/unused', keys, extra: { NATS_USER: 'hookstream', NATS_PASSWORD: 'wrong' } }));
  served.push(s);
  await eventually(() => (s.exited ? true : undefined), 60_000, 'the process to exit');
  t.is(s.exitCode, 1);
  const said = lines(s, 'hookstream serve:');
  t.is(said.length, 1, s.output);
  t.regex(said[0]!, /Authorization Violation/i);
  t.false(s.output.includes('right'), 'no password in the output');
});

test('a nats-server without JetStream ends start-up at once with what to do', async (t) => {
  const nats = await startNatsServer({ jetstream: false });
  servers.push(nats);
  const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: 'postgres://postgres@127.0.0.1:1/unused', keys }));
  served.push(s);
  await eventually(() => (s.exited ? true : undefined), 60_000, 'the process to exit');
  t.is(s.exitCode, 1);
  const said = lines(s, 'hookstream serve:');
  t.is(said.length, 1, s.output);
  t.regex(said[0]!, /JetStream is not enabled on nats-server: start it with -js/);
});

test('SIGTERM with NATS gone: the process exits 0 once HOOKSTREAM_SHUTDOWN_TIMEOUT has passed', async (t) => {
  t.timeout(120_000);
  const nats = await startNatsServer();
  servers.push(nats);
  const pg = await startPostgresServer();
  t.teardown(() => pg.dispose());
  const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: pg.url('hookstream_stop'), keys, extra: { HOOKSTREAM_SHUTDOWN_TIMEOUT: '2s' } }));
  served.push(s);
  await eventually(() => (s.exited || s.output.includes('hookstream started') ? true : undefined), 60_000, 'started');
  t.false(s.exited, s.output);
  await nats.stop();
  await eventually(() => (s.output.includes('lost the connection to NATS') ? true : undefined), 30_000, 'the loss noticed');
  const signalled = Date.now();
  const stopped = s.kill('SIGTERM');
  // Generous against a loaded machine; without the deadline the process never exits (it waits for NATS).
  const exited = await Promise.race([stopped.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 30_000))]);
  t.true(exited, `still running 30 s after SIGTERM:\n${s.output.slice(-2000)}`);
  t.is(s.exitCode, 0, s.output.slice(-2000));
  t.log(`exited ${Date.now() - signalled} ms after SIGTERM (deadline 2 s)`);
});
