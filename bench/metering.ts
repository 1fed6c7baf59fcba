// CPU and memory of the processes in a run, read from /proc: where the time of a scenario went.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Group } from './group.ts';
import type { Receivers } from './processes.ts';
import { fmt } from './report.ts';

export const TICKS = (() => { try { return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100; } catch { return 100; } })();

export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime, stime
}

export const cpuTicksOf = (pids: number[]) => pids.reduce((sum, pid) => sum + cpuTicks(pid), 0);

export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/**
 * Starts metering; the function returned gives each process's CPU since, in % of one core, and with
 * `deliveries` also the service's and nats-server's CPU per delivery (µs): the figure to compare between
 * runs on a loaded machine, where rates and latencies move far more.
 */
export function cpuMeter(group: Group, receivers: Receivers): (deliveries?: number) => string {
  // With a cluster, nats is the sum of its nodes (each % of one core).
  const pids: [string, number[]][] = [
    ['service', group.service?.pids ?? []], ['nats', group.natsPids()], ['receivers', [receivers.child.pid!]], ['bench', [process.pid]],
  ];
  const t0 = performance.now();
  const before = pids.map(([, ps]) => cpuTicksOf(ps));
  return (deliveries) => {
    const secs = (performance.now() - t0) / 1000;
    const used = pids.map(([, ps], i) => (ps.length ? (cpuTicksOf(ps) - before[i]!) / TICKS : NaN));
    const shares = pids.map(([name], i) => `${name} ${Number.isNaN(used[i]) ? '?' : fmt((used[i]! / secs) * 100, 0)}%`).join(', ');
    if (!deliveries) return shares;
    return `${shares}; per delivery service ${fmt((used[0]! / deliveries) * 1e6, 0)} µs, nats ${fmt((used[1]! / deliveries) * 1e6, 0)} µs`;
  };
}
