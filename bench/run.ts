// `npm run bench`: the whole delivery path measured on this machine, beside a ceiling measured in the
// same run (issue 5). Every group of scenarios gets its own nats-server (free port, temporary store) and
// its own Postgres database, so the bench never touches the machine's NATS or another database; the
// service runs as a child process (bench/service-child.ts) so its memory and CPU are its own; receivers
// run in another child (bench/receivers.ts) on many loopback ports; the producer and the ceiling loop
// run here. Progress and a table go to stderr; `--json` writes one JSON object to stdout.
import { parseArgs } from 'node:util';
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { Agent } from 'undici';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { loadConfig, type Config } from '../src/config.ts';
import { connectNats } from '../src/nats/connect.ts';
import { ensureStreams } from '../streams/index.ts';
import { generateKeys, initSodium, type GeneratedKeys } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import { signatureHeader, signingKeyObject } from '../src/domain/signature.ts';
import type { EventName } from '../src/domain/catalogue.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { startNatsServer, type NatsServer } from '../test/helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from '../test/helpers/database.ts';
import { percentile, type PhaseStats, type PortMode, type ReceiverCommand, type ReceiverReply } from './receivers.ts';
import type { LoopStats, ServiceChildCommand, ServiceChildMessage } from './service-child.ts';

// ---------------------------------------------------------------------------------------------------
// Options

// 'one' and 'maxrate' measure the common case of issue 13: events that reach one or two endpoints.
const SCENARIOS = ['throughput', 'one', 'maxrate', 'latency', 'isolation', 'fanout', 'scale'] as const;
type Scenario = (typeof SCENARIOS)[number];

interface Size {
  /** Deliveries per throughput run (and per ceiling run). */
  deliveries100: number;
  deliveries5000: number;
  /** Alternating ceiling/service rounds the deliveries are split into. */
  rounds: number;
  /** Seconds of each steady-rate phase (latency, isolation), after a warm-up second. */
  steadySeconds: number;
  /** Longer than the pull loops' expiry, so every loop's re-pull and heartbeats fall inside the window. */
  idleSeconds: number;
  fanouts: number;
  /** Latency phases are repeated this often and the median reported, so one stall does not decide a figure. */
  latencyReps: number;
  /** Seconds of each step of the max_rate_1to1 sweep, after a warm-up second. */
  sweepSeconds: number;
}

const SIZES: Record<'short' | 'long', Size> = {
  short: { deliveries100: 30_000, deliveries5000: 30_000, rounds: 3, steadySeconds: 6, idleSeconds: 35, fanouts: 3, latencyReps: 3, sweepSeconds: 4 },
  long: { deliveries100: 150_000, deliveries5000: 100_000, rounds: 5, steadySeconds: 30, idleSeconds: 130, fanouts: 7, latencyReps: 3, sweepSeconds: 10 },
};

const USAGE = `usage: npm run bench -- [options]

  --size short|long      short fits in about two minutes, long in about ten (default: short)
  --json                 write one JSON object with every figure to stdout (the table still goes to stderr)
  --only LIST            comma-separated scenarios to run: ${SCENARIOS.join(', ')} (default: all);
                         one: throughput_1to1, ratio_1to1, throughput_2; maxrate: the max_rate_1to1 sweep
  --roles LIST           service roles to run (default: router,delivery,deadletter)
  --ports N              receiver ports, i.e. endpoint hosts (default: 100)
  --ceiling-concurrency N  POSTs in flight in the ceiling loop (default: 256)
  --rate N               events per second of the latency and isolation phases (default: 1000)
  --sweep LIST           event rates of the max_rate_1to1 sweep (default: 1000,2000,3000,4000,5000,6000,8000)
  --split                run the service as two processes: the delivery role, and the other roles
  --cpu-prof DIR         write V8 CPU profiles of the service process into DIR
  --keep                 keep the service logs, NATS stores and databases (printed at the end)
  -h, --help             this text

The service's configuration comes from the environment as for \`npm start\` (e.g.
HOOKSTREAM_DELIVERY_SHARDS, HOOKSTREAM_MAX_IN_FLIGHT); NATS_URL and DATABASE_URL are set by the bench.
Postgres: TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres). nats-server: NATS_SERVER_BIN.`;

class UsageError extends Error {}

interface Options {
  size: 'short' | 'long';
  json: boolean;
  only: Set<Scenario>;
  roles: string;
  ports: number;
  ceilingConcurrency: number;
  rate: number;
  sweep: number[];
  cpuProf: string | undefined;
  keep: boolean;
  split: boolean;
}

