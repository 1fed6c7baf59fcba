// The tenant portal (issue 19), served on the API's listener under /portal: a single-use link from
// POST /v1/portal/sessions starts a session that acts as the API key that asked for it (it ends with the
// key); every write goes through the same input checks and tenant-scoped store calls as /v1. Endpoints
// only: no delivery history. It may be framed only by the origins in PORTAL_FRAME_ANCESTORS.
import Router from '@koa/router';
import type { Context, Middleware } from 'koa';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createInput, updateInput } from '../api/input.ts';
import { createFailureThrottle } from '../api/auth-throttle.ts';
import { createRateLimiter } from '../api/rate-limit.ts';
import { endpointOut } from '../api/wire.ts';
import type { Asset } from '../console/assets.ts';
import { toString, type Html } from '../console/html.ts';
import { clearCookie, formRefusal, readCookie, readForm } from '../console/security.ts';
import { csrfTokenOf } from '../console/sessions.ts';
import type { CheckUrl } from '../domain/endpoint.ts';
import { isEndpointId, type EndpointId } from '../domain/ids.ts';
import { getEndpoint, listEndpoints } from '../endpoints/queries.ts';
import type { CommandResult, EndpointStore } from '../endpoints/store.ts';
import type { TestEvents } from '../endpoints/test-event.ts';
import { describe, ErrorCode, isHookstreamError, notFound } from '../errors.ts';
import type { Logger } from '../log.ts';
import { cataloguePage, endpointPage, endpointsPage, messagePage, secretPage, type Notice } from './pages.ts';
import { findPortalSession, PORTAL_SESSION_TTL_MS, redeemPortalLink, type PortalSessionInfo } from './sessions.ts';
import { holdWrite } from '../../projections/endpoints.ts';

export const PORTAL_COOKIE = 'hs_portal';

const COPY_SCRIPT = `// Copy buttons: <button data-copy="ID"> copies the text of the element with that id.
for (const b of document.querySelectorAll('button[data-copy]')) {
  b.addEventListener('click', async () => {
    const text = document.getElementById(b.dataset.copy).textContent;
    try { await navigator.clipboard.writeText(text); b.textContent = 'Copied'; } catch { b.textContent = 'Copy failed: select the text'; }
  });
}
`;

export interface PortalDeps {
  orm: MikroORM;
  store: EndpointStore;
  waitForProjection(seq: number): Promise<void>;
  checkUrl: CheckUrl;
  /** Origins that may frame the portal (PORTAL_FRAME_ANCESTORS); empty: none. */
  frameAncestors: string[];
  assets: Map<string, Asset>;
  /** "Send test event": a signed `webhook.test` delivery to one endpoint, under the tenant's writes quota. */
  testEvents: TestEvents;
  /** Requests per second per API key, as /v1 allows it (HOOKSTREAM_RATE_LIMIT), counted apart from /v1's. */
  rateLimitPerSecond: number;
  log: Logger;
}

interface PortalState {
  portal?: PortalSessionInfo;
}
type Ctx = Context & { state: PortalState };

/**
 * A session cookie that works inside the platform's dashboard frame: SameSite=None (sent in a third-party
 * frame) and Partitioned (kept apart per top-level site, where browsers block third-party cookies),
 * HttpOnly and Secure; forms carry the session's CSRF token and must come from the portal's own origin.
 */
const setPortalCookie = (ctx: Context, token: string, maxAge: number) =>
  ctx.append('Set-Cookie', `${PORTAL_COOKIE}=${token}; Path=/portal; Max-Age=${maxAge}; HttpOnly; Secure; SameSite=None; Partitioned`);

