// Configuration comes from environment variables only, read and validated once at start-up; a bad
// value fails with a ConfigError naming the variable. Only the wiring (src/service.ts, the CLI) reads it.
import { ConfigError } from './errors.ts';
import { formatDuration, parseDuration } from './domain/duration.ts';
import { DEFAULT_MAX_EVENT_BYTES } from './domain/event-data.ts';
import { EVENTS_MAX_MSG_SIZE, MAX_EVENT_PARTITIONS } from '../streams/events.ts';
import { DELIVERY_MAX_BODY, MAX_DELIVERY_SHARDS, MAX_QUEUED_PER_ENDPOINT, QUEUE_RETENTION_MS } from '../streams/deliveries.ts';
import { ERASURE_INDEX_MAX_AGE_MS } from '../streams/erasure-index.ts';

export const ROLES = ['api', 'router', 'delivery', 'deadletter', 'admin', 'projector', 'console'] as const;
export type Role = (typeof ROLES)[number];

export interface Config {
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  databaseUrl: string;
  /** Whether NATS_URL / DATABASE_URL were set; when not, `serve` may run local servers (src/local/). */
  natsUrlSet: boolean;
  databaseUrlSet: boolean;
  host: string;
  port: number;
  /** Listener of /healthz, /readyz and /metrics, in every process; never the API's. */
  opsHost: string;
  /** 0 picks a free port. */
  opsPort: number;
  /** The operator console's listener (console role); never the API's. */
  consoleHost: string;
  consolePort: number;
  /** The console's NATS user: the operator user of nats.conf (it asks the admin subjects). */
  consoleNatsUser: string | undefined;
  consoleNatsPassword: string | undefined;
  /** Origins allowed to frame the tenant portal (PORTAL_FRAME_ANCESTORS); none: it cannot be framed. */
  portalFrameAncestors: string[];
  /** The API's base URL as tenants reach it (PUBLIC_URL): portal links are made from it, never from a request's Host. */
  publicUrl: string | undefined;
  dataDir: string;
  production: boolean;
  roles: Role[];
  /** HOOKSTREAM_API_THREAD: a process running API-side and delivery-side roles runs the API side in a thread of its own. */
  apiThread: boolean;
  /** Delays before retries 1..n; n is max_retries. */
  retrySchedule: number[];
  attemptTimeoutMs: number;
  /** HOOKSTREAM_SHUTDOWN_TIMEOUT: how long a stop lets in-flight work finish before it closes what is left. */
  shutdownTimeoutMs: number;
  /** HOOKSTREAM_DISABLE_AFTER: an endpoint failing this long with no success is disabled; 0 never. */
  disableAfterMs: number;
  /** HOOKSTREAM_DEAD_LETTER_BACKSTOP; 0: off. */
  deadLetterBackstopMs: number;
  /** HOOKSTREAM_DEAD_LETTER_RETENTION; 0 keeps dead letters. */
  deadLetterRetentionMs: number;
  /** HOOKSTREAM_ATTEMPT_RETENTION: how long the delivery log keeps attempts; 0 keeps them. */
  attemptRetentionMs: number;
  allowPrivateTargets: boolean;
  /** HOOKSTREAM_FORWARD_TRACEPARENT: attempts send receivers a `traceparent` (when tracing is on). */
  forwardTraceparent: boolean;
  /** HOOKSTREAM_SEAL_DELIVERIES: the router seals delivery bodies under data keys (crypto-shredding). */
  sealDeliveries: boolean;
  /** Each endpoint's lanes in a delivery process: its concurrent attempts there. */
  maxInFlightPerEndpoint: number;
  /** HOOKSTREAM_MAX_QUEUED: deliveries one endpoint's queue holds; the next is refused and recorded. */
  maxQueuedPerEndpoint: number;
  /** HOOKSTREAM_QUEUE_RETENTION: a delivery still queued this long after it was routed is removed unsent. */
  queueRetentionMs: number;
  /** Number of DELIVERIES streams endpoints are spread over; fixed once streams exist. */
  deliveryShards: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: partition streams nats-server fills from EVENTS (0: none); fixed once set. */
  eventPartitions: number;
  /**
   * HOOKSTREAM_DIRECT_DELIVERY: endpoints without ordering read their events from their tenant's partition
   * stream through a consumer of their own, not from a copy the router queues (needs the partitions).
   */
  directDelivery: boolean;
  /** Copies of every stream and durable consumer on a NATS cluster (1 on a single server). */
  replicas: number;
  rateLimitPerSecond: number;
  /** Failed authentications a source address (or key prefix) may make at once before 429s; 0: no limit. */
  authFailureBurst: number;
  /** Largest event body the router accepts; larger ones are rejected (too_large). */
  maxEventBytes: number;
  masterKey: string | undefined;
  deadLetterPublicKey: string | undefined;
  deadLetterSecretKey: string | undefined;
  /** Rotation: the master key before HOOKSTREAM_MASTER_KEY; what was sealed under it still opens. */
  previousMasterKey: string | undefined;
  /** Rotation: the dead-letter secret key before HOOKSTREAM_DEAD_LETTER_SECRET_KEY (admin role). */
  previousDeadLetterSecretKey: string | undefined;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
}

