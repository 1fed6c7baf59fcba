import test from 'ava';
import type { LookupAddress } from 'node:dns';
import { checkTargetUrl, createGuardedLookup, isForbiddenAddress, ForbiddenTargetError, type Resolver } from '../src/delivery/target-policy.ts';

const FORBIDDEN = [
  '0.0.0.0', '0.1.2.3', '127.0.0.1', '127.255.255.254', '10.0.0.1', '10.255.255.255',
  '172.16.0.1', '172.31.255.255', '192.168.0.1', '192.168.255.255', '169.254.169.254', '169.254.0.1',
  '100.64.0.1', '100.127.255.255', '100.100.100.200', '192.0.0.8', '192.0.2.1', '198.18.0.1', '198.51.100.7',
  '203.0.113.9', '224.0.0.1', '239.255.255.250', '240.0.0.1', '255.255.255.255',
  '::', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:10.1.2.3', '::ffff:169.254.169.254',
  '::127.0.0.1', '64:ff9b::127.0.0.1', '64:ff9b::a9fe:a9fe', '64:ff9b:1::1', '100::1', '2001:db8::1', '2001::1',
  '2002:7f00:1::1', 'fc00::1', 'fd00::1', 'fd00:ec2::254', 'fdff:ffff::1', 'fe80::1', 'fe80::1%eth0', 'febf::1',
  'fec0::1', 'ff02::1', 'ff05::1:3', '[::1]',
  // IPv4-translated and SRv6 (issue 23; Svix blocked these in 2026)
  '::ffff:0:7f00:1', '::ffff:0:127.0.0.1', '::ffff:0:808:808', '0:0:0:0:ffff:0:a00:1', '5f00::1', '5f00:1:2:3::7', '5f00:ffff::1',
  // documentation, RFC 9637
  '3fff::1', '3fff:fff:ffff::1',
  // not an address at all: fail closed
  'localhost', 'example.com', '', '999.1.1.1',
];

const ALLOWED = [
  '1.1.1.1', '8.8.8.8', '93.184.215.14', '172.15.255.255', '172.32.0.1', '192.169.0.1', '100.63.255.255',
  '100.128.0.1', '169.253.255.255', '223.255.255.255', '11.0.0.1', '198.20.0.1',
  '2606:4700:4700::1111', '2001:4860:4860::8888', '2a00:1450:4001:80b::200e', '::ffff:8.8.8.8', '64:ff9b::8.8.8.8',
  '5eff:ffff::1', '5f01::1', '3ffe:ffff::1', '3fff:1000::1',
];

for (const ip of FORBIDDEN) {
  test(`forbidden: ${JSON.stringify(ip)}`, (t) => t.true(isForbiddenAddress(ip)));
}
for (const ip of ALLOWED) {
  test(`allowed: ${ip}`, (t) => t.false(isForbiddenAddress(ip)));
}

const URLS: [string, boolean, string | undefined][] = [
  ['https://hooks.example.com/in', false, undefined],
  ['https://93.184.215.14/in', false, undefined],
  ['https://[2606:4700:4700::1111]/in', false, undefined],
  ['http://hooks.example.com/in', false, 'must be an https:// URL'],
  ['ftp://hooks.example.com/in', false, 'must be an https:// URL'],
  ['https://localhost:8443/', false, 'must not point to localhost'],
  ['https://LOCALHOST./', false, 'must not point to localhost'],
  ['https://api.localhost/', false, 'must not point to localhost'],
  ['https://127.0.0.1/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://127.1/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://2130706433/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://0x7f.1/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://169.254.169.254/latest/meta-data/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[::1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[::ffff:127.0.0.1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[3fff::1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[fd00::1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://0.0.0.0/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[::ffff:0:7f00:1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['https://[5f00::1]/', false, 'must not point to a loopback, private, link-local or reserved address'],
  ['http://127.0.0.1:3000/', true, undefined],
  ['http://localhost:3000/', true, undefined],
  ['https://[::1]/', true, undefined],
  ['ftp://127.0.0.1/', true, 'must be an http:// or https:// URL'],
];

for (const [url, allowPrivate, expected] of URLS) {
  test(`checkTargetUrl(${url}, allowPrivate=${allowPrivate})`, (t) => {
    t.is(checkTargetUrl(new URL(url), allowPrivate), expected);
  });
}

/** A stand-in for DNS: a fixed answer per name, so a public name can "resolve" to a private address. */
function fakeDns(answers: Record<string, LookupAddress[]>): Resolver {
  return (hostname, _options, callback) => {
    const found = answers[hostname];
    setImmediate(() => {
      if (found) callback(null, found);
      else callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), []);
    });
  };
}

const dns = fakeDns({
  'public.example': [{ address: '93.184.215.14', family: 4 }, { address: '2606:2800:21f:cb07:6820:80da:af6b:8b2c', family: 6 }],
  'rebind.example': [{ address: '10.0.0.5', family: 4 }],
  'mixed.example': [{ address: '93.184.215.14', family: 4 }, { address: '169.254.169.254', family: 4 }],
  'mapped.example': [{ address: '::ffff:127.0.0.1', family: 6 }],
  'empty.example': [],
});

function lookup(hostname: string, all: boolean): Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family?: number }> {
  const guarded = createGuardedLookup(dns);
  return new Promise((resolve) => guarded(hostname, { all }, (err, address, family) => resolve({ err, address, family })));
}

test('guarded lookup passes public answers through, in both the single and the all form', async (t) => {
  const one = await lookup('public.example', false);
  t.is(one.err, null);
  t.is(one.address, '93.184.215.14');
  t.is(one.family, 4);
  const all = await lookup('public.example', true);
  t.is(all.err, null);
  t.deepEqual(all.address, [{ address: '93.184.215.14', family: 4 }, { address: '2606:2800:21f:cb07:6820:80da:af6b:8b2c', family: 6 }]);
});

for (const name of ['rebind.example', 'mixed.example', 'mapped.example']) {
  for (const all of [false, true]) {
    test(`guarded lookup rejects ${name} (all=${all})`, async (t) => {
      const { err } = await lookup(name, all);
      t.true(err instanceof ForbiddenTargetError);
      t.is((err as ForbiddenTargetError).host, name);
      t.true(isForbiddenAddress((err as ForbiddenTargetError).address));
    });
  }
}

test('guarded lookup passes resolver errors through and treats an empty answer as not found', async (t) => {
  t.is((await lookup('nowhere.example', true)).err?.code, 'ENOTFOUND');
  t.is((await lookup('empty.example', false)).err?.code, 'ENOTFOUND');
});
