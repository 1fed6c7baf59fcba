// The endpoint read model: the ENDPOINTS stream folded into the Postgres table `endpoints`, one row per
// endpoint (applyEndpointEvent over its events). The engine applies it batch by batch under the checkpoint.
import type { EntityManager } from '@mikro-orm/postgresql';
import {
  applyEndpointEvent, decodeEndpointMessage, isDisabledReason, MAX_RATE_LIMIT, MIN_RATE_LIMIT, type EndpointEvent, type EndpointState,
} from '../src/domain/endpoint.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import { recordToRow, rowToRecordData, rowToState, stateToRow, type EndpointRow } from '../src/db/endpoint-rows.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { describe } from '../src/errors.ts';
import { Projection } from './checkpoint.ts';
import {
  rebuildProjection, startProjector, type Decoded, type Fold, type Projector, type ProjectorDeps, type ProjectorOptions, type ReadModel, type StreamMessage,
} from './engine.ts';

export const ENDPOINTS_PROJECTION = Projection.Endpoints;
export type EndpointProjector = Projector;

const isText = (x: unknown): x is string => typeof x === 'string';
const isTime = (x: unknown): boolean => typeof x === 'string' && Number.isFinite(Date.parse(x));

// Postgres text cannot hold U+0000 (issue 23: one such description stopped every tenant's writes).
const holdsNul = (x: unknown): boolean => typeof x === 'string' && x.includes('\u0000');

/** What makes a row storable; a well-typed event carrying wrong fields must not wedge the projector. */
function rowProblem(row: EndpointRow): string | undefined {
  if (Object.values(row).some((v) => holdsNul(v) || (Array.isArray(v) && v.some(holdsNul)))) return 'a text field holds U+0000';
  if (!isText(row.id) || !isText(row.tenant) || !isText(row.url)) return 'id, tenant and url must be strings';
  if (!Array.isArray(row.events) || !row.events.every(isText)) return 'events must be a list of strings';
  if (row.description !== null && !isText(row.description)) return 'description must be a string or null';
  if (row.status !== 'active' && row.status !== 'disabled' && row.status !== 'deleted') return 'status must be active, disabled or deleted';
  if (row.rateLimit !== null && !(Number.isInteger(row.rateLimit) && row.rateLimit >= MIN_RATE_LIMIT && row.rateLimit <= MAX_RATE_LIMIT)) return 'rate_limit must be an integer from 1 to 10000 or null';
  if (row.disabledReason !== null && !isDisabledReason(row.disabledReason)) return 'disabled_reason must be gone, failing or null';
  if (row.disabledAt !== null && !isTime(row.disabledAt)) return 'disabled_at must be an ISO date or null';
  if (row.signatureScheme !== 'v1' && row.signatureScheme !== 'v1a') return 'signature_scheme must be v1 or v1a';
  if (row.signingPublicKey !== null && !isText(row.signingPublicKey)) return 'signing_public_key must be a string or null';
  if (!isTime(row.createdAt) || !isTime(row.updatedAt)) return 'timestamps must be ISO dates';
  return undefined;
}

function decode(m: StreamMessage): Decoded<EndpointEvent> {
  const decoded = decodeEndpointMessage(m.data);
  return decoded.ok ? { ok: true, message: decoded.event } : decoded;
}

/** Endpoint states being folded, keyed by id; only the ones an applied event changed are written. */
function endpointFold(states: Map<string, EndpointState>): Fold<EndpointEvent> {
  const changed = new Set<string>();
  return {
    apply(seq, event) {
      let next: EndpointState;
      try {
        next = applyEndpointEvent(states.get(event.id), event, seq);
      } catch (e) {
        return `cannot apply ${event.type} to ${event.id}: ${describe(e)}`;
      }
      const problem = rowProblem(stateToRow(next));
      if (problem) return `malformed fields in ${event.type} of ${event.id}: ${problem}`;
      states.set(event.id, next);
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
