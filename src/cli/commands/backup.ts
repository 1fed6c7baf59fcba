// `hookstream backup --to DIR` and `hookstream restore --from DIR`: what hookstream cannot rebuild, the
// ENDPOINTS and OPS streams and the Postgres tables that are no projection, as JSON lines in a folder; and
// back onto empty servers. Postgres is read first, in one snapshot, then the streams: every endpoint a
// dead letter or an idempotency record names is then in the ENDPOINTS copy.
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { once } from 'node:events';
import { IsolationLevel } from '@mikro-orm/core';
import { UsageError, requireString, type Command } from '../command.ts';
import { withDatabase, withNats } from '../context.ts';
import { BACKED_UP_STREAMS, readStream, streamMessages, writeStream, type StoredMessage } from '../../backup/streams.ts';
import { backedUpTables, countRows, readTable, resetSequences, writeRows } from '../../backup/tables.ts';
import { ConfigError } from '../../errors.ts';
import { ENDPOINTS_STREAM } from '../../../streams/endpoints.ts';

const FORMAT = 'hookstream-backup';

interface Manifest {
  format: typeof FORMAT;
  version: 1;
  created_at: string;
  tables: Record<string, number>;
  streams: Record<string, number>;
}

async function writeLines(path: string, lines: AsyncIterable<string>): Promise<number> {
  const file = createWriteStream(path, { flags: 'wx', mode: 0o600 });
  let n = 0;
  try {
    for await (const line of lines) {
      if (!file.write(line + '\n')) await once(file, 'drain');
      n++;
    }
  } finally {
    file.end();
    await once(file, 'close');
  }
  return n;
}

const readLines = (path: string) => createInterface({ input: createReadStream(path), crlfDelay: Infinity });

async function* parsed(path: string): AsyncGenerator<StoredMessage> {
  for await (const line of readLines(path)) if (line !== '') yield JSON.parse(line) as StoredMessage;
}

async function* json<T>(items: AsyncIterable<T>): AsyncGenerator<string> {
  for await (const item of items) yield JSON.stringify(item);
}

const report = (heading: string, counts: Pick<Manifest, 'streams' | 'tables'>) => [
  heading,
  ...Object.entries(counts.streams).map(([s, n]) => `  stream ${s}: ${n} message(s)`),
  ...Object.entries(counts.tables).map(([t, n]) => `  table ${t}: ${n} row(s)`),
];

export const backup: Command = {
  name: 'backup',
  summary: 'Copy the ENDPOINTS, OPS and DATA_KEYS streams and the Postgres tables that are no projection into a folder',
  help: [
    '  --to DIR   a folder that does not exist yet, or is empty',
    '',
    'Writes manifest.json, streams/<STREAM>.jsonl and postgres/<table>.jsonl (readable by you only). The',
    'endpoints\' signing secrets and the keys of delivery bodies are in it, sealed under the master key: keep',
    'the keys apart from the backup.',
    'Runs beside the service, as the service\'s NATS user with DATABASE_URL. See docs/operations.md.',
  ].join('\n'),
  options: { to: { type: 'string' } },
  async run({ values, out }) {
    const dir = requireString(values, 'to');
    const existing = await readdir(dir).catch(() => []);
    if (existing.length > 0) throw new UsageError(`--to ${dir} is not empty`);
    await mkdir(join(dir, 'postgres'), { recursive: true, mode: 0o700 });
    await mkdir(join(dir, 'streams'), { recursive: true, mode: 0o700 });
    const manifest: Manifest = { format: FORMAT, version: 1, created_at: new Date().toISOString(), tables: {}, streams: {} };
    await withDatabase((em) => em.transactional(async (tx) => {
      for (const table of await backedUpTables(tx)) {
        manifest.tables[table] = await writeLines(join(dir, 'postgres', `${table}.jsonl`), readTable(tx, table));
      }
    }, { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true }));
    await withNats(async ({ js, jsm }) => {
      for (const stream of BACKED_UP_STREAMS) {
        manifest.streams[stream] = await writeLines(join(dir, 'streams', `${stream}.jsonl`), json(readStream(js, jsm, stream)));
      }
    });
    await writeFile(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n', { mode: 0o600 });
    out.data(manifest, () => report(`backed up into ${dir}:`, manifest).join('\n'));
  },
};

export const restore: Command = {
  name: 'restore',
  summary: 'Restore a backup onto empty servers: the streams\' messages and the tables\' rows',
  help: [
    '  --from DIR   a folder `hookstream backup` wrote',
    '',
    'Start the service once on the new NATS and Postgres first (it creates the streams and tables), with',
    'the same keys and HOOKSTREAM_DELIVERY_SHARDS as before; it may keep running. Refuses unless ENDPOINTS',
    'and every table to restore are empty. The endpoints come back with their secrets; deliveries that were',
    'queued or in flight at the backup do not. As the service\'s NATS user with DATABASE_URL.',
  ].join('\n'),
  options: { from: { type: 'string' } },
  async run({ values, out }) {
    const dir = requireString(values, 'from');
    const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8').catch(() => {
      throw new UsageError(`--from ${dir} holds no manifest.json: not a backup`);
    })) as Manifest;
    if (manifest.format !== FORMAT || manifest.version !== 1) throw new UsageError(`--from ${dir}: not a hookstream backup of a version this one reads`);
    const restored = { tables: {} as Record<string, number>, streams: {} as Record<string, number> };
    await withNats(async ({ js, jsm }) => {
      const stored = await streamMessages(jsm, ENDPOINTS_STREAM);
      if (stored > 0) throw new ConfigError('NATS_URL', `its ${ENDPOINTS_STREAM} stream already holds ${stored} message(s): restore onto an empty NATS store`);
      await withDatabase((em) => em.transactional(async (tx) => {
        for (const table of Object.keys(manifest.tables)) {
          const rows = await countRows(tx, table).catch(() => { throw new ConfigError('DATABASE_URL', `has no table ${table}: start the service once on it first`); });
          if (rows > 0) throw new ConfigError('DATABASE_URL', `its table ${table} already holds ${rows} row(s): restore onto an empty database`);
        }
        for (const table of Object.keys(manifest.tables)) {
          let batch: string[] = [];
          let n = 0;
          for await (const line of readLines(join(dir, 'postgres', `${table}.jsonl`))) {
            if (line === '') continue;
            batch.push(line);
            n++;
            if (batch.length === 500) { await writeRows(tx, table, batch); batch = []; }
          }
          await writeRows(tx, table, batch);
          await resetSequences(tx, table);
          restored.tables[table] = n;
        }
      }));
      for (const stream of Object.keys(manifest.streams)) {
        restored.streams[stream] = await writeStream(js, parsed(join(dir, 'streams', `${stream}.jsonl`)));
      }
    });
    out.data(restored, () => [...report(`restored from ${dir}:`, restored),
      'a running service picks the endpoints up from the stream; otherwise start it'].join('\n'));
  },
};
