// `hookstream projections rebuild`: drop the endpoint projection and replay the ENDPOINTS stream into it.
// Works on the store directly (NATS and Postgres, as the service user); live projectors wait and go on.
import { loadConfig } from '../../config.ts';
import { closeDatabase, openDatabase } from '../../db/orm.ts';
import { rebuildEndpointProjection } from '../../../projections/endpoints.ts';
import type { Command } from '../command.ts';
import { cliLogger, withNats } from '../context.ts';

export const projectionsRebuild: Command = {
  name: 'projections rebuild',
  summary: 'Rebuild the endpoints table from the ENDPOINTS stream (the source of truth)',
  help: [
    'Drops every row of the endpoint projection and applies the stream from its first event, in one',
    'transaction: readers see the old table until the new one is complete, and running projectors pause',
    'meanwhile. Needs DATABASE_URL and a NATS user allowed to use JetStream (the service user).',
  ].join('\n'),
  async run({ out }) {
    const config = loadConfig();
    const result = await withNats(async ({ js, log }) => {
      const orm = await openDatabase(config.databaseUrl, cliLogger(config), { poolSize: 2 });
      try {
        return await rebuildEndpointProjection({ js, orm, log }, (done, total) => out.progress(done, total, 'rebuilding'));
      } finally {
        await closeDatabase(orm);
      }
    });
    out.data({ applied: result.applied }, () => `endpoint projection rebuilt: ${result.applied} event(s) applied`);
  },
};
