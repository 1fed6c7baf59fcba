// Opening the database: create it when missing, migrate it, and hand back a MikroORM instance; or
// fail within seconds with one line naming the URL and how to start Postgres.
import pg from 'pg';
import { MikroORM } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import type { Logger as OrmLogger, LoggerNamespace } from '@mikro-orm/core';
import { ENTITIES } from './entities.ts';
import { MIGRATIONS } from './migrations/index.ts';
import { redactUrl } from '../config.ts';
import { ConfigError, ErrorCode, HookstreamError, UnreachableError, describe } from '../errors.ts';
import type { Logger } from '../log.ts';

export type Database = MikroORM;

export interface DatabaseOptions {
  /** Largest number of pooled connections (default 10: the projector, the API and dead letters share it). */
  poolSize?: number;
  /** How long to wait for a connection before giving up (default 5 s). */
  connectTimeoutMs?: number;
}

const START_HINT = 'start it with: pg_ctlcluster 15 main start (or docker compose up postgres)';
// Any fixed 64-bit number: serialises migrations when several instances start at once.
const MIGRATION_LOCK = 0x686f6f6b_6d6967n; // "hookmig"

// Errors that mean "no server answered", as opposed to a server that refused us.
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

function isNetworkError(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const code = (e as { code?: unknown }).code;
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
  // pg reports its own connect timeout and dropped sockets with messages only.
  return /timeout|terminated unexpectedly|Connection terminated/i.test(e.message)
    || (e instanceof AggregateError && e.errors.some(isNetworkError));
}

const pgCode = (e: unknown): string | undefined => {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
};

/**
 * Whether a failed query means Postgres is unavailable (down, restarting, unreachable) rather than
 * that the query was wrong: no connection, a dropped one, SQLSTATE class 08 (connection exception)
 * or 57P01-57P03 (shutting down, starting up). Works on MikroORM's DriverException, which keeps the
 * driver error's code.
 */
