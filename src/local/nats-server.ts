// The local nats-server of `npm start`: the machine's binary (NATS_SERVER_BIN, PATH, or the sbin
// directories Debian's package installs into, which a normal user's PATH lacks), run with the project's
// nats.conf (the same accounts and users as production, with generated passwords), JetStream on, its store
// under HOOKSTREAM_DATA_DIR, listening on loopback only.
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../errors.ts';
import { answers, spawnServer, type ServerChild } from './child.ts';

export const NATS_CONF = fileURLToPath(new URL('../../nats.conf', import.meta.url));

export const INSTALL_HINT = 'install it with `apt-get install nats-server` (Debian, Ubuntu) or `brew install nats-server` (macOS)';

const SBIN_DIRS = ['/usr/sbin', '/usr/local/sbin'];

const isExecutable = (path: string): boolean => {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

/** The nats-server binary to run, or a ConfigError naming the one command that installs it. */
export function findNatsServer(env: NodeJS.ProcessEnv, fallbackDirs: readonly string[] = SBIN_DIRS): string {
  const given = env['NATS_SERVER_BIN']?.trim();
  if (given) {
    if (isExecutable(given)) return given;
    throw new ConfigError('NATS_SERVER_BIN', `${given} is not an executable file; unset it to use nats-server from PATH, or ${INSTALL_HINT}`);
  }
  const dirs = [...(env['PATH'] ?? '').split(delimiter).filter(Boolean), ...fallbackDirs];
  const found = dirs.map((d) => join(d, 'nats-server')).find(isExecutable);
  if (found) return found;
  throw new ConfigError('NATS_URL', `is not set and no NATS server answers on the default address; no nats-server binary to start one: ${INSTALL_HINT}`);
}

/** The password variables nats.conf names (nats-server refuses to start without each of them). */
export function natsConfVariables(): string[] {
  const text = readFileSync(NATS_CONF, 'utf8');
  return [...new Set(text.match(/\$HOOKSTREAM_NATS_[A-Z0-9_]+_PASSWORD/g) ?? [])].map((v) => v.slice(1));
}

/** The password variable of a nats.conf user: `service` → HOOKSTREAM_NATS_SERVICE_PASSWORD. */
export const passwordVariable = (user: string): string => `HOOKSTREAM_NATS_${user.toUpperCase()}_PASSWORD`;

export async function startNatsServer(opts: {
  binary: string; host: string; port: number; storeDir: string; logFile: string; passwords: Record<string, string>;
}): Promise<ServerChild> {
  const child = await spawnServer('nats-server', opts.binary, ['-c', NATS_CONF, '-js', '-sd', opts.storeDir, '-a', opts.host, '-p', String(opts.port)], {
    logFile: opts.logFile, env: { ...process.env, ...opts.passwords },
  });
  try {
    // Listening means ready: nats-server opens its client port after JetStream has read its store.
    await child.waitReady(() => answers(opts.host, opts.port), 30_000);
  } catch (e) {
    await child.stop('SIGKILL', 1000);
    throw e;
  }
  return child;
}