function positiveInt(name: string, raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > max) throw new UsageError(`--${name} expects a whole number from 1 to ${max}, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

function parseOptions(argv: string[]): Options | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        size: { type: 'string' },
        json: { type: 'boolean' },
        only: { type: 'string' },
        roles: { type: 'string' },
        ports: { type: 'string' },
        'ceiling-concurrency': { type: 'string' },
        rate: { type: 'string' },
        sweep: { type: 'string' },
        'cpu-prof': { type: 'string' },
        keep: { type: 'boolean' },
        split: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message.replace(/\. To specify.*$/s, '') : String(e));
  }
  const v = parsed.values;
  if (v.help) return 'help';
  const size = v.size ?? 'short';
  if (size !== 'short' && size !== 'long') throw new UsageError(`--size expects short or long, got ${JSON.stringify(size)}`);
  const only = new Set<Scenario>();
  for (const s of (v.only ?? SCENARIOS.join(',')).split(',').map((x) => x.trim()).filter(Boolean)) {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new UsageError(`--only: unknown scenario ${JSON.stringify(s)}; scenarios are ${SCENARIOS.join(', ')}`);
    only.add(s as Scenario);
  }
  if (only.size === 0) throw new UsageError('--only names no scenario');
  const roles = v.roles ?? 'router,delivery,deadletter';
  for (const r of ['router', 'delivery']) if (!roles.split(',').includes(r)) throw new UsageError(`--roles must include ${r}: the bench measures delivery`);
  return {
    size, json: v.json ?? false, only, roles,
    ports: positiveInt('ports', v.ports, 100, 1000),
    ceilingConcurrency: positiveInt('ceiling-concurrency', v['ceiling-concurrency'], 256, 10_000),
    rate: positiveInt('rate', v.rate, 1000, 100_000),
    sweep: (v.sweep ?? '1000,2000,3000,4000,5000,6000,8000').split(',').map((x) => positiveInt('sweep', x.trim(), 1000, 100_000)),
    cpuProf: v['cpu-prof'],
    keep: v.keep ?? false,
    split: v.split ?? false,
  };
}

// ---------------------------------------------------------------------------------------------------
// Output

const say = (line: string) => process.stderr.write(line + '\n');
const progress = (line: string) => say(`  … ${line}`);
const rows: [string, string, string][] = [];
function row(figure: string, value: string, note = '') {
  rows.push([figure, value, note]);
  say(`  ${figure.padEnd(28)} ${value.padStart(12)}  ${note}`);
}
const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : String(n));
const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const wallNow = () => performance.timeOrigin + performance.now();

// ---------------------------------------------------------------------------------------------------
// Receivers child

interface Receivers {
  ports: number[];
  call(m: DistributiveOmit<ReceiverCommand, 'id'>): Promise<ReceiverReply & { ok: true }>;
  stats(phase: string, ports?: number[]): Promise<PhaseStats>;
  count(phase: string): Promise<number>;
  mode(ports: number[], mode: PortMode): Promise<void>;
  child: ChildProcess;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

async function startReceivers(count: number): Promise<Receivers> {
  const child = fork(new URL('./receivers.ts', import.meta.url).pathname, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 1;
  const waiting = new Map<number, (r: ReceiverReply) => void>();
  child.on('message', (r: ReceiverReply) => { waiting.get(r.id)?.(r); waiting.delete(r.id); });
  const call = (m: DistributiveOmit<ReceiverCommand, 'id'>) => new Promise<ReceiverReply & { ok: true }>((resolve, reject) => {
    const id = next++;
    waiting.set(id, (r) => (r.ok ? resolve(r) : reject(new Error(`receivers: ${r.error}`))));
    child.send({ ...m, id } as ReceiverCommand);
  });
  const started = await call({ cmd: 'start', ports: count });
  return {
    ports: started.ports!, call, child,
    stats: async (phase, ports) => (await call(ports ? { cmd: 'stats', phase, ports } : { cmd: 'stats', phase })).stats!,
    count: async (phase) => (await call({ cmd: 'count', phase })).count!,
    mode: async (ports, mode) => { await call({ cmd: 'mode', ports, mode }); },
  };
}

async function waitForCount(receivers: Receivers, phase: string, target: number, timeoutMs: number, label: string): Promise<PhaseStats> {
  const until = Date.now() + timeoutMs;
  let lastShown = 0;
  for (;;) {
    const n = await receivers.count(phase);
    if (n >= target) return receivers.stats(phase);
    if (Date.now() > until) throw new Error(`${label}: ${n} of ${target} deliveries arrived within ${timeoutMs / 1000} s`);
    if (Date.now() - lastShown > 2000 && !label.startsWith('fan')) { progress(`${label}: ${n}/${target}`); lastShown = Date.now(); }
    await sleep(target - n < 2000 ? 20 : 200);
  }
}

// ---------------------------------------------------------------------------------------------------
// One group: a nats-server, a database, endpoints, the service child

const ORG_EVENTS: EventName[] = [
  'organization.created', 'organization.updated', 'organization.deleted', 'organization.restored',
  'organization.auth_policy.updated', 'organization.delivery_channels.updated', 'organization.social_providers.updated',
  'organization.outbound_saml_app.created', 'organization.outbound_saml_app.deleted', 'organization.scim_target.created',
];

interface EndpointPlan {
  tenant: string;
  url: string;
  port: number;
  events: EventName[];
  /** v1a endpoints sign with ed25519 (issue 11); absent: v1. */
  scheme?: 'v1a';
}

interface Group {
  name: string;
  nats: NatsServer;
  db: TestDatabase;
  keys: GeneratedKeys;
  config: Config;
  env: Record<string, string>;
  nc: NatsConnection;
  js: JetStreamClient;
  endpoints: EndpointPlan[];
  service?: ServiceProcess;
  logFile: string;
  dir: string;
}

interface ServiceProcess {
  /** One process, or two with --split (router+deadletter, delivery). */
  pids: number[];
  readyMs: number;
  /** Starts a new window of event-loop delay and GC figures in every service process. */
  loopReset(): void;
  /** Event-loop delay and GC pauses since loopReset (the worst process's, with --split). */
  loopStats(): Promise<LoopStats>;
  stop(): Promise<void>;
}

const cleanups: (() => Promise<void>)[] = [];

async function startGroup(name: string, opts: Options, endpoints: EndpointPlan[]): Promise<Group> {
  const dir = mkdtempSync(join(tmpdir(), `hookstream-bench-${name}-`));
  const nats = await startNatsServer();
  const db = await createTestDatabase(`bench_${name}`);
  cleanups.push(async () => {
    if (opts.keep) {
      await nats.stop();
      say(`kept ${name}: service log ${join(dir, 'service.log')}, NATS store ${nats.storeDir}, database ${db.name}`);
      return;
    }
    await nats.dispose();
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });
  const keys = generateKeys();
  const env: Record<string, string> = {
    ...Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[1] !== undefined)),
    NATS_URL: nats.url,
    DATABASE_URL: db.url,
    PORT: '0',
    OPS_PORT: '0',
    HOOKSTREAM_ROLES: opts.roles,
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
    HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
    HOOKSTREAM_DATA_DIR: join(dir, 'data'),
    HOOKSTREAM_LOG_LEVEL: process.env['HOOKSTREAM_LOG_LEVEL'] ?? 'warn',
  };
  const config = loadConfig(env);
  const nc = await connectNats({ url: nats.url, name: 'hookstream-bench-producer' });
  cleanups.unshift(async () => { await nc.close(); });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, { shards: config.deliveryShards, retrySchedule: config.retrySchedule, replicas: config.replicas });

  // Endpoints are created through the real command side (the same events the API appends).
  const { store } = createEndpoints({ js, jsm, masterKey: keys.masterKey, allowPrivateTargets: true });
  const queue = endpoints.map((e, i) => [e, i] as const);
  let made = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: 64 }, async () => {
    for (let item = queue.pop(); item; item = queue.pop()) {
      await store.create(item[0].tenant as TenantId, { url: item[0].url, events: item[0].events, signature_scheme: item[0].scheme });
      if (++made % 2000 === 0) progress(`${name}: ${made}/${endpoints.length} endpoints created`);
    }
  }));
  progress(`${name}: ${endpoints.length} endpoints created in ${fmt((performance.now() - started) / 1000)} s`);
  return { name, nats, db, keys, config, env, nc, js, endpoints, logFile: join(dir, 'service.log'), dir };
}

async function startServiceProcess(group: Group, opts: Options, timeoutMs = 180_000): Promise<ServiceProcess> {
  const started = performance.now();
  const roleSets = opts.split
    ? [opts.roles.split(',').filter((r) => r !== 'delivery').join(','), 'delivery']
    : [opts.roles];
  const children = await Promise.all(roleSets.map((roles) => startChild(group, opts, roles, timeoutMs)));
  const readyMs = performance.now() - started;
  let nextId = 1;
  const ask = (c: ChildProcess) => new Promise<LoopStats>((resolve, reject) => {
    const id = nextId++;
    const timer = setTimeout(() => { c.off('message', on); reject(new Error('service: no loop stats within 10 s')); }, 10_000);
    const on = (m: ServiceChildMessage) => {
      if (m.type === 'loop-stats' && m.id === id) { clearTimeout(timer); c.off('message', on); resolve(m.stats); }
    };
    c.on('message', on);
    c.send({ type: 'loop-stats', id } satisfies ServiceChildCommand);
  });
  return {
    pids: children.map((c) => c.child.pid!), readyMs,
    loopReset: () => { for (const c of children) c.child.send({ type: 'loop-reset' } satisfies ServiceChildCommand); },
    loopStats: async () => {
      const all = await Promise.all(children.map((c) => ask(c.child)));
      // With --split, the worse of the two processes on each figure.
      return all.reduce((a, b) => Object.fromEntries(Object.keys(a).map((k) => [k, Math.max(a[k as keyof LoopStats], b[k as keyof LoopStats])])) as unknown as LoopStats);
    },
    stop: async () => { await Promise.all(children.map((c) => c.stop())); },
  };
}

async function startChild(group: Group, opts: Options, roles: string, timeoutMs: number): Promise<{ child: ChildProcess; stop(): Promise<void> }> {
  const log = openSync(group.logFile, 'a');
  const execArgv = opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProf}`] : [];
  const child = fork(new URL('./service-child.ts', import.meta.url).pathname, [], {
    env: { ...group.env, HOOKSTREAM_ROLES: roles }, execArgv, stdio: ['ignore', log, log, 'ipc'],
  });
  closeSync(log);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const killAtExit = async () => { if (child.exitCode === null) child.kill('SIGKILL'); };
  cleanups.unshift(killAtExit);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${group.name}: service (${roles}) not ready within ${timeoutMs / 1000} s (log: ${group.logFile})`)), timeoutMs);
    child.on('message', (m: ServiceChildMessage) => {
      if (m.type === 'ready') { clearTimeout(timer); resolve(); }
      if (m.type === 'failed') { clearTimeout(timer); reject(new Error(`${group.name}: service (${roles}) failed to start: ${m.error} (log: ${group.logFile})`)); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${group.name}: service (${roles}) exited with ${code} before ready (log: ${group.logFile})`)); });
  });
  return {
    child,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(30_000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Producer

const eventBody = (phase: string, i: number) => JSON.stringify({ userId: `user_bench${i}`, p: phase, i, t: wallNow() });

/** Publish as fast as JetStream takes them, `window` publishes awaiting their ack at once. */
async function publishBurst(js: JetStreamClient, subjects: (i: number) => string, count: number, phase: string, window = 256): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: window }, async () => {
    for (let i = next++; i < count; i = next++) await js.publish(subjects(i), eventBody(phase, i));
  }));
}

