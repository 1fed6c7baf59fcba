// A nats-server of the test's own with the ENDPOINTS and ENDPOINT_SNAPSHOTS streams, for tests of the
// endpoint directory that need no service around it; everything is removed when the test ends.
import type { ExecutionContext } from 'ava';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connectNats } from '../../src/nats/connect.ts';
import { ensureEndpointsStream } from '../../streams/endpoints.ts';
import { ensureEndpointSnapshotsStream } from '../../streams/endpoint-snapshots.ts';
import { startNatsServer } from './nats-server.ts';

export async function endpointsStream(t: ExecutionContext) {
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await ensureEndpointsStream(jsm);
  await ensureEndpointSnapshotsStream(jsm);
  return { js: jetstream(nc), jsm, storeDir: server.storeDir };
}
