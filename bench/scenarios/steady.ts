// The steady phases of the e100 group: events at a steady rate, each to one endpoint. latency (all
// endpoints healthy), the max_rate_1to1 sweep (rising rates until one is not held), and isolation (half
// of the endpoints black-holed, then answering 500), in that order.
import { jetstreamManager } from '@nats-io/jetstream';
import { ORG_EVENTS, type EndpointPlan, type Group } from '../group.ts';
import { publishSteady } from '../load.ts';
import { cpuMeter } from '../metering.ts';
import { phaseProfile } from '../phase-profile.ts';
import type { Options, Size } from '../options.ts';
import type { Receivers, ServiceProcess } from '../processes.ts';
import { percentile } from '../receivers.ts';
import { fmt, median, progress, round, row, type Figures } from '../report.ts';
import type { LoopStats } from '../service-child.ts';
import { sleep } from '../time.ts';

/**
 * Event i goes to tenant i%10 with the org event that exactly one endpoint there takes, so every
 * endpoint gets rate/100 events per second.
 */
export const steadySubject = (i: number) => `events.t${i % 10}.${ORG_EVENTS[Math.floor(i / 10) % 10]!}`;

export async function steadyScenarios(ctx: {
  group: Group; service: ServiceProcess; receivers: Receivers; endpoints: EndpointPlan[]; opts: Options; size: Size; figures: Figures;
}): Promise<void> {
  const { group, service, receivers, endpoints, opts, size, figures } = ctx;
  const healthyPorts = endpoints.map((e, i) => (i % 2 === 0 ? e.port : -1)).filter((p) => p >= 0);
  const badPorts = endpoints.map((e, i) => (i % 2 === 1 ? e.port : -1)).filter((p) => p >= 0);

  /** One steady phase: `rate` events/s, each to one endpoint, after a warm-up second. */
  const steadyOnce = async (phase: string, rate: number, seconds: number) => {
    await publishSteady(group.js, steadySubject, rate, 1, `${phase}-warm`);
    service.loopReset();
    // Profiled phases count every delivery answered in the window, also an earlier phase's (a backlog).
    const prof = opts.phaseProf ? await phaseProfile(opts.phaseProf, opts.natsProfPort, phase, seconds, service, group.natsPids(), () => receivers.count('*'), await jetstreamManager(group.nc)) : undefined;
    const meter = cpuMeter(group, receivers);
    const t0 = performance.now();
    const pub = await publishSteady(group.js, steadySubject, rate, seconds, phase);
    const achieved = pub.length / ((performance.now() - t0) / 1000);
    // CPU per event moves far less with the machine's other load than latency does.
    const cpu = meter(pub.length);
    await prof?.stop(rate);
    const loop = await service.loopStats();
    // Whatever has not arrived 1 s after the last publish is counted as late (the phase was not held).
    const until = performance.now() + 1000;
    while ((await receivers.count(phase)) < pub.length && performance.now() < until) await sleep(20);
    await sleep(100);
    pub.sort((a, b) => a - b);
    return { published: pub.length, achieved, cpu, publishP99: percentile(pub, 0.99), all: await receivers.stats(phase), healthy: await receivers.stats(phase, healthyPorts), loop };
  };
  type Steady = Awaited<ReturnType<typeof steadyOnce>>;
  // A service just started (JIT, connection pools, first pulls of 100 consumers) stalls for up to a second in
  // its first seconds of steady load; that is start-up, not the steady state these phases measure. Measured:
  // without this, the first repetition's p99 was 0.6-1.7 s in every run and the sweep's first step failed.
  let warm = false;
  const warmUp = async () => {
    if (warm) return;
    warm = true;
    progress(`warm-up: ${opts.rate} events/s for 5 s (not measured)`);
    await steadyOnce('warmup', opts.rate, 5);
  };
  /** `latencyReps` repetitions; each figure is the median over them (so one stall does not decide it). */
  const steady = async (phase: string) => {
    const reps: Steady[] = [];
    for (let r = 0; r < size.latencyReps; r++) reps.push(await steadyOnce(`${phase}${r}`, opts.rate, size.steadySeconds));
    const m = (f: (x: Steady) => number) => median(reps.map(f));
    return {
      reps,
      publishP99: m((x) => x.publishP99),
      all: { p50: m((x) => x.all.p50), p99: m((x) => x.all.p99), max: m((x) => x.all.max), count: m((x) => x.all.count) },
      healthy: { p99: m((x) => x.healthy.p99) },
      loop: Object.fromEntries(Object.keys(reps[0]!.loop).map((k) => [k, m((x) => x.loop[k as keyof LoopStats])])) as unknown as LoopStats,
    };
  };
  const loopNote = (l: LoopStats) => `event-loop delay p99 ${fmt(l.eld_p99_ms, 1)} max ${fmt(l.eld_max_ms, 1)} ms; gc ${l.gc_count}× ${fmt(l.gc_total_ms, 0)} ms (max ${fmt(l.gc_max_ms, 1)})`;

  let h: Awaited<ReturnType<typeof steady>> | undefined;
  if (opts.only.has('latency') || opts.only.has('isolation')) {
    await warmUp();
    progress(`latency: ${opts.rate} events/s for ${size.steadySeconds} s × ${size.latencyReps}, all endpoints healthy`);
    h = await steady('steady');
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
  }

  if (opts.only.has('maxrate')) {
    // The highest steady rate held: every delivery in, publish→receipt p99 ≤ 50 ms. Rising steps; the
    // sweep ends at the first step not held.
    const steps: { rate: number; achieved: number; p50: number; p99: number; late: number; held: boolean; cpu: string; loop: LoopStats }[] = [];
    let best = 0;
    await warmUp();
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

  // Last: its black-holed and failing endpoints leave retries scheduled for minutes, which would load
  // any phase after it (the sweep collapsed to p99 4.4 s at 1,000/s when it ran after this one).
  if (opts.only.has('isolation') && h) {
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
    // What the degraded phases cost, beside the healthy ones' latency_cpu and latency_loop.
    for (const [name, x] of [['hang', d], ['fail', f]] as const) {
      figures[`isolation_${name}_p99_reps_ms`] = x.reps.map((r) => round(r.healthy.p99));
      figures[`isolation_${name}_cpu_reps`] = x.reps.map((r) => r.cpu);
      row(`isolation_${name}`, '', `healthy p99 by rep ${x.reps.map((r) => fmt(r.healthy.p99, 1)).join(', ')} ms; ${loopNote(x.loop)}; cpu: ${x.reps.map((r) => r.cpu).join(' | ')}`);
    }
  }
}
