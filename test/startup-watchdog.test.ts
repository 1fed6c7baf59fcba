// A start-up step that never ends is a failure like any other: past its watchdog the attempt is aborted
// (its connections closed, so whatever it awaited fails), readiness and the log name the step, and start-up
// tries again. Against a real nats-server frozen (SIGSTOP) while start-up waits on its JetStream API.
// Not under TEST_DIRECT_DELIVERY: a router-only start frozen at its first JetStream request, before anything direct delivery adds.
import test from 'ava';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { startService } from '../src/service.ts';
import { startUntilUp, type Waiting } from '../src/supervisor/start-up.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { startNatsServer } from './helpers/nats-server.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('an attempt whose step never ends is aborted and tried again; if it ends after all, what it started is stopped', async (t) => {
  const lines: string[] = [];
  const log = createLogger({ level: 'info', write: (l) => { lines.push(l); } });
  const metrics = createServiceMetrics();
  const seen: (Waiting | undefined)[] = [];
  let lateStopped = false;
  let attempts = 0;
  const started = await startUntilUp(async (step, signal) => {
    attempts++;
    step('Postgres');
    if (attempts === 1) {
      // Hangs until aborted, then "succeeds" late: that service must be stopped, not used.
      await new Promise((resolve) => signal.addEventListener('abort', resolve));
      return { name: 'late', stop: async () => { lateStopped = true; } };
    }
    return { name: 'second', stop: async () => {} };
  }, { log, retries: metrics.startupRetries, onWaiting: (w) => seen.push(w), firstDelayMs: 10, stepTimeoutMs: 300 });
  t.is(started.name, 'second');
  t.is(attempts, 2);
  t.regex(seen[0]!.reason, /start-up step "Postgres" did not finish within/);
  t.is(seen.at(-1), undefined, 'up');
  t.is(metrics.startupRetries.get({ waiting_for: 'Postgres' }), 1);
  await sleep(50);
  t.true(lateStopped);
  t.true(lines.some((l) => l.includes('start-up is waiting for Postgres')));
});

test('nats-server frozen while start-up asks JetStream: the watchdog aborts the attempt and start-up goes through once it thaws', async (t) => {
  t.timeout(60_000);
  await initSodium();
  const nats = await startNatsServer();
  t.teardown(() => nats.dispose());
  const pid = nats.pid!;
  t.teardown(() => { try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ } });
  const keys = generateKeys();
  const config = loadConfig({
    NATS_URL: nats.url, OPS_PORT: '0', HOOKSTREAM_ROLES: 'router', HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_SHUTDOWN_TIMEOUT: '2s',
  });
  const lines: string[] = [];
  const log = createLogger({ level: 'info', write: (l) => { lines.push(l); } });
  const metrics = createServiceMetrics();
  let frozen = false;
  const seen: Waiting[] = [];
  const service = await startUntilUp((step, signal) => startService(config, log, {
    metrics, signal,
    step: (name) => {
      step(name);
      // Frozen once, as the first attempt turns to JetStream; thawed 4 s later.
      if (name === 'JetStream' && !frozen) {
        frozen = true;
        process.kill(pid, 'SIGSTOP');
        setTimeout(() => process.kill(pid, 'SIGCONT'), 4000);
      }
    },
  }), { log, retries: metrics.startupRetries, onWaiting: (w) => { if (w) seen.push(w); }, firstDelayMs: 200, stepTimeoutMs: 1500 });
  t.teardown(() => service.stop());
  t.true(frozen);
  t.regex(seen[0]?.reason ?? '', /start-up step "JetStream" did not finish within 2 s/, JSON.stringify(seen));
  t.true(lines.some((l) => l.includes('hookstream started')));
  t.true(lines.some((l) => l.includes('start-up went through after waiting')));
});
