// `npm start` with nothing running (issue 18): in a network namespace of the test's own, where nothing
// answers on the default addresses, the service starts a local nats-server and Postgres; the README's
// walk-through (API key, endpoint, listen, publish, an operator's command) reaches a verified delivery with
// no configuration; SIGTERM stops what it started (checked by pid), a second start finds the data, and a
// start after a SIGKILL stops the servers the killed one left before using their data.
// Also: NODE_ENV=production refuses, a nats-server too old on the default address gets a local one beside it,
// and a missing nats-server is downloaded or named.
import test from 'ava';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isHookstreamError } from '../src/errors.ts';
import { findNatsServer } from '../src/local/nats-server.ts';
import { isAlive, RUNNING_FILE } from '../src/local/state.ts';
import { createNetns, netnsAvailable, type Netns } from './helpers/netns.ts';
import { OLD_NATS_BINARY } from './helpers/nats-binary.ts';

// What `npm start` and `npx hookstream` run.
const BIN = fileURLToPath(new URL('../bin/hookstream', import.meta.url));
const nsTest = netnsAvailable() ? test.serial : test.serial.skip;

/** This process's environment without anything that configures hookstream, as on a new machine. */
function cleanEnv(dataDir: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(NATS_(URL|USER|PASSWORD)|DATABASE_URL|NODE_ENV|HOOKSTREAM_.*)$/.test(k)) continue;
    env[k] = v;
  }
  // NATS_SERVER_BIN stays: the test runs the nats-server the suite is run on.
  return { ...env, HOOKSTREAM_DATA_DIR: dataDir, HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', ...extra };
}

/** A data directory the postgres OS user can reach when we are root (tmpdir's are 0700). */
function freshDir(): { root: string; dataDir: string } {
  const root = mkdtempSync(join(tmpdir(), 'hookstream-local-'));
  chmodSync(root, 0o755);
  return { root, dataDir: join(root, 'data') };
}

interface Output { text: string; wait(re: RegExp, what: string, timeoutMs?: number): Promise<RegExpMatchArray> }

function collect(child: ChildProcess): Output {
  const out: Output = {
    text: '',
    wait: (re, what, timeoutMs = 90_000) => new Promise((resolve, reject) => {
      const check = () => {
        const m = out.text.match(re);
        if (m) { clearInterval(timer); clearTimeout(limit); resolve(m); }
        else if (child.exitCode !== null || child.signalCode !== null) { clearInterval(timer); clearTimeout(limit); reject(new Error(`exited before ${what}:\n${out.text}`)); }
      };
      const timer = setInterval(check, 50);
      const limit = setTimeout(() => { clearInterval(timer); reject(new Error(`no ${what} within ${timeoutMs} ms:\n${out.text}`)); }, timeoutMs);
    }),
  };
  for (const s of [child.stdout, child.stderr]) s?.on('data', (c: Buffer) => { out.text += c.toString('utf8'); });
  return out;
}

function serve(ns: Netns, env: NodeJS.ProcessEnv): { child: ChildProcess; out: Output } {
  const child = ns.spawn(BIN, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  return { child, out: collect(child) };
}

async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  return exited;
}

/** Processes whose command line names `dir`: what the service started there and left behind. */
function processesIn(dir: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmd = '';
    try { cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' '); } catch { continue; }
    if (cmd.includes(dir)) found.push(`${pid}: ${cmd}`);
  }
  return found;
}

