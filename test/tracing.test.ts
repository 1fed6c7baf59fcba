// OpenTelemetry (issue 20), end to end: two `hookstream serve` processes (A routes, dead-letters, replays
// and answers the API; B delivers) export to a real OTLP/HTTP receiver in this test, which decodes what
// it gets (http/json). A producer's traceparent on its publish makes one trace: the router's span as its
// child, and one attempt span per attempt of every endpoint, made by the other instance, each a child of
// the router's; an event without one is a trace of the same shape, rooted at the router's span. So with
// direct delivery too (TEST_DIRECT_DELIVERY=1), where no message passes from the router to an attempt. A
// dead letter's replay is a new trace linked to the original.
import test from 'ava';
import { directDeliveryDefaults, storedEventSubject } from './helpers/direct-env.ts';
import type { ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { eventually } from './helpers/service.ts';
import { runCli } from './helpers/cli.ts';
import { serveChild } from './helpers/serve.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { TenantId } from '../src/domain/ids.ts';

/** What the test needs of an OTLP span, with the instance that sent it (its service.instance.id). */
interface ReceivedSpan {
  instance: string;
  service: string;
  scope: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, string | number | boolean>;
  links: { traceId: string; spanId: string }[];
  status: { code?: number };
}

/** OTLP's SpanKind numbers. */
const Kind = { Server: 2, Client: 3, Producer: 4, Consumer: 5 } as const;

interface OtlpValue { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number }
interface OtlpKeyValue { key: string; value: OtlpValue }
interface OtlpTraces {
  resourceSpans?: {
    resource?: { attributes?: OtlpKeyValue[] };
    scopeSpans?: { scope?: { name?: string }; spans?: {
      traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number;
      attributes?: OtlpKeyValue[]; links?: { traceId: string; spanId: string }[]; status?: { code?: number };
    }[] }[];
  }[];
}

const valueOf = (v: OtlpValue): string | number | boolean =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.boolValue ?? v.doubleValue ?? '';
const attrs = (list: OtlpKeyValue[] = []) => Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]));

/** A collector stand-in: POST /v1/traces in OTLP http/json, every span kept. */
async function otlpReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; contentTypes: Set<string>; server: Server }> {
  const spans: ReceivedSpan[] = [];
  const contentTypes = new Set<string>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      contentTypes.add(String(req.headers['content-type']));
      if (req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpTraces;
        for (const rs of body.resourceSpans ?? []) {
          const resource = attrs(rs.resource?.attributes);
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              spans.push({
                instance: String(resource['service.instance.id']), service: String(resource['service.name']), scope: ss.scope?.name ?? '',
                traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? '', name: s.name, kind: s.kind,
                attributes: attrs(s.attributes), links: s.links ?? [], status: s.status ?? {},
              });
            }
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, contentTypes, server };
}

/** A receiver answering each webhook-id from a script of statuses (the last one repeats). */
async function scriptedReceiver(script: (webhookId: string, n: number) => number) {
  const seen = new Map<string, { n: number; traceparent: string | undefined; baggage: string | undefined }[]>();
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const list = seen.get(id) ?? [];
      list.push({ n: list.length + 1, traceparent: req.headers['traceparent'] as string | undefined, baggage: req.headers['baggage'] as string | undefined });
      seen.set(id, list);
      res.writeHead(script(id, list.length)).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, seen, server };
}

let nats: NatsServer;
let db: TestDatabase;
let nc: NatsConnection;
let env: Record<string, string>;
const children: ChildProcess[] = [];
const servers: Server[] = [];

/** Start `hookstream serve` with these roles, as the instance named (its service.instance.id). */
const serve = (instance: string, roles: string, extra: Record<string, string> = {}) => serveChild({
  ...process.env, ...env, HOOKSTREAM_ROLES: roles, OTEL_RESOURCE_ATTRIBUTES: `service.instance.id=${instance}`, ...extra,
}, children);

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

test.before(async () => {
  await initSodium();
  nats = await startNatsServer();
  db = await createTestDatabase('tracing');
  const keys = generateKeys();
  env = {
    NATS_URL: nats.url, DATABASE_URL: db.url, HOST: '127.0.0.1', PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0',
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_RETRY_SCHEDULE: '1s,1s',
    HOOKSTREAM_LOG_LEVEL: 'info', HOOKSTREAM_DEAD_LETTER_BACKSTOP: '0',
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
  };
  nc = await connectNats({ url: nats.url, name: 'tracing-test' });
});

