// Read one endpoint's state straight from its subject in the ENDPOINTS stream (the source of truth),
// so a command never decides on a stale projection.
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type MsgRequest, type NextMsgRequest } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM, endpointSubject } from '../../streams/endpoints.ts';
import type { EndpointState } from '../domain/endpoint.ts';
import { isEndpointId, type EndpointId, type TenantId } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import { decodeEndpointEvent, foldEndpointMessage } from './fold.ts';

export interface ReadOptions {
  /**
   * Only this tenant's endpoint: another tenant's id costs exactly what a missing one costs (one
   * request for the subject's first message), so timing cannot tell them apart.
   */
  tenant?: TenantId;
  /** Where skipped (malformed) events are reported. */
  log?: Logger;
}

/**
 * The first message on a subject. STREAM.MSG.GET takes next_by_subj (nats-server 2.9+) though the client's
 * type for getMessage leaves it out; direct get would need allow_direct on the stream.
 */
const firstOf = (subject: string): MsgRequest => ({ seq: 0, next_by_subj: subject }) as NextMsgRequest as unknown as MsgRequest;

export async function readEndpoint(
  js: JetStreamClient, jsm: JetStreamManager, id: EndpointId, opts: ReadOptions = {},
): Promise<EndpointState | undefined> {
  // A wildcard or dotted id would name other subjects.
  if (!isEndpointId(id)) return undefined;
  const subject = endpointSubject(id);
  if (opts.tenant !== undefined) {
    // endpoint.created is always the subject's first event and names the tenant. A missing id makes the
    // same single request and finds nothing; the costly fold below runs for the owner only.
    const first = await jsm.streams.getMessage(ENDPOINTS_STREAM, firstOf(subject));
    if (!first) return undefined;
    const created = decodeEndpointEvent(first);
    if (!created.ok || created.event.type !== 'endpoint.created' || created.event.tenant !== opts.tenant) return undefined;
  }
  const last = await jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: subject });
  if (!last) return undefined;
  const consumer = await js.consumers.get(ENDPOINTS_STREAM, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  let state: EndpointState | undefined;
  const messages = await consumer.consume({ max_messages: 64 });
  try {
    for await (const m of messages) {
      // One bad message must not make every command on the endpoint fail: skip it, as every reader does.
      const step = foldEndpointMessage(m, () => state);
      if (step.ok) state = step.state;
      else {
        opts.log?.warn('skipping endpoint event', { stream: ENDPOINTS_STREAM, seq: m.seq, endpoint: id, reason: step.reason });
        // The next command's expected last subject sequence is this message's, or it would conflict for ever.
        if (state) state = { ...state, version: m.seq };
      }
      if (m.seq >= last.seq) break;
    }
  } finally {
    await messages.close();
  }
  return state;
}
