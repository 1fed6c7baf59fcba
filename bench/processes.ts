// The bench's child processes and what to undo at exit: the receivers child (bench/receivers.ts, many
// loopback ports, driven over IPC) and the service under test (bench/service-child.ts, one process, or
// two with --split), whose readiness and event-loop figures also come over IPC. nats-server and the
// databases are started by the test helpers (test/helpers/), which tests and bench share.
import { fork, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import type { PhaseStats, PortMode, ReceiverCommand, ReceiverReply } from './receivers.ts';
import type { LoopStats, ServiceChildCommand, ServiceChildMessage } from './service-child.ts';
import { progress } from './report.ts';
import { sleep } from './time.ts';

/**
 * The node arguments `npm start` runs the service with (`bin/hookstream`'s `exec "$node" …` line, up to the
 * CLI's entry), so the bench measures the service as it is run: without them it ran with V8's
 * allocation-site pretenuring, which the service turns off for its GC (see bin/hookstream).
 */
export const SERVICE_NODE_FLAGS: string[] = (() => {
  const root = new URL('..', import.meta.url).pathname.replace(/\/$/, '');
  const script = readFileSync(new URL('../bin/hookstream', import.meta.url), 'utf8');
  const line = /^exec "\$node" (.*)$/m.exec(script)?.[1];
  if (!line) throw new Error('bench: bin/hookstream has no `exec "$node" …` line to take the service\'s node flags from');
  const words = line.split(/\s+/).map((w) => w.replace(/"/g, '').replace('$here/..', root));
  const entry = words.findIndex((w) => w.endsWith('/src/cli/main.ts'));
  return words.slice(0, entry);
})();

/**
 * Undone at exit, first to last, also on failure and SIGINT. Servers and databases go last (push), the
 * processes and connections using them first (unshift).
 */
export const cleanups: (() => Promise<void>)[] = [];

// ---------------------------------------------------------------------------------------------------
// Receivers child

export interface Receivers {
  ports: number[];
  call(m: DistributiveOmit<ReceiverCommand, 'id'>): Promise<ReceiverReply & { ok: true }>;
  stats(phase: string, ports?: number[]): Promise<PhaseStats>;
  count(phase: string): Promise<number>;
  mode(ports: number[], mode: PortMode): Promise<void>;
  child: ChildProcess;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export async function startReceivers(count: number): Promise<Receivers> {
  const child = fork(new URL('./receivers.ts', import.meta.url).pathname, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 1;
  const waiting = new Map<number, (r: ReceiverReply) => void>();
  child.on('message', (r: ReceiverReply) => { waiting.get(r.id)?.(r); waiting.delete(r.id); });
  const call = (m: DistributiveOmit<ReceiverCommand, 'id'>) => new Promise<ReceiverReply & { ok: true }>((resolve, reject) => {
    const id = next++;
    waiting.set(id, (r) => (r.ok ? resolve(r) : reject(new Error(`receivers: ${r.error}`))));
    child.send({ ...m, id } as ReceiverCommand);
  });
  const started = await call({ cmd: 'start', ports: count });
  return {
    ports: started.ports!, call, child,
    stats: async (phase, ports) => (await call(ports ? { cmd: 'stats', phase, ports } : { cmd: 'stats', phase })).stats!,
    count: async (phase) => (await call({ cmd: 'count', phase })).count!,
    mode: async (ports, mode) => { await call({ cmd: 'mode', ports, mode }); },
  };
}

export async function waitForCount(receivers: Receivers, phase: string, target: number, timeoutMs: number, label: string): Promise<PhaseStats> {
  const until = Date.now() + timeoutMs;
  let lastShown = 0;
  for (;;) {
    const n = await receivers.count(phase);
    if (n >= target) return receivers.stats(phase);
    if (Date.now() > until) throw new Error(`${label}: ${n} of ${target} deliveries arrived within ${timeoutMs / 1000} s`);
    if (Date.now() - lastShown > 2000 && !label.startsWith('fan')) { progress(`${label}: ${n}/${target}`); lastShown = Date.now(); }
    await sleep(target - n < 2000 ? 20 : 200);
  }
}

// ---------------------------------------------------------------------------------------------------
// The service under test

export interface ServiceProcess {
  /** One process, or two with --split (router+deadletter, delivery). */
  pids: number[];
  readyMs: number;
  /** Starts a new window of event-loop delay and GC figures in every service process. */
  loopReset(): void;
  /** Event-loop delay and GC pauses since loopReset (the worst process's, with --split). */
  loopStats(): Promise<LoopStats>;
  /** Starts a V8 CPU profile in every service process (--phase-prof). */
  profileStart(): Promise<void>;
  /** Stops it and writes `<prefix>.cpuprofile` (`<prefix>.<i>.cpuprofile` per process with --split). */
  profileStop(prefix: string): Promise<void>;
  stop(): Promise<void>;
}

/** What a service process needs of its group: a name for messages, its environment and its log file. */
export interface ServiceSetup {
  name: string;
  env: Record<string, string>;
  logFile: string;
}

export interface ServiceOptions {
  roles: string;
  split: boolean;
  cpuProf: string | undefined;
}

export async function startServiceProcess(group: ServiceSetup, opts: ServiceOptions, timeoutMs = 180_000): Promise<ServiceProcess> {
  const started = performance.now();
  const roleSets = opts.split
    ? [opts.roles.split(',').filter((r) => r !== 'delivery').join(','), 'delivery']
    : [opts.roles];
  const children = await Promise.all(roleSets.map((roles) => startChild(group, opts, roles, timeoutMs)));
  const readyMs = performance.now() - started;
  let nextId = 1;
  /** Sends `cmd` with a fresh id and resolves with the child's answer of `type` to that id. */
  const request = <T extends ServiceChildMessage>(c: ChildProcess, cmd: (id: number) => ServiceChildCommand, type: T['type'], timeoutMs: number) => new Promise<T>((resolve, reject) => {
    const id = nextId++;
    const timer = setTimeout(() => { c.off('message', on); reject(new Error(`service: no ${type} answer within ${timeoutMs / 1000} s`)); }, timeoutMs);
    const on = (m: ServiceChildMessage) => {
      if (m.type === type && 'id' in m && m.id === id) { clearTimeout(timer); c.off('message', on); resolve(m as T); }
    };
    c.on('message', on);
    c.send(cmd(id));
  });
  const ask = async (c: ChildProcess) => (await request<ServiceChildMessage & { type: 'loop-stats' }>(c, (id) => ({ type: 'loop-stats', id }), 'loop-stats', 10_000)).stats;
  const profileCall = async (c: ChildProcess, cmd: (id: number) => ServiceChildCommand) => {
    const r = await request<ServiceChildMessage & { type: 'profile' }>(c, cmd, 'profile', 60_000);
    if (r.error) throw new Error(`service profile: ${r.error}`);
  };
  return {
    pids: children.map((c) => c.child.pid!), readyMs,
    loopReset: () => { for (const c of children) c.child.send({ type: 'loop-reset' } satisfies ServiceChildCommand); },
    loopStats: async () => {
      const all = await Promise.all(children.map((c) => ask(c.child)));
      // With --split, the worse of the two processes on each figure.
      return all.reduce((a, b) => Object.fromEntries(Object.keys(a).map((k) => [k, Math.max(a[k as keyof LoopStats], b[k as keyof LoopStats])])) as unknown as LoopStats);
    },
    profileStart: async () => { await Promise.all(children.map((c) => profileCall(c.child, (id) => ({ type: 'profile-start', id })))); },
    profileStop: async (prefix) => {
      await Promise.all(children.map((c, i) => profileCall(c.child, (id) => ({
        type: 'profile-stop', id, file: `${prefix}${children.length > 1 ? `.${i}` : ''}.cpuprofile`,
      }))));
    },
    stop: async () => { await Promise.all(children.map((c) => c.stop())); },
  };
}

async function startChild(group: ServiceSetup, opts: ServiceOptions, roles: string, timeoutMs: number): Promise<{ child: ChildProcess; stop(): Promise<void> }> {
  const log = openSync(group.logFile, 'a');
  const execArgv = [...SERVICE_NODE_FLAGS, ...(opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProf}`] : [])];
  const child = fork(new URL('./service-child.ts', import.meta.url).pathname, [], {
    env: { ...group.env, HOOKSTREAM_ROLES: roles }, execArgv, stdio: ['ignore', log, log, 'ipc'],
  });
  closeSync(log);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const killAtExit = async () => { if (child.exitCode === null) child.kill('SIGKILL'); };
  cleanups.unshift(killAtExit);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${group.name}: service (${roles}) not ready within ${timeoutMs / 1000} s (log: ${group.logFile})`)), timeoutMs);
    child.on('message', (m: ServiceChildMessage) => {
      if (m.type === 'ready') { clearTimeout(timer); resolve(); }
      if (m.type === 'failed') { clearTimeout(timer); reject(new Error(`${group.name}: service (${roles}) failed to start: ${m.error} (log: ${group.logFile})`)); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${group.name}: service (${roles}) exited with ${code} before ready (log: ${group.logFile})`)); });
  });
  return {
    child,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(30_000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
