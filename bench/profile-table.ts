// Where a delivery's CPU goes, from V8 CPU profiles (.cpuprofile JSON: `npm run bench -- --phase-prof DIR`,
// or `--cpu-prof DIR`), or from nats-server's (.pprof, `--nats-prof-port`; read with `go tool pprof`):
//   node bench/profile-table.ts DIR/steady0.cpuprofile [more.cpuprofile ...] [--top N]
//   node bench/profile-table.ts DIR/steady0.nats.pprof [more.nats.pprof ...]
//   node bench/profile-table.ts DIR/steady0.heapprofile [more.heapprofile ...]   (BENCH_HEAP_SAMPLING=1)
// Two tables, summed over the files given: self time by module (project source file, npm package, Node
// internal, V8's own entries), and every sample charged to the part of the delivery path it works for
// (the nearest project frame on its stack that names one, see PARTS), with the functions it spent most in.
// With the `<phase>.json` the bench writes beside each profile, shares become µs per delivery: each share
// of the sampled time times the process's CPU per delivery from /proc (samples are taken on wall time, so
// on a busy machine a descheduled thread still collects them; the shares hold, their sum does not).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import type { PhaseFacts } from './phase-profile.ts';

interface CallFrame { functionName: string; url: string; lineNumber: number }
interface ProfileNode { id: number; callFrame: CallFrame; children?: number[] }
interface CpuProfile { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[]; timeDeltas: number[] }

const ROOT = resolve(new URL('..', import.meta.url).pathname);