export function isPostgresUnavailable(e: unknown): boolean {
  const code = pgCode(e);
  return isNetworkError(e) || (code !== undefined && (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03'));
}

/**
 * Whether Postgres refused a value rather than failed: SQLSTATE class 22 (data exception, e.g. U+0000 in
 * text) or 23 (integrity constraint). Trying the same write again fails the same way.
 */
export function isRefusedValue(e: unknown): boolean {
  const code = pgCode(e);
  return code !== undefined && (code.startsWith('22') || code.startsWith('23'));
}

/**
 * The stored schema cannot be brought to this version's: a migration failed on Postgres's answer (SQLSTATE
 * class 42, syntax error or access rule violation, or 0A, feature not supported), not on its availability.
 */
export class SchemaError extends HookstreamError {}

function failure(url: string, e: unknown): UnreachableError {
  const shown = redactUrl(url);
  if (isNetworkError(e)) return new UnreachableError(`cannot connect to Postgres at ${shown} (${describe(e) || pgCode(e)}); ${START_HINT}`, e);
  return new UnreachableError(`cannot use Postgres at ${shown}: ${describe(e)}`, e);
}

async function connectClient(url: string, database: string, timeoutMs: number): Promise<pg.Client> {
  // pg lets the connection string win over a separate `database` option, so rewrite the URL's path.
  const target = new URL(url);
  target.pathname = `/${encodeURIComponent(database)}`;
  const client = new pg.Client({ connectionString: target.toString(), connectionTimeoutMillis: timeoutMs });
  // A socket error after connecting must not crash the process as an unhandled 'error' event.
  client.on('error', () => {});
  try {
    await client.connect();
    return client;
  } catch (e) {
    await client.end().catch(() => {});
    throw e;
  }
}

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** Connect to the named database, creating it first (through the server's `postgres` database) when missing. */
async function connectOrCreate(url: string, dbName: string, timeoutMs: number, log: Logger): Promise<pg.Client> {
  try {
    return await connectClient(url, dbName, timeoutMs);
  } catch (e) {
    if (pgCode(e) !== '3D000') throw failure(url, e); // 3D000: database does not exist
  }
  let admin: pg.Client;
  try {
    admin = await connectClient(url, 'postgres', timeoutMs);
  } catch (e) {
    throw failure(url, e);
  }
  try {
    await admin.query(`create database ${quoteIdent(dbName)}`);
    log.info('created database', { database: dbName });
  } catch (e) {
    // Another instance created it at the same moment: 42P04 duplicate_database, or 23505 on pg_database.
    if (pgCode(e) !== '42P04' && pgCode(e) !== '23505') throw failure(url, e);
  } finally {
    await admin.end().catch(() => {});
  }
  try {
    return await connectClient(url, dbName, timeoutMs);
  } catch (e) {
    throw failure(url, e);
  }
}

/**
 * Give back a pooled connection that dies while checked out. kysely (under MikroORM) releases a
 * transaction's connection only after a successful COMMIT or ROLLBACK, and on a dead connection both
 * fail (kysely-org/kysely#1990), so every Postgres restart that cut a transaction short would keep a
 * pool slot for good, and closing the pool (service stop) would wait for it forever. Released here
 * with its error, the pool discards the connection; the holder's own release, if it comes, does nothing.
 */
function releaseDeadConnections(pool: pg.Pool): void {
  const watched = new WeakSet<pg.PoolClient>();
  const checkedOut = new WeakSet<pg.PoolClient>();
  pool.on('release', (_err, client) => { checkedOut.delete(client); });
  pool.on('acquire', (client) => {
    checkedOut.add(client);
    if (watched.has(client)) return;
    watched.add(client);
    client.on('error', (e) => {
      // An idle connection's error is the pool's own business: it removes the connection itself.
      if (!checkedOut.has(client)) return;
      checkedOut.delete(client);
      const release = client.release;
      client.release = () => {};
      release(e);
    });
  });
}

/** MikroORM's own log lines go to ours: warnings and errors always, the rest at debug level. */
function ormLogger(log: Logger): OrmLogger {
  let debugMode: boolean | LoggerNamespace[] = false;
  const enabled = (ns: string) => debugMode === true || (Array.isArray(debugMode) && debugMode.includes(ns as LoggerNamespace));
  return {
    log: (ns, message) => { if (enabled(ns)) log.debug(message, { component: 'mikro-orm', namespace: ns }); },
    warn: (ns, message) => log.warn(message, { component: 'mikro-orm', namespace: ns }),
    error: (ns, message) => log.error(message, { component: 'mikro-orm', namespace: ns }),
    logQuery: (ctx) => { if (enabled('query')) log.debug('query', { component: 'mikro-orm', query: ctx.query ?? null, took: ctx.took ?? null }); },
    setDebugMode: (mode) => { debugMode = mode; },
    isEnabled: (ns) => enabled(ns),
  };
}

/**
 * Open the database named in `databaseUrl`: create it if missing, run pending migrations (one instance
 * at a time), and return the ORM. Throws UnreachableError (one line, password redacted) when Postgres
 * cannot be reached within `connectTimeoutMs`.
 */
export async function openDatabase(databaseUrl: string, log: Logger, opts: DatabaseOptions = {}): Promise<Database> {
  const timeoutMs = opts.connectTimeoutMs ?? 5000;
  let parsed: URL;
  try { parsed = new URL(databaseUrl); } catch { throw new ConfigError('DATABASE_URL', `not a URL: ${JSON.stringify(redactUrl(databaseUrl))}`); }
  const dbName = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  if (!dbName) throw new ConfigError('DATABASE_URL', `names no database: ${redactUrl(databaseUrl)}`);

  const lockClient = await connectOrCreate(databaseUrl, dbName, timeoutMs, log);
  let orm: MikroORM | undefined;
  try {
    orm = await MikroORM.init({
      clientUrl: databaseUrl,
      dbName,
      entities: ENTITIES,
      extensions: [Migrator],
      // The database was created above; MikroORM's own check would only repeat it.
      ensureDatabase: false,
      // The delivery log's tables are written and read only by set-based SQL (src/deliverylog), with no entity.
      schemaGenerator: { skipTables: ['attempt_log', 'delivery_log', 'attempt_rates'] },
      pool: { min: 0, max: opts.poolSize ?? 10, idleTimeoutMillis: 30_000 },
      // Also bounds the wait for a pooled connection, so an overloaded pool fails instead of hanging.
      driverOptions: { connectionTimeoutMillis: timeoutMs },
      loggerFactory: () => ormLogger(log),
      migrations: {
        migrationsList: MIGRATIONS,
        transactional: true,
        allOrNothing: true,
        // No snapshot files: the migrations in code are the whole truth.
        snapshot: false,
        silent: true,
      },
    });
    releaseDeadConnections(await orm.em.getConnection().getNativeClient());
    await lockClient.query('select pg_advisory_lock($1)', [MIGRATION_LOCK.toString()]);
    const migrator = orm.migrator;
    migrator.on('migrated', (m) => log.info('applied migration', { migration: m.name }));
    await migrator.up();
    await lockClient.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK.toString()]);
    return orm;
  } catch (e) {
    await orm?.close(true).catch(() => {});
    if (isPostgresUnavailable(e)) throw failure(databaseUrl, e);
    const message = `migrating the database at ${redactUrl(databaseUrl)} failed: ${describe(e)}`;
    const code = pgCode(e);
    if (code?.startsWith('42') || code?.startsWith('0A')) throw new SchemaError(ErrorCode.Internal, message, { cause: e });
    throw new HookstreamError(ErrorCode.Internal, message, { cause: e });
  } finally {
    await lockClient.end().catch(() => {});
  }
}

export async function closeDatabase(orm: Database): Promise<void> {
  await orm.close();
}
