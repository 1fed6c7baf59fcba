// --cluster (issue 9): the throughput_100 rounds again, against a three-node nats-server cluster on
// loopback with HOOKSTREAM_REPLICAS=3, so a run reports what replication costs beside the one-node
// figures. The nodes run the project's nats.conf (test/helpers/nats-cluster.ts): the service logs in as
// `service`, the producer as `publisher` from the PRODUCERS account, as in a deployment.
import { CLUSTER_PASSWORDS, CLUSTER_SERVER_VERSION, REPLICAS_SUPPORTED, startNatsCluster } from '../../test/helpers/nats-cluster.ts';
import { plan, startGroup } from '../group.ts';
import { ceiling, interleaved, throughputRun } from '../load.ts';
import type { Options, Size } from '../options.ts';
import { cleanups, startServiceProcess, type Receivers } from '../processes.ts';
import { fmt, progress, round, row, say, type Figures } from '../report.ts';

/** In the JSON with --cluster (null when the group fails), beside KEYS. */
export const CLUSTER_KEYS = ['throughput_100_r3', 'ratio_100_r3'] as const;

export async function groupCluster(opts: Options, size: Size, receivers: Receivers, figures: Figures): Promise<void> {
  // hookstream refuses replicas on nats-server below 2.11 (src/nats/server-version.ts).
  if (!REPLICAS_SUPPORTED) { say(`r3: skipped, nats-server ${CLUSTER_SERVER_VERSION ?? '?'} is below 2.11 (HOOKSTREAM_REPLICAS=3 needs 2.11)`); return; }
  progress('r3: starting a three-node nats-server cluster');
  const cluster = await startNatsCluster({ name: 'bench' });
  cleanups.push(async () => {
    if (opts.keep) {
      await Promise.all(cluster.nodes.map((n) => n.stop()));
      say(`kept r3: NATS stores ${cluster.nodes.map((n) => n.storeDir).join(', ')}`);
      return;
    }
    await cluster.dispose();
  });
  const endpoints = plan(10, 10, receivers.ports, 't');
  const group = await startGroup('r3', opts, endpoints, {
    url: cluster.url,
    service: { user: 'service', password: CLUSTER_PASSWORDS.service },
    producer: { user: 'publisher', password: CLUSTER_PASSWORDS.publisher },
    env: { HOOKSTREAM_REPLICAS: '3' },
    pids: () => cluster.nodes.map((n) => n.pid).filter((p): p is number => p !== undefined),
  });
  group.service = await startServiceProcess(group, opts);
  progress(`r3: service ready in ${fmt(group.service.readyMs / 1000)} s`);
  progress('r3: warming up the ceiling loop and the service');
  await ceiling(receivers, endpoints, 10_000, opts.ceilingConcurrency, 'cwarm100r3');
  await throughputRun(group, receivers, 5000, 'warm100r3', 10, 10);
  const m = await interleaved(group, receivers, endpoints, opts, size.deliveries100, size.rounds, 'tp100r3', 10, 10);
  figures['throughput_100_r3'] = round(m.throughput, 0);
  figures['ratio_100_r3'] = round(m.ratio, 3);
  figures['ceiling_100_r3'] = round(m.ceiling, 0);
  figures['cpu_throughput_100_r3'] = m.cpu;
  row('ceiling (r3 rounds)', `${fmt(m.ceiling, 0)}/s`, `cpu: ${m.cpuCeiling}`);
  row('throughput_100_r3', `${fmt(m.throughput, 0)}/s`, `three nodes, HOOKSTREAM_REPLICAS=3; cpu (nats: the three nodes): ${m.cpu}`);
  row('ratio_100_r3', fmt(m.ratio, 2), `median of rounds ${m.detail}`);
  await group.service.stop();
}