/** A frame's module: a project file, an npm package, a Node internal area, or V8's own entry. */
function moduleOf(f: CallFrame): string {
  if (!f.url) return f.functionName.startsWith('(') ? f.functionName : '(native)';
  const url = f.url.replace(/^file:\/\//, '');
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url.split('/').slice(0, 3).join('/');
  return url.startsWith('/') ? relative(ROOT, url) : url;
}

/** The parts of the delivery path, by the project file (and function) a sample works for; first match wins. */
const PARTS: [part: string, file: RegExp, fn?: RegExp][] = [
  ['ordering: the router\'s keyed bound and barrier, the gate and its reads', /^src\/router\/(ordering|keyed-bound)\.ts|^src\/delivery\/ordered-gate\.ts|^src\/nats\/next-by-subject\.ts|^src\/domain\/ordering-key\.ts/],
  ['router: ROUTED log, late marks', /^src\/router\/(routed-log|late-marks)\.ts|^streams\/routed\.ts/],
  ['router: fan-out publish', /^src\/router\/(fair-publishes|dedupe)\.ts/],
  ['router: read, check, match', /^src\/router\/|^src\/domain\/(catalogue|event-data|webhook-id|ordering-key)\.ts|^src\/endpoints\/directory\.ts/],
  ['erasure index', /^src\/erasure\/|erasure-index\.ts$/],
  ['delivery log', /^src\/deliverylog\/|attempt-log\.ts$/],
  ['delivery: stored-ack records, router floor, recent acks', /^src\/delivery\/(stored-acks|router-floor|recent-acks)\.ts/],
  ['delivery: sign', /^src\/delivery\/sign-request\.ts|^src\/domain\/signature\.ts/],
  ['delivery: HTTP', /^src\/delivery\/(http-sender|target-policy)\.ts/],
  ['delivery: pull, parse', /^src\/nats\/(pull-feed|pulled-msg)\.ts|^src\/delivery\/(pull-loop|concurrency|in-flight)\.ts/],
  ['delivery: attempt (prepare, outcome, health)', /^src\/delivery\//],
  ['metrics, logs', /^src\/(metrics|log)\.ts/],
  ['projections, Postgres', /^projections\/|^src\/db\//],
  ['acked publishes: their replies (router, ROUTED, logs)', /^src\/nats\/(acked-publisher|replies)\.ts/],
];

/** Samples with no project frame that names a part: by the module working (see `owner`). */
function unattributed(mod: string): string {
  if (mod === '(garbage collector)') return 'GC (main thread)';
  if (mod === '(program)' || mod === '(native)') return 'V8 / native, no JS frame';
  if (mod.startsWith('@nats-io/') || mod === 'src/nats/connect.ts') return 'NATS client: socket I/O and protocol, router and delivery alike';
  if (mod === 'undici') return 'HTTP client (undici) on its own callbacks';
  if (mod.startsWith('wasm://')) return 'libsodium (wasm)';
  if (mod.startsWith('node:')) return 'Node internals (sockets, timers, microtasks)';
  return `other: ${mod}`;
}

interface Tally {
  totalUs: number;
  idleUs: number;
  byModule: Map<string, number>;
  byPart: Map<string, number>;
  /** Part → `module function` → self time. */
  inPart: Map<string, Map<string, number>>;
}

function tally(profiles: CpuProfile[]): Tally {
  const t: Tally = { totalUs: 0, idleUs: 0, byModule: new Map(), byPart: new Map(), inPart: new Map() };
  const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us);
  for (const p of profiles) {
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    const partOf = new Map<number, string>();
    /** The module working when `id` has no part: the innermost package's on its stack, else a Node internal, else V8's entry. */
    const owner = (id: number): string => {
      let internal: string | undefined;
      for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
        const f = byId.get(at)!.callFrame;
        if (!f.url) {
          if (f.functionName === '(root)') break;
          if (f.functionName.startsWith('(')) return f.functionName;
          continue;
        }
        const mod = moduleOf(f);
        if (!mod.startsWith('node:')) return mod;
        internal ??= mod;
      }
      return internal ?? '(native)';
    };
    const part = (id: number): string => {
      const known = partOf.get(id);
      if (known) return known;
      let found: string | undefined;
      for (let at: number | undefined = id; at !== undefined && !found; at = parent.get(at)) {
        const f = byId.get(at)!.callFrame;
        const file = moduleOf(f);
        found = PARTS.find(([, re, fn]) => re.test(file) && (!fn || fn.test(f.functionName)))?.[0];
      }
      const result = found ?? unattributed(owner(id));
      partOf.set(id, result);
      return result;
    };
    // timeDeltas[i] is the time before sample i; the time of sample i is the next delta.
    for (let i = 0; i < p.samples.length; i++) {
      const us = p.timeDeltas[i + 1] ?? 0;
      const node = byId.get(p.samples[i]!)!;
      const mod = moduleOf(node.callFrame);
      t.totalUs += us;
      if (mod === '(idle)') { t.idleUs += us; continue; }
      add(t.byModule, mod, us);
      const where = part(node.id);
      add(t.byPart, where, us);
      if (!t.inPart.has(where)) t.inPart.set(where, new Map());
      add(t.inPart.get(where)!, `${mod} ${node.callFrame.functionName || '(anonymous)'}`, us);
    }
  }
  return t;
}

/** nats-server's work, by the first rule one of a sample's frames matches (Go function names). */
const SERVER_PARTS: [part: string, frame: RegExp][] = [
  ['profiling itself (block profile events)', /runtime\.(saveblockevent|blockevent)/],
  ['consumer state files (written after acks)', /consumerFileStore\)\.(flushLoop|writeState)/],
  ['store: removing acked work-queue messages', /\(\*fileStore\)\.(removeMsg|RemoveMsg|deleteMsg)|\(\*stream\)\.ackMsg/],
  ['store: writing messages', /\(\*fileStore\)\.|\(\*msgBlock\)\./],
  ['acks: processing', /processInboundAcks|processAckMsg|\(\*consumer\)\.processAck|processNak/],
  ['consumers: pull requests, finding and sending messages', /\(\*consumer\)\.|signalConsumers/],
  ['streams: taking publishes (dedupe, limits, publish acks)', /\(\*stream\)\.process(Inbound)?JetStreamMsg/],
  ['JetStream API (info, direct get, consumer create)', /apiDispatch|\.js[A-Z]\w+Request|DirectGet|processDirect/],
  ['connections: reading, parsing, routing', /\(\*client\)\.readLoop/],
  ['connections: writing', /\(\*client\)\.(writeLoop|flushOutbound|flushClients)/],
  ['Go GC', /gcBgMarkWorker|gcDrain|markroot|bgsweep|bgscavenge|gcStart/],
  ['Go scheduler, timers, syscalls elsewhere', /./],
];