/** Publish at a steady rate; returns each publish's latency (call to stored ack) in ms. */
async function publishSteady(js: JetStreamClient, subjects: (i: number) => string, rate: number, seconds: number, phase: string): Promise<number[]> {
  const latencies: number[] = [];
  const pending = new Set<Promise<void>>();
  const start = performance.now();
  const total = Math.round(rate * seconds);
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate));
    for (; sent < due; sent++) {
      const t0 = performance.now();
      const p = js.publish(subjects(sent), eventBody(phase, sent)).then(() => { latencies.push(performance.now() - t0); });
      pending.add(p);
      void p.finally(() => pending.delete(p));
    }
    await sleep(1);
  }
  await Promise.all(pending);
  return latencies;
}

// ---------------------------------------------------------------------------------------------------
// Ceiling: sign and POST the same bodies to the same receivers from one loop, no queue.

async function ceiling(receivers: Receivers, endpoints: EndpointPlan[], deliveries: number, concurrency: number, phase = 'ceiling'): Promise<number> {
  const agent = new Agent({ connections: 128, pipelining: 1, allowH2: false });
  const keys = endpoints.map(() => signingKeyObject(`whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`));
  const urls = endpoints.map((e) => new URL(e.url));
  let next = 0;
  let failed = 0;
  const started = wallNow();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < deliveries; i = next++) {
      const e = i % endpoints.length;
      const body = Buffer.from(JSON.stringify({ type: 'user.updated', data: JSON.parse(eventBody(phase, i)) as unknown }));
      const now = Date.now();
      const ts = Math.floor(now / 1000);
      const id = `msg_ceiling${i}`;
      const res = await agent.request({
        origin: urls[e]!.origin, path: urls[e]!.pathname, method: 'POST', body,
        headers: {
          'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(ts),
          'webhook-signature': signatureHeader([keys[e]!], id, ts, body), 'service-webhook-event': 'user.updated',
          'user-agent': 'hookstream-bench',
        },
      });
      await res.body.dump();
      if (res.statusCode >= 300) failed++;
    }
  }));
  const elapsed = (wallNow() - started) / 1000;
  await agent.close();
  if (failed) throw new Error(`ceiling: ${failed} POSTs failed`);
  await waitForCount(receivers, phase, deliveries, 10_000, phase);
  return deliveries / elapsed;
}

