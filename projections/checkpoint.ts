// The projection_checkpoints table: one row per read model, holding the last stream sequence its rows
// cover. The row is written in the same transaction as the rows it covers, so it is the position of truth.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { ProjectionCheckpoint, ProjectionSkip } from '../src/db/entities.ts';

/** The read models and the names of their checkpoint rows (stored: a renamed row starts again from sequence 1). */
export const Projection = { Endpoints: 'endpoints', ErasureIndex: 'erasure_index', AttemptLog: 'attempt_log', EventIndex: 'event_index' } as const;
export type Projection = (typeof Projection)[keyof typeof Projection];

/** Lock `name`'s checkpoint row for the rest of the transaction and return its position. */
export async function lockCheckpoint(em: EntityManager, name: Projection): Promise<number> {
  // One round trip once the row exists (every batch of every projector pays this); the row is created once,
  // a concurrent insert of the same row simply ignored.
  const locked = () => em.execute<{ last_seq: string | number }[]>('select last_seq from projection_checkpoints where name = ? for update', [name]);
  let [row] = await locked();
  if (!row) {
    await em.execute('insert into projection_checkpoints (name, last_seq) values (?, 0) on conflict (name) do nothing', [name]);
    [row] = await locked();
  }
  return Number(row!.last_seq);
}

/** Move the checkpoint; only under the lock of lockCheckpoint, in the transaction that wrote the rows. */
export async function setCheckpoint(em: EntityManager, name: Projection, seq: number): Promise<void> {
  await em.execute('update projection_checkpoints set last_seq = ? where name = ?', [seq, name]);
}

/** Read the checkpoint without locking (0 when the projection never ran); the endpoint projection by default. */
export async function readCheckpoint(orm: MikroORM, name: Projection = Projection.Endpoints): Promise<number> {
  const row = await orm.em.fork().findOne(ProjectionCheckpoint, { name }, { disableIdentityMap: true });
  return row?.lastSeq ?? 0;
}

/** An event a projector left out, and why. */
export interface SkippedEvent {
  seq: number;
  reason: string;
  skippedAt: string;
}

/** Write down skipped events; in the transaction that moves the checkpoint past them. */
export async function recordSkipped(em: EntityManager, name: Projection, skipped: { seq: number; reason: string }[]): Promise<void> {
  if (skipped.length === 0) return;
  const skippedAt = new Date();
  await em.upsertMany(ProjectionSkip, skipped.map((s) => ({ name, seq: s.seq, reason: s.reason, skippedAt })));
}

/** Forget every skip of `name` (a rebuild records them again). */
export async function clearSkipped(em: EntityManager, name: Projection): Promise<void> {
  await em.nativeDelete(ProjectionSkip, { name });
}

/** The latest `limit` skipped events of `name`, newest first, and how many there are. */
export async function readSkipped(orm: MikroORM, name: Projection, limit = 20): Promise<{ total: number; latest: SkippedEvent[] }> {
  const em = orm.em.fork();
  const [rows, total] = await em.findAndCount(ProjectionSkip, { name }, { orderBy: { seq: 'desc' }, limit, disableIdentityMap: true });
  return { total, latest: rows.map((r) => ({ seq: r.seq, reason: r.reason, skippedAt: r.skippedAt.toISOString() })) };
}
