// Three nats-servers forming a JetStream cluster on loopback: free ports, private store directories, and
// one generated config per node that includes a copy of the project's nats.conf (its accounts and users)
// and adds the cluster block. Nodes can be killed (SIGKILL) and started again on the same ports and store.
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitForPort } from './nats-server.ts';
import { NATS_CONF, natsConfPasswords } from './nats-conf.ts';
import { belowFloor, CLUSTER_FLOOR } from '../../src/nats/server-version.ts';

import { NATS_BINARY as BINARY, NATS_VERSION } from './nats-binary.ts';

/** The version of the nats-server the clusters run (`2.10.27`). */
export const CLUSTER_SERVER_VERSION = NATS_VERSION;
/** Whether hookstream runs with replicas on it (src/nats/server-version.ts refuses older servers). */
export const REPLICAS_SUPPORTED = !belowFloor(CLUSTER_SERVER_VERSION, CLUSTER_FLOOR);

/** Fresh passwords for every variable nats.conf names, given to the nodes' environment. */
const passwords = natsConfPasswords();
/** The passwords of nats.conf's users, to log in to the cluster with. */
export const CLUSTER_PASSWORDS = {
  service: passwords.user('service'),
  publisher: passwords.user('publisher'),
  operator: passwords.user('operator'),
  opsReader: passwords.user('ops_reader'),
} as const;

export interface ClusterNode {
  name: string;
  port: number;
  url: string;
  /** Monitoring port (/jsz, /varz, /healthz). */
  httpPort: number;
  storeDir: string;
  /** The node's log (every run of it, appended), kept until dispose. */
  logPath: string;
  readonly running: boolean;
  /** The running process's id (for CPU metering), undefined while stopped. */
  readonly pid: number | undefined;
  start(): Promise<void>;
  /** SIGKILL: no shutdown, as a crashed machine. */
  kill(): Promise<void>;
  /** SIGTERM, waiting for the exit. */
  stop(): Promise<void>;
}

export interface NatsCluster {
  nodes: ClusterNode[];
  /** Every node's client URL, comma-separated, as NATS_URL takes them. */
  url: string;
  /** Name of the JetStream meta leader, asked of any running node's monitoring port. */
  metaLeader(): Promise<string | undefined>;
  node(name: string): ClusterNode;
  /**
   * Wait until every running node reports the same meta leader, and that leader counts every other running
   * node as a current peer.
   */
  waitForMetaLeader(timeoutMs?: number): Promise<string>;
  dispose(): Promise<void>;
}

type ClusterOptions = { size?: number; name?: string; binaries?: readonly (string | undefined)[] };

/**
 * `binaries`: a nats-server binary per node (the suite's, NATS_BINARY, for the ones not given), for mixed
 * clusters. A cluster that elects no meta leader at its start is started once more on other ports (a free
 * port can be taken by another process before a node binds it; CI saw one such start), with what its
 * nodes logged written to stderr.
 */
export async function startNatsCluster(opts: ClusterOptions = {}): Promise<NatsCluster> {
  try {
    return await startNatsClusterOnce(opts);
  } catch (e) {
    process.stderr.write(`nats cluster did not start; starting it again on other ports: ${e instanceof Error ? e.message : String(e)}\n`);
    return startNatsClusterOnce(opts);
  }
}

