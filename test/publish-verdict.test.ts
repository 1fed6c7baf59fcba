// `hookstream events publish` waits for the router's verdict: routed to N endpoints (exit 0), or rejected
// with its reason (exit 1), against a real service.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { runCli } from './helpers/cli.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;

test.before(async () => {
  h = await startTestService('publish_verdict');
});

test.after.always(async () => {
  await h?.closeAll();
});

const cli = (args: string[]) => {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith('HOOKSTREAM_')) delete env[name];
  return runCli(args, { ...env, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: h.keys.masterKey });
};

// A long wait: under load the router may take more than the default 5 s to decide.
const publish = (tenant: string, data: string, ...more: string[]) =>
  cli(['events', 'publish', '--tenant', tenant, '--type', 'user.created', '--data', data, ...(more.includes('--no-wait') ? [] : ['--wait', '50']), ...more]);

test.serial('a routed event says to how many endpoints, and exits 0', async (t) => {
  const tenant = 'tenant_verdict_ok' as TenantId;
  const r = await h.receiver(() => 200);
  await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await h.store.create(tenant, { url: r.url, events: ['organization.*'] });
  const run = await publish(tenant, '{"userId":"user_1"}');
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, /published user\.created for tenant_verdict_ok \(EVENTS #\d+\): routed to 1 endpoint$/m);
  const json = await publish(tenant, '{"userId":"user_2"}', '--json');
  t.is(json.code, 0, json.stderr);
  t.like(JSON.parse(json.stdout), { stream: 'EVENTS', verdict: 'routed', endpoints: 1, reason: null });
  await r.waitFor(2);
});

test.serial('a rejected event names the reason on one line and exits 1; --no-wait does not wait', async (t) => {
  const tenant = 'tenant_verdict_bad';
  // Deeper than the router's limit of 64 levels, which JSON.parse in the CLI accepts.
  const deep = `{"userId":"user_1","x":${'['.repeat(80)}${']'.repeat(80)}}`;
  const run = await publish(tenant, deep);
  t.is(run.code, 1, run.stdout);
  t.is(run.stdout, '');
  const lines = run.stderr.trim().split('\n');
  t.is(lines.length, 1, run.stderr);
  t.regex(lines[0]!, /^hookstream events publish: published user\.created for tenant_verdict_bad \(EVENTS #\d+\), but the router rejected it: too_deep \(body nests deeper than 64 levels\)$/);
  const json = await publish(tenant, deep, '--json');
  t.is(json.code, 1);
  t.like(JSON.parse(json.stdout), { verdict: 'rejected', reason: 'too_deep', endpoints: null });
  t.regex(json.stderr, /rejected it: too_deep/);
  const noWait = await publish(tenant, deep, '--no-wait', '--json');
  t.is(noWait.code, 0, noWait.stderr);
  const badWait = await cli(['events', 'publish', '--tenant', tenant, '--type', 'user.created', '--data', '{}', '--wait', '0']);
  t.is(badWait.code, 2);
  t.regex(badWait.stderr, /--wait must be/);
  t.is((JSON.parse(noWait.stdout) as { verdict?: string }).verdict, undefined);
});

test.serial('an event no endpoint subscribes to is routed to 0 endpoints', async (t) => {
  const run = await publish('tenant_verdict_none', '{"userId":"user_1"}');
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, /routed to 0 endpoints$/m);
});
