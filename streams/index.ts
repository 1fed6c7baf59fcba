// Every stream the service needs, created or brought up to date in one call at start-up.
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { ensureEventsStream } from './events.ts';
import { countDirectConsumers } from './direct.ts';
import { ensureEndpointsStream } from './endpoints.ts';
import { ensureDeliveryStreams, QUEUE_RETENTION_MS } from './deliveries.ts';
import { ensureDeadLetterStream } from './dead-letters.ts';
import { ensureAttemptsStream } from './attempts.ts';
import { ensureRejectedStream } from './rejected.ts';
import { ensureOpsStream } from './ops.ts';
import { ensureEndpointHealthStream } from './endpoint-health.ts';
import { ensureRoutedStream } from './routed.ts';
import { ensureEndpointSnapshotsStream } from './endpoint-snapshots.ts';
import { ensureErasureIndexStream } from './erasure-index.ts';
import { ensureAttemptLogStream } from './attempt-log.ts';
import { ensureDataKeysStream } from './data-keys.ts';
import { ensureRouterDrainsStream } from './router-drains.ts';
import { ensureProducerIdsStream } from './producer-ids.ts';
import { isHookstreamError, HookstreamError, ErrorCode, UnreachableError, describe } from '../src/errors.ts';
import { TooFewServersError, type EnsureOptions } from './ensure.ts';

/** How long start-up keeps trying while JetStream does not answer (a cluster electing leaders, say). */
const STARTUP_PATIENCE_MS = 60_000;
/** JetStream not answering for now: waited out at start-up, then reported as unreachable. */
const TRANSIENT = /timeout|no responders|503|unavailable/i;

/**
 * Create or update every stream. Each step is idempotent, so a JetStream that does not answer for a while
 * (a cluster electing its meta leader or still gathering its servers, several instances creating replicated
 * streams at once) is waited
 * out for a minute, from the first step, before start-up fails with one line.
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  opts: {
    shards: number; maxQueued: number; retrySchedule: number[]; replicas: number; onRetry?: (reason: string) => void;
    /** HOOKSTREAM_EVENT_PARTITIONS; absent: none. */
    partitions?: number;
    /** HOOKSTREAM_DIRECT_DELIVERY; absent: direct delivery's window is left as it is (streams/events.ts). */
    direct?: boolean;
    /** HOOKSTREAM_QUEUE_RETENTION; absent: its default (benches, tests). */
    queueRetentionMs?: number;
  },
): Promise<void> {
  const o: EnsureOptions = { replicas: opts.replicas };
  const until = Date.now() + STARTUP_PATIENCE_MS;
  let lastReason: string | undefined;
  for (let wait = 500; ; wait = Math.min(wait * 2, 5000)) {
    try {
      await ensureEndpointsStream(jsm, o);
      const partitions = opts.partitions ?? 0;
      const { everDirect } = await ensureEventsStream(jsm, o, partitions, opts.direct === undefined ? undefined : {
        on: opts.direct, retentionMs: opts.queueRetentionMs ?? QUEUE_RETENTION_MS, consumersLeft: () => countDirectConsumers(jsm, partitions),
      });
      await ensureDeliveryStreams(jsm, opts.shards, opts.maxQueued, o, opts.queueRetentionMs);
      // Once direct delivery was on, its consumers' advisories and producer marks stay wanted: turned off,
      // they drain what its window held.
      await ensureDeadLetterStream(jsm, opts.shards, o, everDirect ? partitions : 0);
      await ensureAttemptsStream(jsm, opts.retrySchedule, o);
      await ensureRejectedStream(jsm, o);
      await ensureOpsStream(jsm, o);
      await ensureEndpointHealthStream(jsm, o);
      await ensureRoutedStream(jsm, o);
      await ensureEndpointSnapshotsStream(jsm, o);
      await ensureErasureIndexStream(jsm, o);
      await ensureAttemptLogStream(jsm, o);
      await ensureDataKeysStream(jsm, o);
      await ensureRouterDrainsStream(jsm, o);
      if (everDirect) await ensureProducerIdsStream(jsm, o);
      return;
    } catch (e) {
      const transient = e instanceof TooFewServersError || (!isHookstreamError(e) && TRANSIENT.test(describe(e)));
      if (!transient || Date.now() + wait > until) throw startupError(e);
      if (describe(e) !== lastReason) opts.onRetry?.(describe(e));
      lastReason = describe(e);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

/** The nats-server runs without JetStream: no wait heals that (src/supervisor/fatal.ts). */
export class JetStreamDisabledError extends UnreachableError {}

/**
 * The manager start-up uses. nats.js checks the account with a request by default: on a cluster electing
 * its meta leader that request timed out before ensureStreams' patience began (a CI run's fault scenario
 * failed there). A server without JetStream says so in its INFO, so that mistake still fails at once.
 */
export async function startupJetStreamManager(nc: NatsConnection): Promise<JetStreamManager> {
  if (nc.info && nc.info.jetstream !== true) {
    throw new JetStreamDisabledError('JetStream is not enabled on nats-server: start it with -js (or jetstream {} in its configuration)');
  }
  return jetstreamManager(nc, { checkAPI: false });
}

/** Any failure of start-up's JetStream calls as one line that says what to do (never a stack). */
export function startupError(e: unknown): HookstreamError {
  if (isHookstreamError(e)) return e;
  const reason = describe(e);
  // Timeouts and 503s: JetStream is off, or a cluster has no meta leader (a majority of its servers is down).
  if (TRANSIENT.test(reason) || /not enabled/i.test(reason)) {
    return new UnreachableError(`JetStream did not answer (${reason}): start nats-server with -js; on a cluster, a majority of its servers must be up`, e);
  }
  return new HookstreamError(ErrorCode.Internal, `creating the JetStream streams failed: ${reason}`, { cause: e });
}
