// What an endpoint command costs as its history grows: N updates to one endpoint through the command
// store, the latency of the first and the last ten, then N refused restores (409), and the ENDPOINTS
// stream's consumers before and after; then the one-time cost of an endpoint whose saved state is gone
// (written by an older version: its whole history folded once, by message gets).
// Run: node bench/endpoint-writes.ts [writes] (default 1000). A nats-server of its own (NATS_SERVER_BIN
// picks the binary, as for the tests); prints one JSON line.
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer } from '../test/helpers/nats-server.ts';
import { ENDPOINT_STATES_STREAM, ENDPOINTS_STREAM, endpointStateSubject, ensureEndpointsStream } from '../streams/endpoints.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import type { TenantId } from '../src/domain/ids.ts';

const writes = Number(process.argv[2] ?? 1000);
await initSodium();
const nats = await startNatsServer();
const nc = await connect({ servers: nats.url });
try {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  await ensureEndpointsStream(jsm);
  const { store } = createEndpoints({ js, jsm, masterKey: generateKeys().masterKey, allowPrivateTargets: true });
  const tenant = 'tenant_bench' as TenantId;
  const { endpoint } = await store.create(tenant, { url: 'https://hooks.example.com/a', events: ['user.*'] });
  const consumers = async () => (await jsm.streams.info(ENDPOINTS_STREAM)).state.consumer_count;
  const timed = async (fn: () => Promise<unknown>) => { const t0 = performance.now(); await fn().catch(() => {}); return performance.now() - t0; };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const round = (ms: number) => Math.round(ms * 100) / 100;

  const before = await consumers();
  const updates: number[] = [];
  for (let i = 0; i < writes; i++) updates.push(await timed(() => store.update(tenant, endpoint.id, { description: `write ${i}` })));
  const restores: number[] = [];
  for (let i = 0; i < writes; i++) restores.push(await timed(() => store.restore(tenant, endpoint.id)));
  const after = await consumers();
  // As if written by a version that saved no state: the next command folds the whole history once.
  await jsm.streams.purge(ENDPOINT_STATES_STREAM, { filter: endpointStateSubject(endpoint.id) });
  const refold = await timed(() => store.update(tenant, endpoint.id, { description: 'after the purge' }));
  const next = await timed(() => store.update(tenant, endpoint.id, { description: 'and the next' }));
  console.log(JSON.stringify({
    server: nc.info?.version, writes,
    update_ms_first10_median: round(median(updates.slice(0, 10))), update_ms_last10_median: round(median(updates.slice(-10))),
    restore_409_ms_first10_median: round(median(restores.slice(0, 10))), restore_409_ms_last10_median: round(median(restores.slice(-10))),
    endpoints_consumers_before: before, endpoints_consumers_after: after,
    events_kept: (await jsm.streams.info(ENDPOINTS_STREAM, { subjects_filter: `endpoints.${endpoint.id}` })).state.subjects?.[`endpoints.${endpoint.id}`] ?? 0,
    saved_states_for_endpoint: (await jsm.streams.info(ENDPOINT_STATES_STREAM, { subjects_filter: endpointStateSubject(endpoint.id) })).state.subjects?.[endpointStateSubject(endpoint.id)] ?? 0,
    refold_without_saved_state_ms: round(refold), next_write_ms: round(next),
  }));
} finally {
  await nc.close();
  await nats.dispose();
}