nsTest('npm start with nothing running: the README walk-through to a verified delivery, a clean stop, the data on the next start, also after a kill', async (t) => {
  t.timeout(300_000);
  const ns = await createNetns();
  const { root, dataDir } = freshDir();
  const env = cleanEnv(dataDir);
  const children: ChildProcess[] = [];
  t.teardown(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) await stop(c);
    // A failed run leaves nothing behind either: what still runs in the data directory is killed.
    for (const p of processesIn(dataDir)) { try { process.kill(Number(p.split(':')[0]), 'SIGKILL'); } catch { /* gone */ } }
    ns.dispose();
    rmSync(root, { recursive: true, force: true });
  });
  const hookstream = async (...args: string[]) => {
    const r = await ns.run(BIN, args, { env });
    t.is(r.code, 0, `hookstream ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const curl = async (...args: string[]) => {
    const r = await ns.run('curl', ['-s', '--fail-with-body', ...args], { env });
    t.is(r.code, 0, `curl ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    return r.stdout;
  };

  // shell 1: the service
  const first = serve(ns, env);
  children.push(first.child);
  await first.out.wait(/hookstream started/, 'start-up');
  t.regex(first.out.text, /no Postgres answered on 127\.0\.0\.1:5432: started a local one there \(new\)/);
  t.regex(first.out.text, /no NATS server answered on 127\.0\.0\.1:4222: started a local nats-server there/);
  const running = JSON.parse(readFileSync(join(dataDir, RUNNING_FILE), 'utf8')) as { nats: { pid: number }; postgres: { pid: number } };
  t.true(isAlive(running.nats.pid) && isAlive(running.postgres.pid));

  // shell 2: an API key, a subscribed receiver
  const key = (await hookstream('api-keys', 'create', '--tenant', 'tenant_42', '--name', 'quickstart')).match(/hs_live_\S+/)?.[0];
  t.truthy(key);
  t.regex(await curl('http://127.0.0.1:8080/v1/event-types', '-H', `Authorization: Bearer ${key}`), /user\.created/);
  const created = JSON.parse(await curl('-X', 'POST', 'http://127.0.0.1:8080/v1/webhooks',
    '-H', `Authorization: Bearer ${key}`, '-H', 'content-type: application/json',
    '-d', '{"url":"http://127.0.0.1:9000/webhooks","events":["user.*"],"description":"local test"}')) as { id: string; signing_secret: string };
  const listen = ns.spawn(BIN, ['listen', '--port', '9000', '--secret', created.signing_secret], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(listen);
  const received = collect(listen);
  await received.wait(/listening on/, 'the receiver');

  // shell 3: an auth service publishes; the receiver verifies the signature and answers 204
  t.regex(await hookstream('events', 'publish', '--tenant', 'tenant_42', '--type', 'user.created', '--data', '{"userId":"user_1"}'), /published user\.created/);
  const [, webhookId] = await received.wait(/user\.created\s+(msg_\w+)\s+signature valid\s+-> 204/, 'the delivery');
  // An operator's command, through the admin subjects as nats.conf's operator user.
  t.regex(await hookstream('deliveries', 'show', webhookId!, '--endpoint', created.id), /: ACKNOWLEDGED/);
  t.regex(await hookstream('dead-letters', 'list'), /no dead letters/);

  // Ctrl-C under `npm start`: SIGINT from the terminal, and again forwarded by npm. The service stops,
  // then what it started.
  await stop(listen);
  const exited = new Promise<number | null>((resolve) => first.child.once('exit', (code) => resolve(code)));
  first.child.kill('SIGINT');
  await first.out.wait(/shutting down/, 'the shutdown');
  first.child.kill('SIGINT');
  t.is(await exited, 0, first.out.text);
  t.regex(first.out.text, /stopped the local nats-server[\s\S]*stopped the local Postgres[\s\S]*"stopped"/);
  t.false(isAlive(running.nats.pid), 'nats-server still runs');
  t.false(isAlive(running.postgres.pid), 'postgres still runs');
  t.deepEqual(processesIn(dataDir), []);
  t.false(existsSync(join(dataDir, RUNNING_FILE)));

  // The second start finds the data where the first left it.
  const second = serve(ns, env);
  children.push(second.child);
  await second.out.wait(/hookstream started/, 'the second start-up');
  t.notRegex(second.out.text, /\(new\)/);
  t.regex(await hookstream('endpoints', 'list', '--tenant', 'tenant_42'), new RegExp(created.id));
  t.regex(await curl('http://127.0.0.1:8080/v1/webhooks', '-H', `Authorization: Bearer ${key}`), new RegExp(created.id));

  // A service killed outright leaves its servers running: the next start stops them cleanly, then starts its own.
  const left = JSON.parse(readFileSync(join(dataDir, RUNNING_FILE), 'utf8')) as { nats: { pid: number }; postgres: { pid: number } };
  const killed = new Promise((resolve) => second.child.once('exit', resolve));
  second.child.kill('SIGKILL');
  await killed;
  t.true(isAlive(left.nats.pid) && isAlive(left.postgres.pid));
  const third = serve(ns, env);
  children.push(third.child);
  await third.out.wait(/hookstream started/, 'the start after a kill');
  t.regex(third.out.text, /stopping the local nats-server a previous hookstream left running/);
  t.regex(third.out.text, /stopping the local postgres a previous hookstream left running/);
  t.regex(await hookstream('endpoints', 'list', '--tenant', 'tenant_42'), new RegExp(created.id));
  const last = JSON.parse(readFileSync(join(dataDir, RUNNING_FILE), 'utf8')) as { nats: { pid: number }; postgres: { pid: number } };
  t.is(await stop(third.child), 0, third.out.text);
  t.false(isAlive(last.nats.pid) || isAlive(last.postgres.pid));
  t.deepEqual(processesIn(dataDir), []);
});

