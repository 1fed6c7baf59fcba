// `bin/hookstream serve` as an orchestrator runs it: a child process with the given environment, resolved
// once it logged that it started, with its log lines (stderr) as they come and its exit code.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { directDeliveryDefaults } from './direct-env.ts';

const BIN = fileURLToPath(new URL('../../bin/hookstream', import.meta.url));

export interface ServeChild { child: ChildProcess; log: string[]; exited: Promise<number | null> }

/** Start `hookstream serve`; `children` gets the process at once, so a test's teardown can kill it. */
export function serveChild(env: Record<string, string | undefined>, children: ChildProcess[]): Promise<ServeChild> {
  const child = spawn(BIN, ['serve'], { env: { ...directDeliveryDefaults(), ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  const log: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let buffer = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('utf8');
      const lines = buffer.split('\n');
      buffer = lines.pop()!;
      for (const line of lines) {
        log.push(line);
        if (line.includes('"hookstream started"')) resolve({ child, log, exited });
      }
    });
    void exited.then((code) => reject(new Error(`hookstream serve exited with ${code} before it started:\n${log.join('\n')}`)));
  });
}
