// Read models fed through a stream that is only a buffer (ERASURE_INDEX, ATTEMPT_LOG): each message is a
// batch of entries, appended to the table as they come, and what the projection has applied is purged
// from the stream every few seconds, so nothing stays there once it is rows (and erasure of a row leaves
// no copy behind). The checkpoint is shared by every instance, so any of them may trim up to it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { describe } from '../src/errors.ts';
import { startProjector, type Fold, type Projector, type ProjectorDeps, type ReadModel } from './engine.ts';

/** A fold that gathers the batches' entries and writes them with `insert` (which returns how many rows). */
export function appendFold<T>(insert: (em: EntityManager, entries: T[]) => Promise<number>): Fold<T[]> {
  const entries: T[] = [];
  return {
    apply(_seq, batch) {
      entries.push(...batch);
      return undefined;
    },
    save: (em) => insert(em, entries),
  };
}

const TRIM_EVERY_MS = 10_000;

export async function startTrimmedProjector<M>(model: ReadModel<M>, deps: ProjectorDeps, opts: { trimEveryMs?: number } = {}): Promise<Projector> {
  const projector = await startProjector(model, deps);
  const jsm = await deps.js.jetstreamManager();
  let trimmed = 0;
  const trim = async () => {
    const upTo = projector.lastSeq();
    if (upTo <= trimmed) return;
    await jsm.streams.purge(model.stream, { seq: upTo + 1 });
    trimmed = upTo;
  };
  let trimming: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    trimming = trim().catch((e: unknown) => deps.log.warn(`could not purge the applied ${model.kind} from its stream; trying again`, { reason: describe(e) }));
  }, opts.trimEveryMs ?? TRIM_EVERY_MS);
  timer.unref();
  return {
    ...projector,
    async stop() {
      clearInterval(timer);
      await trimming;
      await projector.stop();
    },
  };
}
