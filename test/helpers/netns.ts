// A network namespace of the test's own (Linux, root): nothing listens on any port there, so the default
// addresses (4222, 5432, 8080, 9090) are as free as on a new user's laptop, whatever this machine runs.
// Commands run inside it with nsenter; the holder process keeps it alive until dispose().
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';

/** Whether this machine lets us make one (root, util-linux's unshare and nsenter, iproute2's ip). */
export function netnsAvailable(): boolean {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  return spawnSync('unshare', ['-n', 'sh', '-c', 'ip link set lo up && command -v nsenter'], { stdio: 'ignore' }).status === 0;
}

export interface Netns {
  /** Spawn `command` inside the namespace. */
  spawn(command: string, args: string[], opts?: SpawnOptions): ChildProcess;
  /** Run `command` inside the namespace to its end: its exit code and output. */
  run(command: string, args: string[], opts?: SpawnOptions): Promise<{ code: number | null; stdout: string; stderr: string }>;
  dispose(): void;
}

export async function createNetns(): Promise<Netns> {
  const holder = spawn('unshare', ['-n', 'sh', '-c', 'ip link set lo up && echo up && exec sleep 100000'], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    holder.stdout!.once('data', () => resolve());
    holder.once('exit', (code) => reject(new Error(`unshare -n exited (${code})`)));
  });
  const pid = String(holder.pid);
  const inside = (command: string, args: string[], opts: SpawnOptions = {}) => spawn('nsenter', ['-t', pid, '-n', '--', command, ...args], opts);
  return {
    spawn: inside,
    run: (command, args, opts = {}) => new Promise((resolve, reject) => {
      const child = inside(command, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (c: Buffer) => { stdout += c.toString('utf8'); });
      child.stderr!.on('data', (c: Buffer) => { stderr += c.toString('utf8'); });
      child.once('error', reject);
      child.once('close', (code) => resolve({ code, stdout, stderr }));
    }),
    dispose: () => { holder.kill('SIGKILL'); },
  };
}