export function createPortal(deps: PortalDeps): Middleware {
  const { orm, store, log } = deps;
  const csp = [
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "form-action 'self'", "base-uri 'none'",
    `frame-ancestors ${deps.frameAncestors.length ? deps.frameAncestors.join(' ') : "'none'"}`,
  ].join('; ');
  const assets = new Map([...deps.assets].map(([path, a]) => [`/portal${path}`, a]));
  assets.set('/portal/assets/portal.js', { type: 'text/javascript; charset=utf-8', body: Buffer.from(COPY_SCRIPT) });
  const router = new Router<PortalState>({ sensitive: true, strict: true });
  const limiter = createRateLimiter({ perSecond: deps.rateLimitPerSecond });
  // Failed links and session cookies, per source address: a flood of them costs no lookups.
  const failures = createFailureThrottle();

  const send = (ctx: Ctx, body: Html, status = 200) => {
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = toString(body);
  };
  const session = (ctx: Ctx) => ctx.state.portal!;
  const csrf = (ctx: Ctx) => csrfTokenOf(session(ctx).token);
  const pathId = (ctx: Ctx): EndpointId => {
    const id = ctx.params['id'];
    if (!isEndpointId(id)) throw notFound('endpoint');
    return id;
  };
  /** The endpoint as the command left it, once the projection holds it (as /v1 answers writes). */
  async function after(r: CommandResult) {
    await holdWrite(orm.em.fork(), r, deps.waitForProjection, () => {}).catch(() => {});
    return endpointOut(r.endpoint);
  }
  async function list(ctx: Ctx) {
    return (await listEndpoints(orm.em.fork(), session(ctx).tenant, { limit: 100 })).rows.map(endpointOut);
  }
  async function postedForm(ctx: Ctx): Promise<URLSearchParams | undefined> {
    const form = await readForm(ctx);
    const refusal = formRefusal(ctx, session(ctx).token, form.get('csrf'));
    if (!refusal) return form;
    log.warn('portal form refused', { path: ctx.path, reason: refusal });
    send(ctx, messagePage('Form refused', `Refused: ${refusal}. Reload the page and try again.`), 403);
    return undefined;
  }
  /** A 422 (or 409) of the checks /v1 applies, as a notice naming each problem. */
  const problem = (e: unknown): Notice | undefined => (isHookstreamError(e) && (e.code === ErrorCode.ValidationFailed || e.code === ErrorCode.Conflict || e.code === ErrorCode.QuotaExceeded)
    ? { kind: 'error', text: e.message, details: e.details.map((d) => `${d.field}: ${d.message}`) }
    : undefined);
  /** The status of a refused form, as /v1 answers: 429 with Retry-After for a rate (writes a second), else 422. */
  const refusal = (ctx: Ctx, e: unknown): number => {
    if (!isHookstreamError(e, ErrorCode.QuotaExceeded) || e.retryAfterSeconds === undefined) return 422;
    ctx.set('Retry-After', String(e.retryAfterSeconds));
    return 429;
  };

  router.get('/portal/start', async (ctx) => {
    const token = typeof ctx.query['token'] === 'string' ? ctx.query['token'] : '';
    const admitted = failures.check(ctx.ip, undefined);
    if (!admitted.ok) {
      ctx.set('Retry-After', String(admitted.retryAfterSeconds));
      return send(ctx, messagePage('Too many requests', `Too many failed links from this address; try again in ${admitted.retryAfterSeconds} s.`), 429);
    }
    const s = await redeemPortalLink(orm.em.fork(), token);
    if (!s) failures.failed(ctx.ip);
    if (!s) return send(ctx, messagePage('Link not valid', 'This link was already used or has expired. Open the webhooks page from your dashboard again.'), 410);
    setPortalCookie(ctx, s.token, Math.floor(PORTAL_SESSION_TTL_MS / 1000));
    ctx.status = 303;
    ctx.redirect('/portal');
  });

  router.get('/portal', async (ctx) => send(ctx, endpointsPage(csrf(ctx), await list(ctx))));
  router.get('/portal/event-types', (ctx) => send(ctx, cataloguePage()));

  router.post('/portal/endpoints', async (ctx) => {
    const form = await postedForm(ctx);
    if (!form) return;
    const fields = {
      url: form.get('url') ?? '', events: form.getAll('events'), signature_scheme: form.get('signature_scheme') ?? 'v1', ordering: form.get('ordering') ?? 'none',
    };
    try {
      const r = await store.create(session(ctx).tenant, createInput(fields, deps.checkUrl));
      const e = await after(r);
      send(ctx, secretPage('Endpoint added', e.id, r.signingSecret
        ? { label: 'Its signing secret', value: r.signingSecret }
        : { label: 'Its public key (v1a; the private key never leaves the service)', value: e.signing_public_key ?? '' }), 201);
    } catch (e) {
      const n = problem(e);
      if (!n) throw e;
      send(ctx, endpointsPage(csrf(ctx), await list(ctx), n, fields), refusal(ctx, e));
    }
  });

  router.get('/portal/endpoints/:id', async (ctx) => {
    const row = await getEndpoint(orm.em.fork(), session(ctx).tenant, pathId(ctx));
    if (!row) throw notFound('endpoint');
    send(ctx, endpointPage(csrf(ctx), endpointOut(row)));
  });

  router.post('/portal/endpoints/:id', async (ctx) => {
    const form = await postedForm(ctx);
    if (!form) return;
    const id = pathId(ctx);
    try {
      const e = await after(await store.update(session(ctx).tenant, id, updateInput({
        url: form.get('url') ?? '', events: form.getAll('events'), ...(form.get('ordering') ? { ordering: form.get('ordering') } : {}),
      }, deps.checkUrl)));
      send(ctx, endpointPage(csrf(ctx), e, { kind: 'ok', text: 'Saved.' }));
    } catch (e) {
      const n = problem(e);
      const row = n && await getEndpoint(orm.em.fork(), session(ctx).tenant, id);
      if (!n || !row) throw e;
      send(ctx, endpointPage(csrf(ctx), endpointOut(row), n), refusal(ctx, e));
    }
  });

  for (const [path, verb] of [['delete', 'Deleted'], ['restore', 'Restored']] as const) {
    router.post(`/portal/endpoints/:id/${path}`, async (ctx) => {
      if (!(await postedForm(ctx))) return;
      const id = pathId(ctx);
      const r = path === 'delete' ? await store.delete(session(ctx).tenant, id) : await store.restore(session(ctx).tenant, id);
      send(ctx, endpointPage(csrf(ctx), await after(r), { kind: 'ok', text: `${verb}.` }));
    });
  }

  router.post('/portal/endpoints/:id/send-test', async (ctx) => {
    if (!(await postedForm(ctx))) return;
    const id = pathId(ctx);
    let n: Notice;
    let status = 200;
    try {
      await deps.testEvents.send(session(ctx).tenant, id);
      n = { kind: 'ok', text: 'Test event sent: your receiver gets a signed webhook.test delivery (retried like any other).' };
    } catch (e) {
      n = problem(e);
      if (!n) throw e;
      status = refusal(ctx, e);
    }
    const row = await getEndpoint(orm.em.fork(), session(ctx).tenant, id);
    if (!row) throw notFound('endpoint');
    send(ctx, endpointPage(csrf(ctx), endpointOut(row), n), status);
  });

  router.post('/portal/endpoints/:id/rotate-secret', async (ctx) => {
    if (!(await postedForm(ctx))) return;
    const r = await store.rotateSecret(session(ctx).tenant, pathId(ctx));
    const e = await after(r);
    send(ctx, secretPage('Secret rotated', e.id, r.signingSecret
      ? { label: 'The new signing secret (the old one keeps signing for 24 hours)', value: r.signingSecret }
      : { label: 'The new public key (the old pair keeps signing for 24 hours)', value: e.signing_public_key ?? '' }));
  });

  const routes = router.routes();
  const methods = router.allowedMethods();
  return async (ctx: Ctx, next) => {
    if (ctx.path !== '/portal' && !ctx.path.startsWith('/portal/')) return next();
    ctx.set('Content-Security-Policy', csp);
    if (!deps.frameAncestors.length) ctx.set('X-Frame-Options', 'DENY');
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'same-origin');
    ctx.set('Cache-Control', 'no-store');
    try {
      const asset = ctx.method === 'GET' || ctx.method === 'HEAD' ? assets.get(ctx.path) : undefined;
      if (asset) {
        ctx.set('Cache-Control', 'public, max-age=3600');
        ctx.type = asset.type;
        ctx.body = asset.body;
        return;
      }
      if (ctx.path !== '/portal/start') {
        const cookie = readCookie(ctx, PORTAL_COOKIE);
        // A source whose cookies keep failing is refused before the lookup (api/auth-throttle.ts).
        const admitted = failures.check(ctx.ip, cookie);
        if (!admitted.ok) {
          ctx.set('Retry-After', String(admitted.retryAfterSeconds));
          return send(ctx, messagePage('Too many requests', `Too many failed sessions from this address; try again in ${admitted.retryAfterSeconds} s.`), 429);
        }
        const s = await findPortalSession(orm.em.fork(), cookie);
        if (s) failures.succeeded(cookie!);
        else if (cookie) failures.failed(ctx.ip);
        if (!s) {
          clearCookie(ctx, PORTAL_COOKIE);
          return send(ctx, messagePage('Session ended', 'This page needs a portal link: open the webhooks page from your dashboard again.'), 401);
        }
        ctx.state.portal = s;
        const take = limiter.take(s.keyId);
        if (!take.ok) {
          ctx.set('Retry-After', String(take.retryAfterSeconds));
          return send(ctx, messagePage('Too many requests', `Too many requests; try again in ${take.retryAfterSeconds} s.`), 429);
        }
      }
      // The router's own context type adds what it sets itself (params, router).
      await routes(ctx as Parameters<typeof routes>[0], async () => {});
      await methods(ctx as Parameters<typeof methods>[0], async () => {});
      if (ctx.body === undefined && ctx.status === 404) send(ctx, messagePage('Not found', 'There is no such page or endpoint.'), 404);
    } catch (e) {
      if (isHookstreamError(e) && e.code === ErrorCode.NotFound) return send(ctx, messagePage('Not found', 'There is no such page or endpoint.'), 404);
      // A quota (delete, restore, rotate-secret over the writes a second) or a conflict: refused, not failed.
      if (isHookstreamError(e, ErrorCode.QuotaExceeded)) return send(ctx, messagePage('Refused', e.message), refusal(ctx, e));
      if (isHookstreamError(e, ErrorCode.Conflict)) return send(ctx, messagePage('Refused', e.message), 409);
      const status = (e as { status?: unknown }).status;
      if (typeof status === 'number' && status >= 400 && status < 500) return send(ctx, messagePage('Refused', describe(e)), status);
      log.error('portal request failed', { path: ctx.path, reason: describe(e) });
      send(ctx, messagePage('Something went wrong', 'Internal error; it was logged.'), 500);
    }
  };
}
