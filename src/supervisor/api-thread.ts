// The API's roles in a worker thread of the `serve` process (which roles: threads.ts; the thread itself:
// api-thread-entry.ts). The main thread keeps the delivery path, the signals and the ops listener; it asks
// the thread for its ops answers, which the listener merges with its own (src/ops/combined.ts).
// A thread that ends on its own (its heap exhausted, a bug that exits it) is started again with a capped
// exponential backoff, counted in hookstream_role_restarts_total{role="api-thread"}, and named by /readyz
// meanwhile; the deliveries in the main thread go on. What its start-up cannot heal (the API's port in use,
// credentials refused) ends `serve` with that error, as in one thread.
import { Worker } from 'node:worker_threads';
import type { Config } from '../config.ts';
import { ErrorCode, HookstreamError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Counter } from '../metrics.ts';
import { exposition, json, type Ops, type OpsResponse } from '../ops/ops.ts';

export type ToApiThread = { type: 'ops'; id: number; path: string } | { type: 'stop' };
export type FromApiThread =
  | { type: 'ops'; id: number; res?: OpsResponse | undefined; error?: string }
  | { type: 'up'; apiUrl?: string }
  | { type: 'stopped' }
  | { type: 'fatal'; message: string; code: ErrorCode };

export const API_THREAD = 'api-thread';

export interface ApiThread {
  /** The thread's /healthz, /readyz and /metrics, asked over its port. */
  readonly ops: Ops;
  /** Resolves (with the API's URL when it runs there) once the thread's roles first started; rejects when its start-up needs an operator. */
  readonly up: Promise<string | undefined>;
  /** Stop its roles (within HOOKSTREAM_SHUTDOWN_TIMEOUT, as a process's), then the thread. */
  stop(): Promise<void>;
}

export interface ApiThreadOptions {
  /** The configuration of the thread's roles (its `roles` are the API side's). */
  config: Config;
  log: Logger;
  restarts: Counter;
  firstDelayMs?: number;
  maxDelayMs?: number;
  /** How long an ops question may go unanswered (default 3 s: readiness's checks have 2 s each). */
  opsTimeoutMs?: number;
  /** The thread's entry module (tests use their own). */
  entry?: URL;
}

/** The thread's answers between its end and its restart: the process is alive (its deliveries go on), not ready. */
function downAnswer(path: string): OpsResponse | undefined {
  if (path === '/healthz') return json(200, { status: 'ok' });
  if (path === '/readyz') return json(503, { status: 'not_ready', checks: [{ name: 'roles', ok: false, detail: `down, being started again: ${API_THREAD}` }] });
  if (path === '/metrics') return exposition('');
  return undefined;
}

export function startApiThread(opts: ApiThreadOptions): ApiThread {
  const entry = opts.entry ?? new URL('./api-thread-entry.ts', import.meta.url);
  const opsTimeoutMs = opts.opsTimeoutMs ?? 3000;
  const asked = new Map<number, { path: string; resolve(r: OpsResponse | undefined): void; reject(e: Error): void; timer: NodeJS.Timeout }>();
  let nextId = 0;
  let worker: Worker | undefined;
  let upOnce = false;
  let stopping = false;
  let delay = opts.firstDelayMs ?? 500;
  let restartTimer: NodeJS.Timeout | undefined;
  let stopped: () => void = () => {};
  let exited: Promise<void> = Promise.resolve();
  let firstUp: { resolve(url: string | undefined): void; reject(e: Error): void } = { resolve: () => {}, reject: () => {} };
  const up = new Promise<string | undefined>((resolve, reject) => { firstUp = { resolve, reject }; });
  // Nobody may be waiting yet; serve awaits it after its own start-up.
  up.catch(() => {});

  const spawn = () => {
    const w = new Worker(entry, { workerData: { config: opts.config }, name: API_THREAD });
    worker = w;
    let fatal: HookstreamError | undefined;
    exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
    w.on('message', (m: FromApiThread) => {
      if (m.type === 'ops') {
        const a = asked.get(m.id);
        if (!a) return;
        asked.delete(m.id);
        clearTimeout(a.timer);
        if (m.error !== undefined) a.reject(new Error(m.error));
        else a.resolve(m.res);
      } else if (m.type === 'up') {
        delay = opts.firstDelayMs ?? 500;
        if (upOnce) opts.log.info('api thread running again', { role: API_THREAD });
        upOnce = true;
        firstUp.resolve(m.apiUrl);
      } else if (m.type === 'stopped') {
        stopped();
      } else {
        fatal = new HookstreamError(m.code, m.message);
      }
    });
    // Uncaught exceptions are the thread's own guard's (process-guards.ts); this is what escapes it.
    w.on('error', (e) => opts.log.error('api thread failed', { role: API_THREAD, reason: e.message, stack: e.stack ?? null }));
    w.once('exit', (code) => {
      if (worker === w) worker = undefined;
      for (const [id, a] of asked) { clearTimeout(a.timer); a.resolve(downAnswer(a.path)); asked.delete(id); }
      if (stopping) return;
      if (!upOnce && fatal) { firstUp.reject(fatal); return; }
      opts.log.error('api thread ended on its own; starting it again', { role: API_THREAD, exit_code: code, reason: fatal?.message ?? null, delay_ms: delay });
      restartTimer = setTimeout(() => {
        restartTimer = undefined;
        if (stopping) return;
        opts.restarts.inc({ role: API_THREAD });
        spawn();
      }, delay);
      delay = Math.min(delay * 2, opts.maxDelayMs ?? 10_000);
    });
  };

  const askThread = (path: string) => new Promise<OpsResponse | undefined>((resolve, reject) => {
    const w = worker;
    if (!w) { reject(new Error('api thread down, being started again')); return; }
    const id = nextId++;
    const timer = setTimeout(() => { asked.delete(id); reject(new Error(`api thread did not answer within ${opsTimeoutMs} ms`)); }, opsTimeoutMs);
    asked.set(id, { path, resolve, reject, timer });
    w.postMessage({ type: 'ops', id, path } satisfies ToApiThread);
  });

  spawn();
  return {
    up,
    ops: { handle: async (path) => (!worker && !stopping ? downAnswer(path) : askThread(path)) },
    async stop() {
      stopping = true;
      clearTimeout(restartTimer);
      const w = worker;
      if (!w) return;
      if (upOnce) {
        // Its roles stop within the shutdown timeout, as they would in a process; a second past it, the thread goes.
        const done = new Promise<void>((resolve) => { stopped = resolve; });
        w.postMessage({ type: 'stop' } satisfies ToApiThread);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([done, exited, new Promise<void>((resolve) => { timer = setTimeout(resolve, opts.config.shutdownTimeoutMs + 1000); })]);
        clearTimeout(timer);
      }
      // A start-up still waiting has nothing in flight; a stopped thread may still hold a timer or a socket.
      await w.terminate();
    },
  };
}
