// `bin/hookstream` as a user runs it: a child process with the given environment, its exit code and output.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { directDeliveryDefaults } from './direct-env.ts';

const BIN = fileURLToPath(new URL('../../bin/hookstream', import.meta.url));

export interface CliRun { code: number; stdout: string; stderr: string }

export function runCli(args: string[], env: Record<string, string | undefined>): Promise<CliRun> {
  return new Promise((resolve) => {
    // The same defaults as the service's: the CLI reads the configuration the service runs with.
    execFile(BIN, args, { env: { ...directDeliveryDefaults(), ...env }, timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }));
  });
}