// ---------------------------------------------------------------------------------------------------
// Process figures from /proc

const TICKS = (() => { try { return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100; } catch { return 100; } })();
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime, stime
}
const cpuTicksOf = (pids: number[]) => pids.reduce((sum, pid) => sum + cpuTicks(pid), 0);
function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}
/** The nats-server process of a group, found by its port on the command line. */
function natsPid(nats: NatsServer): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const args = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (args[0]?.endsWith('nats-server') && args.includes(String(nats.port)) && args.includes(nats.storeDir)) return Number(entry);
    } catch { /* gone */ }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------
// Scenarios

type Figures = Record<string, number | string | null | object>;

function plan(tenants: number, perTenant: number, ports: number[], prefix: string, offset = 0): EndpointPlan[] {
  const out: EndpointPlan[] = [];
  for (let t = 0; t < tenants; t++) {
    for (let j = 0; j < perTenant; j++) {
      const n = offset + out.length;
      const port = n % ports.length;
      out.push({
        tenant: `${prefix}${t}`, port, url: `http://127.0.0.1:${ports[port]}/hook/${n}`,
        events: perTenant <= ORG_EVENTS.length ? ['user.updated', ORG_EVENTS[j]!] : ['user.updated'],
      });
    }
  }
  return out;
}

/** CPU use of the processes in a run, % of one core each: where the time of a scenario went. */
function cpuMeter(group: Group, receivers: Receivers): () => string {
  const nats = natsPid(group.nats);
  const pids: [string, number[]][] = [
    ['service', group.service?.pids ?? []], ['nats', nats ? [nats] : []], ['receivers', [receivers.child.pid!]], ['bench', [process.pid]],
  ];
  const t0 = performance.now();
  const before = pids.map(([, ps]) => cpuTicksOf(ps));
  return () => {
    const secs = (performance.now() - t0) / 1000;
    return pids.map(([name, ps], i) => `${name} ${ps.length ? fmt(((cpuTicksOf(ps) - before[i]!) / TICKS / secs) * 100, 0) : '?'}%`).join(', ');
  };
}

/**
 * A burst of events, each reaching `perTenant` endpoints: by default `user.updated` to every endpoint of a
 * tenant; `subject` picks another shape (e.g. one endpoint per event), `perTenant` then being its fan-out.
 */
async function throughputRun(group: Group, receivers: Receivers, deliveries: number, label: string, tenants: number, perTenant: number, prefix = 't',
  subject: (i: number) => string = (i) => `events.${prefix}${i % tenants}.user.updated`): Promise<{ rate: number; cpu: string }> {
  const events = Math.ceil(deliveries / perTenant);
  const total = events * perTenant;
  const meter = cpuMeter(group, receivers);
  const started = wallNow();
  const publishing = publishBurst(group.js, subject, events, label);
  await waitForCount(receivers, label, total, 300_000, label);
  await publishing;
  const cpu = meter();
  const stats = await receivers.stats(label);
  return { rate: total / ((stats.last - started) / 1000), cpu };
}

/**
 * Ceiling and service throughput in alternating rounds (ceiling, service, ceiling, service, …): the
 * machine is shared, so a ratio is only meaningful between runs made at nearly the same moment. Reports
 * the medians and the median of the per-round ratios.
 */
