// What the bench says: progress and the table on stderr, and with --json one object on stdout whose
// keys (KEYS first, null when a scenario did not run) scripts compare from run to run.
import { percentile } from './receivers.ts';

export type Figures = Record<string, number | string | null | object>;

/** The headline figures, always present in the JSON (null when their scenario did not run). */
export const KEYS = [
  'throughput_1to1', 'ratio_1to1', 'throughput_2', 'max_rate_1to1',
  'throughput_100', 'throughput_100_v1a', 'throughput_ordered_100', 'ratio_ordered_100', 'ratio_ordered_failing_key', 'throughput_5000', 'ceiling', 'ratio_100', 'ratio_100_v1a', 'ratio_5000', 'latency_p50_ms', 'latency_p99_ms',
  'publish_p99_ms_healthy', 'publish_p99_ms_degraded', 'publish_isolation_ratio', 'endpoint_isolation_ratio',
  'fanout_1000_ms', 'startup_10000_s', 'rss_10000_mb', 'idle_cpu_10000_pct',
] as const;

export const say = (line: string) => process.stderr.write(line + '\n');
export const progress = (line: string) => say(`  … ${line}`);
/** One line of the table. */
export function row(figure: string, value: string, note = '') {
  say(`  ${figure.padEnd(28)} ${value.padStart(12)}  ${note}`);
}
export const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : String(n));
export const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;
export const median = (xs: readonly number[]) => percentile([...xs].sort((a, b) => a - b), 0.5);

export function writeJson(figures: Figures, run: { size: string; split: boolean; machine: string; seconds: number; shards: number }): void {
  process.stdout.write(JSON.stringify({
    ...figures, size: run.size, split: run.split, machine: run.machine, duration_s: round(run.seconds, 0), shards: run.shards,
  }) + '\n');
}
