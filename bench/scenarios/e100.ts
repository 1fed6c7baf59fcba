// The e100 group: 100 endpoints on 10 tenants (plus 100 v1a and 100 paired endpoints when their scenarios
// run) and one service process for all of its scenarios: throughput_100 and its v1a share, the
// one-endpoint case (throughput_1to1, throughput_2), then the steady phases (scenarios/steady.ts).
import { ORG_EVENTS, plan, startGroup, type EndpointPlan } from '../group.ts';
import { ceiling, interleaved, throughputRun } from '../load.ts';
import type { Options, Size } from '../options.ts';
import { startServiceProcess, type Receivers } from '../processes.ts';
import { fmt, median, progress, round, row, type Figures } from '../report.ts';
import { steadyScenarios, steadySubject } from './steady.ts';
import { orderedScenarios } from './ordered.ts';

export async function groupSmall(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
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
  // Issue 21: 100 endpoints ordered per key (tenants o0..o9), for throughput_ordered_100 (scenarios/ordered.ts).
  const orderedEndpoints = opts.only.has('ordered')
    ? plan(10, 10, receivers.ports, 'o', endpoints.length + v1aEndpoints.length + pairEndpoints.length).map((e): EndpointPlan => ({ ...e, ordering: 'key' }))
    : [];
  const group = await startGroup('e100', opts, [...endpoints, ...v1aEndpoints, ...pairEndpoints, ...orderedEndpoints]);
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
    const v1a = median(rates);
    figures['throughput_100_v1a'] = round(v1a, 0);
    figures['ratio_100_v1a'] = round(v1a / m.ceiling, 3);
    row('throughput_100_v1a', `${fmt(v1a, 0)}/s`, `v1a (ed25519) endpoints, median of ${rates.map((x) => fmt(x, 0)).join(', ')}; v1: ${fmt(m.throughput, 0)}/s`);
    row('ratio_100_v1a', fmt(v1a / m.ceiling, 2), 'to the v1 ceiling above');
  }

  const service = group.service;

  if (opts.only.has('ordered')) await orderedScenarios(group, receivers, size, figures, opts.phaseProf);

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
    row('ratio_1to1', fmt(m.ratio, 2), `median of rounds ${m.detail} (target ≥ 0.45); service gc ${fmt(loop.gc_pct)}% of the time`);
    const pairSubject = (i: number) => `events.d${i % 10}.${ORG_EVENTS[Math.floor(i / 10) % 5]!}`;
    await throughputRun(group, receivers, 2000, 'warm2', 10, 2, 'd', pairSubject);
    const rates: number[] = [];
    for (let r = 0; r < size.rounds; r++) {
      rates.push((await throughputRun(group, receivers, Math.ceil(size.deliveries100 / size.rounds), `tp2-${r}`, 10, 2, 'd', pairSubject)).rate);
    }
    const two = median(rates);
    figures['throughput_2'] = round(two, 0);
    figures['ratio_2'] = round(two / m.ceiling, 3);
    row('throughput_2', `${fmt(two, 0)}/s`, `deliveries/s, each event to 2 endpoints; median of ${rates.map((x) => fmt(x, 0)).join(', ')}; ratio ${fmt(two / m.ceiling, 2)}`);
  }

  await steadyScenarios({ group, service, receivers, endpoints, opts, size, figures });
  await service.stop();
}
