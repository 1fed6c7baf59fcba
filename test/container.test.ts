// The container image and docker-compose.yml. Always: the Dockerfile against the rules a linter such as
// hadolint would hold it to (neither npm nor Debian ships one), the files it copies against .dockerignore,
// and the compose file's secrets and published ports. Where a container engine answers (`docker info`):
// the image is built and run against NATS and Postgres containers, becomes healthy on /readyz, runs as a
// non-root user and stops cleanly on SIGTERM.
import test from 'ava';
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const root = resolve(import.meta.dirname, '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');

interface Instruction { keyword: string; args: string }

/** The Dockerfile's instructions: comments dropped, continuation lines joined. */
function instructions(text: string): Instruction[] {
  return text.replace(/\\\n/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => { const [keyword, ...rest] = l.split(/\s+/); return { keyword: keyword!.toUpperCase(), args: rest.join(' ') }; });
}

const dockerfile = instructions(read('Dockerfile'));
const lastFrom = dockerfile.map((i) => i.keyword).lastIndexOf('FROM');
const finalStage = dockerfile.slice(lastFrom);
const isExecForm = (args: string) => { try { return Array.isArray(JSON.parse(args)); } catch { return false; } };

test('lint: multi-stage, every base image pinned to an exact version, dependencies from a stage of their own', (t) => {
  const froms = dockerfile.filter((i) => i.keyword === 'FROM').map((i) => i.args.split(/\s+/)[0]!);
  t.true(froms.length >= 2, 'a build stage and a runtime stage');
  for (const image of froms) t.regex(image, /^[\w./-]+(:\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$/, `${image} is pinned`);
  t.true(froms.every((image) => /^node:24\./.test(image)), 'Node 24');
  t.true(finalStage.some((i) => i.keyword === 'COPY' && /--from=\w+ .*node_modules/.test(i.args)), 'node_modules come from the build stage');
  const install = dockerfile.find((i) => i.keyword === 'RUN' && /\bnpm ci\b/.test(i.args));
  t.regex(install?.args ?? '', /--omit=dev/);
  t.false(dockerfile.some((i) => i.keyword === 'ADD'), 'COPY, not ADD');
  for (const run of dockerfile.filter((i) => i.keyword === 'RUN' && /apt-get install/.test(i.args))) {
    t.regex(run.args, /--no-install-recommends/);
    t.regex(run.args, /rm -rf \/var\/lib\/apt\/lists/);
  }
});

test('lint: the runtime stage runs as a non-root user, in exec form, with a health check on /readyz and no secrets', (t) => {
  const user = finalStage.findLast((i) => i.keyword === 'USER');
  t.truthy(user, 'a USER in the runtime stage');
  t.notRegex(user?.args ?? 'root', /^(root|0)(:|$)/);
  const start = finalStage.findIndex((i) => i.keyword === 'ENTRYPOINT' || i.keyword === 'CMD');
  t.true(finalStage.indexOf(user!) < start, 'USER comes before the command');
  for (const i of finalStage.filter((x) => x.keyword === 'ENTRYPOINT' || x.keyword === 'CMD')) t.true(isExecForm(i.args), `${i.keyword} ${i.args} in exec form`);
  const health = finalStage.find((i) => i.keyword === 'HEALTHCHECK');
  t.regex(health?.args ?? '', /CMD \[.*\/readyz/);
  t.true(isExecForm(health!.args.slice(health!.args.indexOf('CMD') + 3).trim()));
  for (const i of dockerfile.filter((x) => x.keyword === 'ENV' || x.keyword === 'ARG')) t.notRegex(i.args, /PASSWORD|SECRET|_KEY\b|MASTER_KEY/);
  // SIGTERM reaches node itself: the entrypoint script replaces its shell with node.
  const entrypoint = JSON.parse(finalStage.find((i) => i.keyword === 'ENTRYPOINT')!.args) as string[];
  t.is(entrypoint[0], '/app/bin/hookstream');
  t.regex(read('bin/hookstream').trim().split('\n').at(-1)!, /^exec "\$node" /);
});

test('lint: .dockerignore sends the builder only what the image copies, never local data, keys or dependencies', (t) => {
  const ignore = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  t.is(ignore[0], '*', 'everything excluded first');
  const included = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, ''));
  for (const secret of ['.env', '.hookstream', 'node_modules', '.git', '.cache']) t.false(included.some((p) => secret === p || secret.startsWith(`${p}/`)), secret);
  const copied = dockerfile.filter((i) => i.keyword === 'COPY' && !i.args.includes('--from'))
    .flatMap((i) => i.args.split(/\s+/).slice(0, -1));
  for (const path of copied) {
    t.true(existsSync(join(root, path)), `${path} exists`);
    t.true(included.includes(path.replace(/\/$/, '')), `${path} is sent to the builder`);
  }
});

