// The endpoint directory heals itself (issue 23): when the consumer of its fold is deleted under it, or
// stops delivering, a sync starts a new fold instead of failing for ever (every covering sync of the router
// failed, the router retried every event until route_failed, and delivery stopped seeing endpoint changes).
import test from 'ava';
import { endpointsStream } from './helpers/endpoints-stream.ts';
import { startEndpointDirectory } from '../src/endpoints/directory.ts';
import { ENDPOINTS_STREAM, endpointSubject } from '../streams/endpoints.ts';
import { createLogger } from '../src/log.ts';
import { newEndpointId } from '../src/domain/ids.ts';
import { listConsumers } from '../streams/ensure.ts';

const created = (id: string, tenant: string) => JSON.stringify({
  v: 1, type: 'endpoint.created', id, tenant, url: `https://example.com/${id}`, events: ['*'], description: null, secret: 'sealed', at: new Date().toISOString(),
});

test('a directory whose consumer is deleted under it starts a new fold and sees later endpoints', async (t) => {
  const { js, jsm } = await endpointsStream(t);
  const lines: string[] = [];
  const first = newEndpointId();
  await js.publish(endpointSubject(first), created(first, 'tenant_a'));
  const directory = await startEndpointDirectory({ js, jsm, log: createLogger({ level: 'warn', write: (l) => lines.push(l) }), options: { stallMs: 3000 } });
  t.teardown(() => directory.stop());
  t.truthy(directory.get(first));

  for (const round of [1, 2]) {
    for await (const c of listConsumers(jsm, ENDPOINTS_STREAM)) await jsm.consumers.delete(ENDPOINTS_STREAM, c.name);
    const later = newEndpointId();
    await js.publish(endpointSubject(later), created(later, `tenant_${round}`));
    // Every sync ends, and the endpoint published after the deletion is there.
    const until = Date.now() + 30_000;
    while (!directory.get(later) && Date.now() < until) await directory.sync().catch(() => new Promise((r) => setTimeout(r, 200)));
    t.truthy(directory.get(later), `round ${round}: the endpoint created after the consumer was deleted`);
    t.truthy(directory.get(first), 'and the earlier one is still known');
  }
  await directory.sync();
  t.true(lines.some((l) => l.includes('endpoint directory folds the stream anew')), 'said so');
});

test('with nobody calling sync (a delivery-only instance), the directory heals by itself and its lag gauge says so', async (t) => {
  const { js, jsm } = await endpointsStream(t);
  const lags: number[] = [];
  const lag = { set: (v: number) => void lags.push(v), clear: () => {} };
  const directory = await startEndpointDirectory({ js, jsm, log: createLogger({ level: 'error', write: () => {} }), lag, options: { stallMs: 2500, healMs: 300 } });
  t.teardown(() => directory.stop());
  for await (const c of listConsumers(jsm, ENDPOINTS_STREAM)) await jsm.consumers.delete(ENDPOINTS_STREAM, c.name);
  const later = newEndpointId();
  await js.publish(endpointSubject(later), created(later, 'tenant_h'));
  const until = Date.now() + 20_000;
  while (!directory.get(later) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  t.truthy(directory.get(later), 'healed without a caller');
  t.true(lags.some((v) => v > 0), 'the gauge showed the lag while it was behind');
  while (lags.at(-1) !== 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  t.is(lags.at(-1), 0, 'and 0 once it caught up');
  t.is(directory.lagSeconds(), 0);
});
