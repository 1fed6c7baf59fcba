// `npm run bench`: the whole delivery path measured on this machine, beside a ceiling measured in the
// same run (issue 5). Every group of scenarios gets its own nats-server (free port, temporary store) and
// its own Postgres database, so the bench never touches the machine's NATS or another database; the
// service runs as a child process (bench/service-child.ts) so its memory and CPU are its own; receivers
// run in another child (bench/receivers.ts) on many loopback ports; the producer and the ceiling loop
// run here. Progress and a table go to stderr; `--json` writes one JSON object to stdout.
//
// This file is the entry: options (options.ts), the groups (scenarios/; --cluster: scenarios/cluster.ts), the child processes
// (processes.ts), the load (load.ts), metering (metering.ts) and the report (report.ts).
import { cpus } from 'node:os';
import { loadConfig } from '../src/config.ts';
import { initSodium } from '../src/crypto/sodium.ts';
import { parseOptions, SIZES, USAGE, UsageError, type Options, type Scenario } from './options.ts';
import { cleanups, startReceivers } from './processes.ts';
import { fmt, KEYS, say, writeJson, type Figures } from './report.ts';
import { groupSmall } from './scenarios/e100.ts';
import { groupMedium } from './scenarios/e5000.ts';
import { groupLarge } from './scenarios/e10000.ts';
import { CLUSTER_KEYS, groupCluster } from './scenarios/cluster.ts';
import { NATS_VERSION } from '../test/helpers/nats-binary.ts';

async function main(): Promise<number> {
  let opts: Options;
  try {
    const o = parseOptions(process.argv.slice(2));
    if (o === 'help') { say(USAGE); return 0; }
    opts = o;
  } catch (e) {
    if (e instanceof UsageError) { say(`bench: ${e.message}\n\n${USAGE}`); return 2; }
    throw e;
  }
  const size = SIZES[opts.size];
  await initSodium();
  const natsVersion = `nats-server ${NATS_VERSION ?? 'unknown'}`;
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, ${natsVersion}`;
  say(`hookstream bench (${opts.size}): ${machine}`);
  const figures: Figures = Object.fromEntries([...KEYS, ...(opts.cluster ? CLUSTER_KEYS : [])].map((k) => [k, null]));
  const started = performance.now();
  const receivers = await startReceivers(opts.ports);
  cleanups.push(async () => { await receivers.call({ cmd: 'stop' }).catch(() => {}); });
  try {
    if (['throughput', 'ordered', 'one', 'maxrate', 'latency', 'isolation'].some((s) => opts.only.has(s as Scenario))) await groupSmall(opts, size, receivers, figures);
    // Right after the one-node throughput_100 rounds, so the two are measured close together.
    if (opts.cluster) await groupCluster(opts, size, receivers, figures);
    if (opts.only.has('throughput')) await groupMedium(opts, size, receivers, figures);
    if (opts.only.has('scale') || opts.only.has('fanout')) await groupLarge(opts, size, receivers, figures);
  } finally {
    for (const c of cleanups.splice(0)) await c().catch((e: unknown) => say(`cleanup: ${e instanceof Error ? e.message : String(e)}`));
  }
  const seconds = (performance.now() - started) / 1000;
  say(`done in ${fmt(seconds, 0)} s`);
  if (opts.json) {
    const shards = loadConfig({ ...process.env, HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1' }).deliveryShards;
    writeJson(figures, { size: opts.size, split: opts.split, machine, seconds, shards });
  }
  return 0;
}

process.once('SIGINT', () => {
  say('interrupted; cleaning up');
  void Promise.allSettled(cleanups.splice(0).map((c) => c())).then(() => process.exit(130));
});

main().then((code) => process.exit(code), (e: unknown) => {
  say(`bench failed: ${e instanceof Error ? e.message : String(e)}`);
  void Promise.allSettled(cleanups.splice(0).map((c) => c())).then(() => process.exit(1));
});
