// The local nats-server of `npm start`: the machine's binary (NATS_SERVER_BIN, PATH, or the sbin
// directories Debian's package installs into, which a normal user's PATH lacks) when it is recent enough,
// else Debian stable's, downloaded into the project's cache (bin/fetch-nats-server); run with the project's
// nats.conf (the same accounts and users as production, with generated passwords), JetStream on, its store
// under HOOKSTREAM_DATA_DIR, listening on loopback only.
import { execFileSync } from 'node:child_process';
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, describe } from '../errors.ts';
import { belowFloor, FLOOR, short } from '../nats/server-version.ts';
import { answers, spawnServer, type ServerChild } from './child.ts';

export const NATS_CONF = fileURLToPath(new URL('../../nats.conf', import.meta.url));
const FETCH = fileURLToPath(new URL('../../bin/fetch-nats-server', import.meta.url));

export const INSTALL_HINT = `\`bin/fetch-nats-server\` downloads one, or install nats-server ${short(FLOOR)} or newer: \`apt-get install nats-server\` `
  + '(Debian 13, Ubuntu 24.04 and later) or `brew install nats-server` (macOS)';

const SBIN_DIRS = ['/usr/sbin', '/usr/local/sbin'];

const isExecutable = (path: string): boolean => {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

/** The version a nats-server binary reports (`nats-server: v2.10.27`); undefined when it says none. */
export function binaryVersion(binary: string): string | undefined {
  try {
    const out = execFileSync(binary, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
    return /(\d+\.\d+\.\d+)/.exec(out)?.[1];
  } catch {
    return undefined;
  }
}

/** Debian stable's nats-server, downloaded into the project's cache on first use; its path. */
export const fetchStable = (): string => execFileSync(FETCH, ['stable'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 300_000 }).trim();

/**
 * The nats-server binary to run: NATS_SERVER_BIN as given, else the first on PATH or in the sbin
 * directories, else (none, or one older than FLOOR) Debian stable's, downloaded once into the project's
 * cache by bin/fetch-nats-server. `fetched` hears why a download was needed, before it starts.
 */
export function findNatsServer(env: NodeJS.ProcessEnv, opts: {
  fallbackDirs?: readonly string[]; fetched?: (why: string) => void; fetch?: () => string;
} = {}): string {
  const given = env['NATS_SERVER_BIN']?.trim();
  if (given) {
    if (!isExecutable(given)) throw new ConfigError('NATS_SERVER_BIN', `${given} is not an executable file; unset it to use nats-server from PATH, or ${INSTALL_HINT}`);
    const version = binaryVersion(given);
    if (belowFloor(version)) throw new ConfigError('NATS_SERVER_BIN', `${given} is nats-server ${version}; hookstream needs ${short(FLOOR)} or newer: unset it, or ${INSTALL_HINT}`);
    return given;
  }
  const dirs = [...(env['PATH'] ?? '').split(delimiter).filter(Boolean), ...(opts.fallbackDirs ?? SBIN_DIRS)];
  const found = dirs.map((d) => join(d, 'nats-server')).find(isExecutable);
  const version = found === undefined ? undefined : binaryVersion(found);
  if (found !== undefined && !belowFloor(version)) return found;
  opts.fetched?.(found === undefined ? 'no nats-server binary on PATH' : `${found} is nats-server ${version}, older than ${short(FLOOR)}`);
  try {
    return (opts.fetch ?? fetchStable)();
  } catch (e) {
    const reason = (e as { stderr?: string }).stderr?.trim() || describe(e);
    throw new ConfigError('NATS_URL', `is not set and no NATS server ${short(FLOOR)} or newer answers on the default address; `
      + `downloading one failed (${reason}): ${INSTALL_HINT}`);
  }
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
