// The management API as a Koa app: request id and error envelope outermost, then a per-request
// EntityManager, per-key rate limiting (before the key is looked up), API key authentication, and the routes.
import Koa, { type Middleware } from 'koa';
import Router from '@koa/router';
import type { MikroORM } from '@mikro-orm/postgresql';
import { describeCatalogue } from '../domain/catalogue.ts';
import type { EndpointStore } from '../endpoints/store.ts';
import type { Logger } from '../log.ts';
import { OPS_PATHS } from '../ops/index.ts';
import { requireApiKey } from './auth.ts';
import { createFailureThrottle } from './auth-throttle.ts';
import type { Counter } from '../metrics.ts';
import { jsonBody } from './body.ts';
import { errorEnvelope } from './envelope.ts';
import { OPENAPI_DOCUMENT } from './openapi.ts';
import { rejectQuery } from './query.ts';
import { createRateLimiter, rateLimitByKey } from './rate-limit.ts';
import { createEarlyRefusal, createRefusalHolds, type RefuseEarly } from './early.ts';
import type { ApiState } from './state.ts';
import { webhookHandlers } from './webhooks.ts';
import type { TestEvents } from '../endpoints/test-event.ts';
import { emptyInput } from './input.ts';
import { createPortalLink } from '../portal/sessions.ts';
import { answerOnce, type AnswerOnceDeps } from './idempotency.ts';
import { activeTraceFields, TRACE_ID_HEADER, tracing } from '../telemetry/tracing.ts';

export interface ApiDeps {
  orm: MikroORM;
  store: EndpointStore;
  /** Resolves once the endpoint projection has applied stream sequence `seq`. */
  waitForProjection(seq: number): Promise<void>;
  /** The deployment's target policy for endpoint URLs (checkTargetUrl with allowPrivateTargets). */
  checkUrl(url: URL): string | undefined;
  /** Seals the answers kept for Idempotency-Key retries (HOOKSTREAM_MASTER_KEY). */
  sealer: AnswerOnceDeps['sealer'];
  rateLimitPerSecond: number;
  /** HOOKSTREAM_AUTH_FAILURE_BURST: failed authentications per source address or key prefix before 429s (0: unlimited). */
  authFailureBurst?: number;
  /** Counts requests refused by that throttle (`hookstream_auth_throttled_total`). */
  authThrottled?: Counter;
  /** The API's base URL as tenants reach it (PUBLIC_URL, else its listen address), without a trailing slash. */
  publicUrl(): string;
  log: Logger;
  /** Clock of the rate limiter in milliseconds (tests freeze it). */
  now?: () => number;
  /** POST /v1/webhooks/:id/test (the portal's "Send test event" too). */
  testEvents?: TestEvents;
  /** The tenant portal's pages (/portal, issue 19); they answer HTML of their own, outside the /v1 envelope. */
  portal?: Middleware;
}

export interface RouteInfo {
  method: string;
  /** Koa router syntax: /v1/webhooks/:id */
  path: string;
}

export interface Api {
  app: Koa<ApiState>;
  /** For startApiServer: answers the requests the middleware would refuse 429 before Koa sees them (early.ts). */
  refuseEarly: RefuseEarly;
  /** Every registered route (HEAD, which Koa answers for each GET, left out). */
  routes: RouteInfo[];
}

/**
 * Paths that need no API key. /healthz, /readyz and /metrics are served on the ops listener
 * (OPS_HOST:OPS_PORT), not here (the metrics name every tenant's endpoints); here they are routes of
 * nothing, so a probe still pointed at the API gets a plain 404 envelope rather than a 401.
 */
export const PUBLIC_PATHS: ReadonlySet<string> = OPS_PATHS;

