// Read one endpoint's state straight from its subject in the ENDPOINTS stream (the source of truth),
// so a command never decides on a stale projection.
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM, endpointSubject } from '../../streams/endpoints.ts';
import { applyEndpointEvent, isEndpointEvent, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';

export async function readEndpoint(js: JetStreamClient, jsm: JetStreamManager, id: EndpointId): Promise<EndpointState | undefined> {
  const subject = endpointSubject(id);
  const last = await jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: subject });
  if (!last) return undefined;
  const consumer = await js.consumers.get(ENDPOINTS_STREAM, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  let state: EndpointState | undefined;
  const messages = await consumer.consume({ max_messages: 64 });
  try {
    for await (const m of messages) {
      const event: unknown = m.json();
      if (isEndpointEvent(event)) state = applyEndpointEvent(state, event, m.seq);
      if (m.seq >= last.seq) break;
    }
  } finally {
    await messages.close();
  }
  return state;
}
