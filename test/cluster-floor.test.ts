// HOOKSTREAM_REPLICAS > 1 needs nats-server 2.11 or newer on every server of the cluster (older ones can
// lose deliveries of replicated work-queue streams, src/nats/server-version.ts): a cluster with a 2.10
// server ends start-up at once with one line, also when the instance is connected to a newer server
// (the others are seen through its INFO's connect_urls). One server keeps 2.10 as its floor.
import test from 'ava';
import { startNatsCluster } from './helpers/nats-cluster.ts';
import { eventually } from './helpers/service.ts';
import { generateKeys, initSodium, instanceEnv, startServe } from './faults/harness.ts';
import { CLUSTER_PASSWORDS } from './helpers/nats-cluster.ts';
import { clusterFloorError } from '../src/nats/server-version.ts';
import { fetchStable } from '../src/local/nats-server.ts';

test('the decision: replicas above one refuse any server below 2.11, and only those', (t) => {
  const at = (version: string | undefined, name?: string) => ({ address: '127.0.0.1:4222', name, version });
  t.is(clusterFloorError(1, [at('2.10.27')]), undefined, 'one replica keeps 2.10');
  t.is(clusterFloorError(3, [at('2.11.0'), at('2.15.1'), at(undefined)]), undefined, 'new and unknown versions pass');
  const e = clusterFloorError(3, [at('2.15.1', 'n1'), at('2.10.27', 'n2'), at('2.9.10', 'n3')]);
  t.is(e?.name, 'ConfigError');
  t.is(e?.message, 'HOOKSTREAM_REPLICAS: 3 needs nats-server 2.11 or newer on every server of the cluster (older servers can lose '
    + 'deliveries of replicated streams): n2 runs 2.10.27, n3 runs 2.9.10; upgrade them, or set HOOKSTREAM_REPLICAS=1 on a single server');
});

test('a cluster with 2.10 servers: HOOKSTREAM_REPLICAS=3 ends start-up at once with one line naming them', async (t) => {
  t.timeout(120_000);
  await initSodium();
  // The first node runs the server under test, the others Debian stable's 2.10.27: the instance connects to
  // the first only, so on a newer server it must find the old ones through its INFO.
  const stable = fetchStable();
  const cluster = await startNatsCluster({ binaries: [undefined, stable, stable] });
  t.teardown(() => cluster.dispose());
  const s = startServe(instanceEnv({
    natsUrl: cluster.nodes[0]!.url, databaseUrl: 'postgres://postgres@127.0.0.1:1/unused', keys: generateKeys(),
    extra: { NATS_USER: 'service', NATS_PASSWORD: CLUSTER_PASSWORDS.service, HOOKSTREAM_REPLICAS: '3' },
  }));
  t.teardown(() => s.kill('SIGKILL'));
  await eventually(() => (s.exited ? true : undefined), 60_000, 'the process to exit');
  t.is(s.exitCode, 1, s.output);
  const said = s.output.split('\n').filter((l) => l.includes('hookstream serve:'));
  t.is(said.length, 1, s.output);
  t.regex(said[0]!, /HOOKSTREAM_REPLICAS: 3 needs nats-server 2\.11 or newer on every server of the cluster .*: .*n2 runs 2\.10\.27, n3 runs 2\.10\.27;/);
  t.false(s.output.includes('start-up is waiting'), 'not retried');
});
