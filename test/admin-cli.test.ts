// The operator CLI as a user runs it (bin/hookstream as a child process): tables by default, --json for
// scripts, exit code 0 on success, 1 on a failure, 2 on a wrong invocation.
import test from 'ava';
import { runCli, type CliRun } from './helpers/cli.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import type { DeadLetterOut, DeliveryShowOut } from '../src/admin/protocol.ts';
import { newIdBody, type TenantId } from '../src/domain/ids.ts';
import { jetstream } from '@nats-io/jetstream';
import { connectNats } from '../src/nats/connect.ts';
import { endpointSubject } from '../streams/endpoints.ts';

let h: TestService;
let r: Receiver;
let healthy = false;
let endpointId = '';
let letters: DeadLetterOut[] = [];


function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCli(args, { ...process.env, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', ...env });
}

test.before(async () => {
  h = await startTestService('admin_cli', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
  r = await h.receiver(() => (healthy ? 200 : 500));
  const { endpoint } = await h.store.create('tenant_cli' as TenantId, { url: r.url, events: ['user.*'] });
  endpointId = endpoint.id;
  for (let i = 0; i < 3; i++) await h.publish('tenant_cli', 'user.created', { userId: `user_${i}` });
  letters = await eventually(async () => {
    const run = await cli(['dead-letters', 'list', '--json']);
    const page = JSON.parse(run.stdout) as { data: DeadLetterOut[] };
    return page.data.length === 3 ? page.data : undefined;
  }, 30_000, 'three dead letters');
});

test.after.always(() => h?.closeAll());

test.serial('list prints a table; --json a document; --limit pages with a cursor hint', async (t) => {
  const run = await cli(['dead-letters', 'list', '--endpoint', endpointId]);
  t.is(run.code, 0, run.stderr);
  const lines = run.stdout.trim().split('\n');
  t.regex(lines[0]!, /^ID\s+FAILED AT\s+TENANT\s+ENDPOINT\s+EVENT\s+WEBHOOK-ID\s+ATTEMPTS\s+LAST\s+STATUS\s+REPLAYS$/);
  t.is(lines.length, 4);
  t.regex(lines[1]!, new RegExp(`^${letters[0]!.id}\\s.*tenant_cli\\s+${endpointId}\\s+user\\.created\\s+msg_\\S+\\s+3\\s+500\\s+dead\\s+0$`));
  const paged = await cli(['dead-letters', 'list', '--limit', '2']);
  t.is(paged.stdout.trim().split('\n').length, 3);
  t.regex(paged.stderr, /more: --cursor \S+/);
  const all = await cli(['dead-letters', 'list', '--limit', '1', '--all', '--json']);
  t.is((JSON.parse(all.stdout) as { data: unknown[] }).data.length, 3);
  const since = await cli(['dead-letters', 'list', '--since', '1h', '--json']);
  t.is((JSON.parse(since.stdout) as { data: unknown[] }).data.length, 3, 'an age is turned into a time');
});

test.serial('show prints the record and the opened message', async (t) => {
  const run = await cli(['dead-letters', 'show', letters[0]!.id]);
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, new RegExp(`webhook-id:\\s+${letters[0]!.webhook_id}`));
  t.regex(run.stdout, /"type": "user\.created"/);
  const json = JSON.parse((await cli(['dead-letters', 'show', letters[0]!.id, '--json'])).stdout) as { message: { body: unknown } };
  t.like(json.message.body, { type: 'user.created' });
});

test.serial('deliveries show explains the state', async (t) => {
  const run = await cli(['deliveries', 'show', letters[0]!.webhook_id, '--endpoint', endpointId]);
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, /: DEAD\n/);
  t.regex(run.stdout, /Failed attempts:/);
  const json = JSON.parse((await cli(['deliveries', 'show', letters[0]!.webhook_id, '--endpoint', endpointId, '--json'])).stdout) as DeliveryShowOut;
  t.is(json.state, 'dead');
  t.is(json.history.length, 3);
});