async function interleaved(group: Group, receivers: Receivers, endpoints: EndpointPlan[], opts: Options, total: number, rounds: number,
  label: string, tenants: number, perTenant: number, subject?: (i: number) => string): Promise<{ ceiling: number; throughput: number; ratio: number; cpuCeiling: string; cpu: string; detail: string }> {
  const per = Math.ceil(total / rounds);
  const ceilings: number[] = [];
  const rates: number[] = [];
  const ratios: number[] = [];
  let cpuCeiling = '';
  let cpu = '';
  for (let r = 0; r < rounds; r++) {
    progress(`${label}: round ${r + 1}/${rounds}: ceiling`);
    const meter = cpuMeter(group, receivers);
    const c = await ceiling(receivers, endpoints, per, opts.ceilingConcurrency, `c${label}-${r}`);
    if (r === rounds - 1) cpuCeiling = meter();
    progress(`${label}: round ${r + 1}/${rounds}: service`);
    const t = await throughputRun(group, receivers, per, `${label}-${r}`, tenants, perTenant, 't', subject);
    if (r === rounds - 1) cpu = t.cpu;
    ceilings.push(c);
    rates.push(t.rate);
    ratios.push(t.rate / c);
  }
  const med = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 0.5);
  return {
    ceiling: med(ceilings), throughput: med(rates), ratio: med(ratios), cpuCeiling, cpu,
    detail: ratios.map((x) => fmt(x, 2)).join(' '),
  };
}