export const DEFAULT_RETRY_SCHEDULE = '5s,30s,2m,15m,1h,4h,10h,14h';

type Env = Record<string, string | undefined>;

/** Every variable with its default and meaning; the README's table and `hookstream --help` come from here. */
export const VARIABLES: { name: string; default: string; meaning: string }[] = [
  { name: 'NATS_URL', default: 'nats://127.0.0.1:4222', meaning: 'NATS server(s), comma-separated' },
  { name: 'NATS_USER', default: '', meaning: 'NATS user (see nats.conf)' },
  { name: 'NATS_PASSWORD', default: '', meaning: 'NATS password' },
  { name: 'NATS_SERVER_BIN', default: '', meaning: 'the nats-server binary (2.10 or later) `npm start` runs when no NATS answers (default: from PATH, /usr/sbin, /usr/local/sbin when 2.10 or later, else Debian stable\'s, downloaded into .cache/)' },
  { name: 'DATABASE_URL', default: 'postgres://postgres@127.0.0.1:5432/hookstream', meaning: 'Postgres; the database is created if missing' },
  { name: 'HOST', default: '127.0.0.1', meaning: 'API listen address' },
  { name: 'PORT', default: '8080', meaning: 'API listen port' },
  { name: 'OPS_HOST', default: '127.0.0.1', meaning: 'listen address of /healthz, /readyz and /metrics (every process)' },
  { name: 'OPS_PORT', default: '9090', meaning: 'listen port of /healthz, /readyz and /metrics; 0 picks a free port' },
  { name: 'CONSOLE_HOST', default: '127.0.0.1', meaning: 'listen address of the operator console (console role)' },
  { name: 'CONSOLE_PORT', default: '8090', meaning: 'listen port of the operator console; 0 picks a free port' },
  { name: 'CONSOLE_NATS_USER', default: '', meaning: 'NATS user of the console (the operator user of nats.conf)' },
  { name: 'CONSOLE_NATS_PASSWORD', default: '', meaning: 'its NATS password' },
  { name: 'PUBLIC_URL', default: '', meaning: 'the API\'s base URL as tenants reach it (https://hooks.example.com): portal links point there; unset, to the API\'s listen address' },
  { name: 'PORTAL_FRAME_ANCESTORS', default: '', meaning: 'origins (https://dashboard.example.com, comma-separated) that may frame the tenant portal' },
  { name: 'HOOKSTREAM_DATA_DIR', default: '.hookstream', meaning: 'where development keys, and the data of the local Postgres and nats-server `npm start` runs when none answers, are kept' },
  { name: 'HOOKSTREAM_ROLES', default: ROLES.join(','), meaning: 'roles this process runs' },
  { name: 'HOOKSTREAM_API_THREAD', default: '1', meaning: 'a process running the api or console role with router, delivery, deadletter or admin runs the api, console and endpoint projection in a thread of their own (own event loop and heap); 0 keeps every role in one thread' },
  { name: 'HOOKSTREAM_RETRY_SCHEDULE', default: DEFAULT_RETRY_SCHEDULE, meaning: 'delays before retries 1..n (n = max_retries)' },
  { name: 'HOOKSTREAM_ATTEMPT_TIMEOUT', default: '15s', meaning: 'time limit of one delivery attempt' },
  { name: 'HOOKSTREAM_DISABLE_AFTER', default: '5d', meaning: 'an endpoint whose attempts all failed this long, with no success, is disabled (failing); 0 never' },
  { name: 'HOOKSTREAM_ALLOW_PRIVATE_TARGETS', default: '0', meaning: '1 allows http:// and loopback/private targets (development, tests)' },
  { name: 'HOOKSTREAM_SEAL_DELIVERIES', default: '1', meaning: '0 has the router queue delivery bodies unsealed (only while a version that cannot open them still delivers: a rolling upgrade)' },
  { name: 'HOOKSTREAM_FORWARD_TRACEPARENT', default: '0', meaning: '1 sends receivers a traceparent header naming the attempt\'s span (unsigned; only while tracing is on)' },
  { name: 'HOOKSTREAM_MAX_IN_FLIGHT', default: '16', meaning: 'concurrent attempts per endpoint, per delivery process; a failing endpoint is probed with one' },
  { name: 'HOOKSTREAM_DEAD_LETTER_RETENTION', default: '30d', meaning: 'dead letters are deleted this long after they died (or were last replayed); 0 keeps them' },
  { name: 'HOOKSTREAM_ATTEMPT_RETENTION', default: '7d', meaning: 'the delivery log (every attempt, for operators) keeps attempts this long; 0 keeps them' },
  { name: 'HOOKSTREAM_DEAD_LETTER_BACKSTOP', default: '1m', meaning: 'how often the dead-letter role looks for dead deliveries whose advisory was lost; 0 never' },
  { name: 'HOOKSTREAM_MAX_QUEUED', default: '100000', meaning: 'deliveries one endpoint\'s queue holds; beyond it new ones are dropped, counted and recorded (the same on every instance)' },
  { name: 'HOOKSTREAM_QUEUE_RETENTION', default: formatDuration(QUEUE_RETENTION_MS), meaning: `a delivery still queued this long after it was routed (held for a disabled endpoint, say) is removed unsent; shorter than the erasure index's ${formatDuration(ERASURE_INDEX_MAX_AGE_MS)}, longer than the retry schedule (the same on every instance)` },
  { name: 'HOOKSTREAM_DELIVERY_SHARDS', default: '128', meaning: 'DELIVERIES streams endpoints are spread over (fixed once created)' },
  { name: 'HOOKSTREAM_DIRECT_DELIVERY', default: '0', meaning: '1 has each endpoint without ordering read its events from its tenant\'s partition stream, not from a copy the router queues (experimental; needs HOOKSTREAM_EVENT_PARTITIONS; 0 after 1 turns it off, 30 s after the first such start; on again only once that is drained)' },
  { name: 'HOOKSTREAM_EVENT_PARTITIONS', default: '0', meaning: `partition streams EVENTS_<p> that nats-server fills from EVENTS, for the next delivery path (0 to ${MAX_EVENT_PARTITIONS}; fixed once set; 0: none)` },
  { name: 'HOOKSTREAM_REPLICAS', default: '1', meaning: 'copies of every stream and consumer: 1 on one NATS server, 3 on a three-node cluster' },
  { name: 'HOOKSTREAM_RATE_LIMIT', default: '100', meaning: 'API requests per second per API key' },
  { name: 'HOOKSTREAM_AUTH_FAILURE_BURST', default: '20', meaning: 'failed authentications (API keys, portal and console cookies, console sign-ins) a source address or key prefix may make at once, then one a second, before 429s without a lookup; 0 turns it off' },
  { name: 'HOOKSTREAM_MAX_EVENT_BYTES', default: String(DEFAULT_MAX_EVENT_BYTES), meaning: 'largest event body accepted, in bytes (at most 262144); larger events are rejected' },
  { name: 'HOOKSTREAM_MASTER_KEY', default: '(generated in development)', meaning: 'base64 32-byte key sealing signing secrets and keying webhook ids' },
  { name: 'HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY', default: '(generated in development)', meaning: 'base64 X25519 public key sealing dead letters' },
  { name: 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY', default: '(generated in development)', meaning: 'base64 X25519 secret key opening dead letters (admin role only)' },
  { name: 'HOOKSTREAM_PREVIOUS_MASTER_KEY', default: '', meaning: 'during a rotation: the master key before HOOKSTREAM_MASTER_KEY; its sealed secrets and webhook ids still open' },
  { name: 'HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY', default: '', meaning: 'during a rotation: the dead-letter secret key before the current one (admin role); its dead letters still open' },
  { name: 'HOOKSTREAM_LOG_LEVEL', default: 'info', meaning: 'debug, info, warn or error' },
  { name: 'NODE_ENV', default: '', meaning: 'production refuses to start without keys' },
];

function str(env: Env, name: string, fallback: string): string {
  const v = env[name];
  return v === undefined || v.trim() === '' ? fallback : v.trim();
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = str(env, name, String(fallback));
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `expected a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `expected a whole number from ${min} to ${max}, got ${n}`);
  return n;
}

function duration(name: string, raw: string): number {
  const ms = parseDuration(raw);
  if (ms === undefined) throw new ConfigError(name, `expected a duration like 500ms, 5s, 5m or 2h, got ${JSON.stringify(raw)}`);
  return ms;
}

/**
 * HOOKSTREAM_QUEUE_RETENTION (issue 22). Shorter than the erasure index's entries, or erasure could miss a
 * delivery held longer than them; longer than every attempt of the retry schedule, or a failing delivery
 * would vanish instead of becoming a dead letter.
 */
function queueRetention(env: Env, retrySchedule: number[], attemptTimeoutMs: number): number {
  const name = 'HOOKSTREAM_QUEUE_RETENTION';
  const ms = duration(name, str(env, name, formatDuration(QUEUE_RETENTION_MS)));
  if (ms >= ERASURE_INDEX_MAX_AGE_MS) {
    throw new ConfigError(name, `is ${formatDuration(ms)} but must be shorter than the erasure index's ${formatDuration(ERASURE_INDEX_MAX_AGE_MS)}, so erasure finds every queued delivery (default ${formatDuration(QUEUE_RETENTION_MS)})`);
  }
  const attempts = retrySchedule.reduce((sum, d) => sum + d, 0) + (retrySchedule.length + 1) * attemptTimeoutMs;
  if (ms <= attempts) {
    throw new ConfigError(name, `is ${formatDuration(ms)} but must be longer than HOOKSTREAM_RETRY_SCHEDULE with every attempt's HOOKSTREAM_ATTEMPT_TIMEOUT (${formatDuration(attempts)}), so a failing delivery becomes a dead letter instead of expiring`);
  }
  return ms;
}

