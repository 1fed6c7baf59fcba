// Where deliveries may go: https only, and never to loopback, private, link-local, metadata or other
// special-purpose addresses (SSRF protection). The URL is checked when an endpoint is saved; the
// address is checked again on every connection, because DNS can change after validation.
// allowPrivate (HOOKSTREAM_ALLOW_PRIVATE_TARGETS=1) lifts both rules for development and tests.
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';

/** A target resolves to, or is, an address deliveries must not reach. */
export class ForbiddenTargetError extends Error {
  readonly code = 'ERR_HOOKSTREAM_FORBIDDEN_TARGET';
  readonly host: string;
  readonly address: string;
  constructor(host: string, address: string) {
    super(host === address
      ? `target address ${address} is loopback, private, link-local or reserved`
      : `target host ${host} resolves to ${address}, which is loopback, private, link-local or reserved`);
    this.name = 'ForbiddenTargetError';
    this.host = host;
    this.address = address;
  }
}

export const isForbiddenTargetError = (e: unknown): e is ForbiddenTargetError => e instanceof ForbiddenTargetError;

// IANA special-purpose registries (RFC 6890 and successors) plus multicast: nothing here is a public
// web server. Node's BlockList applies IPv4 rules to IPv4-mapped IPv6 (::ffff:a.b.c.d) by itself.
const IPV4: readonly [string, number][] = [
  ['0.0.0.0', 8], // "this network", incl. 0.0.0.0 which connects to the local host
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT; also Alibaba's metadata 100.100.100.200
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, incl. the 169.254.169.254 cloud metadata service
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // TEST-NET-1
  ['192.88.99.0', 24], // deprecated 6to4 relay anycast
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // TEST-NET-2
  ['203.0.113.0', 24], // TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, incl. broadcast 255.255.255.255
];

const IPV6: readonly [string, number][] = [
  ['::', 96], // unspecified ::, loopback ::1 and deprecated IPv4-compatible ::a.b.c.d
  ['::ffff:0:0:0', 96], // IPv4-translated (RFC 2765), e.g. ::ffff:0:7f00:1
  ['5f00::', 16], // SRv6 segment identifiers (RFC 9602)
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard-only
  ['2001::', 23], // IETF protocol assignments, incl. Teredo
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // deprecated 6to4, which embeds an arbitrary IPv4 address
  ['3fff::', 20], // documentation (RFC 9637)
  ['fc00::', 7], // unique local, incl. fd00::/8 (and AWS's fd00:ec2::254 metadata)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // deprecated site-local
  ['ff00::', 8], // multicast
];

const blocked = new BlockList();
for (const [net, prefix] of IPV4) {
  blocked.addSubnet(net, prefix, 'ipv4');
  // Well-known NAT64 (64:ff9b::/96) reaches the embedded IPv4 address, so forbid the same ranges there.
  blocked.addSubnet(`64:ff9b::${net}`, 96 + prefix, 'ipv6');
}
for (const [net, prefix] of IPV6) blocked.addSubnet(net, prefix, 'ipv6');

/** True when deliveries must not connect to this address; anything that is not an IP address is forbidden. */
export function isForbiddenAddress(ip: string): boolean {
  // A zone id (fe80::1%eth0) makes BlockList answer false, so drop it first.
  const address = ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1).split('%')[0]! : ip.split('%')[0]!;
  const family = isIP(address);
  if (family === 0) return true;
  return blocked.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

/** Hostnames that name the local machine without DNS (RFC 6761). */
function isLocalName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

/**
 * The problem with a target URL, or undefined. Used when an endpoint is saved (the domain's
 * CheckUrl) and before each send. Host names other than localhost are checked at connect time.
 */
export function checkTargetUrl(url: URL, allowPrivate: boolean): string | undefined {
  if (allowPrivate) {
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an http:// or https:// URL';
    return undefined;
  }
  if (url.protocol !== 'https:') return 'must be an https:// URL';
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isLocalName(host)) return 'must not point to localhost';
  if (isIP(host) !== 0 && isForbiddenAddress(host)) return 'must not point to a loopback, private, link-local or reserved address';
  return undefined;
}

/** Resolves every address of a host (dns.lookup with all: true, or a stand-in in tests). */
export type Resolver = (hostname: string, options: LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

const systemResolver: Resolver = (hostname, options, callback) => dnsLookup(hostname, options, callback);

/**
 * A lookup for net.connect that fails with ForbiddenTargetError when any address of the host is
 * forbidden: refusing the whole host (not just the bad address) stops a DNS answer that mixes a
 * public and a private address from steering retries inward. IP-literal hosts never reach a lookup
 * (net.connect skips it), so callers check those with isForbiddenAddress themselves. Pass it to undici
 * as `connect: { lookup }`; undici hands it on to net.connect / tls.connect.
 */
export function createGuardedLookup(resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    const { all, ...rest } = options;
    const allOptions: LookupAllOptions = { ...rest, all: true };
    resolve(hostname, allOptions, (err, addresses) => {
      if (err) return callback(err, all ? [] : '');
      const bad = addresses.find((a) => isForbiddenAddress(a.address));
      if (bad) return callback(new ForbiddenTargetError(hostname, bad.address), all ? [] : '');
      const first = addresses[0];
      if (!first) {
        const none: NodeJS.ErrnoException = Object.assign(new Error(`no addresses for ${hostname}`), { code: 'ENOTFOUND' });
        return callback(none, all ? [] : '');
      }
      if (all) callback(null, addresses);
      else callback(null, first.address, first.family);
    });
  };
}
