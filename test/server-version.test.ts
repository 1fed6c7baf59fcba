import test from 'ava';
import { belowFloor, parseVersion } from '../src/nats/server-version.ts';

test('versions below the tested floor are flagged; the floor, newer and unknown versions are not', (t) => {
  t.deepEqual(parseVersion('v2.15.1'), [2, 15, 1]);
  t.deepEqual(parseVersion('2.9.10-beta.1'), [2, 9, 10]);
  t.is(parseVersion('nightly'), undefined);
  for (const v of ['2.9.9', '2.8.4', '1.99.99', 'v2.9.0']) t.true(belowFloor(v), v);
  for (const v of ['2.9.10', '2.9.11', '2.10.0', '2.15.1', '3.0.0', undefined, 'dev']) t.false(belowFloor(v), String(v));
});