async function startNatsClusterOnce(opts: ClusterOptions): Promise<NatsCluster> {
  const size = opts.size ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'hookstream-cluster-'));
  // nats-server joins an include's path to the including file's directory: the copy sits beside the configs.
  copyFileSync(NATS_CONF, join(dir, 'nats.conf'));
  const ports = await Promise.all(Array.from({ length: size }, async () => ({ client: await freePort(), route: await freePort(), http: await freePort() })));
  const routes = ports.map((p) => `"nats-route://127.0.0.1:${p.route}"`).join(', ');
  const env = { ...process.env, ...passwords.env };
  const nodes: ClusterNode[] = ports.map((p, i) => {
    const name = `n${i + 1}`;
    const storeDir = join(dir, name);
    mkdirSync(storeDir);
    const conf = join(dir, `${name}.conf`);
    const logPath = join(dir, `${name}.log`);
    writeFileSync(conf, [
      'include nats.conf',
      `server_name: ${name}`,
      `listen: "127.0.0.1:${p.client}"`,
      `http: "127.0.0.1:${p.http}"`,
      `jetstream { store_dir: "${storeDir}" }`,
      `cluster { name: ${opts.name ?? 'hookstream'}, listen: "127.0.0.1:${p.route}", routes: [${routes}] }`,
      '',
    ].join('\n'));
    let proc: ChildProcess | undefined;
    const node: ClusterNode = {
      name, port: p.client, url: `nats://127.0.0.1:${p.client}`, httpPort: p.http, storeDir, logPath,
      get running() { return proc !== undefined && proc.exitCode === null && proc.signalCode === null; },
      get pid() { return node.running ? proc?.pid : undefined; },
      async start() {
        if (node.running) return;
        const out = openSync(logPath, 'a');
        proc = spawn(opts.binaries?.[i] ?? BINARY, ['-c', conf], { stdio: ['ignore', out, out], env });
        closeSync(out);
        await waitForPort(p.client, 10_000);
      },
      async kill() {
        const q = proc;
        proc = undefined;
        if (!q || q.exitCode !== null || q.signalCode !== null) return;
        await new Promise<void>((r) => { q.once('exit', () => r()); q.kill('SIGKILL'); });
      },
      async stop() {
        const q = proc;
        proc = undefined;
        if (!q || q.exitCode !== null || q.signalCode !== null) return;
        await new Promise<void>((r) => { q.once('exit', () => r()); q.kill('SIGTERM'); });
      },
    };
    return node;
  });
  const onExit = () => { for (const n of nodes) void n.kill(); };
  process.once('exit', onExit);

  type Jsz = { meta_cluster?: { leader?: string; replicas?: { name: string; current: boolean }[] } };
  const jsz = async (n: ClusterNode): Promise<Jsz | undefined> => {
    try {
      const res = await fetch(`http://127.0.0.1:${n.httpPort}/jsz`, { signal: AbortSignal.timeout(1000) });
      return (await res.json()) as Jsz;
    } catch {
      return undefined;
    }
  };
  const cluster: NatsCluster = {
    nodes,
    url: nodes.map((n) => n.url).join(','),
    node: (name) => nodes.find((n) => n.name === name) ?? (() => { throw new Error(`no node ${name}`); })(),
    async metaLeader() {
      for (const n of nodes.filter((x) => x.running)) {
        const leader = (await jsz(n))?.meta_cluster?.leader;
        if (leader) return leader;
      }
      return undefined;
    },
    async waitForMetaLeader(timeoutMs = 20_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const running = nodes.filter((x) => x.running);
        const metas = await Promise.all(running.map(async (n) => (await jsz(n))?.meta_cluster));
        const seen = metas.map((m) => m?.leader);
        const leader = seen[0];
        // A leader that has not yet counted a node as its peer can shrink a new cluster's size when that
        // node stops (nats-server's checkClusterSize; a test's cluster then refused three replicas for a minute).
        const peers = metas[running.findIndex((n) => n.name === leader)]?.replicas ?? [];
        const counted = running.every((n) => n.name === leader || peers.some((p) => p.name === n.name && p.current));
        if (leader && seen.every((l) => l === leader) && counted) return leader;
        if (Date.now() > until) throw new Error(`no JetStream meta leader within ${timeoutMs} ms (seen ${JSON.stringify(seen)})`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async dispose() {
      process.removeListener('exit', onExit);
      await Promise.all(nodes.map((n) => n.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await Promise.all(nodes.map((n) => n.start()));
    await cluster.waitForMetaLeader();
  } catch (e) {
    const logs = nodes.map((n) => `${n.name} (${n.running ? 'running' : 'not running'}): ${existsSync(n.logPath) ? readFileSync(n.logPath, 'utf8').slice(-1500) : 'no log'}`);
    await cluster.dispose();
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${logs.join('\n')}`, { cause: e });
  }
  return cluster;
}