/** Samples (µs) by SERVER_PARTS, from `go tool pprof -traces`. */
function serverTally(files: string[]): Map<string, number> {
  const by = new Map<string, number>();
  const unit: Record<string, number> = { ns: 1e-3, us: 1, µs: 1, ms: 1e3, s: 1e6 };
  for (const file of files) {
    const text = execFileSync('go', ['tool', 'pprof', '-traces', file], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024, stdio: ['ignore', 'pipe', 'ignore'] });
    for (const block of text.split(/^-+\+-+$/m).slice(1)) {
      // 2.10 and later put pprof labels (stream, consumer) before the sample's value and first frame.
      const lines = block.split('\n').map((l) => l.trim()).filter(Boolean);
      const at = lines.findIndex((l) => /^[\d.]+(ns|us|µs|ms|s)\s/.test(l));
      const m = /^([\d.]+)(ns|us|µs|ms|s)\s+(.*)$/.exec(lines[at] ?? '');
      if (!m) continue;
      const frames = [m[3]!, ...lines.slice(at + 1)];
      const part = SERVER_PARTS.find(([, re]) => frames.some((f) => re.test(f)))![0];
      by.set(part, (by.get(part) ?? 0) + Number(m[1]) * unit[m[2]!]!);
    }
  }
  return by;
}

function serverMain(files: string[]): void {
  const by = serverTally(files);
  const total = [...by.values()].reduce((a, b) => a + b, 0);
  const factsFiles = files.map((f) => f.replace(/\.nats\.pprof$/, '.json'));
  const facts = factsFiles.every(existsSync) ? factsFiles.map((f) => JSON.parse(readFileSync(f, 'utf8')) as PhaseFacts) : undefined;
  const deliveries = facts?.reduce((s, f) => s + f.deliveries, 0);
  const perDelivery = deliveries ? (facts!.reduce((s, f) => s + f.nats_cpu_s, 0) * 1e6) / deliveries : undefined;
  const out = perDelivery ? [`nats-server CPU (/proc) ${perDelivery.toFixed(0)} µs per delivery (${deliveries} deliveries)`] : [];
  out.push('', '| nats-server | per delivery | share |', '|---|---|---|');
  for (const [k, us] of [...by].sort((a, b) => b[1] - a[1])) {
    out.push(`| ${k} | ${perDelivery ? `${((us / total) * perDelivery).toFixed(0)} µs` : `${(us / 1000).toFixed(0)} ms`} | ${((us / total) * 100).toFixed(1)} % |`);
  }
  process.stdout.write(out.join('\n') + '\n');
}

interface HeapNode { callFrame: CallFrame; selfSize: number; children?: HeapNode[] }

/**
 * Bytes allocated (`BENCH_HEAP_SAMPLING=1` beside --phase-prof: V8's sampling heap profiler, objects GC
 * collected included) by the part of the delivery path the allocating stack works for, as for CPU samples.
 */
function heapMain(files: string[]): void {
  const by = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapNode, stack: CallFrame[]): void => {
    const frames = [n.callFrame, ...stack];
    if (n.selfSize > 0) {
      total += n.selfSize;
      let part: string | undefined;
      for (const f of frames) if ((part = PARTS.find(([, re, fn]) => re.test(moduleOf(f)) && (!fn || fn.test(f.functionName)))?.[0])) break;
      const owner = frames.map(moduleOf).find((m) => !m.startsWith('node:') && !m.startsWith('(')) ?? moduleOf(n.callFrame);
      const k = part ?? unattributed(owner);
      by.set(k, (by.get(k) ?? 0) + n.selfSize);
    }
    for (const c of n.children ?? []) walk(c, frames);
  };
  for (const f of files) walk((JSON.parse(readFileSync(f, 'utf8')) as { head: HeapNode }).head, []);
  const factsFiles = files.map((f) => f.replace(/\.heapprofile$/, '.json'));
  const deliveries = factsFiles.every(existsSync) ? factsFiles.reduce((n, f) => n + (JSON.parse(readFileSync(f, 'utf8')) as PhaseFacts).deliveries, 0) : 0;
  const per = (b: number) => (deliveries ? `${(b / deliveries / 1024).toFixed(1)} KB` : `${(b / 1e6).toFixed(1)} MB`);
  const out = [`allocated ${(total / 1e6).toFixed(0)} MB${deliveries ? `, ${per(total)} per delivery (${deliveries} deliveries)` : ''}`, ''];
  out.push('| part of the delivery path | allocated per delivery | share |', '|---|---|---|');
  for (const [k, b] of [...by].sort((a, b2) => b2[1] - a[1])) out.push(`| ${k} | ${per(b)} | ${((b / total) * 100).toFixed(1)} % |`);
  process.stdout.write(out.join('\n') + '\n');
}

