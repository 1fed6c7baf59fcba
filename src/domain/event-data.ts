// What a producer's event must look like before it is delivered (the producers' contract). Pure: the
// router calls it on every event, before anything else touches the body.
import { isEventName, type EventName } from './catalogue.ts';
import { isTenantId, TENANT_ID_RULE, type TenantId } from './ids.ts';

export type EventData = Record<string, unknown>;

/** Why an event is not delivered: the `reason` label of hookstream_events_rejected_total and of REJECTED records. */
export const RejectionReason = {
  TooLarge: 'too_large',
  BadSubject: 'bad_subject',
  UnknownEvent: 'unknown_event',
  InvalidUtf8: 'invalid_utf8',
  TooDeep: 'too_deep',
  InvalidJson: 'invalid_json',
  NotAnObject: 'not_an_object',
  InvalidData: 'invalid_data',
  /** The producer's Hookstream-Ordering-Key header is not 1-128 printable ASCII characters (issue 21). */
  InvalidOrderingKey: 'invalid_ordering_key',
  /** Routing threw on this event, or it came back max_deliver times without a verdict. */
  RouteFailed: 'route_failed',
} as const;
export type RejectionReason = (typeof RejectionReason)[keyof typeof RejectionReason];

export interface EventLimits {
  /** Largest body accepted, in bytes (HOOKSTREAM_MAX_EVENT_BYTES). */
  maxBytes: number;
  /** Deepest nesting of objects and arrays accepted. */
  maxDepth: number;
}

/** 256 KiB, the EVENTS stream's max_msg_size: the largest body a producer can store there anyway. */
export const DEFAULT_MAX_EVENT_BYTES = 256 * 1024;
/** Far beyond any real event; far below what makes JSON.parse or JSON.stringify recurse out of stack. */
export const MAX_EVENT_DEPTH = 64;
export const DEFAULT_EVENT_LIMITS: EventLimits = { maxBytes: DEFAULT_MAX_EVENT_BYTES, maxDepth: MAX_EVENT_DEPTH };

export type ParsedEvent =
  | { ok: true; tenant: TenantId; type: EventName; data: EventData }
  | { ok: false; reason: RejectionReason; detail: string };

const USER_ID = /^user_[A-Za-z0-9_-]+$/;
// One decoder for all events: `fatal` makes invalid UTF-8 an error instead of U+FFFD (which would triple
// the size of a body of invalid bytes when re-encoded).
const UTF8 = new TextDecoder('utf-8', { fatal: true });

const reject = (reason: RejectionReason, detail: string): ParsedEvent => ({ ok: false, reason, detail });

const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/**
 * A stored event's subject as its producer published it. EVENTS holds two forms: `events.<tenant>.<event>`,
 * and `events.<tenant>.<p>.<event>`, where `<p>` is the tenant's partition, a token of digits that an
 * ingest transform of nats-server adds (docs/architecture.md, partitions made by nats-server). An event
 * name starts with a letter, so a token of digits after the tenant is always the partition.
 * Anything else comes back unchanged (parseEvent says what is wrong with it).
 */
export function producerSubject(stored: string): string {
  const afterEvents = stored.indexOf('.');
  const afterTenant = afterEvents < 0 ? -1 : stored.indexOf('.', afterEvents + 1);
  if (afterTenant < 0) return stored;
  const afterPartition = stored.indexOf('.', afterTenant + 1);
  if (afterPartition <= afterTenant + 1) return stored;
  for (let i = afterTenant + 1; i < afterPartition; i++) {
    const c = stored.charCodeAt(i);
    if (c < DIGIT_0 || c > DIGIT_9) return stored;
  }
  return stored.slice(0, afterTenant + 1) + stored.slice(afterPartition + 1);
}

/**
 * Parse `events.<tenant>.<event name>` (either stored form: producerSubject) and its JSON body. Event
 * names may contain dots. The checks run cheapest first, and nothing parses the body before its size,
 * encoding and nesting depth are known to be within the limits. Details never quote the body (it is
 * tenant data).
 */
