// The endpoint directory's sync while endpoints are being written: the stream's state is compared with what
// the fold had applied when it was asked for, not with what its live consumer applied by the answer. It
// used to take an endpoint created during the request for a stream that "ends before" the fold, fold the
// stream anew, and report every endpoint the new fold had not reached yet as deleted: the delivery role
// then deleted their consumers and made them again (reconcile-races: hundreds of events sent twice).
import test from 'ava';
import { endpointsStream } from './helpers/endpoints-stream.ts';
import { startEndpointDirectory } from '../src/endpoints/directory.ts';
import { endpointSubject } from '../streams/endpoints.ts';
import { createLogger } from '../src/log.ts';
import { newEndpointId } from '../src/domain/ids.ts';
import { EndpointStatus } from '../src/domain/endpoint.ts';

const created = (id: string, tenant: string) => JSON.stringify({
  v: 1, type: 'endpoint.created', id, tenant, url: `https://example.com/${id}`, events: ['*'], description: null, secret: 'sealed', at: new Date().toISOString(),
});

test('syncs while endpoints are created neither fold the stream anew nor report a live endpoint deleted', async (t) => {
  const { js, jsm } = await endpointsStream(t);
  const lines: string[] = [];
  const directory = await startEndpointDirectory({ js, jsm, log: createLogger({ level: 'warn', write: (l) => lines.push(l) }) });
  t.teardown(() => directory.stop());
  const deleted = new Set<string>();
  directory.onChange((next) => { if (next.status === EndpointStatus.Deleted) deleted.add(next.id); });
  // Writers and syncs at once, as the API's commands and a delivery role's reconciles are.
  const ids: string[] = [];
  let writing = true;
  const writers = Array.from({ length: 4 }, async () => {
    while (ids.length < 1500) {
      const id = newEndpointId();
      ids.push(id);
      await js.publish(endpointSubject(id), created(id, 'tenant_race'));
    }
  });
  const syncs = (async () => { while (writing) await directory.sync(); })();
  await Promise.all(writers);
  writing = false;
  await syncs;
  await directory.sync();
  t.is(ids.filter((id) => directory.get(id as never)).length, ids.length, 'every endpoint known');
  t.deepEqual([...deleted], [], 'none reported deleted');
  t.deepEqual(lines.filter((l) => l.includes('folds the stream anew')), [], 'never folded anew');
});