test.serial('replay one, then the rest in bulk; the receiver gets them all', async (t) => {
  healthy = true;
  const before = r.received.length;
  const one = await cli(['dead-letters', 'replay', letters[2]!.id]);
  t.is(one.code, 0, one.stderr);
  t.regex(one.stdout, /replay #1/);
  const again = await cli(['dead-letters', 'replay', letters[2]!.id]);
  t.is(again.code, 1, 'already replayed: refused without --force');
  t.regex(again.stderr, /already replayed/);
  const bulk = await cli(['dead-letters', 'replay', '--endpoint', endpointId, '--batch', '1', '--json']);
  t.is(bulk.code, 0, bulk.stderr);
  const out = JSON.parse(bulk.stdout) as { total: number; replayed: unknown[]; failed: unknown[] };
  t.like(out, { total: 2, failed: [] });
  t.is(out.replayed.length, 2);
  const got = await r.waitFor(before + 3);
  t.deepEqual(got.slice(before).map((g) => String(g.headers['webhook-id'])).sort(), letters.map((l) => l.webhook_id).sort());
});

test.serial('failures exit non-zero with one line; wrong invocations exit 2 with the usage', async (t) => {
  const missing = await cli(['dead-letters', 'show', 'dl_0000000000000000000000000a']);
  t.is(missing.code, 1);
  t.is(missing.stderr.trim(), 'hookstream dead-letters show: dead letter dl_0000000000000000000000000a not found');
  const badFilter = await cli(['dead-letters', 'list', '--event', 'user.exploded']);
  t.is(badFilter.code, 1);
  t.regex(badFilter.stderr, /is not an event name/);
  const noFilter = await cli(['dead-letters', 'replay']);
  t.is(noFilter.code, 2);
  t.regex(noFilter.stderr, /Usage: hookstream dead-letters replay/);
  const noEndpoint = await cli(['deliveries', 'show', 'msg_x']);
  t.is(noEndpoint.code, 2);
  t.is((await cli(['dead-letters', 'list', '--help'])).code, 0);
});

test('without an admin process the CLI says so', async (t) => {
  const bare: NatsServer = await startNatsServer();
  try {
    const run = await cli(['dead-letters', 'list'], { NATS_URL: bare.url });
    t.is(run.code, 1);
    t.regex(run.stderr, /no hookstream process answers admin requests/);
  } finally {
    await bare.dispose();
  }
});

test.serial('projections rebuild works on the store directly and reports what it applied', async (t) => {
  const run = await cli(['projections', 'rebuild', '--json']);
  t.is(run.code, 0, run.stderr);
  t.like(JSON.parse(run.stdout), { applied: 1 });
});

test.serial('projections status shows how far the projection is and the event it skipped, with why', async (t) => {
  const clean = JSON.parse((await cli(['projections', 'status', '--json'])).stdout) as { applied_seq: number; stream_last_seq: number; skipped: { total: number } };
  t.is(clean.applied_seq, clean.stream_last_seq);
  t.is(clean.skipped.total, 0);
  // A poison event written with the service credential: Postgres cannot hold its description.
  const nc = await connectNats({ url: h.nats.url });
  const id = `webhook_${newIdBody()}`;
  const body = { v: 1, type: 'endpoint.created', id, tenant: 'tenant_poison', url: 'https://example.com/p', events: ['*'], description: 'a\u0000b', secret: 'x', at: new Date().toISOString() };
  const { seq } = await jetstream(nc).publish(endpointSubject(id), JSON.stringify(body));
  await nc.close();
  const status = await eventually(async () => {
    const s = JSON.parse((await cli(['projections', 'status', '--json'])).stdout) as { applied_seq: number; skipped: { total: number; latest: { seq: number; reason: string }[] } };
    return s.applied_seq >= seq ? s : undefined;
  }, 30_000, 'the projection past the poison event');
  t.is(status.skipped.total, 1);
  t.is(status.skipped.latest[0]!.seq, seq);
  t.regex(status.skipped.latest[0]!.reason, /U\+0000/);
  const table = await cli(['projections', 'status']);
  t.is(table.code, 0, table.stderr);
  t.regex(table.stdout, new RegExp(`1 event\\(s\\) skipped\n  seq ${seq} `));
});