test('lint: docker-compose.yml publishes neither NATS nor Postgres, has no default secret and runs a current nats-server', (t) => {
  const compose = read('docker-compose.yml');
  // Service blocks: two-space-indented names under `services:`.
  const services = new Map<string, string>();
  let name: string | undefined;
  for (const line of compose.slice(compose.indexOf('\nservices:')).split('\n').slice(2)) {
    if (/^\S/.test(line)) break;
    const m = /^ {2}([\w-]+):/.exec(line);
    if (m) { name = m[1]!; services.set(name, ''); continue; }
    if (name) services.set(name, services.get(name)! + line + '\n');
  }
  for (const server of ['nats', 'postgres', 'nats-1']) {
    t.true(services.has(server), server);
    t.notRegex(services.get(server)!, /^\s+ports:/m, `${server} publishes no port`);
  }
  t.regex(services.get('hookstream')!, /^\s+build: \.$/m);
  for (const published of compose.matchAll(/^\s+- "([^"]+)"$/gm)) {
    if (/:(9090|8090)$/.test(published[1]!)) t.regex(published[1]!, /^127\.0\.0\.1:/, `${published[1]} on the host's loopback only`);
  }
  for (const variable of compose.matchAll(/\$\{(\w+)(:?[-?])?[^}]*\}/g)) {
    if (/PASSWORD|KEY/.test(variable[1]!)) t.is(variable[2], ':?', `${variable[0]} refuses to start unset`);
  }
  const nats = /image: nats:(\d+)\.(\d+)\.(\d+)/.exec(services.get('nats')!);
  t.truthy(nats, 'nats pinned to a version');
  t.true(Number(nats![1]) === 2 && Number(nats![2]) >= 15, `nats ${nats![0]} is 2.15 or later`);
});

function engineAnswers(): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 20_000 });
    return true;
  } catch {
    return false;
  }
}

const docker = (...args: string[]) => new Promise<string>((done, fail) => {
  execFile('docker', args, { timeout: 900_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) =>
    error ? fail(new Error(`docker ${args.join(' ')}: ${stderr || error.message}`)) : done(stdout.trim()));
});

/** docker logs writes the container's stderr to its own. */
const dockerLogs = (name: string) => new Promise<string>((done) => {
  execFile('docker', ['logs', name], { maxBuffer: 64 * 1024 * 1024 }, (_error, stdout, stderr) => done(stdout + stderr));
});

async function ready(check: () => Promise<unknown>, what: string): Promise<void> {
  for (const deadline = Date.now() + 120_000; ; await sleep(1_000)) {
    try { await check(); return; } catch (e) { if (Date.now() > deadline) throw new Error(`${what} did not come up: ${String(e)}`); }
  }
}

const builtAndRun = 'the image builds, becomes healthy on /readyz against NATS and Postgres, runs as non-root and exits 0 on SIGTERM';
if (!engineAnswers()) {
  test.skip(`${builtAndRun} (skipped: no container engine answers \`docker info\`)`, () => {});
} else {
  test.serial(builtAndRun, async (t) => {
    t.timeout(1_200_000);
    const id = randomBytes(4).toString('hex');
    const image = `hookstream-test:${id}`;
    const network = `hookstream-test-${id}`;
    const password = `p${randomBytes(12).toString('hex')}`;
    t.teardown(async () => {
      await docker('rm', '-f', `hs-${id}`, `nats-${id}`, `pg-${id}`).catch(() => '');
      await docker('network', 'rm', network).catch(() => '');
      await docker('image', 'rm', '-f', image).catch(() => '');
    });
    await docker('build', '-t', image, root);
    await docker('network', 'create', network);
    await docker('run', '-d', '--network', network, '--name', `nats-${id}`, 'nats:2.15.1-alpine', '-js');
    await docker('run', '-d', '--network', network, '--name', `pg-${id}`, '-e', `POSTGRES_PASSWORD=${password}`, 'postgres:18');
    // The service gives up at once on servers that do not answer: start it once both do.
    await ready(() => docker('exec', `pg-${id}`, 'pg_isready', '-U', 'postgres', '-h', '127.0.0.1'), 'Postgres');
    await ready(async () => { if (!(await dockerLogs(`nats-${id}`)).includes('Server is ready')) throw new Error('not yet'); }, 'NATS');
    const keys = (await docker('run', '--rm', image, 'keys', 'generate')).split('\n').filter((l) => l.startsWith('HOOKSTREAM_'));
    t.is(keys.length, 3);
    await docker('run', '-d', '--network', network, '--name', `hs-${id}`,
      '-e', `NATS_URL=nats://nats-${id}:4222`, '-e', `DATABASE_URL=postgres://postgres:${password}@pg-${id}:5432/hookstream`,
      ...keys.flatMap((k) => ['-e', k]), image);

    let health = '';
    for (const deadline = Date.now() + 600_000; Date.now() < deadline && health !== 'healthy'; await sleep(2_000)) {
      health = await docker('inspect', '-f', '{{.State.Health.Status}}', `hs-${id}`);
      t.not(await docker('inspect', '-f', '{{.State.Status}}', `hs-${id}`), 'exited', await dockerLogs(`hs-${id}`));
    }
    t.is(health, 'healthy', await dockerLogs(`hs-${id}`));
    t.not(await docker('exec', `hs-${id}`, 'id', '-u'), '0');
    t.regex(await docker('exec', `hs-${id}`, 'hookstream', '--help'), /hookstream: webhook delivery/);

    await docker('stop', '-t', '60', `hs-${id}`);
    t.is(await docker('inspect', '-f', '{{.State.ExitCode}}', `hs-${id}`), '0');
    t.regex(await dockerLogs(`hs-${id}`), /"msg":"stopped"/);
  });
}
