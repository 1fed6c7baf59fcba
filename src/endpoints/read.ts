// Read one endpoint's state for a command or an operator, from the streams (the source of truth), so a
// command never decides on a stale projection, and with no consumer: the endpoint's saved state
// (ENDPOINT_STATES, written after each command) and the last message of its ENDPOINTS subject, two message
// gets, whatever the length of its history. Only the events the saved state lacks are folded, one message
// get each: none after a command of this service, all of them once for an endpoint written before states
// were saved. A saved state is checked like any state the fold makes, and trusted only for the events
// it stands for.
import type { JetStreamManager, MsgRequest, NextMsgRequest, StoredMsg } from '@nats-io/jetstream';
import { JetStreamApiCodes, type JetStreamClient } from '@nats-io/jetstream';
import { ENDPOINT_STATES_STREAM, ENDPOINTS_STREAM, endpointStateSubject, endpointSubject } from '../../streams/endpoints.ts';
import { isApiError } from '../../streams/ensure.ts';
import type { EndpointState } from '../domain/endpoint.ts';
import { isEndpointId, type EndpointId, type TenantId } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import { decodeEndpointEvent, endpointStateProblem, foldEndpointMessage } from './fold.ts';

export interface ReadOptions {
  /**
   * Only this tenant's endpoint: another tenant's id costs what a missing one costs (the same two
   * requests, sent together), so timing cannot tell them apart.
   */
  tenant?: TenantId;
  /** Where skipped (malformed) events are reported. */
  log?: Logger;
  /** Saves the state when events had to be folded (the command side), so the next read folds none; never throws. */
  save?: (state: EndpointState) => Promise<void>;
}

/**
 * The first message at or after `seq` on a subject. STREAM.MSG.GET takes next_by_subj,
 * though the client's type for getMessage leaves it out.
 */
const nextOf = (subject: string, seq: number): MsgRequest => ({ seq, next_by_subj: subject }) as NextMsgRequest as unknown as MsgRequest;

/** A message get that answers undefined for a stream that does not exist (yet), like for a missing message. */
async function getOrNone(jsm: JetStreamManager, stream: string, query: MsgRequest): Promise<StoredMsg | undefined> {
  try {
    return (await jsm.streams.getMessage(stream, query)) ?? undefined;
  } catch (e) {
    if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return undefined;
    throw e;
  }
}

/** The saved state of `id`, when there is one and it is well formed. */
function savedState(m: StoredMsg | undefined, id: EndpointId): EndpointState | undefined {
  if (!m) return undefined;
  let s: EndpointState;
  try {
    s = m.json<{ v: number; state: EndpointState }>().state;
  } catch {
    return undefined;
  }
  const usable = typeof s === 'object' && s !== null && s.id === id && Array.isArray(s.secrets) && Number.isSafeInteger(s.version) && s.version > 0
    && endpointStateProblem(s) === undefined;
  return usable ? s : undefined;
}

/**
 * Save `state` as the endpoint's latest (a cache: losing a write costs the next read a short fold). The
 * states before it are deleted with secure erase, oldest first: they hold sealed secrets, and a message the
 * stream's own limit removes leaves its bytes in the store's blocks.
 */
export async function saveEndpointState(js: JetStreamClient, jsm: JetStreamManager, state: EndpointState): Promise<void> {
  const subject = endpointStateSubject(state.id);
  const { seq } = await js.publish(subject, JSON.stringify({ v: 1, state }));
  // Saved after its endpoint's history was erased (a tenant's erasure deletes the events, then the states):
  // the copy, sealed secrets included, goes too. Checked after the publish, so an erasure that had not yet
  // removed the events has not yet listed the states either, and erases this one itself.
  if (!(await getOrNone(jsm, ENDPOINTS_STREAM, { last_by_subj: endpointSubject(state.id) }))) {
    await jsm.streams.deleteMessage(ENDPOINT_STATES_STREAM, seq, true);
    return;
  }
  for (;;) {
    const oldest = await getOrNone(jsm, ENDPOINT_STATES_STREAM, nextOf(subject, 0));
    if (!oldest || oldest.seq >= seq) return;
    await jsm.streams.deleteMessage(ENDPOINT_STATES_STREAM, oldest.seq, true);
  }
}

/** The tenant an endpoint's first event names (endpoint.created, or a compaction's state). */
function ownerOf(m: StoredMsg): TenantId | undefined {
  const e = decodeEndpointEvent(m);
  return !e.ok ? undefined : e.event.type === 'endpoint.created' ? e.event.tenant : e.event.type === 'endpoint.compacted' ? e.event.state?.tenant : undefined;
}

export async function readEndpoint(
  _js: JetStreamClient, jsm: JetStreamManager, id: EndpointId, opts: ReadOptions = {},
): Promise<EndpointState | undefined> {
  // A wildcard or dotted id would name other subjects.
  if (!isEndpointId(id)) return undefined;
  const subject = endpointSubject(id);
  const [saved, last] = await Promise.all([
    getOrNone(jsm, ENDPOINT_STATES_STREAM, { last_by_subj: endpointStateSubject(id) }),
    jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: subject }),
  ]);
  // No history (never created, or purged): whatever was saved stands for nothing.
  if (!last) return undefined;
  let state = savedState(saved, id);
  // Past the stream's last event: saved from a stream since recreated.
  if (state && state.version > last.seq) state = undefined;
  // Behind: the event it was saved at must still be this endpoint's, or it belongs to another history.
  if (state && state.version < last.seq && (await getOrNone(jsm, ENDPOINTS_STREAM, { seq: state.version }))?.subject !== subject) state = undefined;
  /** The subject's next message after `seq`, up to `last` (a message stored since may come back: the caller stops at it). */
  const nextAfter = async (seq: number) => (seq < last.seq ? (await jsm.streams.getMessage(ENDPOINTS_STREAM, nextOf(subject, seq + 1))) ?? undefined : undefined);
  // Without a state to start from, the fold starts at the subject's first event: endpoint.created, or the
  // compaction that replaced the events before it. While a compaction deletes those (oldest first), the first
  // left may be any event, naming no owner and folding to nothing: the fold starts at the compaction instead.
  let start: StoredMsg | undefined;
  let owner = state?.tenant;
  if (!state) {
    start = await nextAfter(0);
    while (start && (owner = ownerOf(start)) === undefined && start.seq < last.seq) start = await nextAfter(start.seq);
    if (!start) return undefined;
  }
  // The state's tenant, or the one its first event names: the fold below runs for the owner only.
  if (opts.tenant !== undefined && owner !== opts.tenant) return undefined;
  const from = state?.version ?? 0;
  for (let m = start ?? (await nextAfter(from)); m && m.seq <= last.seq; m = await nextAfter(m.seq)) {
    // One bad message must not make every command on the endpoint fail: skip it, as every reader does.
    const step = foldEndpointMessage(m, () => state);
    if (step.ok) state = step.state;
    else {
      opts.log?.warn('skipping endpoint event', { stream: ENDPOINTS_STREAM, seq: m.seq, endpoint: id, reason: step.reason });
      // The next command's expected last subject sequence is this message's, or it would conflict for ever.
      if (state) state = { ...state, version: m.seq };
    }
  }
  if (opts.save && state && state.version > from) {
    await opts.save(state);
  }
  return state;
}
