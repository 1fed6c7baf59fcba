// Noisy neighbour: an attacker tenant creates endpoints up to its quota on a receiver host the victim also
// uses, fans its events out to them (half answer after 8 s, half never), floods endpoint writes (restores of
// an active endpoint: 409, or 422/429 once its quotas hold) and floods requests with bad API keys.
// Meanwhile the victim PATCHes its endpoint and publishes events, delivered to that endpoint and to an
// ordered one (`ordering: key`, on another host), whose deliveries wait for the router's progress.
// The attacker's client and the victim's PATCH loop each run in a process of their own (noisy-load.ts), as
// they would on machines of their own: the PATCH timings hold no event-loop delay of the attacker's floods
// or of the receivers (this process), only the service's. They still share the machine's two cores, so the
// PATCHes' times are printed twice: as the victim's client saw them, and as the service timed them
// (Server-Timing), without what the client's process and the network add.
// The scenario prints the victim's figures without and with the attacker, and asserts that every victim's
// PATCH answers 2xx and every victim's event arrives at both endpoints within 3 s. (The PATCHes' p99 is
// printed, not asserted: timing is the bench's business, and a loaded machine moves it.) Real service
// process, NATS, Postgres and loopback receivers.
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsServer } from '../helpers/nats-server.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { startReceiver, type Received } from '../helpers/receiver.ts';
import { apiClient } from '../helpers/api-client.ts';
import { runCli } from '../helpers/cli.ts';
import { connectNats } from '../../src/nats/connect.ts';
import { generateKeys, initSodium, instanceEnv, startInstance, type Instance } from './harness.ts';
import type { AttackerJob, AttackerResult, PatchesJob, PatchesResult } from './noisy-load.ts';

const LOAD = resolve(import.meta.dirname, 'noisy-load.ts');
/** The clients still running, killed when the scenario ends early. */
const children = new Set<ChildProcess>();

/** noisy-load.ts in a child process: `started` once it printed that line, `result` its last line, `stop()` asks it to finish. */
function load<R>(mode: 'patches' | 'attacker', job: PatchesJob | AttackerJob): { started: Promise<void>; result: Promise<R>; stop(): void } {
  const child = spawn(process.execPath, [LOAD, mode, JSON.stringify(job)], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  let out = '';
  let err = '';
  let onStarted: () => void = () => {};
  const started = new Promise<void>((r) => { onStarted = r; });
  child.stdout.on('data', (c: Buffer) => { out += c.toString('utf8'); if (out.includes('started\n')) onStarted(); });
  child.stderr.on('data', (c: Buffer) => { err = (err + c.toString('utf8')).slice(-4000); });
  const result = new Promise<R>((resolveResult, reject) => {
    child.once('close', (code) => {
      children.delete(child);
      const last = out.trim().split('\n').at(-1) ?? '';
      if (code === 0 && last.startsWith('{')) resolveResult(JSON.parse(last) as R);
      else reject(new Error(`noisy-load ${mode} exited with ${code}: ${err || out.slice(-2000)}`));
    });
  });
  return { started, result, stop: () => { child.stdin.end('stop\n'); } };
}

/** The attacker's endpoints when no quota stops it sooner (the default quota is 100). */
const ATTACKER_ENDPOINTS = 150;
/**
 * Each phase: the victim's PATCHes, one every PATCH_EVERY_MS (15 a second, within its 20 writes a second),
 * and its events, one every EVENT_EVERY_MS, over the same ~66 s. 1,000 PATCHes: their p99 is the 10th
 * slowest. With 400 (26 s) it was the 5th, and runs of the same code on the same machine printed attacked
 * ÷ idle from 0.92 to 2.74: a few stalls of the shared machine in either phase decided it.
 */
const VICTIM_PATCHES = 1000;
const PATCH_EVERY_MS = 66;
const VICTIM_EVENTS = 125;
const EVENT_EVERY_MS = 520;
/** The attacker's events: each fans out to all its endpoints (1,000 deliveries a second at 100 endpoints). */
const ATTACKER_EVENT_EVERY_MS = 100;
/** The issue's bound on the victim's event latency under attack. */
const EVENT_BOUND_MS = 3000;

interface VictimFigures {
  patches: number;
  /** How many PATCHes did not answer 2xx, and the first of them. */
  patchFailures: number;
  firstFailure?: string;
  patchP50Ms: number;
  patchP99Ms: number;
  patchMaxMs: number;
  /** The same PATCHes as the service timed them (Server-Timing): what the victim's client and the loaded machine add is left out. */
  serviceTimed: number;
  serviceP50Ms: number;
  serviceP99Ms: number;
  serviceMaxMs: number;
  events: number;
  eventsArrived: number;
  eventP50Ms: number;
  eventMaxMs: number;
  /** The same at the ordered endpoint. */
  orderedArrived: number;
  orderedP50Ms: number;
  orderedMaxMs: number;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

/** `who` and `n` of a delivery's event, from its body. */
const eventOf = (g: Received) => (JSON.parse(g.body) as { data: { who?: string; n?: number } }).data;

async function victimPhase(phase: string, apiUrl: string, key: string, endpointId: string, producer: NatsConnection, tenant: string, received: Received[], ordered: Received[]): Promise<VictimFigures> {
  const patches = load<PatchesResult>('patches', { apiUrl, key, endpointId, phase, count: VICTIM_PATCHES, everyMs: PATCH_EVERY_MS }).result;
  const sentAt = new Map<number, number>();
  const events = (async () => {
    for (let n = 0; n < VICTIM_EVENTS; n++) {
      sentAt.set(n, Date.now());
      producer.publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: `user_${n}`, n, who: phase }));
      await new Promise((r) => setTimeout(r, EVENT_EVERY_MS));
    }
  })();
  const [{ patchMs, serviceMs, failures: patchFailures }] = await Promise.all([patches, events]);
  const arrivals = (from: Received[] = received) => {
    const at = new Map<number, number>();
    for (const g of from) {
      const e = eventOf(g);
      if (e.who === phase && e.n !== undefined && !at.has(e.n)) at.set(e.n, g.at - sentAt.get(e.n)!);
    }
    return at;
  };
  // Generous: a missing event is reported as such, not waited for long.
  const until = Date.now() + 30_000;
  while ((arrivals().size < VICTIM_EVENTS || arrivals(ordered).size < VICTIM_EVENTS) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  const latencies = [...arrivals().values()];
  const orderedLatencies = [...arrivals(ordered).values()];
  return {
    patches: patchMs.length, patchFailures: patchFailures.length, ...(patchFailures[0] ? { firstFailure: patchFailures[0] } : {}), patchP50Ms: Math.round(quantile(patchMs, 0.5)), patchP99Ms: Math.round(quantile(patchMs, 0.99)), patchMaxMs: Math.round(Math.max(0, ...patchMs)),
    serviceTimed: serviceMs.length, serviceP50Ms: Math.round(quantile(serviceMs, 0.5)), serviceP99Ms: Math.round(quantile(serviceMs, 0.99)), serviceMaxMs: Math.round(Math.max(0, ...serviceMs)),
    events: VICTIM_EVENTS, eventsArrived: latencies.length, eventP50Ms: quantile(latencies, 0.5), eventMaxMs: Math.max(0, ...latencies),
    orderedArrived: orderedLatencies.length, orderedP50Ms: quantile(orderedLatencies, 0.5), orderedMaxMs: Math.max(0, ...orderedLatencies),
  };
}

