// The endpoint read model: the ENDPOINTS stream folded into the Postgres table `endpoints`, one row per
// endpoint, by the fold every reader uses (src/endpoints/fold.ts). The engine applies it batch by batch
// under the checkpoint.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EndpointEvent, EndpointState } from '../src/domain/endpoint.ts';
import { decodeEndpointEvent, nextEndpointState } from '../src/endpoints/fold.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import { recordToRow, rowToRecordData, rowToState, stateToRow } from '../src/db/endpoint-rows.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { Projection } from './checkpoint.ts';
import {
  rebuildProjection, startProjector, type Decoded, type Fold, type Projector, type ProjectorDeps, type ProjectorOptions, type ReadModel, type StreamMessage,
} from './engine.ts';

export const ENDPOINTS_PROJECTION = Projection.Endpoints;
export type EndpointProjector = Projector;

function decode(m: StreamMessage): Decoded<EndpointEvent> {
  const decoded = decodeEndpointEvent(m);
  return decoded.ok ? { ok: true, message: decoded.event } : decoded;
}

/** Endpoint states being folded, keyed by id; only the ones an applied event changed are written. */
function endpointFold(states: Map<string, EndpointState>): Fold<EndpointEvent> {
  const changed = new Set<string>();
  return {
    apply(seq, event) {
      const step = nextEndpointState(states.get(event.id), event, seq);
      if (!step.ok) return step.reason;
      states.set(event.id, step.state);
      changed.add(event.id);
      return undefined;
    },
    async save(em) {
      const data = [...changed].map((id) => rowToRecordData(stateToRow(states.get(id)!)));
      for (let i = 0; i < data.length; i += 500) await em.upsertMany(EndpointRecord, data.slice(i, i + 500));
      return data.length;
    },
  };
}

export const endpointReadModel: ReadModel<EndpointEvent> = {
  name: ENDPOINTS_PROJECTION,
  stream: ENDPOINTS_STREAM,
  kind: 'endpoint',
  decode,
  async load(em: EntityManager, events) {
    const ids = [...new Set(events.map((e) => e.id))];
    const records = ids.length ? await em.find(EndpointRecord, { id: { $in: ids } }, { disableIdentityMap: true }) : [];
    return endpointFold(new Map(records.map((r) => [r.id, rowToState(recordToRow(r))])));
  },
  empty: () => endpointFold(new Map()),
  async clear(em) {
    await em.nativeDelete(EndpointRecord, {});
  },
};

/** Keep the `endpoints` table up to date with the ENDPOINTS stream (see startProjector). */
export const startEndpointProjector = (deps: ProjectorDeps, opts: ProjectorOptions = {}): Promise<EndpointProjector> =>
  startProjector(endpointReadModel, deps, opts);

/** Recreate the `endpoints` table from the ENDPOINTS stream (see rebuildProjection). */
export const rebuildEndpointProjection = (deps: ProjectorDeps, onProgress?: (done: number, total: number) => void): Promise<{ applied: number; skipped: number }> =>
  rebuildProjection(endpointReadModel, deps, onProgress);
