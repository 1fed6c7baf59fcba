// `npm run bench:tracing`: what tracing costs per delivery (issue 20), apart from NATS, Postgres and the
// receivers, so a shared machine's load moves it little. A child process with the SDK started as
// `npm start` starts it (--import register.ts, OTLP to a sink in this process) does a delivery's
// tracing work N times: the router's span with the producer's traceparent read from NATS headers and
// carried into a delivery message's headers, then the attempt's span read from those headers, answered
// and ended; then it waits until every span has been exported. The CPU time of the child (spans,
// batching, encoding and the OTLP POSTs) is measured against the same loop with tracing off.
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { trace, type ProxyTracerProvider } from '@opentelemetry/api';
import { SERVICE_NODE_FLAGS } from './processes.ts';
import { attemptAnswered, carryContext, contextOf, traceAttempt, traceRouting, tracing } from '../src/telemetry/tracing.ts';

const N = Number(process.env['TRACING_COST_N'] ?? 100_000);
const WARM = 10_000;

interface Result { mode: string; cpuUsPerDelivery: number; wallUsPerDelivery: number; spans: number }

async function child(): Promise<void> {
  const producer = natsHeaders();
  producer.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  const facts = { endpoint: 'webhook_01', tenant: 'tenant_1', event: 'user.updated', webhookId: 'msg_01', url: 'https://example.com/hook', attempt: 1 };
  const event = { subject: 'events.tenant_1.user.updated', seq: 1, headers: producer, info: { deliveryCount: 1 } };
  const once = async (): Promise<void> => {
    // What router.ts and attempt.ts do per delivery, each behind the same test of tracing.on.
    const delivery = natsHeaders();
    if (tracing.on) await traceRouting(event, 'router', facts.webhookId, () => { carryContext(delivery); return Promise.resolve(); });
    if (tracing.on) await traceAttempt(contextOf(delivery), facts, async (span) => attemptAnswered(span, { ok: true, status: 204 }));
  };
  const provider = (trace.getTracerProvider() as ProxyTracerProvider).getDelegate() as { forceFlush?: () => Promise<void> };
  // The loop makes spans far faster than deliveries would: flushed every 1,000 deliveries, the SDK's
  // queue (2,048 spans) drops none, so their export is in the cost.
  const loop = async (n: number) => {
    for (let i = 1; i <= n; i++) {
      await once();
      if (i % 1000 === 0) await provider.forceFlush?.();
    }
  };
  await loop(WARM);
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await loop(N);
  const wall = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  process.send!({ cpuUsPerDelivery: (used.user + used.system) / N, wallUsPerDelivery: (wall * 1000) / N });
}

async function run(mode: string, env: Record<string, string>, sink: { spans: number }): Promise<Result> {
  const before = sink.spans;
  const p = fork(fileURLToPath(import.meta.url), ['--child'], {
    execArgv: SERVICE_NODE_FLAGS,
    env: { ...process.env, ...env },
  });
  const r = await new Promise<Omit<Result, 'mode' | 'spans'>>((resolve, reject) => {
    p.once('message', (m) => resolve(m as Omit<Result, 'mode' | 'spans'>));
    p.once('exit', (code) => reject(new Error(`${mode}: the child exited with ${code}`)));
  });
  p.kill();
  return { mode, ...r, spans: sink.spans - before };
}

async function main(): Promise<void> {
  // The collector stand-in: counts the spans of http/json requests and answers 200 to every request.
  const sink = { spans: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (String(req.headers['content-type']).includes('json')) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
        for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) sink.spans += ss.spans?.length ?? 0;
      }
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const on = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  const results: Result[] = [
    await run('off', {}, sink),
    await run('on, http/protobuf', on, sink),
    await run('on, http/json', { ...on, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, sink),
  ];
  server.close();
  for (const r of results) {
    process.stderr.write(`${r.mode.padEnd(20)} ${r.cpuUsPerDelivery.toFixed(2).padStart(7)} µs CPU, ${r.wallUsPerDelivery.toFixed(2).padStart(7)} µs wall per delivery`
      + `${r.mode.includes('json') ? `; ${r.spans} spans received (${WARM + N} deliveries x 2)` : ''}\n`);
  }
  process.stdout.write(`${JSON.stringify({ n: N, results })}\n`);
}

if (process.argv.includes('--child')) await child();
else await main();
