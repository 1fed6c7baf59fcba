import test from 'ava';
import { belowFloor, floorError, parseVersion } from '../src/nats/server-version.ts';

test('versions below the floor (2.10) are flagged; the floor, newer and unknown versions are not', (t) => {
  t.deepEqual(parseVersion('v2.15.1'), [2, 15, 1]);
  t.deepEqual(parseVersion('2.9.10-beta.1'), [2, 9, 10]);
  t.is(parseVersion('nightly'), undefined);
  for (const v of ['2.9.10', '2.9.99', '2.8.4', '1.99.99', 'v2.9.0']) t.true(belowFloor(v), v);
  for (const v of ['2.10.0', '2.10.7', 'v2.10.27', '2.15.1', '3.0.0', undefined, 'dev']) t.false(belowFloor(v), String(v));
});

test('a server below the floor is refused with the variable to change and how to get a newer one; others pass', (t) => {
  for (const v of ['2.10.0', '2.15.1', undefined]) t.is(floorError(v, '127.0.0.1:4222'), undefined, String(v));
  const e = floorError('2.9.10', 'nats.internal:4222');
  t.is(e?.name, 'ConfigError');
  t.is(e?.message, 'NATS_URL: the nats-server at nats.internal:4222 runs 2.9.10; hookstream needs 2.10 or newer (Debian stable and '
    + 'Ubuntu 24.04 ship it; `bin/fetch-nats-server` downloads one): upgrade it, or set NATS_URL to a newer server');
});