/** A duration, or 0 for never. */
function durationOrNever(env: Env, name: string, fallback: string): number {
  const raw = str(env, name, fallback);
  return raw === '0' ? 0 : duration(name, raw);
}

function flag(env: Env, name: string, fallback = '0'): boolean {
  const raw = str(env, name, fallback).toLowerCase();
  if (['1', 'true', 'yes'].includes(raw)) return true;
  if (['0', 'false', 'no'].includes(raw)) return false;
  throw new ConfigError(name, `expected 1 or 0, got ${JSON.stringify(raw)}`);
}

function url(env: Env, name: string, fallback: string, protocols: string[], list = false): string {
  const raw = str(env, name, fallback);
  // Only NATS_URL is a list; splitting any other URL would cut a password with a comma in it.
  for (const one of list ? raw.split(',') : [raw]) {
    let parsed: URL;
    try { parsed = new URL(one.trim()); } catch { throw new ConfigError(name, `not a URL: ${JSON.stringify(redactUrl(one))}`); }
    if (!protocols.includes(parsed.protocol)) throw new ConfigError(name, `expected ${protocols.join(' or ')} URL, got ${parsed.protocol}`);
  }
  return raw;
}

/** A list of origins (scheme, host and port, nothing else), as a CSP frame-ancestors source list takes them. */
function origins(env: Env, name: string): string[] {
  const out: string[] = [];
  for (const raw of str(env, name, '').split(/[\s,]+/).filter(Boolean)) {
    let origin: string | undefined;
    try { origin = new URL(raw).origin; } catch { origin = undefined; }
    if (!origin || origin === 'null' || origin !== raw.replace(/\/$/, '') || !/^https?:$/.test(new URL(raw).protocol)) {
      throw new ConfigError(name, `expected origins such as https://dashboard.example.com, got ${JSON.stringify(raw)}`);
    }
    out.push(origin);
  }
  return out;
}