export function createApi(deps: ApiDeps): Api {
  const log = deps.log.child({ component: 'api' });
  const router = new Router<ApiState>({ sensitive: true });
  const webhooks = webhookHandlers({ store: deps.store, waitForProjection: deps.waitForProjection, checkUrl: deps.checkUrl, sealer: deps.sealer, log, testEvents: deps.testEvents });
  const body = jsonBody();

  router.get('/v1/openapi.json', (ctx) => { rejectQuery(ctx.querystring); ctx.body = OPENAPI_DOCUMENT; });
  router.get('/v1/event-types', (ctx) => { rejectQuery(ctx.querystring); ctx.body = describeCatalogue(); });
  router.get('/v1/webhooks', webhooks.list);
  router.post('/v1/webhooks', body, webhooks.create);
  router.get('/v1/webhooks/:id', webhooks.get);
  router.patch('/v1/webhooks/:id', body, webhooks.update);
  router.delete('/v1/webhooks/:id', webhooks.remove);
  router.post('/v1/webhooks/:id/restore', body, webhooks.restore);
  router.post('/v1/webhooks/:id/rotate-secret', body, webhooks.rotateSecret);
  router.post('/v1/webhooks/:id/test', body, webhooks.sendTest);
  router.post('/v1/portal/sessions', body, async (ctx) => {
    rejectQuery(ctx.querystring);
    emptyInput(ctx.request.body);
    // The key's own: a link acts as the API key that asked, so another key's retry is another request.
    await answerOnce(ctx, { sealer: deps.sealer, log }, { route: 'portal-session', key: ctx.state.keyId }, async () => {
      const link = await createPortalLink(ctx.state.em, { tenant: ctx.state.tenant, keyId: ctx.state.keyId });
      // Never the request's Host header: anyone can name any host there, and the link carries a session's token.
      return { status: 201, body: { url: `${deps.publicUrl()}/portal/start?token=${link.token}`, expires_at: link.expiresAt.toISOString() } };
    });
  });

  const app = new Koa<ApiState>();
  // Every error is answered by errorEnvelope; Koa's own printing would only repeat (or leak) it.
  app.silent = true;
  app.on('error', (e: unknown) => log.warn('response failed', { reason: e instanceof Error ? e.message : String(e) }));
  // Traced: every answer names its trace (the request's server span, made by the http instrumentation).
  if (tracing.on) app.use((ctx, next) => { const ids = activeTraceFields(); if (ids) ctx.set(TRACE_ID_HEADER, ids.trace_id); return next(); });
  if (deps.portal) app.use(deps.portal);
  // A 429 answered here (a tenant's writes a second) is held like the early ones (early.ts) for a connection
  // that did not wait the last one's retry-after: a client looping on it makes a request a second, not hundreds.
  const holds = createRefusalHolds();
  app.use(async (ctx, next) => {
    await next();
    if (ctx.status !== 429) return;
    const retryAfter = Number(ctx.response.get('retry-after')) || 1;
    await new Promise<void>((resolve) => holds.refuse(ctx.req.socket, retryAfter, resolve));
  });
  // The service's own time on an authenticated request (Server-Timing, which browsers' developer tools
  // show): a tenant can tell it from the network's and its client's. Not on a refusal before the key is
  // known, where it would only time the key lookup for whoever guesses keys.
  app.use(async (ctx, next) => {
    const started = performance.now();
    await next();
    if (ctx.state.tenant !== undefined) ctx.set('server-timing', `app;dur=${(performance.now() - started).toFixed(1)}`);
  });
  app.use(errorEnvelope(log));
  // Forked when first used: a request refused before (its rate, a throttled source) costs no fork.
  app.use(async (ctx, next) => {
    let em: ApiState['em'] | undefined;
    Object.defineProperty(ctx.state, 'em', { get: () => (em ??= deps.orm.em.fork()), configurable: true, enumerable: true });
    return next();
  });
  const throttle = deps.authFailureBurst === 0 ? undefined : createFailureThrottle({ burst: deps.authFailureBurst, now: deps.now });
  const limiter = createRateLimiter({ perSecond: deps.rateLimitPerSecond, now: deps.now });
  const onThrottled = () => deps.authThrottled?.inc({ surface: 'api' });
  // The key's request rate first: over it, a request is refused before the key is looked up.
  app.use(rateLimitByKey(limiter, PUBLIC_PATHS));
  app.use(requireApiKey(PUBLIC_PATHS, throttle, onThrottled));
  app.use(router.routes());
  app.use(router.allowedMethods());

  const routes = router.stack.flatMap((layer) =>
    layer.methods.filter((m) => m !== 'HEAD').map((method) => ({ method, path: String(layer.path) })));
  return { app, routes, refuseEarly: createEarlyRefusal({ limiter, throttle, publicPaths: PUBLIC_PATHS, onThrottled, holds }) };
}