async function groupSmall(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
  const endpoints = plan(10, 10, receivers.ports, 't');
  // The v1a share (issue 11): 100 more endpoints of the same shape (tenants a0..a9, same ports) that sign
  // with ed25519. They receive only the v1a throughput runs; every other phase publishes to t-tenants.
  const v1aEndpoints = opts.only.has('throughput')
    ? plan(10, 10, receivers.ports, 'a', endpoints.length).map((e): EndpointPlan => ({ ...e, scheme: 'v1a' }))
    : [];
  // Pairs for throughput_2 (issue 13): tenants d0..d9 of 10 endpoints, endpoints 2k and 2k+1 of a tenant
  // both taking the org event k (and nothing else), so each event reaches exactly two endpoints.
  const pairEndpoints = opts.only.has('one')
    ? plan(10, 10, receivers.ports, 'd', endpoints.length + v1aEndpoints.length).map((e, i): EndpointPlan => ({ ...e, events: [ORG_EVENTS[(i % 10) >> 1]!] }))
    : [];
  const group = await startGroup('e100', opts, [...endpoints, ...v1aEndpoints, ...pairEndpoints]);
  group.service = await startServiceProcess(group, opts);
  progress(`e100: service ready in ${fmt(group.service.readyMs / 1000)} s`);

  if (opts.only.has('throughput')) {
    // Warm both paths (JIT, connection pools) before measuring: an unwarmed ceiling loop reads ~40 % low
    // in short rounds, which flatters every ratio.
    progress('warming up the ceiling loop and the service');
    await ceiling(receivers, endpoints, 10_000, opts.ceilingConcurrency, 'cwarm100');
    await throughputRun(group, receivers, 5000, 'warm100', 10, 10);
    const m = await interleaved(group, receivers, endpoints, opts, size.deliveries100, size.rounds, 'tp100', 10, 10);
    figures['ceiling'] = round(m.ceiling, 0);
    figures['throughput_100'] = round(m.throughput, 0);
    figures['ratio_100'] = round(m.ratio, 3);
    figures['cpu_ceiling'] = m.cpuCeiling;
    figures['cpu_throughput_100'] = m.cpu;
    row('ceiling', `${fmt(m.ceiling, 0)}/s`, `signed POSTs, ${opts.ceilingConcurrency} in flight, ${receivers.ports.length} ports; cpu: ${m.cpuCeiling}`);
    row('throughput_100', `${fmt(m.throughput, 0)}/s`, `cpu: ${m.cpu}`);
    row('ratio_100', fmt(m.ratio, 2), `median of rounds ${m.detail} (target ≥ 0.5)`);

    // v1a beside v1: the same burst shape to the 100 ed25519 endpoints, right after the v1 rounds; its
    // ratio is to the same (HMAC-signing) ceiling, so it shows what ed25519 costs on the whole path.
    progress('v1a: warming up, then the same rounds to the 100 v1a endpoints');
    await throughputRun(group, receivers, 2000, 'warm100a', 10, 10, 'a');
    const rates: number[] = [];
    for (let r = 0; r < size.rounds; r++) {
      rates.push((await throughputRun(group, receivers, Math.ceil(size.deliveries100 / size.rounds), `tp100a-${r}`, 10, 10, 'a')).rate);
    }
    const v1a = percentile([...rates].sort((a, b) => a - b), 0.5);
    figures['throughput_100_v1a'] = round(v1a, 0);
    figures['ratio_100_v1a'] = round(v1a / m.ceiling, 3);
    row('throughput_100_v1a', `${fmt(v1a, 0)}/s`, `v1a (ed25519) endpoints, median of ${rates.map((x) => fmt(x, 0)).join(', ')}; v1: ${fmt(m.throughput, 0)}/s`);
    row('ratio_100_v1a', fmt(v1a / m.ceiling, 2), 'to the v1 ceiling above');
  }

  // Steady phases: event i goes to tenant i%10 with the org event that exactly one endpoint there takes,
  // so every endpoint gets rate/100 events per second.
  const steadySubject = (i: number) => `events.t${i % 10}.${ORG_EVENTS[Math.floor(i / 10) % 10]!}`;
  const healthyPorts = endpoints.map((e, i) => (i % 2 === 0 ? e.port : -1)).filter((p) => p >= 0);
  const badPorts = endpoints.map((e, i) => (i % 2 === 1 ? e.port : -1)).filter((p) => p >= 0);
  const service = group.service;
  const med = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 0.5);

  if (opts.only.has('one')) {
    // The common case (issue 13): each event reaches one endpoint (the steady phases' shape, as a burst),
    // against the same ceiling loop in alternating rounds; then each event to two endpoints.
    if (!opts.only.has('throughput')) {
      progress('warming up the ceiling loop and the service');
      await ceiling(receivers, endpoints, 10_000, opts.ceilingConcurrency, 'cwarm1');
    }
    await throughputRun(group, receivers, 3000, 'warm1', 10, 1, 't', steadySubject);
    service.loopReset();
    const m = await interleaved(group, receivers, endpoints, opts, size.deliveries100, size.rounds, 'tp1', 10, 1, steadySubject);
    const loop = await service.loopStats();
    figures['ceiling_1to1'] = round(m.ceiling, 0);
    figures['throughput_1to1'] = round(m.throughput, 0);
    figures['ratio_1to1'] = round(m.ratio, 3);
    figures['cpu_throughput_1to1'] = m.cpu;
    figures['loop_1to1'] = loop;
    row('ceiling (1to1 rounds)', `${fmt(m.ceiling, 0)}/s`, `cpu: ${m.cpuCeiling}`);
    row('throughput_1to1', `${fmt(m.throughput, 0)}/s`, `events = deliveries; cpu: ${m.cpu}`);
    row('ratio_1to1', fmt(m.ratio, 2), `median of rounds ${m.detail} (target ≥ 0.35); service gc ${fmt(loop.gc_pct)}% of the time`);
    const pairSubject = (i: number) => `events.d${i % 10}.${ORG_EVENTS[Math.floor(i / 10) % 5]!}`;
    await throughputRun(group, receivers, 2000, 'warm2', 10, 2, 'd', pairSubject);
    const rates: number[] = [];
    for (let r = 0; r < size.rounds; r++) {
      rates.push((await throughputRun(group, receivers, Math.ceil(size.deliveries100 / size.rounds), `tp2-${r}`, 10, 2, 'd', pairSubject)).rate);
    }
    const two = med(rates);
    figures['throughput_2'] = round(two, 0);
    figures['ratio_2'] = round(two / m.ceiling, 3);
    row('throughput_2', `${fmt(two, 0)}/s`, `deliveries/s, each event to 2 endpoints; median of ${rates.map((x) => fmt(x, 0)).join(', ')}; ratio ${fmt(two / m.ceiling, 2)}`);
  }

  /** One steady phase: `rate` events/s, each to one endpoint, after a warm-up second. */
  const steadyOnce = async (phase: string, rate: number, seconds: number) => {
    await publishSteady(group.js, steadySubject, rate, 1, `${phase}-warm`);
    service.loopReset();
    const meter = cpuMeter(group, receivers);
    const t0 = performance.now();
    const pub = await publishSteady(group.js, steadySubject, rate, seconds, phase);
    const achieved = pub.length / ((performance.now() - t0) / 1000);
    // CPU per event moves far less with the machine's other load than latency does.
    const cpu = meter();
    const loop = await service.loopStats();
    // Whatever has not arrived 1 s after the last publish is counted as late (the phase was not held).
    const until = performance.now() + 1000;
    while ((await receivers.count(phase)) < pub.length && performance.now() < until) await sleep(20);
    await sleep(100);
    pub.sort((a, b) => a - b);
    return { published: pub.length, achieved, cpu, publishP99: percentile(pub, 0.99), all: await receivers.stats(phase), healthy: await receivers.stats(phase, healthyPorts), loop };
  };
  type Steady = Awaited<ReturnType<typeof steadyOnce>>;
  /** `latencyReps` repetitions; each figure is the median over them (so one stall does not decide it). */
  const steady = async (phase: string) => {
    const reps: Steady[] = [];
    for (let r = 0; r < size.latencyReps; r++) reps.push(await steadyOnce(`${phase}${r}`, opts.rate, size.steadySeconds));
    const m = (f: (x: Steady) => number) => med(reps.map(f));
    return {
      reps,
      publishP99: m((x) => x.publishP99),
      all: { p50: m((x) => x.all.p50), p99: m((x) => x.all.p99), max: m((x) => x.all.max), count: m((x) => x.all.count) },
      healthy: { p99: m((x) => x.healthy.p99) },
      loop: Object.fromEntries(Object.keys(reps[0]!.loop).map((k) => [k, m((x) => x.loop[k as keyof LoopStats])])) as unknown as LoopStats,
    };
  };
  const loopNote = (l: LoopStats) => `event-loop delay p99 ${fmt(l.eld_p99_ms, 1)} max ${fmt(l.eld_max_ms, 1)} ms; gc ${l.gc_count}× ${fmt(l.gc_total_ms, 0)} ms (max ${fmt(l.gc_max_ms, 1)})`;

  if (opts.only.has('latency') || opts.only.has('isolation')) {
    progress(`latency: ${opts.rate} events/s for ${size.steadySeconds} s × ${size.latencyReps}, all endpoints healthy`);
    const h = await steady('steady');
    figures['latency_p50_ms'] = round(h.all.p50);
    figures['latency_p99_ms'] = round(h.all.p99);
    figures['latency_p99_reps_ms'] = h.reps.map((x) => round(x.all.p99));
    figures['publish_p99_ms_healthy'] = round(h.publishP99);
    figures['latency_loop'] = h.loop;
    figures['latency_loop_reps'] = h.reps.map((x) => x.loop);
    figures['latency_cpu_reps'] = h.reps.map((x) => x.cpu);
    row('latency_p50_ms', fmt(h.all.p50, 2), `publish→receipt, ${h.all.count} deliveries, median of ${h.reps.length} (target ≤ 5)`);
    row('latency_p99_ms', fmt(h.all.p99, 2), `reps ${h.reps.map((x) => fmt(x.all.p99, 1)).join(', ')}; max ${fmt(h.all.max, 1)} (target ≤ 25)`);
    row('latency_loop', '', loopNote(h.loop));
    row('latency_cpu', '', h.reps.map((x) => x.cpu).join(' | '));
    row('publish_p99_ms_healthy', fmt(h.publishP99, 2), 'producer publish→stored ack');

    if (opts.only.has('isolation')) {
      progress('isolation: half of the endpoints black-holed');
      await receivers.mode(badPorts, 'hang');
      const d = await steady('hang');
      progress('isolation: half of the endpoints answering 500');
      await receivers.mode(badPorts, 'fail');
      const f = await steady('fail');
      await receivers.mode(badPorts, 'ok');
      figures['publish_p99_ms_degraded'] = round(d.publishP99);
      const pubRatio = d.publishP99 / h.publishP99;
      figures['publish_isolation_ratio'] = round(pubRatio, 3);
      row('publish_p99_ms_degraded', fmt(d.publishP99, 2), 'half the endpoints black-holed');
      row('publish_isolation_ratio', fmt(pubRatio, 2), '(target ≤ 1.2)');
      const worst = Math.max(d.healthy.p99, f.healthy.p99);
      const epRatio = worst / h.healthy.p99;
      figures['endpoint_isolation_ratio'] = round(epRatio, 3);
      row('endpoint_isolation_ratio', fmt(epRatio, 2),
        `healthy p99 ${fmt(h.healthy.p99, 1)} → ${fmt(d.healthy.p99, 1)} (hang), ${fmt(f.healthy.p99, 1)} (500) ms (target ≤ 1.5)`);
    }
  }

  if (opts.only.has('maxrate')) {
    // The highest steady rate held: every delivery in, publish→receipt p99 ≤ 50 ms. Rising steps; the
    // sweep ends at the first step not held.
    const steps: { rate: number; achieved: number; p50: number; p99: number; late: number; held: boolean; cpu: string; loop: LoopStats }[] = [];
    let best = 0;
    for (const rate of opts.sweep) {
      progress(`max_rate_1to1: ${rate} events/s for ${size.sweepSeconds} s`);
      const r = await steadyOnce(`sweep${rate}`, rate, size.sweepSeconds);
      const late = r.published - r.all.count;
      // A producer that could not publish at the rate (its own process saturated) does not count as held.
      const held = late === 0 && r.all.p99 <= 50 && r.achieved >= rate * 0.95;
      steps.push({ rate, achieved: round(r.achieved, 0), p50: round(r.all.p50), p99: round(r.all.p99), late, held, cpu: r.cpu, loop: r.loop });
      row(`  sweep ${rate}/s`, held ? 'held' : 'not held', `published ${fmt(r.achieved, 0)}/s, p50 ${fmt(r.all.p50, 1)} p99 ${fmt(r.all.p99, 1)} ms, ${late} late; ${loopNote(r.loop)}; cpu: ${r.cpu}`);
      if (!held) break;
      best = rate;
      await sleep(500);
    }
    figures['max_rate_1to1'] = best;
    figures['max_rate_1to1_steps'] = steps;
    row('max_rate_1to1', `${best}/s`, 'highest steady rate with every delivery in and p99 ≤ 50 ms (target ≥ 4000)');
  }
  await group.service.stop();
}