test.serial("noisy neighbour: an attacker tenant's endpoints, fan-out, slow receivers, 409 writes and bad keys", async (t) => {
  await initSodium();
  const keys = generateKeys();
  const nats = await startNatsServer();
  const db = await createTestDatabase('faults_noisy');
  const env = instanceEnv({ natsUrl: nats.url, databaseUrl: db.url, keys, extra: { HOOKSTREAM_ATTEMPT_TIMEOUT: '10s' } });
  const instances: Instance[] = [];
  const producer = await connectNats({ url: nats.url, inboxPrefix: '_INBOX', name: 'fault-producer' });
  // One receiver host for both tenants: the victim's deliveries answer at once, the attacker's after 8 s or never.
  const host = await startReceiver((g) => (eventOf(g).who !== 'attacker' ? 200 : (eventOf(g).n ?? 0) % 2 === 0 ? { status: 200, delayMs: 8000 } : 'hang'));
  const orderedHost = await startReceiver(() => 200);
  try {
    instances.push(await startInstance(env));
    const apiUrl = /api listening.*?(http:\/\/127\.0\.0\.1:\d+)/.exec(instances[0]!.output)?.[1];
    if (!apiUrl) return t.fail(`no API address in the instance's output:\n${instances[0]!.output.slice(-2000)}`);
    const keyOf = async (tenant: string) => {
      const run = await runCli(['api-keys', 'create', '--tenant', tenant, '--json'], { ...process.env, ...env });
      if (run.code !== 0) throw new Error(`api-keys create: ${run.stderr}`);
      return String((JSON.parse(run.stdout) as { key: string }).key);
    };
    const victimTenant = 'tenant_victim';
    const attackerTenant = 'tenant_attacker';
    const victimKey = await keyOf(victimTenant);
    const attackerKey = await keyOf(attackerTenant);
    const victim = apiClient(apiUrl, victimKey);
    const attacker = apiClient(apiUrl, attackerKey);

    const created = await victim.post('/v1/webhooks', { url: host.url, events: ['user.*'] });
    t.is(created.status, 201, created.text);
    const victimEndpoint = String(created.body.id);
    const ordered = await victim.post('/v1/webhooks', { url: orderedHost.url, events: ['user.*'], ordering: 'key' });
    t.is(ordered.status, 201, ordered.text);
    // The endpoints are live once a first event arrives.
    producer.publish(`events.${victimTenant}.user.updated`, JSON.stringify({ userId: 'user_warm', who: 'warm-up' }));
    await host.waitFor(1, 60_000);
    await orderedHost.waitFor(1, 60_000);

    const idle = await victimPhase('idle', apiUrl, victimKey, victimEndpoint, producer, victimTenant, host.received, orderedHost.received);
    t.log(`victim without the attacker: ${JSON.stringify(idle)}`);

    // The attacker: endpoints on the same host up to its quota (or ATTACKER_ENDPOINTS).
    const attackerEndpoints: string[] = [];
    let quotaAnswer = '';
    for (let i = 0; i < ATTACKER_ENDPOINTS; i++) {
      const res = await attacker.post('/v1/webhooks', { url: `${host.url}?a=${i}`, events: ['user.*'] });
      if (res.status === 201) attackerEndpoints.push(String(res.body.id));
      else if (res.status === 429) {
        // Its writes a second: as fast as it is let.
        i--;
        await new Promise((r) => setTimeout(r, 1000 * Number(res.headers.get('retry-after') ?? 1)));
      } else { quotaAnswer = `${res.status} ${res.text.slice(0, 200)}`; break; }
    }
    t.log(`attacker created ${attackerEndpoints.length} endpoints${quotaAnswer ? `, then: ${quotaAnswer}` : ''}`);
    t.true(attackerEndpoints.length > 0);
    const attack = load<AttackerResult>('attacker', {
      apiUrl, key: attackerKey, natsUrl: nats.url, tenant: attackerTenant, endpointId: attackerEndpoints[0]!,
      eventEveryMs: ATTACKER_EVENT_EVERY_MS, writeWorkers: 8, badKeyWorkers: 4,
    });
    await Promise.race([attack.started, attack.result]);
    // The attacker's fan-out is under way before the victim's phase starts.
    await new Promise((r) => setTimeout(r, 3000));
    const attacked = await victimPhase('attacked', apiUrl, victimKey, victimEndpoint, producer, victimTenant, host.received, orderedHost.received);
    attack.stop();
    const attackerFigures = await attack.result;
    t.log(`victim with the attacker: ${JSON.stringify(attacked)}`);
    const ratio = (a: number, b: number) => (a / Math.max(1, b)).toFixed(2);
    t.log(`victim's PATCH p50 ${idle.patchP50Ms} → ${attacked.patchP50Ms} ms, p99 ${idle.patchP99Ms} → ${attacked.patchP99Ms} ms (${ratio(attacked.patchP99Ms, idle.patchP99Ms)}× idle)`);
    t.log(`the same in the service (Server-Timing): p50 ${idle.serviceP50Ms} → ${attacked.serviceP50Ms} ms, p99 ${idle.serviceP99Ms} → ${attacked.serviceP99Ms} ms (${ratio(attacked.serviceP99Ms, idle.serviceP99Ms)}× idle)`);
    t.log(`attacker: ${attackerFigures.events} events to ${attackerEndpoints.length} endpoints, restores ${JSON.stringify(attackerFigures.writeStatuses)}, bad keys ${JSON.stringify(attackerFigures.badKeyStatuses)}`);

    t.is(attacked.patchFailures, 0, `every victim's PATCH answered 2xx (first failure: ${attacked.firstFailure ?? 'none'})`);
    t.is(attacked.serviceTimed, VICTIM_PATCHES, 'every PATCH answer carried its Server-Timing');
    t.is(attacked.eventsArrived, VICTIM_EVENTS, "every victim's event arrived");
    t.true(attacked.eventMaxMs <= EVENT_BOUND_MS, `the victim's slowest event took ${attacked.eventMaxMs} ms`);
    t.is(attacked.orderedArrived, VICTIM_EVENTS, "every victim's event arrived at its ordered endpoint");
    t.true(attacked.orderedMaxMs <= EVENT_BOUND_MS, `the victim's slowest ordered event took ${attacked.orderedMaxMs} ms`);
  } finally {
    for (const c of children) c.kill('SIGKILL');
    for (const i of instances) await i.kill();
    await host.close();
    await orderedHost.close();
    await producer.close().catch(() => {});
    await nats.dispose();
    await db.drop().catch(() => {});
  }
});
