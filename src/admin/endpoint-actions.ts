// Operators act on endpoints (admin.endpoints.disable, .enable, .delete): the same commands the API and the
// delivery role append to ENDPOINTS, so every directory, consumer and projection follows as for a tenant's
// own change. A disable holds the endpoint's queue until it is enabled again; a delete drops it. The admin
// role audits each with the operator's name and, for a disable or delete, the reason (src/admin/server.ts).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { Projection } from '../../projections/checkpoint.ts';
import { waitForCheckpoint } from '../../projections/wait.ts';
import type { CommandResult, EndpointStore } from '../endpoints/store.ts';
import { DisabledReason, EndpointStatus, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { readEndpoint } from '../endpoints/read.ts';
import { conflict, ErrorCode, HookstreamError, notFound } from '../errors.ts';
import type { EndpointActionOut } from './protocol.ts';

export type EndpointCommands = Pick<EndpointStore, 'disable' | 'restore' | 'delete'>;

export function createEndpointActions(deps: { js: JetStreamClient; jsm: JetStreamManager; orm: MikroORM; store: EndpointCommands | undefined }) {
  async function current(id: EndpointId): Promise<{ state: EndpointState; store: EndpointCommands }> {
    // The admin role alone, as nats.conf's admin user, may not write endpoint commands.
    if (!deps.store) throw new HookstreamError(ErrorCode.Unavailable, 'this admin process cannot change endpoints: it runs without the endpoint store (the admin role alone)');
    const state = await readEndpoint(deps.js, deps.jsm, id);
    if (!state) throw notFound(`endpoint ${id}`);
    return { state, store: deps.store };
  }
  /** Answered once the projection shows it (a page read next shows the new state), or after a few seconds. */
  const out = async ({ endpoint: e, seq }: CommandResult): Promise<EndpointActionOut> => {
    await waitForCheckpoint(deps.orm, Projection.Endpoints, seq).catch(() => {});
    return { endpoint_id: e.id, tenant: e.tenant, status: e.status, disabled_reason: e.disabledReason };
  };

  return {
    async disable(id: EndpointId): Promise<EndpointActionOut> {
      const { state, store } = await current(id);
      if (state.status !== EndpointStatus.Active) throw conflict(`endpoint ${id} is ${state.status}, not active`);
      const done = await store.disable(id, DisabledReason.Operator);
      if (!done) throw conflict(`endpoint ${id} stopped being active meanwhile`);
      return out(done);
    },
    async enable(id: EndpointId): Promise<EndpointActionOut> {
      const { state, store } = await current(id);
      if (state.status !== EndpointStatus.Disabled) throw conflict(`endpoint ${id} is ${state.status}, not disabled`);
      return out(await store.restore(state.tenant, id));
    },
    async delete(id: EndpointId): Promise<EndpointActionOut> {
      const { state, store } = await current(id);
      if (state.status === EndpointStatus.Deleted) throw conflict(`endpoint ${id} is already deleted`);
      return out(await store.delete(state.tenant, id));
    },
  };
}