const oldNsTest = netnsAvailable() && OLD_NATS_BINARY !== undefined ? test.serial : test.serial.skip;

oldNsTest('npm start with a nats-server below 2.10 on the default address: a local one of its own beside it, the old one untouched', async (t) => {
  t.timeout(300_000);
  const ns = await createNetns();
  const { root, dataDir } = freshDir();
  const env = cleanEnv(dataDir);
  const old = ns.spawn(OLD_NATS_BINARY!, ['-a', '127.0.0.1', '-p', '4222', '-js', '-sd', join(root, 'old-nats')], { stdio: 'ignore' });
  let first: ReturnType<typeof serve> | undefined;
  t.teardown(async () => {
    if (first) await stop(first.child);
    for (const p of processesIn(dataDir)) { try { process.kill(Number(p.split(':')[0]), 'SIGKILL'); } catch { /* gone */ } }
    old.kill('SIGKILL');
    ns.dispose();
    rmSync(root, { recursive: true, force: true });
  });
  for (let i = 0; i < 100 && (await ns.run('sh', ['-c', 'exec 3<>/dev/tcp/127.0.0.1/4222'])).code !== 0; i++) await new Promise((r) => setTimeout(r, 100));

  first = serve(ns, env);
  await first.out.wait(/hookstream started/, 'start-up');
  const [, port] = first.out.text.match(/the nats-server on 127\.0\.0\.1:4222 runs 2\.9\.10, older than 2\.10: started a local nats-server on 127\.0\.0\.1:(\d+)/) ?? [];
  t.truthy(port, first.out.text);
  t.not(port, '4222');
  // The CLI finds the local one too: a key, then an event published into it.
  const r = await ns.run(BIN, ['events', 'publish', '--tenant', 'tenant_42', '--type', 'user.created', '--data', '{"userId":"user_1"}'], { env });
  t.is(r.code, 0, r.stderr);
  t.is(await stop(first.child), 0, first.out.text);
  first = undefined;
  t.deepEqual(processesIn(dataDir), []);
  t.is(old.exitCode, null, 'the old nats-server still runs');
});

nsTest('NODE_ENV=production never starts a local server: one line names the variable to set', async (t) => {
  const ns = await createNetns();
  const { root, dataDir } = freshDir();
  t.teardown(() => { ns.dispose(); rmSync(root, { recursive: true, force: true }); });
  const r = await ns.run(BIN, ['serve'], { env: cleanEnv(dataDir, { NODE_ENV: 'production' }) });
  t.is(r.code, 1);
  t.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  t.regex(r.stderr, /NATS_URL: is not set and nothing answers on nats:\/\/127\.0\.0\.1:4222; with NODE_ENV=production hookstream never starts a local nats-server: set NATS_URL/);
  t.false(existsSync(dataDir), 'nothing was started or written');
  // With NATS configured, Postgres is refused the same way.
  const db = await ns.run(BIN, ['serve'], { env: cleanEnv(dataDir, { NODE_ENV: 'production', NATS_URL: 'nats://127.0.0.1:4222' }) });
  t.is(db.code, 1);
  t.regex(db.stderr, /DATABASE_URL: is not set and nothing answers on postgres:\/\/postgres@127\.0\.0\.1:5432\/hookstream; .* never starts a local Postgres/);
  t.false(existsSync(dataDir));
});

