// The /v1/webhooks handlers: reads come from the Postgres projection (tenant-scoped queries); writes
// are commands on the endpoint store, answered once the projection holds the command's state.
import type { RouterContext } from '@koa/router';
import { getEndpoint, listEndpoints } from '../endpoints/queries.ts';
import type { CommandResult, EndpointStore } from '../endpoints/store.ts';
import type { TestEvents } from '../endpoints/test-event.ts';
import { isEndpointId, type EndpointId } from '../domain/ids.ts';
import { SignatureScheme } from '../domain/signature.ts';
import { conflict, ErrorCode, isHookstreamError, notFound } from '../errors.ts';
import { holdWrite } from '../../projections/endpoints.ts';
import type { Logger } from '../log.ts';
import { createInput, emptyInput, graceInput, updateInput } from './input.ts';
import { answerOnce, claimEndpointId, IDEMPOTENCY_HEADER, idempotencyKey, requestHash, type AnswerOnceDeps } from './idempotency.ts';
import { parseListQuery, rejectQuery } from './query.ts';
import type { ApiState } from './state.ts';
import { endpointOut, type EndpointCreatedOut, type EndpointListOut, type EndpointOut, type RotateSecretOut } from './wire.ts';

export interface WebhookDeps {
  store: EndpointStore;
  /** Resolves once the endpoint projection has applied stream sequence `seq` (rejects after a timeout). */
  waitForProjection(seq: number): Promise<void>;
  checkUrl(url: URL): string | undefined;
  /** Seals the answers kept for Idempotency-Key retries. */
  sealer: AnswerOnceDeps['sealer'];
  log: Logger;
  /** POST /v1/webhooks/:id/test; absent in API tests that do not send. */
  testEvents?: TestEvents | undefined;
}

type Ctx = RouterContext<ApiState>;

/** `signing_secret` only when there is one (v1); a v1a answer has no such field at all. */
const secretOut = (secret: string | undefined): { signing_secret?: string } => (secret === undefined ? {} : { signing_secret: secret });

/** The path's id; a malformed id is just another id that does not exist. */
function pathId(ctx: Ctx): EndpointId {
  const id = ctx.params['id'];
  if (!isEndpointId(id)) throw notFound(`webhook endpoint ${String(id).slice(0, 100)}`);
  return id;
}

export function webhookHandlers(deps: WebhookDeps) {
  /**
   * The endpoint as the command left it, once the projection holds it (so the tenant's next read shows the
   * write): written through into its row, or, when that fails, applied by the projector. If the projection
   * lags past its timeout the write has still happened (and for create and rotate-secret the secret exists
   * only in this answer): it answers all the same.
   */
  async function afterWrite(ctx: Ctx, result: CommandResult): Promise<EndpointOut> {
    try {
      await holdWrite(ctx.state.em, result, deps.waitForProjection, (code) =>
        deps.log.warn('endpoint row not written through; waiting for the projector', { request_id: ctx.state.requestId, endpoint: result.endpoint.id, error_code: code }));
    } catch (e) {
      // The projection lags (ProjectionLagError); anything else is a real failure.
      if (!isHookstreamError(e, ErrorCode.Unavailable)) throw e;
      deps.log.warn('projection lags; answering a write from the command result', { request_id: ctx.state.requestId, seq: result.seq, endpoint: result.endpoint.id });
    }
    return endpointOut(result.endpoint);
  }

  return {
    async list(ctx: Ctx) {
      const query = parseListQuery(ctx.querystring);
      const page = await listEndpoints(ctx.state.em, ctx.state.tenant, query);
      const body: EndpointListOut = { data: page.rows.map(endpointOut), has_more: page.hasMore, next_cursor: page.nextCursor ?? null };
      ctx.body = body;
    },

    async create(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const key = idempotencyKey(ctx.headers[IDEMPOTENCY_HEADER]);
      const input = createInput(ctx.request.body, deps.checkUrl);
      const id = key === undefined ? undefined : await claimEndpointId(ctx.state.em, ctx.state.tenant, key, requestHash(input));
      const result = await deps.store.create(ctx.state.tenant, input, id === undefined ? {} : { id });
      // A retry answers the secret the first create made, never a later one: once the endpoint has changed
      // (its secret rotated, or it was deleted) a retry learns that it exists and gets no secret.
      if (result.existed && result.signingSecret !== undefined && result.endpoint.updatedAt !== result.endpoint.createdAt) {
        throw conflict(`Idempotency-Key already created webhook endpoint ${result.endpoint.id}, which has changed since (${result.endpoint.status}); `
          + 'its signing secret is not shown again: rotate it if it was lost');
      }
      const body: EndpointCreatedOut = { ...(await afterWrite(ctx, result)), ...secretOut(result.signingSecret) };
      // Stripe's header: this answer is the earlier create's.
      if (result.existed) ctx.set('idempotent-replayed', 'true');
      ctx.status = 201;
      ctx.set('location', `/v1/webhooks/${result.endpoint.id}`);
      ctx.body = body;
    },

    async get(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      const row = await getEndpoint(ctx.state.em, ctx.state.tenant, id);
      if (!row) throw notFound(`webhook endpoint ${id}`);
      ctx.body = endpointOut(row);
    },

    async update(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      const input = updateInput(ctx.request.body, deps.checkUrl);
      ctx.body = await afterWrite(ctx, await deps.store.update(ctx.state.tenant, id, input));
    },

    async remove(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      ctx.body = await afterWrite(ctx, await deps.store.delete(ctx.state.tenant, id));
    },

    async restore(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      emptyInput(ctx.request.body);
      // A retry of a restore that worked is no 409 (already active) with the key.
      await answerOnce(ctx, deps, { route: 'restore', id }, async () => ({
        status: 200, body: await afterWrite(ctx, await deps.store.restore(ctx.state.tenant, id)),
      }));
    },

    async rotateSecret(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      const graceMs = graceInput(ctx.request.body);
      // With the key, a retry gets the new secret shown once instead of a second rotation.
      await answerOnce(ctx, deps, { route: 'rotate-secret', id, graceMs }, async () => {
        const result = await deps.store.rotateSecret(ctx.state.tenant, id, graceMs);
        await afterWrite(ctx, result);
        // v1a: the new pair's public key (the private key never leaves hookstream); v1: the new secret.
        const body: RotateSecretOut = result.endpoint.signatureScheme === SignatureScheme.V1a
          ? { id: result.endpoint.id, signing_public_key: result.endpoint.signingPublicKey! }
          : { id: result.endpoint.id, ...secretOut(result.signingSecret) };
        return { status: 200, body };
      });
    },

    async sendTest(ctx: Ctx) {
      rejectQuery(ctx.querystring);
      const id = pathId(ctx);
      emptyInput(ctx.request.body);
      if (!deps.testEvents) throw new Error('test events are not configured');
      const { webhookId } = await deps.testEvents.send(ctx.state.tenant, id);
      ctx.status = 202;
      ctx.body = { id, webhook_id: webhookId };
    },
  };
}
