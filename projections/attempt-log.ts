// The delivery log's read model: ATTEMPT_LOG folded into attempt_log and delivery_log (src/deliverylog/
// store.ts), one multi-row insert per table per batch of messages (each message is already a batch of
// attempts). What the projection applied is purged from the stream, which is only the buffer between the
// delivery role and Postgres. Every value is checked before it reaches Postgres: a message that does not
// fit is skipped alone (projections/engine.ts).
import { ATTEMPT_LOG_STREAM, ATTEMPT_LOG_SUBJECT, ATTEMPT_OUTCOMES, type AttemptLogEntry } from '../streams/attempt-log.ts';
import { isEndpointId, isTenantId } from '../src/domain/ids.ts';
import { deleteAllAttempts, insertAttempts } from '../src/deliverylog/store.ts';
import { Projection } from './checkpoint.ts';
import type { Decoded, Projector, ProjectorDeps, ReadModel, StreamMessage } from './engine.ts';
import { appendFold, startTrimmedProjector } from './buffered.ts';

const WEBHOOK_ID = /^msg_[0-9A-Za-z]{1,64}$/;
const EVENT = /^[A-Za-z0-9_.-]{1,200}$/;
const MAX_TEXT = 2000;

const isCount = (n: unknown, max: number): n is number => Number.isSafeInteger(n) && (n as number) >= 0 && (n as number) <= max;
const isTime = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) > 0 && (n as number) < 8.64e15;
const isText = (s: unknown): boolean => s === undefined || (typeof s === 'string' && s.length <= MAX_TEXT && !s.includes('\u0000'));

/** Why `e` is not an entry this service could have written, or undefined. */
function invalid(e: Partial<AttemptLogEntry>): string | undefined {
  if (!isTenantId(e.tenant)) return 'tenant is not a tenant id';
  if (!isEndpointId(e.endpoint)) return 'endpoint is not an endpoint id';
  if (typeof e.webhook_id !== 'string' || !WEBHOOK_ID.test(e.webhook_id)) return 'webhook_id is not a webhook id';
  if (typeof e.event !== 'string' || !EVENT.test(e.event)) return 'event is not an event name';
  if (!isCount(e.attempt, 1_000_000) || !isTime(e.at) || !isCount(e.duration_ms, 2 ** 31 - 1)) return 'attempt, at or duration_ms out of range';
  if (e.status !== null && !isCount(e.status, 999)) return 'status is not an HTTP status';
  if (typeof e.outcome !== 'string' || !ATTEMPT_OUTCOMES.includes(e.outcome)) return 'outcome is not one of ' + ATTEMPT_OUTCOMES.join(', ');
  if (!isText(e.error_class) || !isText(e.error) || !isText(e.body)) return 'error_class, error or body is not short text';
  if (e.next_at !== undefined && !isTime(e.next_at)) return 'next_at is not a time';
  return undefined;
}

export function decodeAttemptLogMessage(m: Pick<StreamMessage, 'subject' | 'data'>): Decoded<AttemptLogEntry[]> {
  if (m.subject !== ATTEMPT_LOG_SUBJECT) return { ok: false, reason: `not on ${ATTEMPT_LOG_SUBJECT}` };
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(m.data).toString('utf8'));
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  const o = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  if (o['v'] !== 1 || !Array.isArray(o['entries'])) return { ok: false, reason: 'not an attempt-log batch (version 1)' };
  const entries = o['entries'] as unknown[];
  for (const [i, e] of entries.entries()) {
    const why = typeof e === 'object' && e !== null ? invalid(e as Partial<AttemptLogEntry>) : 'not an object';
    if (why) return { ok: false, reason: `entry ${i}: ${why}` };
  }
  return { ok: true, message: entries as AttemptLogEntry[] };
}

const attemptFold = () => appendFold<AttemptLogEntry>(insertAttempts);

export const attemptLogReadModel: ReadModel<AttemptLogEntry[]> = {
  name: Projection.AttemptLog,
  stream: ATTEMPT_LOG_STREAM,
  kind: 'attempt log',
  decode: decodeAttemptLogMessage,
  load: async () => attemptFold(),
  empty: attemptFold,
  clear: (em) => deleteAllAttempts(em),
};

/** Keep the delivery log up to date with ATTEMPT_LOG, and purge what it applied from the stream. */
export const startAttemptLogProjector = (deps: ProjectorDeps, opts: { trimEveryMs?: number } = {}): Promise<Projector> =>
  startTrimmedProjector(attemptLogReadModel, deps, opts);
