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

/** Starts metering; the function returned gives each process's CPU since, in % of one core. */
export function cpuMeter(group: Group, receivers: Receivers): () => string {
  // With a cluster, nats is the sum of its nodes (each % of one core).
  const pids: [string, number[]][] = [
    ['service', group.service?.pids ?? []], ['nats', group.natsPids()], ['receivers', [receivers.child.pid!]], ['bench', [process.pid]],
  ];
  const t0 = performance.now();
  const before = pids.map(([, ps]) => cpuTicksOf(ps));
  return () => {
    const secs = (performance.now() - t0) / 1000;
    return pids.map(([name, ps], i) => `${name} ${ps.length ? fmt(((cpuTicksOf(ps) - before[i]!) / TICKS / secs) * 100, 0) : '?'}%`).join(', ');
  };
}