nsTest('a NATS_SERVER_BIN that is not there stops start-up with one line, before anything starts', async (t) => {
  const ns = await createNetns();
  const { root, dataDir } = freshDir();
  t.teardown(() => { ns.dispose(); rmSync(root, { recursive: true, force: true }); });
  const r = await ns.run(BIN, ['serve'], { env: cleanEnv(dataDir, { NATS_SERVER_BIN: join(root, 'nats-server') }) });
  t.is(r.code, 1);
  t.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  t.regex(r.stderr, /NATS_SERVER_BIN: .* is not an executable file; .*`bin\/fetch-nats-server` downloads one, .*`apt-get install nats-server` \(Debian 13, Ubuntu 24.04 and later\) or `brew install nats-server` \(macOS\)/);
  t.false(existsSync(dataDir), 'no Postgres was started for nothing');
});

test('the nats-server npm start runs: from PATH or the sbin directories when recent enough, else downloaded; the error names how to get one', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'hookstream-bin-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const empty = join(root, 'empty');
  mkdirSync(empty);
  const fake = (dir: string, version: string) => {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'nats-server'), `#!/bin/sh\necho "nats-server: v${version}"\n`, { mode: 0o755 });
    return join(dir, 'nats-server');
  };
  const fetched: string[] = [];
  const fetch = () => { fetched.push('fetch'); return '/cache/nats-server'; };
  const failing = () => { throw Object.assign(new Error('exit 1'), { stderr: 'fetch-nats-server: cannot download http://deb.debian.org/x.deb\n' }); };
  // Found on PATH, and in the sbin directories a normal user's PATH lacks on Debian.
  const recent = fake(join(root, 'bin'), '2.10.27');
  t.is(findNatsServer({ PATH: `${empty}:${join(root, 'bin')}` }, { fallbackDirs: [], fetch }), recent);
  t.is(findNatsServer({ PATH: empty }, { fallbackDirs: [join(root, 'bin')], fetch }), recent);
  t.deepEqual(fetched, []);
  // None, or one below the floor (Debian bookworm's 2.9.10): downloaded, and said why first.
  const why: string[] = [];
  t.is(findNatsServer({ PATH: empty }, { fallbackDirs: [], fetch, fetched: (w) => why.push(w) }), '/cache/nats-server');
  const old = fake(join(root, 'old'), '2.9.10');
  t.is(findNatsServer({ PATH: join(root, 'old') }, { fallbackDirs: [], fetch, fetched: (w) => why.push(w) }), '/cache/nats-server');
  t.deepEqual(why, ['no nats-server binary on PATH', `${old} is nats-server 2.9.10, older than 2.10`]);
  // The download failed: one line with its reason and how to install one.
  const e = t.throws(() => findNatsServer({ PATH: empty }, { fallbackDirs: [], fetch: failing }));
  t.true(isHookstreamError(e));
  t.is(e?.message, 'NATS_URL: is not set and no NATS server 2.10 or newer answers on the default address; downloading one failed '
    + '(fetch-nats-server: cannot download http://deb.debian.org/x.deb): `bin/fetch-nats-server` downloads one, or install nats-server 2.10 or newer: '
    + '`apt-get install nats-server` (Debian 13, Ubuntu 24.04 and later) or `brew install nats-server` (macOS)');
  // A non-executable file is no binary.
  writeFileSync(join(empty, 'nats-server'), 'not a program', { mode: 0o644 });
  t.is(findNatsServer({ PATH: empty }, { fallbackDirs: [], fetch }), '/cache/nats-server');
  // NATS_SERVER_BIN is taken as given, and refused below the floor rather than replaced.
  t.is(findNatsServer({ NATS_SERVER_BIN: recent }, { fetch }), recent);
  t.throws(() => findNatsServer({ NATS_SERVER_BIN: old }, { fetch }), { message: `NATS_SERVER_BIN: ${old} is nats-server 2.9.10; hookstream needs 2.10 or newer: unset it, or \`bin/fetch-nats-server\` downloads one, or install nats-server 2.10 or newer: \`apt-get install nats-server\` (Debian 13, Ubuntu 24.04 and later) or \`brew install nats-server\` (macOS)` });
});
