// The e5000 group: 5,000 endpoints on 500 tenants, throughput_5000 beside the ceiling in alternating rounds.
import { plan, startGroup } from '../group.ts';
import { ceiling, interleaved, throughputRun } from '../load.ts';
import type { Options, Size } from '../options.ts';
import { startServiceProcess, type Receivers } from '../processes.ts';
import { fmt, progress, round, row, type Figures } from '../report.ts';

export async function groupMedium(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
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
