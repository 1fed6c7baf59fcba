// `hookstream projections rebuild`: drop the endpoint projection and replay the ENDPOINTS stream into it;
// `hookstream projections status`: how far it is, and the events it skipped (issue 23).
// Work on the store directly (NATS and Postgres, as the service user); live projectors wait and go on.
import { closeDatabase, openDatabase, type Database } from '../../db/orm.ts';
import { ENDPOINTS_PROJECTION, rebuildEndpointProjection } from '../../../projections/endpoints.ts';
import { readCheckpoint, readSkipped } from '../../../projections/checkpoint.ts';
import { ENDPOINTS_STREAM } from '../../../streams/endpoints.ts';
import type { Command } from '../command.ts';
import { withNats, type NatsContext } from '../context.ts';

/** Run `fn` with the stream and the database, as the service user; both closed afterwards. */
function withStore<T>(fn: (ctx: NatsContext & { orm: Database }) => Promise<T>): Promise<T> {
  return withNats(async (ctx) => {
    const orm = await openDatabase(ctx.config.databaseUrl, ctx.log, { poolSize: 2 });
    try {
      return await fn({ ...ctx, orm });
    } finally {
      await closeDatabase(orm);
    }
  });
}

export const projectionsRebuild: Command = {
  name: 'projections rebuild',
  summary: 'Rebuild the endpoints table from the ENDPOINTS stream (the source of truth)',
  help: [
    'Drops every row of the endpoint projection and applies the stream from its first event, in one',
    'transaction: readers see the old table until the new one is complete, and running projectors pause',
    'meanwhile. Needs DATABASE_URL and a NATS user allowed to use JetStream (the service user).',
  ].join('\n'),
  async run({ out }) {
    const result = await withStore(({ js, log, orm }) =>
      rebuildEndpointProjection({ js, orm, log }, (done, total) => out.progress(done, total, 'rebuilding')));
    out.data(result, () => `endpoint projection rebuilt: ${result.applied} event(s) applied, ${result.skipped} skipped`
      + (result.skipped ? ' (hookstream projections status lists them)' : ''));
  },
};

export const projectionsStatus: Command = {
  name: 'projections status',
  summary: 'How far the endpoints table is behind the ENDPOINTS stream, and the events it skipped',
  help: [
    'Prints the stream sequence the endpoint projection has applied, the stream\'s last sequence, and the',
    'events it skipped (undecodable, unusable, or holding a value Postgres cannot store: the read model goes',
    'on without them), newest first with their reason. Needs DATABASE_URL and the service\'s NATS user.',
  ].join('\n'),
  async run({ out }) {
    const status = await withStore(async ({ jsm, orm }) => {
      const streamLastSeq = (await jsm.streams.info(ENDPOINTS_STREAM)).state.last_seq;
      const appliedSeq = await readCheckpoint(orm, ENDPOINTS_PROJECTION);
      const skipped = await readSkipped(orm, ENDPOINTS_PROJECTION);
      return { projection: ENDPOINTS_PROJECTION, applied_seq: appliedSeq, stream_last_seq: streamLastSeq, unapplied: Math.max(0, streamLastSeq - appliedSeq), skipped };
    });
    out.data(status, () => [
      `endpoints: applied up to ${status.applied_seq} of ${status.stream_last_seq} (${status.unapplied} unapplied); ${status.skipped.total} event(s) skipped`,
      ...status.skipped.latest.map((s) => `  seq ${s.seq}  ${s.skippedAt}  ${s.reason}`),
    ].join('\n'));
  },
};
