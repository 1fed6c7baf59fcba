// One delivery attempt as an HTTP POST: keep-alive pools per tenant and origin (one undici Agent per
// tenant), so one tenant's slow endpoints hold only its own share of sockets to a receiver host that other
// tenants use too; a hard deadline on the attempt once it is sent, no redirects, a bounded read of the
// answer, and every failure classified rather than thrown. Deciding what an outcome means for the message
// (ack, retry, dead) is the worker's job.
import type { IncomingHttpHeaders } from 'node:http';
import { Agent, errors as undiciErrors, type Dispatcher } from 'undici';
import { checkTargetUrl, createGuardedLookup, ForbiddenTargetError, type Resolver } from './target-policy.ts';

export const USER_AGENT = 'hookstream/0.1';
/** Bytes of a response body read at most; beyond that the body is destroyed, closing its connection. */
export const MAX_RESPONSE_READ = 4096;
/** Characters of the response body kept for operators. */
export const SNIPPET_LENGTH = 1024;
const MAX_ERROR_LENGTH = 500;
/** Sockets one tenant's pool opens to one origin, by default. */
export const CONNECTIONS_PER_ORIGIN = 128;
/** A tenant's pool unused this long (and with nothing in flight) is closed: idle tenants keep no sockets or agent. */
const POOL_IDLE_MS = 5 * 60_000;

/** `not_sent`: the POST never left, it waited for a connection when the sender stopped (no attempt). */
export type FailureKind = 'status' | 'timeout' | 'connection' | 'forbidden_target' | 'invalid_url' | 'not_sent';

export type AttemptOutcome =
  | { ok: true; status: number; durationMs: number; bodySnippet?: string }
  | {
    ok: false; kind: FailureKind; status: number | null; error: string; durationMs: number; bodySnippet?: string;
    /** The answer's Retry-After header as sent (only on a status failure that carried one); the worker interprets it. */
    retryAfter?: string;
  };

export type AttemptFailure = Extract<AttemptOutcome, { ok: false }>;

export interface SendRequest {
  url: string;
  /** Whose pool the attempt uses (the tenant): pools never share sockets. */
  pool?: string;
  headers: Record<string, string>;
  body: string | Buffer;
}

export interface HttpSender {
  send(req: SendRequest): Promise<AttemptOutcome>;
  /** Answer `not_sent` to every POST still waiting for a connection, at once, and to every later one (a stop). */
  stopWaiting(): void;
  /** Waits for in-flight attempts, then closes every pooled connection. */
  close(): Promise<void>;
}

export interface HttpSenderOptions {
  attemptTimeoutMs: number;
  allowPrivateTargets: boolean;
  /**
   * Most sockets one pool (tenant) opens to one origin; attempts beyond it wait for one, and their deadline
   * starts when they are sent: a wait is no attempt, and a pool's queue that timed out all at once would
   * fail hundreds of deliveries never sent in one burst.
   */
  connectionsPerOrigin?: number;
  /** DNS stand-in for tests of the resolved-address check; defaults to dns.lookup. */
  resolve?: Resolver;
}

class AttemptTimeoutError extends Error {
  constructor(ms: number) {
    super(`attempt timed out after ${ms}ms`);
    this.name = 'AttemptTimeoutError';
  }
}

