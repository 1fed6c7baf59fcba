// What a producer's event must look like before it is delivered (DESIGN.md, "Contract").
import { isEventName, type EventName } from './catalogue.ts';
import { isTenantId, TENANT_ID_RULE } from './ids.ts';

export type EventData = Record<string, unknown>;
export type Rejection = 'unknown_event' | 'bad_subject' | 'not_json_object' | 'invalid_data';

export type ParsedEvent =
  | { ok: true; tenant: string; type: EventName; data: EventData }
  | { ok: false; reason: Rejection; detail: string };

const USER_ID = /^user_[A-Za-z0-9_-]+$/;

/** Parse `events.<tenant>.<event name>` and its JSON body. Event names may contain dots. */
export function parseEvent(subject: string, body: Uint8Array): ParsedEvent {
  const parts = subject.split('.');
  if (parts.length < 3 || parts[0] !== 'events' || !parts[1]) {
    return { ok: false, reason: 'bad_subject', detail: 'expected events.<tenant>.<event>' };
  }
  const tenant = parts[1];
  if (!isTenantId(tenant)) return { ok: false, reason: 'bad_subject', detail: `tenant id must be ${TENANT_ID_RULE}` };
  const type = parts.slice(2).join('.');
  if (!isEventName(type)) return { ok: false, reason: 'unknown_event', detail: `unknown event name ${JSON.stringify(type)}` };
  let data: unknown;
  try {
    data = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
  } catch {
    return { ok: false, reason: 'not_json_object', detail: 'body is not JSON' };
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return { ok: false, reason: 'not_json_object', detail: 'body is not a JSON object' };
  }
  const problem = checkData(type, data as EventData);
  if (problem) return { ok: false, reason: 'invalid_data', detail: problem };
  return { ok: true, tenant, type, data: data as EventData };
}

/** The data rules the spec states; other events' data shapes are not specified, so any object passes. */
function checkData(type: EventName, data: EventData): string | undefined {
  if (type === 'user.created') {
    const userId = data['userId'];
    if (typeof userId !== 'string' || !USER_ID.test(userId)) return 'user.created needs data.userId shaped user_<id>';
  }
  return undefined;
}
