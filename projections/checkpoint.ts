// The projection_checkpoints table: one row per read model, holding the last stream sequence its rows
// cover. The row is written in the same transaction as the rows it covers, so it is the position of truth.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { ProjectionCheckpoint } from '../src/db/entities.ts';

/** The read models and the names of their checkpoint rows (stored: a renamed row starts again from sequence 1). */
export const Projection = { Endpoints: 'endpoints' } as const;
export type Projection = (typeof Projection)[keyof typeof Projection];

/** Lock `name`'s checkpoint row for the rest of the transaction and return its position. */
export async function lockCheckpoint(em: EntityManager, name: Projection): Promise<number> {
  // The row must exist to be locked; a concurrent insert of the same row is simply ignored.
  await em.execute('insert into projection_checkpoints (name, last_seq) values (?, 0) on conflict (name) do nothing', [name]);
  const row = await em.findOneOrFail(ProjectionCheckpoint, { name }, { lockMode: LockMode.PESSIMISTIC_WRITE, disableIdentityMap: true });
  return row.lastSeq;
}

/** Move the checkpoint; only under the lock of lockCheckpoint, in the transaction that wrote the rows. */
export async function setCheckpoint(em: EntityManager, name: Projection, seq: number): Promise<void> {
  await em.nativeUpdate(ProjectionCheckpoint, { name }, { lastSeq: seq });
}

/**
 * Read the checkpoint without locking (0 when the projection never ran). The endpoint projection is
 * the default because it is the only read model so far.
 */
export async function readCheckpoint(orm: MikroORM, name: Projection = Projection.Endpoints): Promise<number> {
  const row = await orm.em.fork().findOne(ProjectionCheckpoint, { name }, { disableIdentityMap: true });
  return row?.lastSeq ?? 0;
}