export function createHttpSender(opts: HttpSenderOptions): HttpSender {
  const timeout = opts.attemptTimeoutMs;
  const newAgent = () => new Agent({
    connections: opts.connectionsPerOrigin ?? CONNECTIONS_PER_ORIGIN,
    pipelining: 1,
    // HTTP/1.1 only: undici 8 offers h2 by default, which would multiplex a whole origin onto one
    // session and make `connections` stop meaning concurrent attempts.
    allowH2: false,
    connectTimeout: timeout,
    headersTimeout: timeout,
    bodyTimeout: timeout,
    // Resolved addresses are checked on every new connection, so DNS rebinding after validation fails.
    ...(opts.allowPrivateTargets ? {} : { connect: { lookup: createGuardedLookup(opts.resolve) } }),
  });
  const pools = new Map<string, { agent: Agent; running: number; usedAt: number }>();
  const idleSweep = setInterval(() => {
    const before = performance.now() - POOL_IDLE_MS;
    for (const [key, pool] of pools) {
      if (pool.running > 0 || pool.usedAt > before) continue;
      pools.delete(key);
      void pool.agent.close();
    }
  }, POOL_IDLE_MS / 5);
  idleSweep.unref();
  const poolOf = (key: string) => {
    let pool = pools.get(key);
    if (!pool) pools.set(key, (pool = { agent: newAgent(), running: 0, usedAt: 0 }));
    return pool;
  };

  // An endpoint's URL is parsed and checked once, not on every attempt (a URL object and its origin each time).
  const targets = new Map<string, Target>();
  const targetOf = (url: string): Target => {
    let target = targets.get(url);
    if (!target) {
      if (targets.size >= MAX_TARGETS) targets.delete(targets.keys().next().value!);
      targets.set(url, (target = parseTarget(url, opts.allowPrivateTargets)));
    }
    return target;
  };

  /** Released (`not_sent`) by stopWaiting: the POSTs waiting for a connection. */
  const waiting = new Set<() => void>();
  let stopped = false;

  async function send(req: SendRequest): Promise<AttemptOutcome> {
    // From the moment the POST is sent (a wait for a pooled connection is not part of the attempt).
    let started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const fail = (kind: FailureKind, error: string, status: number | null = null, bodySnippet?: string): AttemptFailure => ({
      ok: false, kind, status, error: redact(error, req.headers), durationMs: elapsed(),
      ...(bodySnippet ? { bodySnippet } : {}),
    });

    if (stopped) return fail('not_sent', 'not sent: the sender stopped');
    const target = targetOf(req.url);
    if ('kind' in target) return fail(target.kind, target.error);

    let answer: Answer;
    const pool = poolOf(req.pool ?? '');
    pool.running++;
    try {
      answer = await exchange(pool.agent, {
        origin: target.origin,
        path: target.path,
        method: 'POST',
        headers: withUserAgent(req.headers),
        body: req.body,
      }, timeout, waiting, () => { started = performance.now(); });
    } catch (err) {
      return err instanceof NotSentError ? fail('not_sent', 'not sent: the sender stopped') : fail(classify(err), describeError(err));
    } finally {
      pool.running--;
      pool.usedAt = performance.now();
    }
    const { status, headers, head } = answer;
    const snippet = head.length > 0 ? sanitize(head.subarray(0, SNIPPET_LENGTH).toString('utf8')) : '';
    if (status >= 200 && status < 300) return { ok: true, status, durationMs: elapsed(), ...(snippet ? { bodySnippet: snippet } : {}) };
    if (status >= 300 && status < 400) {
      const location = headers['location'];
      const to = typeof location === 'string' ? ` to ${sanitize(location).slice(0, 200)}` : '';
      return fail('status', `HTTP ${status} redirect${to} (redirects are not followed)`, status, snippet);
    }
    const retryAfter = headers['retry-after'];
    const failed = fail('status', `HTTP ${status}`, status, snippet);
    // A repeated header arrives as an array; the first value is the one a receiver meant.
    const value = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
    return value === undefined ? failed : { ...failed, retryAfter: sanitize(value).slice(0, 100) };
  }

  return {
    send,
    stopWaiting() {
      stopped = true;
      for (const release of waiting) release();
    },
    async close() {
      clearInterval(idleSweep);
      await Promise.all([...pools.values()].map((p) => p.agent.close()));
      pools.clear();
    },
  };
}

/** URLs whose parse is kept (the oldest goes first): about one per endpoint a process delivers to. */
const MAX_TARGETS = 20_000;

const origins = new Map<string, string | undefined>();
/** The pool a tenant's POSTs to `url` wait in for a socket: the tenant's, to the URL's origin. */
export function socketPoolOf(tenant: string, url: string): string | undefined {
  let origin = origins.get(url);
  if (origin === undefined && !origins.has(url)) {
    if (origins.size >= MAX_TARGETS) origins.delete(origins.keys().next().value!);
    origin = URL.parse(url)?.origin;
    origins.set(url, origin);
  }
  return origin === undefined ? undefined : `${tenant} ${origin}`;
}

/** Where a URL's POSTs go, or why none may. */
type Target = { origin: string; path: string } | { kind: FailureKind; error: string };

function parseTarget(raw: string, allowPrivateTargets: boolean): Target {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { kind: 'invalid_url', error: 'not a valid URL' };
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return { kind: 'invalid_url', error: `unsupported scheme ${url.protocol}` };
  if (url.username || url.password) return { kind: 'invalid_url', error: 'URL must not carry credentials' };
  if (!allowPrivateTargets) {
    // IP-literal hosts never reach the guarded lookup (net.connect skips DNS for them): check here.
    const problem = checkTargetUrl(url, false);
    if (problem) return { kind: 'forbidden_target', error: `target ${problem}` };
  }
  return { origin: url.origin, path: url.pathname + url.search };
}

/** What an attempt keeps of an answer: its status, its headers, and the first MAX_RESPONSE_READ bytes of its body. */
interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  head: Buffer;
}

/** Ends the read of a body past MAX_RESPONSE_READ: the rest is not wanted, and its connection is closed. */
class EnoughReadError extends Error {}

/** Ends a POST still waiting for a connection when the sender stops. */
class NotSentError extends Error {}