async function groupMedium(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
  const endpoints = plan(500, 10, receivers.ports, 't');
  const group = await startGroup('e5000', opts, endpoints);
  group.service = await startServiceProcess(group, opts);
  progress(`e5000: service ready in ${fmt(group.service.readyMs / 1000)} s`);
  await ceiling(receivers, endpoints, 10_000, opts.ceilingConcurrency, 'cwarm5000');
  await throughputRun(group, receivers, 5000, 'warm5000', 500, 10);
  const m = await interleaved(group, receivers, endpoints, opts, size.deliveries5000, size.rounds, 'tp5000', 500, 10);
  figures['ceiling_5000'] = round(m.ceiling, 0);
  figures['throughput_5000'] = round(m.throughput, 0);
  figures['ratio_5000'] = round(m.ratio, 3);
  figures['cpu_throughput_5000'] = m.cpu;
  row('ceiling (5000 URLs)', `${fmt(m.ceiling, 0)}/s`, `cpu: ${m.cpuCeiling}`);
  row('throughput_5000', `${fmt(m.throughput, 0)}/s`, `cpu: ${m.cpu}`);
  row('ratio_5000', fmt(m.ratio, 2), `median of rounds ${m.detail} (target ≥ 0.35)`);
  await group.service.stop();
}

async function groupLarge(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
  // 9,000 endpoints in tenants of ten, and one tenant with 1,000 for the fan-out.
  const endpoints = [...plan(900, 10, receivers.ports, 't'), ...plan(1, 1000, receivers.ports, 'fan', 9000)];
  const group = await startGroup('e10000', opts, endpoints);
  const pids = () => group.service!.pids;

  if (opts.only.has('scale')) {
    progress('scale: first start with 10,000 endpoints (creates their consumers)');
    group.service = await startServiceProcess(group, opts);
    figures['startup_10000_first_s'] = round(group.service.readyMs / 1000);
    row('startup_10000_first_s', fmt(group.service.readyMs / 1000, 1), 'first start: creates 10,000 consumers');
    await group.service.stop();
    progress('scale: restart with 10,000 endpoints and their consumers');
    group.service = await startServiceProcess(group, opts);
    figures['startup_10000_s'] = round(group.service.readyMs / 1000);
    row('startup_10000_s', fmt(group.service.readyMs / 1000, 1), 'start to ready, consumers exist (target ≤ 20)');
    await sleep(3000);
    const nPid = natsPid(group.nats);
    const t0 = performance.now();
    const c0 = cpuTicksOf(pids());
    const n0 = nPid ? cpuTicks(nPid) : 0;
    progress(`scale: idle for ${size.idleSeconds} s`);
    await sleep(size.idleSeconds * 1000);
    const secs = (performance.now() - t0) / 1000;
    const cpu = ((cpuTicksOf(pids()) - c0) / TICKS / secs) * 100;
    const natsCpu = nPid ? ((cpuTicks(nPid) - n0) / TICKS / secs) * 100 : NaN;
    const rss = pids().reduce((sum, p) => sum + rssMb(p), 0);
    figures['idle_cpu_10000_pct'] = round(cpu);
    figures['idle_cpu_10000_nats_pct'] = round(natsCpu);
    figures['rss_10000_mb'] = round(rss, 0);
    row('idle_cpu_10000_pct', fmt(cpu, 2), `% of one core over ${fmt(secs, 0)} s; nats-server ${fmt(natsCpu, 1)}% (target ≤ 5)`);
    row('rss_10000_mb', fmt(rss, 0), 'service process (target ≤ 600)');
  } else {
    group.service = await startServiceProcess(group, opts);
  }

  if (opts.only.has('fanout')) {
    const times: number[] = [];
    for (let k = 0; k < size.fanouts; k++) {
      const phase = `fan${k}`;
      const t0 = wallNow();
      await group.js.publish('events.fan0.user.updated', eventBody(phase, k));
      const s = await waitForCount(receivers, phase, 1000, 60_000, phase);
      times.push(s.last - t0);
      await sleep(300);
    }
    const sorted = [...times].sort((a, b) => a - b);
    const median = percentile(sorted, 0.5);
    figures['fanout_1000_ms'] = round(median, 1);
    row('fanout_1000_ms', fmt(median, 0), `median of ${times.map((t) => fmt(t, 0)).join(', ')} ms, 10,000 endpoints live (target ≤ 1000)`);
  }
  await group.service.stop();
}

