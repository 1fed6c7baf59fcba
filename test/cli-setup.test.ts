// The `hookstream` command as a user meets it before anything works: which Node bin/hookstream runs on
// (the project's, else one on PATH that is new enough, else a message saying what it needs), and what the
// CLI says, from any folder, when the service's servers do not answer.
import test from 'ava';
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { freePort } from './helpers/nats-server.ts';

const root = resolve(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'hookstream-cli-setup-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

function run(bin: string, args: string[], env: Record<string, string>, cwd = dir): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(bin, args, { env: { HOME: dir, ...env }, cwd, timeout: 60_000 }, (error, stdout, stderr) =>
      done({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }));
  });
}

/** A copy of the project as `npm ci --omit=dev` leaves it: no node_modules/.bin/node. */
function projectWithoutPinnedNode(): string {
  const project = join(dir, 'project');
  mkdirSync(join(project, 'bin'), { recursive: true });
  copyFileSync(join(root, 'bin/hookstream'), join(project, 'bin/hookstream'));
  symlinkSync(join(root, 'src'), join(project, 'src'));
  return join(project, 'bin/hookstream');
}

test('without the pinned Node, bin/hookstream runs on a new enough node from PATH, and names what it needs when that is too old', async (t) => {
  const bin = projectWithoutPinnedNode();
  const current = await run(bin, ['keys', 'generate'], { PATH: `${dirname(process.execPath)}:/usr/bin:/bin` });
  t.is(current.code, 0, current.stderr);
  t.regex(current.stdout, /^HOOKSTREAM_MASTER_KEY=/m);

  const old = join(dir, 'old-node');
  mkdirSync(old);
  writeFileSync(join(old, 'node'), '#!/bin/sh\n[ "$1" = --version ] && echo v20.20.2 && exit 0\nexit 1\n');
  chmodSync(join(old, 'node'), 0o755);
  const refused = await run(bin, ['--help'], { PATH: `${old}:/usr/bin:/bin` });
  t.is(refused.code, 1);
  t.regex(refused.stderr, /is Node\.js v20\.20\.2; hookstream needs 22\.20 or later/);

  const none = await run(bin, ['--help'], { PATH: join(dir, 'nothing-here') });
  t.is(none.code, 1);
  t.regex(none.stderr, /no node on PATH; hookstream needs Node\.js 22\.20 or later/);
});

test('from another folder, with nothing answering, the CLI names the service to start and the variables to give, and leaves no .hookstream there', async (t) => {
  const bin = join(root, 'bin/hookstream');
  const elsewhere = join(dir, 'elsewhere');
  mkdirSync(elsewhere);
  const port = await freePort();
  const env = { PATH: process.env['PATH'] ?? '', NATS_URL: `nats://127.0.0.1:${port}`, DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/hookstream` };

  const admin = await run(bin, ['dead-letters', 'list'], env, elsewhere);
  t.is(admin.code, 1);
  t.regex(admin.stderr, new RegExp(`cannot connect to NATS at nats://127\\.0\\.0\\.1:${port} \\(connection refused\\): is hookstream running\\? Start it with \`npm start\` in ${root}`));
  t.regex(admin.stderr, /the service's NATS_URL, NATS_USER, NATS_PASSWORD/);
  t.notRegex(admin.stderr, /nats-server -js|pg_ctlcluster/);

  const publish = await run(bin, ['events', 'publish', '--tenant', 'tenant_1', '--type', 'user.created', '--data', '{"userId":"user_1"}'], env, elsewhere);
  t.is(publish.code, 1);
  t.regex(publish.stderr, /cannot connect to NATS .*: is hookstream running\?/);

  const database = await run(bin, ['api-keys', 'list', '--tenant', 'tenant_1'], env, elsewhere);
  t.is(database.code, 1);
  t.regex(database.stderr, /cannot connect to Postgres at .*: is hookstream running\? .* the service's DATABASE_URL/);
  t.notRegex(database.stderr, /pg_ctlcluster|\n\s+at /);

  t.false(existsSync(join(elsewhere, '.hookstream')));
});
