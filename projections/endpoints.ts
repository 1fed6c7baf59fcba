// The endpoint read model: the ENDPOINTS stream folded into the Postgres table `endpoints`, one row per
// endpoint, by the fold every reader uses (src/endpoints/fold.ts). The engine applies it batch by batch
// under the checkpoint. A command's own state is also written through (writeEndpointState), so an endpoint
// write answers after one statement, not after the projector's round trips. Every write of a row is kept
// only if it is newer (its version, the stream sequence of its last event): the projector and the
// commands' write-throughs may land in either order and the row never goes back.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EndpointEvent, EndpointState } from '../src/domain/endpoint.ts';
import { decodeEndpointEvent, nextEndpointState } from '../src/endpoints/fold.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import { columnsToRow, ENDPOINT_COLUMNS, rowToState, stateToRow, type EndpointColumns, type EndpointRow } from '../src/db/endpoint-rows.ts';
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

const COLUMNS = ENDPOINT_COLUMNS;
const UPDATED = COLUMNS.filter((c) => c !== 'id');
const UPSERT = `insert into endpoints (${COLUMNS.join(', ')})
  select ${COLUMNS.join(', ')} from json_populate_recordset(null::endpoints, ?::json)
  on conflict (id) do update set (${UPDATED.join(', ')}) = (${UPDATED.map((c) => `excluded.${c}`).join(', ')})
  where endpoints.version < excluded.version`;
const SELECT_BY_IDS = `select ${COLUMNS.join(', ')} from endpoints where id in (select json_array_elements_text(?::json))`;

const rowJson = (r: EndpointRow): Record<(typeof COLUMNS)[number], unknown> => ({
  id: r.id, tenant: r.tenant, url: r.url, events: r.events, description: r.description, status: r.status,
  signature_scheme: r.signatureScheme, signing_public_key: r.signingPublicKey, rate_limit: r.rateLimit, ordering: r.ordering,
  disabled_reason: r.disabledReason, disabled_at: r.disabledAt, created_at: r.createdAt, updated_at: r.updatedAt, version: r.version,
});

/** Insert or update rows in one statement; a stored row as new as the one given, or newer, stays as it is. */
async function upsertNewer(em: EntityManager, rows: EndpointRow[]): Promise<void> {
  for (let i = 0; i < rows.length; i += 500) await em.execute(UPSERT, [JSON.stringify(rows.slice(i, i + 500).map(rowJson))]);
}

/**
 * Write a command's resulting state into its row, unless the row already holds that version or a later
 * one. The command's state is the fold's, so the row is the one the projector makes from the same event.
 */
export const writeEndpointState = (em: EntityManager, state: EndpointState): Promise<void> => upsertNewer(em, [stateToRow(state)]);

/**
 * Make the projection hold a command's result before the command answers, so the tenant's next read shows
 * it: the state written through, or, when Postgres refuses that, the projector's applying it (`waitFor`,
 * which rejects when it lags). `missed` hears the write-through's failure, by its code only: a driver's
 * message may quote the statement, and with it the endpoint's URL.
 */
export async function holdWrite(
  em: EntityManager, result: { endpoint: EndpointState; seq: number }, waitFor: (seq: number) => Promise<void>, missed: (code: string) => void,
): Promise<void> {
  try {
    await writeEndpointState(em, result.endpoint);
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    missed(typeof code === 'string' ? code : 'unknown');
    await waitFor(result.seq);
  }
}

/** Endpoint states being folded, keyed by id; only the ones an applied event changed are written. */
function endpointFold(states: Map<string, EndpointState>): Fold<EndpointEvent> {
  const changed = new Set<string>();
  return {
    apply(seq, event) {
      const previous = states.get(event.id);
      // Written through by its command already (or by a projector in another instance): nothing to do.
      if (previous && previous.version >= seq) return undefined;
      const step = nextEndpointState(previous, event, seq);
      if (!step.ok) return step.reason;
      states.set(event.id, step.state);
      changed.add(event.id);
      return undefined;
    },
    async save(em) {
      await upsertNewer(em, [...changed].map((id) => stateToRow(states.get(id)!)));
      return changed.size;
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
    const rows = ids.length ? await em.execute<EndpointColumns[]>(SELECT_BY_IDS, [JSON.stringify(ids)]) : [];
    return endpointFold(new Map(rows.map((r) => [r.id, rowToState(columnsToRow(r))])));
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
