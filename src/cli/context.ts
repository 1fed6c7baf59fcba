// What CLI commands share: the configuration, a logger, and short-lived NATS/JetStream connections.
import { jetstream, JetStreamApiCodes, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { withAdminClient, type AdminClient } from '../admin/client.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { loadConfig, redactUrl, type Config } from '../config.ts';
import { openDatabase, closeDatabase } from '../db/orm.ts';
import { createLogger, type Logger } from '../log.ts';
import { connectNats } from '../nats/connect.ts';
import { useLocalServers } from '../local/index.ts';
import { startupJetStreamManager } from '../../streams/index.ts';
import { EVENTS_STREAM } from '../../streams/events.ts';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { isApiError } from '../../streams/ensure.ts';
import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import { describe, ErrorCode, isHookstreamError, UnreachableError } from '../errors.ts';
import { isOperatorName, OPERATOR_NAME_RULE } from '../operators/store.ts';
import { UsageError } from './command.ts';

export interface NatsContext {
  config: Config;
  log: Logger;
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/** The project's folder: where `npm start` runs and keeps `.hookstream/` (src/cli/main.ts defaults to it). */
export const PROJECT_DIR = resolve(import.meta.dirname, '../..');

/**
 * A server the CLI cannot reach or use, said for the person at the terminal: the hookstream service (whose
 * `npm start` runs the servers when none answers) is what they start, or its configuration what they give.
 */
function unreachable(e: unknown, variables: string): unknown {
  if (!isHookstreamError(e, ErrorCode.Unreachable)) return e;
  // The servers' own start hints (nats-server -js, pg_ctlcluster) are for whoever runs the servers.
  const what = e.message.replace(/; start (one|it) with: .*$/, '');
  // Nothing answered: the service (and the servers it runs) may be down. Something answered and refused:
  // the command lacks the service's configuration.
  const answered = !what.startsWith('cannot connect') || /authori[sz]ation|authentication|password/i.test(describe(e.cause ?? e));
  return new UnreachableError(answered
    ? `${what}: set ${variables} for this command${variables.startsWith('NATS') ? ' (docs/nats-users.md names the user of each command)' : ''}`
    : `${what}: is hookstream running? Start it with \`npm start\` in ${PROJECT_DIR} (it runs NATS and Postgres itself where none answers), or give this command the service's ${variables}`, e.cause ?? e);
}

const NATS_VARIABLES = 'NATS_URL, NATS_USER, NATS_PASSWORD';

export function cliLogger(config: Config): Logger {
  // The CLI's own output is for people or scripts; only warnings and errors are logged.
  return createLogger({ level: config.logLevel === 'debug' ? 'debug' : 'warn' });
}

/**
 * Run `fn` as a producer: a plain connection on the default `_INBOX` prefix, no JetStream API (the
 * `publisher` credential of nats.conf may only publish events and read its own acks).
 */
export async function withProducer<T>(fn: (ctx: { js: JetStreamClient }) => Promise<T>): Promise<T> {
  const config = await useLocalServers(loadConfig(), 'publisher');
  const nc = await connectNats({ url: config.natsUrl, user: config.natsUser, password: config.natsPassword, name: 'hookstream-cli', inboxPrefix: '_INBOX' })
    .catch((e: unknown) => { throw unreachable(e, NATS_VARIABLES); });
  try {
    return await fn({ js: jetstream(nc) });
  } finally {
    await nc.drain().catch(() => {});
  }
}

/** Run `fn` with a Postgres connection (migrated), closing it afterwards. */
export async function withDatabase<T>(fn: (em: EntityManager) => Promise<T>): Promise<T> {
  const config = await useLocalServers(loadConfig(), 'service');
  // One connection is all a CLI command needs.
  const orm = await openDatabase(config.databaseUrl, cliLogger(config), { poolSize: 1 })
    .catch((e: unknown) => { throw unreachable(e, 'DATABASE_URL'); });
  try {
    return await fn(orm.em.fork());
  } finally {
    await closeDatabase(orm);
  }
}

/**
 * The streams must exist already: only `serve` creates streams or changes their settings. A CLI run from a
 * shell without the service's environment would otherwise set their retention, limits and replicas from
 * its own defaults.
 */
async function requireStreams(jsm: JetStreamManager, url: string): Promise<void> {
  for (const name of [EVENTS_STREAM, ENDPOINTS_STREAM]) {
    await jsm.streams.info(name).catch((e: unknown) => {
      if (!isApiError(e, JetStreamApiCodes.StreamNotFound)) throw e;
      throw new UnreachableError(`NATS at ${url.split(',').map((s) => redactUrl(s.trim())).join(',')} has no ${name} stream: start the service (hookstream serve) once, which creates its streams`);
    });
  }
}

/** Run `fn` with a NATS connection to the service's streams (never created or changed here), closing it afterwards whatever happens. */
export async function withNats<T>(fn: (ctx: NatsContext) => Promise<T>): Promise<T> {
  const config = await useLocalServers(loadConfig(), 'service');
  const log = cliLogger(config);
  const nc = await connectNats({ url: config.natsUrl, user: config.natsUser, password: config.natsPassword, name: 'hookstream-cli' })
    .catch((e: unknown) => { throw unreachable(e, NATS_VARIABLES); });
  try {
    const js = jetstream(nc);
    const jsm = await startupJetStreamManager(nc);
    await requireStreams(jsm, config.natsUrl);
    return await fn({ config, log, nc, js, jsm });
  } finally {
    await nc.drain().catch(() => {});
  }
}

/**
 * Who runs the CLI, as the audit log records it: --operator or HOOKSTREAM_OPERATOR, else
 * `cli:<login name>` (characters the names do not take become `-`).
 */
export function cliOperator(): string {
  const named = process.env['HOOKSTREAM_OPERATOR'];
  if (named !== undefined && named !== '') {
    if (!isOperatorName(named)) throw new UsageError(`--operator (or HOOKSTREAM_OPERATOR) must be ${OPERATOR_NAME_RULE}`);
    return named;
  }
  let login = 'unknown';
  try { login = userInfo().username; } catch { /* no passwd entry: keep unknown */ }
  return `cli:${login.replace(/[^A-Za-z0-9._@:+-]/g, '-')}`.slice(0, 64);
}

/** Run `fn` with an admin client as the operator NATS_URL, NATS_USER and NATS_PASSWORD name, audited as cliOperator(). */
export async function withAdmin<T>(fn: (admin: AdminClient) => Promise<T>, opts: { timeoutMs?: number } = {}): Promise<T> {
  const config = await useLocalServers(loadConfig(), 'operator');
  const operator = cliOperator();
  // Only the connection's failure is rewritten: fn's own errors pass as they are.
  let connected = false;
  try {
    return await withAdminClient({ url: config.natsUrl, user: config.natsUser, password: config.natsPassword, operator, ...opts }, (admin) => {
      connected = true;
      return fn(admin);
    });
  } catch (e) {
    throw connected ? e : unreachable(e, NATS_VARIABLES);
  }
}
