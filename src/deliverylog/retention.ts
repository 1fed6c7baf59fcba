// How long the delivery log keeps its rows (HOOKSTREAM_ATTEMPT_RETENTION), and its part in erasure: a
// user's or organization's deliveries (by the webhook-ids the erasure index found) and a whole tenant's.
// Erasure first waits, briefly, for the projection to apply what the delivery role wrote before it began,
// so no attempt of an erased delivery arrives in the table afterwards.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamManager } from '@nats-io/jetstream';
import { ATTEMPT_LOG_STREAM } from '../../streams/attempt-log.ts';
import { Projection } from '../../projections/checkpoint.ts';
import { waitForCheckpoint } from '../../projections/wait.ts';
import { startRetentionSweep, type RetentionSweep } from '../db/retention-sweep.ts';
import type { Logger } from '../log.ts';
import { deleteAttemptsOf, deleteExpiredAttempts, deleteTenantAttempts } from './store.ts';

export const DEFAULT_ATTEMPT_RETENTION_MS = 7 * 24 * 3600_000;
const PROJECTION_WAIT_MS = 10_000;

export function startAttemptLogRetention(deps: { orm: MikroORM; retentionMs: number; log: Logger }): RetentionSweep {
  return startRetentionSweep({
    orm: deps.orm, retentionMs: deps.retentionMs, log: deps.log, what: 'expired delivery log rows',
    deleteExpired: deleteExpiredAttempts,
    deleted: (count) => deps.log.info('delivery log rows past their retention deleted', { count }),
  });
}

/** Until the projection applied everything ATTEMPT_LOG holds now; a projection that lags is not waited for longer. */
type WaitFor = (name: typeof Projection.AttemptLog, seq: number) => Promise<void>;

async function caughtUp(jsm: JetStreamManager, wait: WaitFor): Promise<void> {
  const end = await jsm.streams.info(ATTEMPT_LOG_STREAM).then((i) => i.state.last_seq, () => 0);
  if (end > 0) await wait(Projection.AttemptLog, end).catch(() => {});
}

/** Erase the tenant's logged attempts and deliveries of these webhook-ids (a user's erasure); how many rows went. */
export async function eraseAttempts(deps: { jsm: JetStreamManager; orm: MikroORM }, em: EntityManager, tenant: string, webhookIds: readonly string[]): Promise<number> {
  if (webhookIds.length === 0) return 0;
  await caughtUp(deps.jsm, (name, seq) => waitForCheckpoint(deps.orm, name, seq, PROJECTION_WAIT_MS));
  return deleteAttemptsOf(em, tenant, webhookIds);
}

/** Erase everything the log holds of a tenant (it leaves); how many rows went. */
export async function eraseTenantAttempts(deps: { jsm: JetStreamManager; waitForProjection: WaitFor }, em: EntityManager, tenant: string): Promise<number> {
  await caughtUp(deps.jsm, deps.waitForProjection);
  return deleteTenantAttempts(em, tenant);
}
