// A local server as a child process: its output appended to a log file, started in a process group of its
// own (so a Ctrl-C in the terminal reaches only hookstream, which stops the server after the service has
// drained), stopped with a signal, and signalled too when this process exits without stopping it.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ServerChild {
  readonly pid: number;
  /** Resolves once `ready()` answers true; rejects when the process exits first or after `timeoutMs`. */
  waitReady(ready: () => Promise<boolean>, timeoutMs: number): Promise<void>;
  /** Signal it and wait for its exit (SIGKILL after `graceMs`). */
  stop(signal: NodeJS.Signals, graceMs: number): Promise<void>;
  /** Called when it exits without being stopped. */
  onUnexpectedExit(fn: (code: number | null, signal: NodeJS.Signals | null) => void): void;
}

/** The last non-empty lines of a log file, for an error message. */
export function logTail(path: string, lines = 3): string {
  try {
    return readFileSync(path, 'utf8').split('\n').filter((l) => l.trim() !== '').slice(-lines).join(' | ');
  } catch {
    return '';
  }
}

export function spawnServer(
  name: string, command: string, args: string[],
  opts: { logFile: string; env?: NodeJS.ProcessEnv; uid?: number; gid?: number },
): Promise<ServerChild> {
  const fd = openSync(opts.logFile, 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(command, args, {
      stdio: ['ignore', fd, fd], detached: true, env: opts.env ?? process.env,
      ...(opts.uid !== undefined ? { uid: opts.uid } : {}), ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
    });
  } finally {
    closeSync(fd);
  }
  return new Promise((resolve, reject) => {
    child.once('error', (e) => reject(new Error(`cannot run ${name} (${command}): ${e.message}`)));
    child.once('spawn', () => {
      const pid = child.pid!;
      let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
      let stopping = false;
      let unexpected: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined;
      const exit = new Promise<void>((done) => child.once('exit', (code, signal) => {
        exited = { code, signal };
        process.removeListener('exit', onProcessExit);
        if (!stopping) unexpected?.(code, signal);
        done();
      }));
      // A crash or process.exit() elsewhere: the server still shuts down cleanly on its own.
      const onProcessExit = () => { try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ } };
      process.on('exit', onProcessExit);
      const exitReason = () => `${name} exited (${exited?.signal ?? `exit ${exited?.code}`}): ${logTail(opts.logFile) || `see ${opts.logFile}`}`;
      resolve({
        pid,
        async waitReady(ready, timeoutMs) {
          const until = Date.now() + timeoutMs;
          for (;;) {
            if (exited) throw new Error(exitReason());
            if (await ready()) return;
            if (Date.now() > until) throw new Error(`${name} did not start within ${timeoutMs / 1000} s; see ${opts.logFile}`);
            await sleep(50);
          }
        },
        async stop(signal, graceMs) {
          stopping = true;
          if (exited) return;
          child.kill(signal);
          const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
          await exit;
          clearTimeout(timer);
        },
        onUnexpectedExit(fn) { unexpected = fn; },
      });
    });
  });
}

/** Whether something accepts TCP connections on host:port (within 1 s). */
export function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 1000 });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('timeout', () => { s.destroy(); resolve(false); });
    s.once('error', () => resolve(false));
  });
}