/** PUBLIC_URL: one origin (scheme, host, port), or none. */
function publicUrl(env: Env): string | undefined {
  const given = origins(env, 'PUBLIC_URL');
  if (given.length > 1) throw new ConfigError('PUBLIC_URL', 'expected one origin such as https://hooks.example.com');
  return given[0];
}

/** A URL with any password replaced, for messages. */
export function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    // Unparseable, often because the password holds '/', '@' or '#': hide everything up to the last '@'.
    const at = raw.lastIndexOf('@');
    if (at < 0) return raw;
    const start = raw.indexOf('//');
    return (start >= 0 && start < at ? raw.slice(0, start + 2) : '') + '***' + raw.slice(at);
  }
}

const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '[::]']);

/** Whether listeners on these two addresses would take the same port (a wildcard takes it on every address). */
function sameInterface(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase() || WILDCARD_HOSTS.has(a) || WILDCARD_HOSTS.has(b);
}

export function loadConfig(env: Env = process.env): Config {
  const rolesRaw = str(env, 'HOOKSTREAM_ROLES', ROLES.join(','));
  const roles = rolesRaw.split(',').map((r) => r.trim()).filter(Boolean);
  if (roles.length === 0) throw new ConfigError('HOOKSTREAM_ROLES', `names no role; roles are ${ROLES.join(', ')}`);
  for (const r of roles) {
    if (!(ROLES as readonly string[]).includes(r)) throw new ConfigError('HOOKSTREAM_ROLES', `unknown role ${JSON.stringify(r)}; roles are ${ROLES.join(', ')}`);
  }
  const scheduleRaw = str(env, 'HOOKSTREAM_RETRY_SCHEDULE', DEFAULT_RETRY_SCHEDULE);
  const retrySchedule = scheduleRaw.split(',').map((d) => duration('HOOKSTREAM_RETRY_SCHEDULE', d));
  if (retrySchedule.length > 50) throw new ConfigError('HOOKSTREAM_RETRY_SCHEDULE', 'at most 50 retries');
  const attemptTimeoutMs = duration('HOOKSTREAM_ATTEMPT_TIMEOUT', str(env, 'HOOKSTREAM_ATTEMPT_TIMEOUT', '15s'));
  if (attemptTimeoutMs > 5 * 60_000) throw new ConfigError('HOOKSTREAM_ATTEMPT_TIMEOUT', 'at most 5m');
  const shutdownTimeoutMs = duration('HOOKSTREAM_SHUTDOWN_TIMEOUT', str(env, 'HOOKSTREAM_SHUTDOWN_TIMEOUT', '10s'));
  if (shutdownTimeoutMs < 100 || shutdownTimeoutMs > 10 * 60_000) throw new ConfigError('HOOKSTREAM_SHUTDOWN_TIMEOUT', 'from 100ms to 10m');
  const host = str(env, 'HOST', '127.0.0.1');
  const port = int(env, 'PORT', 8080, 0, 65535);
  const opsHost = str(env, 'OPS_HOST', '127.0.0.1');
  const opsPort = int(env, 'OPS_PORT', 9090, 0, 65535);
  // Caught here with a clear message rather than as EADDRINUSE at start-up; PORT is only listened on with the api role.
  if (roles.includes('api') && port !== 0 && opsPort === port && sameInterface(host, opsHost)) {
    throw new ConfigError('OPS_PORT', `${opsPort} is also the API's PORT on ${host}; the ops listener needs a port of its own`);
  }
  const consoleHost = str(env, 'CONSOLE_HOST', '127.0.0.1');
  const consolePort = int(env, 'CONSOLE_PORT', 8090, 0, 65535);
  if (roles.includes('console') && consolePort !== 0) {
    if (roles.includes('api') && consolePort === port && sameInterface(host, consoleHost)) {
      throw new ConfigError('CONSOLE_PORT', `${consolePort} is also the API's PORT on ${host}; the console needs a port of its own`);
    }
    if (consolePort === opsPort && sameInterface(opsHost, consoleHost)) throw new ConfigError('CONSOLE_PORT', `${consolePort} is also OPS_PORT on ${opsHost}`);
  }
  const level = str(env, 'HOOKSTREAM_LOG_LEVEL', 'info');
  if (!['debug', 'info', 'warn', 'error'].includes(level)) throw new ConfigError('HOOKSTREAM_LOG_LEVEL', `expected debug, info, warn or error, got ${JSON.stringify(level)}`);
  const eventPartitions = int(env, 'HOOKSTREAM_EVENT_PARTITIONS', 0, 0, MAX_EVENT_PARTITIONS);
  const directDelivery = flag(env, 'HOOKSTREAM_DIRECT_DELIVERY');
  if (directDelivery && eventPartitions === 0) {
    throw new ConfigError('HOOKSTREAM_DIRECT_DELIVERY', 'is 1 but HOOKSTREAM_EVENT_PARTITIONS is 0: endpoints read their tenant\'s partition stream, so set HOOKSTREAM_EVENT_PARTITIONS (16, say) too');
  }
  return {
    natsUrl: url(env, 'NATS_URL', 'nats://127.0.0.1:4222', ['nats:', 'tls:', 'ws:', 'wss:'], true),
    natsUser: env['NATS_USER'] || undefined,
    natsPassword: env['NATS_PASSWORD'] || undefined,
    databaseUrl: url(env, 'DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/hookstream', ['postgres:', 'postgresql:']),
    natsUrlSet: str(env, 'NATS_URL', '') !== '',
    databaseUrlSet: str(env, 'DATABASE_URL', '') !== '',
    host,
    port,
    opsHost,
    opsPort,
    consoleHost,
    consolePort,
    consoleNatsUser: env['CONSOLE_NATS_USER'] || undefined,
    consoleNatsPassword: env['CONSOLE_NATS_PASSWORD'] || undefined,
    portalFrameAncestors: origins(env, 'PORTAL_FRAME_ANCESTORS'),
    publicUrl: publicUrl(env),
    dataDir: str(env, 'HOOKSTREAM_DATA_DIR', '.hookstream'),
    production: env['NODE_ENV'] === 'production',
    roles: [...new Set(roles)] as Role[],
    retrySchedule,
    attemptTimeoutMs,
    shutdownTimeoutMs,
    disableAfterMs: durationOrNever(env, 'HOOKSTREAM_DISABLE_AFTER', '5d'),
    deadLetterBackstopMs: durationOrNever(env, 'HOOKSTREAM_DEAD_LETTER_BACKSTOP', '1m'),
    deadLetterRetentionMs: durationOrNever(env, 'HOOKSTREAM_DEAD_LETTER_RETENTION', '30d'),
    attemptRetentionMs: durationOrNever(env, 'HOOKSTREAM_ATTEMPT_RETENTION', '7d'),
    allowPrivateTargets: flag(env, 'HOOKSTREAM_ALLOW_PRIVATE_TARGETS'),
    forwardTraceparent: flag(env, 'HOOKSTREAM_FORWARD_TRACEPARENT'),
    sealDeliveries: flag(env, 'HOOKSTREAM_SEAL_DELIVERIES', '1'),
    apiThread: flag(env, 'HOOKSTREAM_API_THREAD', '1'),
    maxInFlightPerEndpoint: int(env, 'HOOKSTREAM_MAX_IN_FLIGHT', 16, 1, 1000),
    maxQueuedPerEndpoint: int(env, 'HOOKSTREAM_MAX_QUEUED', MAX_QUEUED_PER_ENDPOINT, 1, 10_000_000),
    queueRetentionMs: queueRetention(env, retrySchedule, attemptTimeoutMs),
    // 128: nats-server 2.9 slows with the consumers on a stream, so 5,000 endpoints need ~40 per stream to
    // keep the delivery rate (issue 5 bench, 5,000 endpoints: 8 shards 1.2-2.0k deliveries/s, 128 shards 3.5-3.8k).
    deliveryShards: int(env, 'HOOKSTREAM_DELIVERY_SHARDS', 128, 1, MAX_DELIVERY_SHARDS),
    eventPartitions,
    directDelivery,
    // JetStream allows at most 5 replicas.
    replicas: int(env, 'HOOKSTREAM_REPLICAS', 1, 1, 5),
    rateLimitPerSecond: int(env, 'HOOKSTREAM_RATE_LIMIT', 100, 1, 1_000_000),
    authFailureBurst: int(env, 'HOOKSTREAM_AUTH_FAILURE_BURST', 20, 0, 1_000_000),
    // EVENTS stores nothing larger, and the delivery body ({"type","data"} around it) must fit a DELIVERIES message.
    maxEventBytes: int(env, 'HOOKSTREAM_MAX_EVENT_BYTES', DEFAULT_MAX_EVENT_BYTES, 1024, Math.min(EVENTS_MAX_MSG_SIZE, DELIVERY_MAX_BODY - 1024)),
    masterKey: env['HOOKSTREAM_MASTER_KEY'] || undefined,
    deadLetterPublicKey: env['HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY'] || undefined,
    deadLetterSecretKey: env['HOOKSTREAM_DEAD_LETTER_SECRET_KEY'] || undefined,
    previousMasterKey: env['HOOKSTREAM_PREVIOUS_MASTER_KEY'] || undefined,
    previousDeadLetterSecretKey: env['HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY'] || undefined,
    logLevel: level as Config['logLevel'],
  };
}