test.after.always(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  for (const s of servers) s.close();
  await nc?.drain();
  await nats?.dispose();
  await db?.drop();
});

test('one trace per event from the producer\'s publish to every attempt, across two instances; a replay is a new trace linked to it', async (t) => {
  const otlp = await otlpReceiver();
  servers.push(otlp.server);
  let deadFixed = false;
  // Fails twice then answers 204; the other endpoint fails until the test fixes it (after its death).
  const flaky = await scriptedReceiver((_id, n) => (n <= 2 ? 500 : 204));
  const dying = await scriptedReceiver(() => (deadFixed ? 204 : 503));
  // Takes both events at once: each event's trace holds every endpoint's attempts.
  const steady = await scriptedReceiver(() => 204);
  servers.push(flaky.server, dying.server, steady.server);

  const tracingEnv = {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  const a = await serve('a', 'api,projector,router,deadletter,admin', tracingEnv);
  const b = await serve('b', 'delivery', { ...tracingEnv, HOOKSTREAM_FORWARD_TRACEPARENT: '1' });

  const js = jetstream(nc);
  const { store } = createEndpoints({ js, jsm: await jetstreamManager(nc), masterKey: env['HOOKSTREAM_MASTER_KEY']!, allowPrivateTargets: true });
  const tenant = 'tenant_traced' as TenantId;
  const flakyEndpoint = (await store.create(tenant, { url: flaky.url, events: ['user.updated'] })).endpoint;
  const dyingEndpoint = (await store.create(tenant, { url: dying.url, events: ['user.deleted'] })).endpoint;
  const steadyEndpoint = (await store.create(tenant, { url: steady.url, events: ['user.updated', 'user.deleted'] })).endpoint;

  // The producer's span: its context on the publish, as an instrumented auth service sets it.
  const producer = { traceId: hex(16), spanId: hex(8) };
  const h = natsHeaders();
  h.set('traceparent', `00-${producer.traceId}-${producer.spanId}-01`);
  h.set('baggage', 'user.secret=never-forwarded');
  await js.publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: 'user_1' }), { headers: h });
  // No context: the router starts the trace.
  await js.publish(`events.${tenant}.user.deleted`, JSON.stringify({ userId: 'user_2' }));
  // A rejected event: its router span says why.
  const rejectedTrace = hex(16);
  const hr = natsHeaders();
  hr.set('traceparent', `00-${rejectedTrace}-${hex(8)}-01`);
  await js.publish(`events.${tenant}.user.created`, JSON.stringify({ userId: 'not-a-user-id' }), { headers: hr });

  const inTrace = (traceId: string) => otlp.spans.filter((s) => s.traceId === traceId);
  /** The attempt spans in a trace, of one endpoint when named, the first attempt first. */
  const attemptsOf = (traceId: string, endpoint?: string) => inTrace(traceId)
    .filter((s) => s.name === 'POST' && s.kind === Kind.Client && (endpoint === undefined || s.attributes['hookstream.endpoint.id'] === endpoint))
    .sort((x, y) => Number(x.attributes['http.request.resend_count']) - Number(y.attributes['http.request.resend_count']));

  // One trace for the published event: the producer's span is the router span's parent.
  const spans = await eventually(() => (attemptsOf(producer.traceId, flakyEndpoint.id).length >= 3 && attemptsOf(producer.traceId, steadyEndpoint.id).length >= 1
    ? inTrace(producer.traceId) : undefined), 60_000, 'four attempt spans');
  const routed = spans.filter((s) => s.name === 'process EVENTS');
  t.is(routed.length, 1);
  const router = routed[0]!;
  t.is(router.kind, Kind.Consumer);
  t.is(router.parentSpanId, producer.spanId);
  t.is(router.instance, 'a');
  t.is(router.service, 'hookstream');
  t.like(router.attributes, { 'messaging.system': 'nats', 'messaging.destination.name': storedEventSubject(tenant, 'user.updated', Number(directDeliveryDefaults()['HOOKSTREAM_EVENT_PARTITIONS'] ?? 0)), 'messaging.operation.type': 'process' });
  t.is(typeof router.attributes['hookstream.event.sequence'], 'number');
  // The endpoints the event went to: two, whether queued for them or read by them from the stream.
  t.is(router.attributes['hookstream.deliveries'], 2);
  const rejected = await eventually(() => inTrace(rejectedTrace).find((s) => s.name === 'process EVENTS'), 30_000, 'the rejected event\'s span');
  t.is(rejected.attributes['hookstream.rejected'], 'invalid_data');
  t.is(rejected.status.code, 2);

  // Three attempts, made by the other instance, each a child of the router's span; the other endpoint's one too.
  const attempts = attemptsOf(producer.traceId, flakyEndpoint.id);
  t.is(attempts.length, 3);
  t.deepEqual(attempts.map((s) => s.attributes['http.request.resend_count']), [0, 1, 2]);
  t.deepEqual(attempts.map((s) => s.attributes['http.response.status_code']), [500, 500, 204]);
  t.deepEqual(attempts.map((s) => s.attributes['error.type']), ['500', '500', undefined]);
  // OTLP status code 2 is ERROR.
  t.deepEqual(attempts.map((s) => s.status.code === 2), [true, true, false]);
  for (const s of attempts) {
    t.is(s.parentSpanId, router.spanId);
    t.is(s.instance, 'b');
    t.is(s.attributes['hookstream.endpoint.id'], flakyEndpoint.id);
    t.is(s.attributes['server.address'], '127.0.0.1');
  }
  const steadyAttempts = attemptsOf(producer.traceId, steadyEndpoint.id);
  t.is(steadyAttempts.length, 1);
  t.is(steadyAttempts[0]!.parentSpanId, router.spanId);
  t.is(steadyAttempts[0]!.attributes['http.response.status_code'], 204);

  // The receiver got each attempt's traceparent (HOOKSTREAM_FORWARD_TRACEPARENT=1 on b), and never the baggage.
  const received = [...flaky.seen.values()][0]!;
  t.deepEqual(received.map((r) => r.traceparent), attempts.map((s) => `00-${s.traceId}-${s.spanId}-01`));
  t.true(received.every((r) => r.baggage === undefined));

  // B's log line of a failed attempt names the attempt's trace and span.
  const failedLine = b.log.map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l['msg'] === 'delivery attempt failed' && l['endpoint'] === flakyEndpoint.id);
  t.is(failedLine?.['trace_id'], producer.traceId);
  t.is(failedLine?.['span_id'], attempts[0]!.spanId);

  // The event without a context: a trace rooted at the router, three failed attempts, then its dead letter.
  const deadSpan = await eventually(() => otlp.spans.find((s) => s.name === 'dead_letter'), 60_000, 'the dead letter span');
  const original = deadSpan.traceId;
  const originalRouter = inTrace(original).find((s) => s.name === 'process EVENTS');
  if (!originalRouter) return t.fail('the dead letter is not in the trace of its event\'s routing');
  t.is(originalRouter.parentSpanId, '');
  t.is(originalRouter.attributes['hookstream.deliveries'], 2);
  const dyingAttempts = attemptsOf(original, dyingEndpoint.id);
  t.is(dyingAttempts.length, 3);
  t.deepEqual(dyingAttempts.map((s) => s.parentSpanId), [originalRouter.spanId, originalRouter.spanId, originalRouter.spanId]);
  // Every endpoint's attempts of the event in its one trace.
  const steadyOfOriginal = await eventually(() => attemptsOf(original, steadyEndpoint.id)[0], 30_000, 'the other endpoint\'s attempt of the event without a context');
  t.is(steadyOfOriginal.parentSpanId, originalRouter.spanId);
  t.is(deadSpan.parentSpanId, originalRouter.spanId);
  t.is(deadSpan.instance, 'a');
  t.is(deadSpan.attributes['hookstream.endpoint.id'], dyingEndpoint.id);
  const deadLine = a.log.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l['msg'] === 'delivery is dead; dead letter stored');
  t.is(deadLine?.['trace_id'], original);

  // Replay it: a new trace, linked to the original, whose attempt succeeds.
  deadFixed = true;
  const cliEnv = { ...process.env, ...env };
  const list = await runCli(['dead-letters', 'list', '--json'], cliEnv);
  t.is(list.code, 0, list.stderr);
  const listed = (JSON.parse(list.stdout) as { data: { id: string; trace_id: string | null }[] }).data[0]!;
  t.is(listed.trace_id, original, 'the dead letter records its trace');
  const deadLetterId = listed.id;
  const replayed = await runCli(['dead-letters', 'replay', deadLetterId], cliEnv);
  t.is(replayed.code, 0, replayed.stderr);
  const replay = await eventually(() => otlp.spans.find((s) => s.name === 'replay dead_letter'), 30_000, 'the replay span');
  t.not(replay.traceId, original);
  t.is(replay.parentSpanId, '');
  t.is(replay.kind, Kind.Producer);
  t.is(replay.attributes['hookstream.dead_letter.id'], deadLetterId);
  t.deepEqual(replay.links.map((l) => l.traceId), [original]);
  const replayAttempt = await eventually(() => attemptsOf(replay.traceId)[0], 30_000, 'the replay\'s attempt');
  t.is(replayAttempt.parentSpanId, replay.spanId);
  t.is(replayAttempt.attributes['http.response.status_code'], 204);
  t.is(replayAttempt.attributes['hookstream.replay'], 1);

  // The API: its answer names its trace, which holds the request's server span, its route and its queries.
  const apiUrl = (a.log.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l['msg'] === 'api listening')!)['url'] as string;
  const created = await runCli(['api-keys', 'create', '--tenant', tenant], cliEnv);
  const apiKey = /hs_live_\S+/.exec(created.stdout)?.[0];
  t.truthy(apiKey, created.stdout + created.stderr);
  const answer = await fetch(`${apiUrl}/v1/webhooks`, { headers: { authorization: `Bearer ${apiKey}` } });
  t.is(answer.status, 200);
  const apiTrace = answer.headers.get('x-trace-id');
  t.regex(apiTrace ?? '', /^[0-9a-f]{32}$/);
  const apiSpans = await eventually(() => {
    const found = inTrace(apiTrace!);
    return found.some((s) => s.kind === Kind.Server) && found.some((s) => s.scope.includes('instrumentation-pg')) ? found : undefined;
  }, 30_000, 'the API request\'s spans');
  t.true(apiSpans.every((s) => s.instance === 'a'));
  t.true(apiSpans.some((s) => s.scope.includes('instrumentation-koa') && s.name.includes('/v1/webhooks')));
  t.log('API trace:', apiSpans.map((s) => `${s.scope.replace('@opentelemetry/instrumentation-', '')}: ${s.name}`).join('; '));
  // No secret in a span: a query's literals (the API key's hash) are not in its text, nor a portal link's token in its URL.
  const pgSpans = apiSpans.filter((s) => s.scope.includes('instrumentation-pg') && typeof s.attributes['db.query.text'] === 'string');
  t.true(pgSpans.length > 0);
  t.deepEqual(pgSpans.filter((s) => String(s.attributes['db.query.text']).includes("'")).map((s) => s.attributes['db.query.text']), [], 'no literal in a query text');
  const keyHash = createHash('sha256').update(apiKey!).digest();
  const portalToken = `tok${randomBytes(12).toString('hex')}`;
  const portal = await fetch(`${apiUrl.replace(/\/$/, '')}/portal/start?token=${portalToken}`, { redirect: 'manual' });
  const portalTrace = portal.headers.get('x-trace-id') ?? '';
  await eventually(() => (inTrace(portalTrace).some((s) => s.kind === Kind.Server) ? true : undefined), 30_000, 'the portal request\'s span');
  const leaks = otlp.spans.filter((s) => Object.values(s.attributes).some((v) => {
    const text = String(v);
    return text.includes(portalToken) || text.includes(keyHash.toString('hex')) || text.includes(keyHash.toString('base64')) || text.includes(apiKey!);
  }));
  t.deepEqual(leaks.map((s) => `${s.name}: ${JSON.stringify(s.attributes)}`), []);

  // The CLI publishing as a producer (tracing on): its span is the router span's parent.
  const published = await runCli(['events', 'publish', '--tenant', tenant, '--type', 'user.updated', '--data', '{"userId":"user_9"}'], { ...cliEnv, ...tracingEnv });
  t.is(published.code, 0, published.stderr);
  const send = await eventually(() => otlp.spans.find((s) => s.name === 'send EVENTS'), 30_000, 'the CLI\'s producer span');
  t.is(send.kind, Kind.Producer);
  t.is(send.attributes['messaging.destination.name'], `events.${tenant}.user.updated`);
  const routedByCli = await eventually(() => inTrace(send.traceId).find((s) => s.name === 'process EVENTS'), 30_000, 'the router\'s span of the CLI\'s event');
  t.is(routedByCli.parentSpanId, send.spanId);
  t.true(otlp.contentTypes.has('application/json'));
});
