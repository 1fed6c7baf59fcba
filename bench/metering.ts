// CPU and memory of the processes in a run, read from /proc: where the time of a scenario went.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
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

/** The machine's CPU ticks from /proc/stat, all cores: busy (everything but idle and iowait) and stolen by the hypervisor. */
function machineTicks(): { busy: number; steal: number; all: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = f as [number, number, number, number, number, number, number, number];
  return { busy: user + nice + system + irq + softirq, steal, all: user + nice + system + idle + iowait + irq + softirq + steal };
}

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
  const machine0 = machineTicks();
  return (deliveries) => {
    const secs = (performance.now() - t0) / 1000;
    const used = pids.map(([, ps], i) => (ps.length ? (cpuTicksOf(ps) - before[i]!) / TICKS : NaN));
    // The whole machine too (kernel work on their behalf and other processes included), in % of one core
    // like the rest: a phase whose machine figure is near cores × 100 % was limited by the machine.
    const m = machineTicks();
    const cores = availableParallelism();
    const share = (ticks: number) => fmt((ticks / (m.all - machine0.all)) * cores * 100, 0);
    const shares = [...pids.map(([name], i) => `${name} ${Number.isNaN(used[i]) ? '?' : fmt((used[i]! / secs) * 100, 0)}%`),
      `machine ${share(m.busy - machine0.busy)}% of ${cores * 100}% (steal ${share(m.steal - machine0.steal)}%)`].join(', ');
    if (!deliveries) return shares;
    return `${shares}; per delivery service ${fmt((used[0]! / deliveries) * 1e6, 0)} µs, nats ${fmt((used[1]! / deliveries) * 1e6, 0)} µs`;
  };
}
