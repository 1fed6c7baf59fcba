// A real nats-server per test file, on a free port with its own temporary store, so files running in
// parallel never share streams. Can be stopped and started again on the same port and store.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, connect as tcpConnect } from 'node:net';

import { NATS_BINARY as BINARY } from './nats-binary.ts';
/** How long a SIGTERM may take before the server is killed. */
const STOP_GRACE_MS = 20_000;

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts TCP connections on 127.0.0.1:`port`; fails after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = tcpConnect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`nats-server did not listen on ${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface NatsServer {
  url: string;
  port: number;
  storeDir: string;
  /** The running process's id (for CPU metering), undefined while stopped. */
  readonly pid: number | undefined;
  /** Stop it: SIGTERM (a graceful stop, finished by SIGKILL if it lasts), or SIGKILL at once (a crash). */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  start(): Promise<void>;
  /** Stop and remove the store. */
  dispose(): Promise<void>;
}

/** `binary`: another nats-server than the suite's (NATS_BINARY), such as one below hookstream's floor. */
export async function startNatsServer(opts: { config?: string; jetstream?: boolean; binary?: string } = {}): Promise<NatsServer> {
  const port = await freePort();
  const storeDir = mkdtempSync(join(tmpdir(), 'hookstream-nats-'));
  let proc: ChildProcess | undefined;
  const start = async () => {
    const args = ['-a', '127.0.0.1', '-p', String(port), ...(opts.jetstream === false ? [] : ['-js']), '-sd', storeDir];
    if (opts.config) args.push('-c', opts.config);
    proc = spawn(opts.binary ?? BINARY, args, { stdio: 'ignore' });
    await waitForPort(port, 10_000);
  };
  const stop = async (signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM') => {
    const p = proc;
    proc = undefined;
    if (!p || p.exitCode !== null) return;
    // nats-server 2.15.1 took minutes to stop on SIGTERM holding 10,000 consumers (bench, issue 18):
    // a stop that lasts is finished with SIGKILL (JetStream's store survives both).
    const force = setTimeout(() => p.kill('SIGKILL'), STOP_GRACE_MS);
    await new Promise<void>((resolve) => { p.once('exit', () => resolve()); p.kill(signal); });
    clearTimeout(force);
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`, port, storeDir, start, stop,
    get pid() { return proc?.pid; },
    dispose: async () => { await stop(); rmSync(storeDir, { recursive: true, force: true }); },
  };
}
