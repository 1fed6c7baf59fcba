// `npm start` with nothing running: when NATS_URL (DATABASE_URL) is not set and nothing answers on the
// default address, `serve` starts a local nats-server (Postgres) there, with its data under
// HOOKSTREAM_DATA_DIR, and stops it after the service; the CLI finds it through the file `serve` writes
// (src/local/state.ts). A configured URL is always used as given; NODE_ENV=production never starts one.
import { execFileSync } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, describe } from '../errors.ts';
import { redactUrl, type Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { answers, type ServerChild } from './child.ts';
import { belowFloor, FLOOR, probeServer, short } from '../nats/server-version.ts';
import { findNatsServer, natsConfVariables, passwordVariable, startNatsServer } from './nats-server.ts';
import { startPostgres } from './postgres.ts';
import { ensureCredentials, isAlive, readCredentials, readRunning, removeRunning, writeRunning, type RunningServers } from './state.ts';

/** The nats.conf user a process connects as to the local nats-server. */
export type LocalNatsUser = 'service' | 'publisher' | 'operator';

export interface LocalServers {
  /** The configuration with the local servers' URLs and credentials where they stand in. */
  readonly config: Config;
  /** Stop what was started (after the service has stopped); nothing when nothing was. */
  stop(): Promise<void>;
}

const hostPort = (url: string, defaultPort: number) => {
  const u = new URL(url);
  return { host: u.hostname, port: u.port ? Number(u.port) : defaultPort };
};

/** The console role asks the admin subjects: as nats.conf's operator user, unless CONSOLE_NATS_USER says otherwise. */
const consoleUser = (config: Config, passwords: Record<string, string>) =>
  (config.consoleNatsUser ? {} : { consoleNatsUser: 'operator', consoleNatsPassword: passwords[passwordVariable('operator')] });

/**
 * The configuration with the servers a running `serve` started standing in for unset URLs, connecting as
 * `as` to NATS (nats.conf's user for the job). Unchanged when none runs.
 */
export async function useLocalServers(config: Config, as: LocalNatsUser): Promise<Config> {
  if (config.natsUrlSet && config.databaseUrlSet) return config;
  const running = await readRunning(config.dataDir);
  if (!running || !isAlive(running.pid)) return config;
  const creds = await readCredentials(config.dataDir);
  if (!creds) return config;
  const out = { ...config };
  if (running.nats && !config.natsUrlSet) {
    Object.assign(out, { natsUrl: running.nats.url, natsUser: as, natsPassword: creds.nats[passwordVariable(as)], ...consoleUser(config, creds.nats) });
  }
  if (running.postgres && !config.databaseUrlSet) {
    const u = new URL(running.postgres.url);
    u.password = creds.postgres;
    out.databaseUrl = u.toString();
  }
  return out;
}

/** A TCP port free on `host` now (the OS picks it). */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether `pid` runs a command naming `dir` (so a recorded pid reused by another process is left alone). */
function runsIn(pid: number, dir: string): boolean {
  try {
    return execFileSync('ps', ['-o', 'command=', '-p', String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).includes(dir);
  } catch {
    return false;
  }
}

/** Servers left running by a `serve` that was killed: stopped cleanly before anything else uses their data. */
async function stopLeftOvers(running: RunningServers, dataDir: string, log: Logger): Promise<void> {
  for (const [name, server, signal] of [['nats-server', running.nats, 'SIGTERM'], ['postgres', running.postgres, 'SIGINT']] as const) {
    if (!server || !isAlive(server.pid) || !runsIn(server.pid, dataDir)) continue;
    log.warn(`stopping the local ${name} a previous hookstream left running`, { pid: server.pid });
    try { process.kill(server.pid, signal); } catch { continue; }
    // Not isAlive alone: the orphan's exit leaves a zombie until init reaps it, and its command is gone.
    const running = () => isAlive(server.pid) && runsIn(server.pid, dataDir);
    for (let i = 0; i < 600 && running(); i++) await sleep(50);
    if (running()) throw new Error(`the local ${name} (pid ${server.pid}) a previous hookstream left running does not stop; stop it, then start again`);
  }
}

/**
 * Start what is missing before the service starts. `database`: whether the roles use Postgres. Another
 * `serve` already running the local servers lends them, as to the CLI.
 */
export async function startLocalServers(config: Config, log: Logger, opts: { database: boolean }): Promise<LocalServers> {
  const unchanged: LocalServers = { config, stop: async () => {} };
  if (config.natsUrlSet && (config.databaseUrlSet || !opts.database)) return unchanged;
  const dataDir = resolve(config.dataDir);
  const running = await readRunning(dataDir);
  if (running && isAlive(running.pid)) {
    log.info('using the local servers of the hookstream already running', { pid: running.pid });
    return { config: await useLocalServers(config, 'service'), stop: async () => {} };
  }
  if (running) {
    await stopLeftOvers(running, dataDir, log);
    await removeRunning(dataDir);
  }

  let nats = hostPort(config.natsUrl, 4222);
  const db = hostPort(config.databaseUrl, 5432);
  let startNats = !config.natsUrlSet && !(await answers(nats.host, nats.port));
  let natsWhy = `no NATS server answered on ${nats.host}:${nats.port}: started a local nats-server there`;
  if (!config.natsUrlSet && !startNats) {
    // A server too old for hookstream on the default address (a distribution's older package): one of
    // our own beside it, as if none answered, rather than a refusal at connect.
    const { version } = await probeServer(`${nats.host}:${nats.port}`);
    if (belowFloor(version)) {
      startNats = true;
      const taken = `${nats.host}:${nats.port}`;
      nats = { host: nats.host, port: await freePort(nats.host) };
      natsWhy = `the nats-server on ${taken} runs ${version}, older than ${short(FLOOR)}: started a local nats-server on ${nats.host}:${nats.port}`;
    }
  }
  const startDb = opts.database && !config.databaseUrlSet && !(await answers(db.host, db.port));
  if (!startNats && !startDb) return unchanged;
  if (config.production) {
    const [variable, url, what] = startNats ? ['NATS_URL', config.natsUrl, 'nats-server'] : ['DATABASE_URL', redactUrl(config.databaseUrl), 'Postgres'];
    throw new ConfigError(variable, `is not set and nothing answers on ${url}; with NODE_ENV=production hookstream never starts a local ${what}: set ${variable}`);
  }
  // Found before anything starts, so a missing binary costs nothing to undo.
  const binary = startNats
    ? findNatsServer(process.env, { fetched: (why) => log.info(`${why}: downloading Debian stable's nats-server into the project's cache (bin/fetch-nats-server stable)`) })
    : undefined;

  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const creds = await ensureCredentials(dataDir, natsConfVariables());
  const started: { name: string; child: ServerChild; signal: NodeJS.Signals }[] = [];
  const stop = async () => {
    for (const s of started.splice(0).reverse()) {
      await s.child.stop(s.signal, 60_000).then(
        () => log.info(`stopped the local ${s.name}`, { pid: s.child.pid }),
        (e: unknown) => log.error(`error while stopping the local ${s.name}`, { reason: describe(e) }),
      );
    }
    await removeRunning(dataDir).catch(() => {});
  };
  const record: RunningServers = { pid: process.pid };
  const out = { ...config };
  try {
    if (startDb) {
      const { child, initialised } = await startPostgres({ dataDir, ...db, password: creds.postgres, logFile: join(dataDir, 'postgres.log') });
      // SIGINT: Postgres's fast shutdown (a checkpoint, then exit), once the service has closed its connections.
      started.push({ name: 'Postgres', child, signal: 'SIGINT' });
      const url = new URL(config.databaseUrl);
      url.username = 'postgres';
      record.postgres = { url: url.toString(), pid: child.pid };
      url.password = creds.postgres;
      out.databaseUrl = url.toString();
      log.info(`no Postgres answered on ${db.host}:${db.port}: started a local one there${initialised ? ' (new)' : ''}, data in ${join(dataDir, 'postgres')}`, { pid: child.pid });
    }
    if (startNats && binary) {
      const child = await startNatsServer({
        binary, ...nats, storeDir: join(dataDir, 'nats'), logFile: join(dataDir, 'nats-server.log'), passwords: creds.nats,
      });
      started.push({ name: 'nats-server', child, signal: 'SIGTERM' });
      record.nats = { url: `nats://${nats.host}:${nats.port}`, pid: child.pid };
      Object.assign(out, { natsUrl: record.nats.url, natsUser: 'service', natsPassword: creds.nats[passwordVariable('service')], ...consoleUser(config, creds.nats) });
      log.info(`${natsWhy} (${binary}, nats.conf's users), JetStream store in ${join(dataDir, 'nats')}`, { pid: child.pid });
    }
    for (const s of started) {
      s.child.onUnexpectedExit((code, signal) => log.error(`the local ${s.name} exited; its log is in ${dataDir}`, { code, signal }));
    }
    await writeRunning(dataDir, record);
  } catch (e) {
    await stop();
    throw e;
  }
  return { config: out, stop };
}
