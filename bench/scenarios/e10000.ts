// The e10000 group: 9,000 endpoints in tenants of ten and one tenant of 1,000. scale (first start and
// restart times, idle CPU and memory with 10,000 consumers) and fanout (one event to 1,000 endpoints).
import { plan, startGroup } from '../group.ts';
import { eventBody } from '../load.ts';
import { cpuTicks, cpuTicksOf, rssMb, TICKS } from '../metering.ts';
import type { Options, Size } from '../options.ts';
import { startServiceProcess, waitForCount, type Receivers } from '../processes.ts';
import { fmt, median, progress, round, row, type Figures } from '../report.ts';
import { sleep, wallNow } from '../time.ts';

export async function groupLarge(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
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
    const nPid = group.natsPids()[0];
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
    const m = median(times);
    figures['fanout_1000_ms'] = round(m, 1);
    row('fanout_1000_ms', fmt(m, 0), `median of ${times.map((t) => fmt(t, 0)).join(', ')} ms, 10,000 endpoints live (target ≤ 1000)`);
  }
  await group.service.stop();
}
