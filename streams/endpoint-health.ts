// ENDPOINT_HEALTH: since when an endpoint's attempts have all failed, one small record per endpoint
// (`endpoint_health.<endpointId>`, only the latest kept), written only when that changes (the first
// failure after a success, the first success after failures, a disable). It survives restarts and is
// shared by every delivery instance: each folds the stream live (src/delivery/endpoint-health.ts).
// A record nobody re-writes expires (issue 23: the record of an endpoint whose delete was missed, and old
// states, stayed for ever); delivery instances re-write a failing active endpoint's record well within it.
import { DiscardPolicy, JetStreamApiCodes, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, isApiError, type EnsureOptions } from './ensure.ts';

export const ENDPOINT_HEALTH_STREAM = 'ENDPOINT_HEALTH';
export const endpointHealthSubject = (endpointId: string) => `endpoint_health.${endpointId}`;

/** Wire shape, version 1. `failing_since` null: the last attempt succeeded (or the clock was reset). */
export interface EndpointHealthRecord {
  v: 1;
  endpoint: string;
  failing_since: string | null;
  at: string;
}

/**
 * The stream's max_age. A failing active endpoint's record is re-written once it is a seventh of this old,
 * so its clock outlives any HOOKSTREAM_DISABLE_AFTER; only a clock nobody delivers for (a deleted or
 * disabled endpoint, or no delivery instance running for this long) is lost, which only delays a disable.
 */
export const ENDPOINT_HEALTH_MAX_AGE_MS = 7 * 24 * 3600_000;

/** `maxAgeMs`: tests shorten it (the delivery role's refresh follows the same option). */
export async function ensureEndpointHealthStream(jsm: JetStreamManager, opts?: EnsureOptions, maxAgeMs = ENDPOINT_HEALTH_MAX_AGE_MS): Promise<void> {
  await keepClocksThroughShorterAge(jsm, maxAgeMs);
  await ensureStream(jsm, {
    name: ENDPOINT_HEALTH_STREAM,
    subjects: ['endpoint_health.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_msgs_per_subject: 1,
    max_msg_size: 1024,
    max_age: nanos(maxAgeMs),
    // The server's default (2 min), or less for a test's short age: it may not exceed max_age, also on update.
    duplicate_window: nanos(Math.min(maxAgeMs, 120_000)),
  }, opts);
}

/**
 * The server drops what is older than a new max_age at once: before a stream made without one (an upgrade)
 * gets it, or a shorter one, the failing clocks older than half the new age are re-written (on the sequence
 * read, so a success written meanwhile wins), and the delivery role's refreshes take over from there.
 */
async function keepClocksThroughShorterAge(jsm: JetStreamManager, maxAgeMs: number): Promise<void> {
  let current;
  try {
    current = (await jsm.streams.info(ENDPOINT_HEALTH_STREAM)).config.max_age;
  } catch (e) {
    if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return;
    throw e;
  }
  if (current !== 0 && current <= nanos(maxAgeMs)) return;
  const { state } = await jsm.streams.info(ENDPOINT_HEALTH_STREAM, { subjects_filter: 'endpoint_health.>' });
  const js = jsm.jetstream();
  for (const subject of Object.keys(state.subjects ?? {})) {
    const m = await jsm.streams.getMessage(ENDPOINT_HEALTH_STREAM, { last_by_subj: subject }).catch(() => null);
    if (!m || Date.now() - m.time.getTime() < maxAgeMs / 2) continue;
    let r: Partial<EndpointHealthRecord>;
    try { r = m.json(); } catch { continue; }
    if (typeof r.failing_since !== 'string') continue; // healthy: nothing to keep
    try {
      await js.publish(subject, JSON.stringify({ ...r, at: new Date().toISOString() }), { expect: { lastSubjectSequence: m.seq } });
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.StreamWrongLastSequence)) throw e; // start-up tries again
    }
  }
}
