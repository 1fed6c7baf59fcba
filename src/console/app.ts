// The operator console as a Koa app (issue 19): one more client of the admin subjects (every page asks
// them as the signed-in operator, so the admin role's checks, answers and audit apply as for the CLI);
// Postgres only for operators and their sessions. Pages are server-rendered, forms are plain posts.
import Koa, { type Context } from 'koa';
import Router from '@koa/router';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { AdminClient } from '../admin/client.ts';
import type { DeadLettersReplayManyOut } from '../admin/protocol.ts';
import { createFailureThrottle } from '../api/auth-throttle.ts';
import { AUDIT_OK, AuditAction, recordAudit } from '../audit/store.ts';
import { isEndpointId } from '../domain/ids.ts';
import { ErrorCode, isHookstreamError, describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { createSampledWarnings } from '../sampled-log.ts';
import { authenticateOperator, isWellFormedOperatorKey, operatorKeyPrefix } from '../operators/store.ts';
import type { Asset } from './assets.ts';
import { toString, type Html } from './html.ts';
import type { Flash, Viewer } from './layout.ts';
import {
  auditPage, deadLetterFilterOf, openPayloadPage, deadLetterPage, deadLettersPage, deliveriesPage, deliveryPage, DELIVERY_SEARCH_FIELDS, endpointPage, endpointsPage, errorPage, overviewPage, rejectedPage,
  rejectedShowPage, replayAllConfirmPage, replayAllResultPage, signInPage, type Query,
} from './pages.ts';
import {
  clearCookie, formRefusal, PRE_SESSION_COOKIE, readCookie, readForm, SESSION_COOKIE, setCookie, setSecurityHeaders,
} from './security.ts';
import { createSession, csrfTokenOf, deleteSession, findSession, SESSION_TTL_MS, type Session } from './sessions.ts';
import { isToken, newToken } from '../crypto/tokens.ts';

export interface ConsoleDeps {
  orm: MikroORM;
  /** An admin client whose requests name this operator (the audit log's name). */
  admin(operator: string): AdminClient;
  assets: Map<string, Asset>;
  log: Logger;
  /** Failed sign-ins (and session cookies) per client address or operator key prefix: a burst of this many, then one per 6 s (default 10). */
  signInBurst?: number;
}

interface State {
  session?: Session;
}

type Ctx = Context & { state: State };

const STATUS: Partial<Record<string, number>> = {
  [ErrorCode.BadRequest]: 400, [ErrorCode.ValidationFailed]: 400, [ErrorCode.NotFound]: 404, [ErrorCode.Conflict]: 409,
  [ErrorCode.Unreachable]: 503, [ErrorCode.Unavailable]: 503,
};

const first = (q: Record<string, string | string[] | undefined>): Query =>
  Object.fromEntries(Object.entries(q).map(([k, v]) => [k, (Array.isArray(v) ? v[0] : v)?.trim() || undefined]));

export function createConsoleApp(deps: ConsoleDeps): Koa<State> {
  const { orm, log } = deps;
  const burst = deps.signInBurst ?? 10;
  // Failed sign-ins and session cookies, per source address and per operator key prefix, never for the
  // whole console (one client must not lock every operator out); a key or cookie that worked lately passes.
  // Guessing a 256-bit key is hopeless, but each try costs a lookup and a log line.
  const failures = createFailureThrottle({ burst, perSecond: burst / 60 });
  // Said once a minute per address (with how many were quieter), not once per refused try of a flood.
  const throttledWarnings = createSampledWarnings(log, { intervalMs: 60_000 });
  const router = new Router<State>({ sensitive: true, strict: true });

  const send = (ctx: Ctx, body: Html, status = 200) => {
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = toString(body);
  };
  const viewer = (ctx: Ctx): Viewer => ({ operator: ctx.state.session!.operatorName, csrf: csrfTokenOf(ctx.state.session!.token) });
  const admin = (ctx: Ctx) => deps.admin(ctx.state.session!.operatorName);

  /** A form post of the signed-in operator, checked against CSRF; undefined when refused (answered). */
  async function postedForm(ctx: Ctx): Promise<URLSearchParams | undefined> {
    const form = await readForm(ctx);
    const refusal = formRefusal(ctx, ctx.state.session?.token, form.get('csrf'));
    if (refusal) {
      log.warn('console form refused', { path: ctx.path, reason: refusal });
      send(ctx, errorPage(ctx.state.session ? viewer(ctx) : undefined, 'Form refused', `Refused: ${refusal}. Reload the page and try again.`), 403);
      return undefined;
    }
    return form;
  }

  // ---- signing in and out ----

  router.get('/sign-in', (ctx) => {
    if (ctx.state.session) return ctx.redirect('/');
    let pre = readCookie(ctx, PRE_SESSION_COOKIE);
    if (!isToken(pre)) {
      pre = newToken();
      setCookie(ctx, PRE_SESSION_COOKIE, pre, 3600);
    }
    send(ctx, signInPage(csrfTokenOf(pre)));
  });

  router.post('/sign-in', async (ctx) => {
    const pre = readCookie(ctx, PRE_SESSION_COOKIE);
    const form = await readForm(ctx);
    const again = (message: string, status: number) => {
      const fresh = newToken();
      setCookie(ctx, PRE_SESSION_COOKIE, fresh, 3600);
      send(ctx, signInPage(csrfTokenOf(fresh), message), status);
    };
    const key = (form.get('key') ?? '').trim();
    const prefix = isWellFormedOperatorKey(key) ? operatorKeyPrefix(key) : undefined;
    const limited = failures.check(ctx.ip, key, prefix);
    if (!limited.ok) {
      ctx.set('Retry-After', String(limited.retryAfterSeconds));
      throttledWarnings.warn(ctx.ip, 'console sign-in rate limited', { address: ctx.ip });
      return again(`Too many sign-in attempts; try again in ${limited.retryAfterSeconds} s.`, 429);
    }
    const refusal = formRefusal(ctx, isToken(pre) ? pre : undefined, form.get('csrf'));
    if (refusal) {
      failures.failed(ctx.ip, prefix);
      return again(`Refused: ${refusal}. Try again.`, 403);
    }
    const em = orm.em.fork();
    const operator = await authenticateOperator(em, key);
    if (!operator) {
      failures.failed(ctx.ip, prefix);
      log.info('console sign-in refused', { address: ctx.ip });
      return again('Unknown or revoked operator key.', 401);
    }
    failures.succeeded(key);
    const session = await createSession(em, operator);
    await recordAudit(em, { operator: operator.name, action: AuditAction.ConsoleSignIn, target: operator.id, outcome: AUDIT_OK, detail: `from ${ctx.ip}` });
    clearCookie(ctx, PRE_SESSION_COOKIE);
    setCookie(ctx, SESSION_COOKIE, session.token, Math.floor(SESSION_TTL_MS / 1000));
    ctx.status = 303;
    ctx.redirect('/');
  });

  router.post('/sign-out', async (ctx) => {
    if (!(await postedForm(ctx))) return;
    await deleteSession(orm.em.fork(), ctx.state.session!.token);
    clearCookie(ctx, SESSION_COOKIE);
    ctx.status = 303;
    ctx.redirect('/sign-in');
  });

  // ---- pages ----

  router.get('/', async (ctx) => send(ctx, overviewPage(viewer(ctx), await admin(ctx).overview())));

  router.get('/dead-letters', async (ctx) => {
    const q = first(ctx.query);
    const filter = deadLetterFilterOf(q);
    try {
      const page = await admin(ctx).listDeadLetters({ ...defined(filter), ...(q['cursor'] ? { cursor: q['cursor'] } : {}) });
      send(ctx, deadLettersPage(viewer(ctx), filter, page.data, page.next_cursor));
    } catch (e) {
      if (!isHookstreamError(e) || e.code !== ErrorCode.BadRequest) throw e;
      send(ctx, deadLettersPage(viewer(ctx), filter, [], null, { kind: 'error', text: e.message }), 400);
    }
  });

  router.get('/dead-letters/replay-all', async (ctx) => {
    const { status: _s, webhook_id: _w, ...filter } = deadLetterFilterOf(first(ctx.query));
    const dry = await admin(ctx).replayDeadLetters({ ...defined(filter), dry_run: true });
    send(ctx, replayAllConfirmPage(viewer(ctx), filter, dry.total));
  });

  router.post('/dead-letters/replay-all', async (ctx) => {
    const form = await postedForm(ctx);
    if (!form) return;
    const { status: _s, webhook_id: _w, ...filter } = deadLetterFilterOf(Object.fromEntries(form));
    let replayed = 0;
    const failed: DeadLettersReplayManyOut['failed'] = [];
    let cursor: string | null = null;
    do {
      const r = await admin(ctx).replayDeadLetters({ ...defined(filter), ...(cursor ? { cursor } : {}) });
      replayed += r.replayed.length;
      failed.push(...r.failed);
      cursor = r.next_cursor;
    } while (cursor);
    send(ctx, replayAllResultPage(viewer(ctx), filter, replayed, failed));
  });

  // Opening a payload is audited: only a form post with the CSRF token opens one (openPayloadPage).
  router.get('/dead-letters/:id', (ctx) => {
    const id = ctx.params['id']!;
    const n = String(ctx.query['n'] ?? '');
    const flash: Flash = ctx.query['done'] === 'replayed' && /^\d{1,9}$/.test(n) ? { kind: 'ok', text: `Replayed (replay ${n}).` } : undefined;
    send(ctx, openPayloadPage(viewer(ctx), '/dead-letters', `Dead letter ${id}`, `/dead-letters/${encodeURIComponent(id)}/open`, flash));
  });

  router.post('/dead-letters/:id/open', async (ctx) => {
    if (!await postedForm(ctx)) return;
    send(ctx, deadLetterPage(viewer(ctx), await admin(ctx).showDeadLetter({ id: ctx.params['id']! })));
  });

  router.post('/dead-letters/:id/replay', async (ctx) => {
    const form = await postedForm(ctx);
    if (!form) return;
    const id = ctx.params['id']!;
    const replayed = await admin(ctx).replayDeadLetter({ id, force: form.get('force') === '1' });
    ctx.status = 303;
    ctx.redirect(`/dead-letters/${encodeURIComponent(id)}?done=replayed&n=${replayed.dead_letter.replay_count}`);
  });

  router.get('/deliveries', async (ctx) => {
    const q = first(ctx.query);
    const webhookId = q['webhook_id'];
    const endpoint = q['endpoint'];
    if (webhookId && endpoint && !q['search']) {
      // One delivery (a row of the search, or a dead letter's link): its state and every logged attempt.
      const attempts = (await admin(ctx).deliveryAttempts({ webhook_id: webhookId, endpoint })).data;
      const shown = await admin(ctx).showDelivery({ webhook_id: webhookId, endpoint }).then((s) => ({ s }), (e: unknown) => {
        if (!isHookstreamError(e) || (e.code !== ErrorCode.BadRequest && e.code !== ErrorCode.NotFound)) throw e;
        return { note: e.message };
      });
      return send(ctx, deliveryPage(viewer(ctx), webhookId, endpoint, 's' in shown ? shown.s : undefined, attempts, 'note' in shown ? shown.note : undefined));
    }
    const filter = defined(Object.fromEntries(DELIVERY_SEARCH_FIELDS.map((k) => [k, q[k]])));
    try {
      send(ctx, deliveriesPage(viewer(ctx), q, await admin(ctx).listDeliveries({ ...filter, ...(q['cursor'] ? { cursor: q['cursor'] } : {}) })));
    } catch (e) {
      if (!isHookstreamError(e) || e.code !== ErrorCode.BadRequest) throw e;
      send(ctx, deliveriesPage(viewer(ctx), q, undefined, e.message), 400);
    }
  });

  router.get('/endpoints', async (ctx) => {
    const q = first(ctx.query);
    const list = await admin(ctx).listEndpoints(defined({ tenant: q['tenant'], status: q['status'], cursor: q['cursor'] }));
    const retried = q['retried'];
    const flash: Flash = retried && isEndpointId(retried) && /^\d+$/.test(q['n'] ?? '')
      ? { kind: 'ok', text: `Retry now: ${q['n']} waiting ${q['n'] === '1' ? 'delivery' : 'deliveries'} of ${retried} brought forward.` }
      : undefined;
    send(ctx, endpointsPage(viewer(ctx), q, list, flash));
  });

  const DONE: Partial<Record<string, string>> = { disabled: 'Disabled.', enabled: 'Enabled: deliveries resume.', retried: 'Retry now: waiting deliveries brought forward.' };

  router.get('/endpoints/:id', async (ctx) => {
    const id = ctx.params['id']!;
    if (!isEndpointId(id)) return send(ctx, errorPage(viewer(ctx), 'Not found', 'No such endpoint.'), 404);
    const [health, recent] = await Promise.all([admin(ctx).endpointHealth({ endpoint: id }), admin(ctx).listDeliveries({ endpoint: id, limit: 20 })]);
    const done = DONE[String(ctx.query['done'])];
    send(ctx, endpointPage(viewer(ctx), health, recent, done ? { kind: 'ok', text: done } : undefined));
  });

  router.post('/endpoints/:id/disable', async (ctx) => {
    const form = await postedForm(ctx);
    if (!form) return;
    const r = await admin(ctx).disableEndpoint({ endpoint: ctx.params['id']!, reason: form.get('reason') ?? '' });
    ctx.status = 303;
    ctx.redirect(`/endpoints/${encodeURIComponent(r.endpoint_id)}?done=disabled`);
  });

  router.post('/endpoints/:id/enable', async (ctx) => {
    if (!(await postedForm(ctx))) return;
    const r = await admin(ctx).enableEndpoint({ endpoint: ctx.params['id']! });
    ctx.status = 303;
    ctx.redirect(`/endpoints/${encodeURIComponent(r.endpoint_id)}?done=enabled`);
  });

  router.post('/endpoints/:id/retry-now', async (ctx) => {
    if (!(await postedForm(ctx))) return;
    const r = await admin(ctx).retryNow({ endpoint: ctx.params['id']! });
    ctx.status = 303;
    ctx.redirect(`/endpoints?retried=${encodeURIComponent(r.endpoint_id)}&n=${r.brought_forward}`);
  });

  router.get('/rejected-events', async (ctx) => {
    const q = first(ctx.query);
    const [overview, list] = await Promise.all([
      admin(ctx).overview(),
      admin(ctx).listRejectedEvents(defined({ tenant: q['tenant'], cursor: q['cursor'] })),
    ]);
    send(ctx, rejectedPage(viewer(ctx), q, overview.rejected_24h, list));
  });

  router.get('/rejected-events/:seq', (ctx) => {
    const seq = ctx.params['seq']!;
    if (!/^\d{1,15}$/.test(seq)) return send(ctx, errorPage(viewer(ctx), 'Not found', 'No such rejected event.'), 404);
    send(ctx, openPayloadPage(viewer(ctx), '/rejected-events', `Rejected event ${seq}`, `/rejected-events/${seq}/open`));
  });

  router.post('/rejected-events/:seq/open', async (ctx) => {
    const seq = ctx.params['seq']!;
    if (!/^\d{1,15}$/.test(seq)) return send(ctx, errorPage(viewer(ctx), 'Not found', 'No such rejected event.'), 404);
    if (!await postedForm(ctx)) return;
    send(ctx, rejectedShowPage(viewer(ctx), await admin(ctx).showRejectedEvent({ seq: Number(seq) })));
  });

  router.get('/audit', async (ctx) => {
    const q = first(ctx.query);
    const page = await admin(ctx).listAudit(defined({ operator: q['by'], action: q['action'], target: q['target'], cursor: q['cursor'] }));
    send(ctx, auditPage(viewer(ctx), q, page.data, page.next_cursor));
  });

  const app = new Koa<State>();
  app.silent = true;
  app.use(async (ctx, next) => {
    setSecurityHeaders(ctx);
    ctx.set('Cache-Control', 'no-store');
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) send(ctx, errorPage(ctx.state.session ? viewer(ctx) : undefined, 'Not found', 'There is no such page.'), 404);
    } catch (e) {
      const v = ctx.state.session ? viewer(ctx) : undefined;
      const httpStatus = (e as { status?: unknown }).status;
      if (isHookstreamError(e)) {
        const status = STATUS[e.code] ?? 500;
        if (status === 500) log.error('console request failed', { path: ctx.path, reason: e.message });
        send(ctx, errorPage(v, status === 500 ? 'Something went wrong' : 'Refused', e.message), status);
      } else if (typeof httpStatus === 'number' && httpStatus >= 400 && httpStatus < 500) {
        send(ctx, errorPage(v, 'Refused', describe(e)), httpStatus);
      } else {
        log.error('console request failed', { path: ctx.path, reason: describe(e) });
        send(ctx, errorPage(v, 'Something went wrong', 'Internal error; it was logged.'), 500);
      }
    }
  });
  app.use(async (ctx, next) => {
    const asset = ctx.method === 'GET' || ctx.method === 'HEAD' ? deps.assets.get(ctx.path) : undefined;
    if (asset) {
      ctx.set('Cache-Control', 'public, max-age=3600');
      ctx.type = asset.type;
      ctx.body = asset.body;
      return;
    }
    const token = readCookie(ctx, SESSION_COOKIE);
    // A source whose cookies keep failing is not looked up again for a while (signed out, at no cost).
    const session = token && failures.check(ctx.ip, token).ok ? await findSession(orm.em.fork(), token) : undefined;
    if (token && !session) {
      failures.failed(ctx.ip);
      clearCookie(ctx, SESSION_COOKIE); // or the browser would spend the budget with every page it asks for
    }
    if (session) failures.succeeded(token!);
    if (session) ctx.state.session = session;
    if (!session && ctx.path !== '/sign-in') {
      if (ctx.method === 'GET' || ctx.method === 'HEAD') {
        ctx.status = 303;
        return ctx.redirect('/sign-in');
      }
      return send(ctx, errorPage(undefined, 'Signed out', 'Your session has ended; sign in again.'), 401);
    }
    return next();
  });
  app.use(router.routes());
  app.use(router.allowedMethods());
  return app;
}

/** The fields that hold a value (admin requests refuse empty strings). */
function defined<T extends Record<string, string | undefined>>(q: T): { [K in keyof T]?: string } {
  return Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined && v !== '')) as { [K in keyof T]?: string };
}