export function parseEvent(stored: string, body: Uint8Array, limits: EventLimits = DEFAULT_EVENT_LIMITS): ParsedEvent {
  if (body.byteLength > limits.maxBytes) {
    return reject(RejectionReason.TooLarge, `body is ${body.byteLength} bytes; the limit is ${limits.maxBytes}`);
  }
  const parts = producerSubject(stored).split('.');
  if (parts.length < 3 || parts[0] !== 'events' || !parts[1]) {
    return reject(RejectionReason.BadSubject, 'expected events.<tenant>.<event>');
  }
  const tenant = parts[1];
  if (!isTenantId(tenant)) return reject(RejectionReason.BadSubject, `tenant id must be ${TENANT_ID_RULE}`);
  const type = parts.slice(2).join('.');
  if (!isEventName(type)) return reject(RejectionReason.UnknownEvent, `unknown event name ${JSON.stringify(type.slice(0, 100))}`);
  let text: string;
  try {
    text = UTF8.decode(body);
  } catch {
    return reject(RejectionReason.InvalidUtf8, 'body is not valid UTF-8');
  }
  const depth = jsonDepth(body, limits.maxDepth);
  if (depth > limits.maxDepth) return reject(RejectionReason.TooDeep, `body nests deeper than ${limits.maxDepth} levels`);
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    // The parser's message quotes the body: not repeated here.
    return reject(RejectionReason.InvalidJson, 'body is not JSON');
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return reject(RejectionReason.NotAnObject, 'body is not a JSON object');
  }
  const problem = checkData(type, data as EventData);
  if (problem) return reject(RejectionReason.InvalidData, problem);
  return { ok: true, tenant, type, data: data as EventData };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * The deepest nesting of `{` and `[` outside strings, scanning bytes (so it is linear and never
 * recurses); stops counting once `stopAbove` is exceeded. Malformed JSON gets some number: JSON.parse
 * rejects it afterwards.
 */
export function jsonDepth(body: Uint8Array, stopAbove = Infinity): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const b = body[i]!;
    if (inString) {
      if (b === BACKSLASH) i++; // the escaped byte cannot end the string
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) {
      inString = true;
    } else if (b === OPEN_BRACE || b === OPEN_BRACKET) {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stopAbove) return deepest;
      }
    } else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
      depth--;
    }
  }
  return deepest;
}

/** The data rules the spec states; other events' data shapes are not specified, so any object passes. */
function checkData(type: EventName, data: EventData): string | undefined {
  if (type === 'user.created') {
    const userId = data['userId'];
    if (typeof userId !== 'string' || !USER_ID.test(userId)) return 'user.created needs data.userId shaped user_<id>';
  }
  return undefined;
}

/**
 * The body every endpoint receives, `{"type","data"}`, or a rejection when it would not fit `maxBytes`
 * (re-encoding can grow a body: `1e20` becomes 21 digits).
 */
/**
 * Whether an event of `bytes` bytes may re-encode into a delivery body larger than `maxBytes`: re-encoding
 * never lengthens a string (escapes come out as short or shorter), and a number at most 5.25 times
 * (`1e20`, 4 characters, is written out in 21); the envelope adds its type. Smaller events always fit.
 */
export const mayOutgrow = (bytes: number, maxBytes: number): boolean => bytes * 5.25 + 128 > maxBytes;

export function encodeDelivery(type: EventName, data: EventData, maxBytes: number): { ok: true; body: Buffer } | { ok: false; reason: RejectionReason; detail: string } {
  const body = Buffer.from(JSON.stringify({ type, data }));
  if (body.byteLength > maxBytes) {
    return { ok: false, reason: RejectionReason.TooLarge, detail: `delivery body would be ${body.byteLength} bytes; deliveries hold at most ${maxBytes}` };
  }
  return { ok: true, body };
}