/**
 * One POST through undici's dispatch API, settled by the answer's end (or by an error) with what was read.
 *
 * Not `agent.request()`: its stream body and async-resource machinery kept attempts' objects alive past
 * V8's young generation (2.5 MB promoted per scavenge at 1,000 POSTs/s in a loop doing nothing else, and
 * scavenges of 10-20 ms); the same loop through a plain handler promotes nothing (issue 13, README).
 *
 * The status decides the attempt; the body is read only for the operators' snippet and to free the
 * connection, so a body that fails, stalls or runs long after the status leaves the status standing (past
 * MAX_RESPONSE_READ bytes the read is aborted, which closes that connection: undici cannot pool a socket
 * with unread data). The deadline starts when undici sends the request (`onStart`); until then the POST
 * is in `waiting`, whose entry ends it unsent.
 */
function exchange(agent: Dispatcher, options: Dispatcher.DispatchOptions, timeoutMs: number, waiting: Set<() => void>, onStart: () => void): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    let status = 0;
    let headers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const answer = () => ({ status, headers, head: Buffer.concat(chunks, size).subarray(0, MAX_RESPONSE_READ) });
    let timer: NodeJS.Timeout | undefined;
    let notSent: NotSentError | undefined;
    const release = () => {
      notSent = new NotSentError();
      settle(() => reject(notSent));
    };
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      waiting.delete(release);
      outcome();
    };
    waiting.add(release);
    agent.dispatch(options, {
      onRequestStart(c) {
        // Released while it waited: undici starts it now, and it ends before anything is written.
        if (notSent) return c.abort(notSent);
        waiting.delete(release);
        onStart();
        timer = setTimeout(() => {
          const timedOut = new AttemptTimeoutError(timeoutMs);
          c.abort(timedOut);
          settle(() => (status ? resolve(answer()) : reject(timedOut)));
        }, timeoutMs);
      },
      onResponseStart(_c, statusCode, responseHeaders) {
        status = statusCode;
        headers = responseHeaders;
      },
      onResponseData(c, chunk) {
        if (size >= MAX_RESPONSE_READ) return;
        chunks.push(chunk);
        size += chunk.length;
        if (size >= MAX_RESPONSE_READ) c.abort(new EnoughReadError());
      },
      onResponseEnd() {
        settle(() => resolve(answer()));
      },
      onResponseError(_c, err) {
        // After the status: reset, timeout, abort or enough read mid-body; what was read is enough.
        settle(() => (status ? resolve(answer()) : reject(err)));
      },
    });
  });
}

function withUserAgent(headers: Record<string, string>): Record<string, string> {
  for (const k in headers) if (k.length === 10 && k.toLowerCase() === 'user-agent') return headers;
  return { ...headers, 'user-agent': USER_AGENT };
}

/** Every error of an error, its causes and an AggregateError's members (happy eyeballs raises those). */
function* chain(err: unknown, depth = 0): Generator<unknown> {
  if (err === undefined || err === null || depth > 5) return;
  yield err;
  if (err instanceof AggregateError) for (const e of err.errors) yield* chain(e, depth + 1);
  if (err instanceof Error) yield* chain(err.cause, depth + 1);
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

function classify(err: unknown): FailureKind {
  for (const e of chain(err)) {
    if (e instanceof ForbiddenTargetError) return 'forbidden_target';
    if (e instanceof AttemptTimeoutError) return 'timeout';
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && TIMEOUT_CODES.has(code)) return 'timeout';
  }
  if (err instanceof undiciErrors.InvalidArgumentError) return 'invalid_url';
  return 'connection';
}

function describeError(err: unknown): string {
  const forbidden = [...chain(err)].find((e) => e instanceof ForbiddenTargetError);
  if (forbidden) return forbidden.message;
  if (err instanceof AggregateError && err.errors.length) {
    return err.errors.map((e) => describeError(e)).join('; ');
  }
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    const message = err.message || err.name;
    return typeof code === 'string' && !message.includes(code) ? `${code}: ${message}` : message;
  }
  return String(err);
}

/**
 * Bound an error message and strip any request header value from it: headers carry signatures, and
 * error strings end up in logs and dead letters. No known undici message includes one; this makes sure.
 */
function redact(message: string, headers: Record<string, string>): string {
  let out = message;
  for (const value of Object.values(headers)) {
    if (value.length >= 8) out = out.split(value).join('[redacted]');
  }
  out = sanitize(out);
  return out.length > MAX_ERROR_LENGTH ? `${out.slice(0, MAX_ERROR_LENGTH)}…` : out;
}

/** Printable text only: control characters (and invalid UTF-8, already U+FFFD) become spaces or go. */
function sanitize(text: string): string {
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufffd]/g, ' ').replace(/\s+/g, ' ').trim();
}
