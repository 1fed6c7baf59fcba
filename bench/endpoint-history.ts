// Start-up against a long endpoint history (issue 23): how long the endpoint directory takes to load with
// N endpoints and M writes in ENDPOINTS (each endpoint created once, the rest updates spread over them),
// folding the whole stream and starting from a snapshot (with 1,000 more writes after it).
// Run: node bench/endpoint-history.ts [endpoints] [writes] (default 10000 100000). A nats-server of its own
// (as the tests start one); prints one JSON line per measurement.
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer } from '../test/helpers/nats-server.ts';
import { endpointSubject, ensureEndpointsStream } from '../streams/endpoints.ts';
import { ensureEndpointSnapshotsStream } from '../streams/endpoint-snapshots.ts';
import { writeSnapshot } from '../src/endpoints/snapshot.ts';
import { startEndpointDirectory } from '../src/endpoints/directory.ts';
import { createLogger } from '../src/log.ts';
import type { EndpointEvent } from '../src/domain/endpoint.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

const endpoints = Number(process.argv[2] ?? 10_000);
const writes = Number(process.argv[3] ?? 100_000);
const IN_FLIGHT = 1000;

const nats = await startNatsServer();
const nc = await connect({ servers: nats.url });
try {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  await ensureEndpointsStream(jsm);
  await ensureEndpointSnapshotsStream(jsm);
  const id = (i: number) => `webhook_bench${String(i).padStart(10, '0')}` as EndpointId;
  const at = new Date().toISOString();
  const event = (n: number): EndpointEvent => n < endpoints
    ? { v: 1, type: 'endpoint.created', id: id(n), tenant: `tenant_${n % 500}` as TenantId, url: `https://receiver.example.com/hooks/${n}`, events: ['user.*'], description: null, secret: 'v2:AAAA', at }
    : { v: 1, type: 'endpoint.updated', id: id(n % endpoints), description: `update ${n}`, at };
  const write = async (from: number, to: number) => {
    let pending: Promise<unknown>[] = [];
    for (let n = from; n < to; n++) {
      const e = event(n);
      pending.push(js.publish(endpointSubject(e.id), JSON.stringify(e)));
      if (pending.length >= IN_FLIGHT) { await Promise.all(pending); pending = []; }
    }
    await Promise.all(pending);
  };
  const t0 = performance.now();
  await write(0, writes);
  const bytes = (await jsm.streams.info('ENDPOINTS')).state.bytes;
  console.log(JSON.stringify({ phase: 'written', endpoints, writes, stream_mib: +(bytes / 2 ** 20).toFixed(1), seconds: +((performance.now() - t0) / 1000).toFixed(1) }));

  const load = async (phase: string) => {
    for (let run = 1; run <= 3; run++) {
      const started = performance.now();
      const directory = await startEndpointDirectory({ js, jsm, log: createLogger({ level: 'warn' }), options: { snapshotEvery: 0 } });
      const seconds = (performance.now() - started) / 1000;
      console.log(JSON.stringify({ phase, run, endpoints: [...directory.all()].length, seq: directory.lastSeq(), seconds: +seconds.toFixed(2) }));
      if (phase === 'whole stream' && run === 3) {
        const t1 = performance.now();
        const { bytes } = await writeSnapshot(js, directory.snapshot());
        console.log(JSON.stringify({ phase: 'snapshot written', kib: Math.round(bytes / 1024), seconds: +((performance.now() - t1) / 1000).toFixed(2) }));
      }
      await directory.stop();
    }
  };
  await load('whole stream');
  await write(writes, writes + 1000);
  await load('from snapshot');
} finally {
  await nc.close();
  await nats.dispose();
}