// ---------------------------------------------------------------------------------------------------

const KEYS = [
  'throughput_1to1', 'ratio_1to1', 'throughput_2', 'max_rate_1to1',
  'throughput_100', 'throughput_100_v1a', 'throughput_5000', 'ceiling', 'ratio_100', 'ratio_100_v1a', 'ratio_5000', 'latency_p50_ms', 'latency_p99_ms',
  'publish_p99_ms_healthy', 'publish_p99_ms_degraded', 'publish_isolation_ratio', 'endpoint_isolation_ratio',
  'fanout_1000_ms', 'startup_10000_s', 'rss_10000_mb', 'idle_cpu_10000_pct',
] as const;

async function main(): Promise<number> {
  let opts: Options;
  try {
    const o = parseOptions(process.argv.slice(2));
    if (o === 'help') { say(USAGE); return 0; }
    opts = o;
  } catch (e) {
    if (e instanceof UsageError) { say(`bench: ${e.message}\n\n${USAGE}`); return 2; }
    throw e;
  }
  const size = SIZES[opts.size];
  await initSodium();
  const natsVersion = (() => { try { return execFileSync(process.env['NATS_SERVER_BIN'] ?? '/usr/sbin/nats-server', ['--version']).toString().trim(); } catch { return 'unknown'; } })();
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, ${natsVersion}`;
  say(`hookstream bench (${opts.size}): ${machine}`);
  const figures: Figures = Object.fromEntries(KEYS.map((k) => [k, null]));
  const started = performance.now();
  const receivers = await startReceivers(opts.ports);
  cleanups.push(async () => { await receivers.call({ cmd: 'stop' }).catch(() => {}); });
  try {
    if (['throughput', 'one', 'maxrate', 'latency', 'isolation'].some((s) => opts.only.has(s as Scenario))) await groupSmall(opts, size, receivers, figures);
    if (opts.only.has('throughput')) await groupMedium(opts, size, receivers, figures);
    if (opts.only.has('scale') || opts.only.has('fanout')) await groupLarge(opts, size, receivers, figures);
  } finally {
    for (const c of cleanups.splice(0)) await c().catch((e: unknown) => say(`cleanup: ${e instanceof Error ? e.message : String(e)}`));
  }
  const seconds = (performance.now() - started) / 1000;
  say(`done in ${fmt(seconds, 0)} s`);
  if (opts.json) {
    process.stdout.write(JSON.stringify({
      ...figures, size: opts.size, split: opts.split, machine, duration_s: round(seconds, 0),
      shards: loadConfig({ ...process.env, HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1' }).deliveryShards,
    }) + '\n');
  }
  return 0;
}

process.once('SIGINT', () => {
  say('interrupted; cleaning up');
  void Promise.allSettled(cleanups.splice(0).map((c) => c())).then(() => process.exit(130));
});

main().then((code) => process.exit(code), (e: unknown) => {
  say(`bench failed: ${e instanceof Error ? e.message : String(e)}`);
  void Promise.allSettled(cleanups.splice(0).map((c) => c())).then(() => process.exit(1));
});