function main(): void {
  const args = process.argv.slice(2);
  const topAt = args.indexOf('--top');
  const top = topAt >= 0 ? Number(args[topAt + 1]) : 25;
  const pprofs = args.filter((a) => a.endsWith('.pprof'));
  if (pprofs.length > 0) return serverMain(pprofs);
  const heaps = args.filter((a) => a.endsWith('.heapprofile'));
  if (heaps.length > 0) return heapMain(heaps);
  const files = args.filter((a, i) => a.endsWith('.cpuprofile') && (topAt < 0 || i !== topAt + 1));
  if (files.length === 0) {
    process.stderr.write('usage: node bench/profile-table.ts FILE.cpuprofile [...] [--top N] | FILE.pprof [...]\n');
    process.exit(2);
  }
  const t = tally(files.map((f) => JSON.parse(readFileSync(f, 'utf8')) as CpuProfile));
  const factsFiles = files.map((f) => f.replace(/(\.\d+)?\.cpuprofile$/, '.json'));
  const facts = factsFiles.every(existsSync)
    ? [...new Set(factsFiles)].map((f) => JSON.parse(readFileSync(f, 'utf8')) as PhaseFacts)
    : undefined;
  const deliveries = facts?.reduce((s, f) => s + f.deliveries, 0);
  const busyUs = t.totalUs - t.idleUs;
  const sum = (k: 'service_cpu_s' | 'nats_cpu_s' | 'seconds') => facts?.reduce((s, f) => s + f[k], 0) ?? 0;
  // µs of the service's CPU per delivery, by share of the sampled busy time; without facts, ms of samples.
  const cpuPerDelivery = deliveries ? (sum('service_cpu_s') * 1e6) / deliveries : undefined;
  const per = (us: number) => (cpuPerDelivery ? `${((us / busyUs) * cpuPerDelivery).toFixed(0)} µs` : `${(us / 1000).toFixed(0)} ms`);
  const pct = (us: number) => `${((us / busyUs) * 100).toFixed(1)} %`;
  const out: string[] = [];
  if (facts && deliveries && cpuPerDelivery) {
    out.push(`${facts.map((f) => f.phase).join(', ')}: ${deliveries} deliveries in ${sum('seconds').toFixed(1)} s (${(deliveries / sum('seconds')).toFixed(0)}/s)`);
    out.push(`service CPU (/proc) ${cpuPerDelivery.toFixed(0)} µs per delivery; nats-server ${((sum('nats_cpu_s') * 1e6) / deliveries).toFixed(0)} µs`);
    out.push(`main thread sampled busy ${((busyUs / t.totalUs) * 100).toFixed(0)} % of the window`);
    const stored: Record<string, number> = {};
    for (const f of facts) for (const [k, v] of Object.entries(f.stored ?? {})) stored[k] = (stored[k] ?? 0) + v;
    out.push(`messages stored per delivery: ${Object.entries(stored).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${(v / deliveries).toFixed(2)}`).join(', ')}`);
  }
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  out.push('', '| part of the delivery path | per delivery | share | mostly in |', '|---|---|---|---|');
  for (const [k, us] of sorted(t.byPart)) {
    const mostly = sorted(t.inPart.get(k)!).slice(0, 3).map(([f, fus]) => `${f} ${((fus / us) * 100).toFixed(0)} %`).join('; ');
    out.push(`| ${k} | ${per(us)} | ${pct(us)} | ${mostly} |`);
  }
  out.push('', '| module (self time) | per delivery | share |', '|---|---|---|');
  for (const [k, us] of sorted(t.byModule).slice(0, top)) out.push(`| ${k} | ${per(us)} | ${pct(us)} |`);
  process.stdout.write(out.join('\n') + '\n');
}

main();
