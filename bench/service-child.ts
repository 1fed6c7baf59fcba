// The service under benchmark, in its own process so its memory and CPU are its own: the configuration
// comes from the environment exactly as `npm start` reads it. Tells the parent over IPC when startService
// has resolved (every endpoint's consumer is created and its pull loop running), and stops gracefully
// on SIGTERM. On request it reports event-loop delay and GC pauses since the last reset (issue 13), so a
// latency figure can be read beside what stalled the process during its phase. With --phase-prof it also
// takes a V8 CPU profile of each measured phase (the inspector's Profiler, started and stopped over IPC).
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { monitorEventLoopDelay, PerformanceObserver, type EntryType, type PerformanceEntry } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { initSodium } from '../src/crypto/sodium.ts';
import { startService } from '../src/service.ts';

/** Event-loop delay (ms) and GC pauses of the service process over one phase. */
export interface LoopStats {
  /** Event-loop delay percentiles (perf_hooks histogram, 1 ms sampling). */
  eld_p50_ms: number;
  eld_p99_ms: number;
  eld_max_ms: number;
  gc_count: number;
  /** Sum of GC pauses in the phase, and as a share of its wall time. */
  gc_total_ms: number;
  gc_pct: number;
  gc_max_ms: number;
  /** Major (mark-compact) collections and their longest pause. */
  gc_major: number;
  gc_major_max_ms: number;
}

export type ServiceChildMessage =
  | { type: 'ready'; endpoints: number }
  | { type: 'failed'; error: string }
  | { type: 'stopped' }
  | { type: 'loop-stats'; id: number; stats: LoopStats }
  | { type: 'profile'; id: number; error?: string };

export type ServiceChildCommand =
  | { type: 'loop-reset' } | { type: 'loop-stats'; id: number }
  | { type: 'profile-start'; id: number } | { type: 'profile-stop'; id: number; file: string };

const send = (m: ServiceChildMessage) => process.send?.(m);

// Sampling every 1 ms is a timer per ms: on only between a phase's loop-reset and its loop-stats. Left on
// for the whole run it was most of the service's idle CPU in the scale phase (4-7 % of a core, 1.3 % without).
const eld = monitorEventLoopDelay({ resolution: 1 });
let since = performance.now();
const gc = { count: 0, total: 0, max: 0, major: 0, majorMax: 0 };
// NODE_PERFORMANCE_GC_MAJOR: mark-sweep-compact.
const GC_MAJOR = 4;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gc.count++;
    gc.total += e.duration;
    gc.max = Math.max(gc.max, e.duration);
    if ((e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === GC_MAJOR) {
      gc.major++;
      gc.majorMax = Math.max(gc.majorMax, e.duration);
    }
  }
}).observe({ entryTypes: ['gc' as EntryType] });

const ms = (ns: number) => Math.round(ns / 1e4) / 100;
const loopStats = (): LoopStats => {
  const wall = performance.now() - since;
  return {
    eld_p50_ms: ms(eld.percentile(50)), eld_p99_ms: ms(eld.percentile(99)), eld_max_ms: ms(eld.max),
    gc_count: gc.count, gc_total_ms: Math.round(gc.total * 10) / 10, gc_pct: Math.round((gc.total / wall) * 1000) / 10,
    gc_max_ms: Math.round(gc.max * 100) / 100, gc_major: gc.major, gc_major_max_ms: Math.round(gc.majorMax * 100) / 100,
  };
};
// One sample every 500 µs (V8 default: 1 ms): enough samples in a few seconds, little overhead.
const PROFILE_INTERVAL_US = 500;
let profiler: Session | undefined;
const heapSampling = process.env['BENCH_HEAP_SAMPLING'] === '1';
async function profile(m: ServiceChildCommand & { type: 'profile-start' | 'profile-stop' }): Promise<void> {
  if (m.type === 'profile-start') {
    profiler = new Session();
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.setSamplingInterval', { interval: PROFILE_INTERVAL_US });
    await profiler.post('Profiler.start');
    // BENCH_HEAP_SAMPLING=1: also what the phase allocated, by stack (objects GC collected included).
    if (heapSampling) await profiler.post('HeapProfiler.startSampling', { samplingInterval: 16384, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  } else if (profiler) {
    if (heapSampling) {
      const { profile: heap } = await profiler.post('HeapProfiler.stopSampling');
      writeFileSync(m.file.replace(/\.cpuprofile$/, '.heapprofile'), JSON.stringify(heap));
    }
    const { profile } = await profiler.post('Profiler.stop');
    profiler.disconnect();
    profiler = undefined;
    writeFileSync(m.file, JSON.stringify(profile));
  }
}

process.on('message', (m: ServiceChildCommand) => {
  if (m.type === 'profile-start' || m.type === 'profile-stop') {
    profile(m).then(() => send({ type: 'profile', id: m.id }), (e: unknown) => send({ type: 'profile', id: m.id, error: String(e) }));
    return;
  }
  if (m.type === 'loop-reset') {
    eld.reset();
    eld.enable();
    Object.assign(gc, { count: 0, total: 0, max: 0, major: 0, majorMax: 0 });
    since = performance.now();
  } else if (m.type === 'loop-stats') {
    send({ type: 'loop-stats', id: m.id, stats: loopStats() });
    eld.disable();
  }
});

try {
  await initSodium();
  const config = loadConfig(process.env);
  const log = createLogger({ level: config.logLevel });
  const service = await startService(config, log);
  send({ type: 'ready', endpoints: [...(service.directory?.all() ?? [])].length });
  const stop = async () => {
    await service.stop();
    send({ type: 'stopped' });
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
  process.on('disconnect', () => void stop());
} catch (e) {
  send({ type: 'failed', error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
  process.exit(1);
}
