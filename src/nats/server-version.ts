// Which nats-server versions hookstream runs on, and what start-up says about the servers it sees.
// Tested: 2.10.27 (Debian stable, trixie; `bin/fetch-nats-server stable`) and 2.15.1 (Debian unstable,
// `bin/fetch-nats-server`). Start-up refuses a server below FLOOR: below 2.10 a subject's index can hide a
// stored message from `next_by_subj` (three messages on a subject, the last removed, then the first: the
// one left is not found), and the ordering gate finds a key's deliveries through that index
// (test/server-floor.test.ts); 2.10 also brings several filter subjects per consumer. Replicated streams
// need more: below 2.11 a replicated work-queue stream's replicas can diverge after "stream store EOF →
// Resetting stream cluster state" and lose deliveries (nats-server #3999, #6140, #6486; measured on a
// 2.9.10 cluster under the fault suite's chaos), so HOOKSTREAM_REPLICAS > 1 refuses to start on any server
// below CLUSTER_FLOOR.
import { connect as tcpConnect } from 'node:net';
import { ConfigError } from '../errors.ts';

export const FLOOR = '2.10.0';
export const CLUSTER_FLOOR = '2.11.0';
export const TESTED_VERSIONS = ['2.10.27', '2.15.1'] as const;

/** `2.10.0` as people say it: `2.10`. */
export const short = (floor: string): string => floor.replace(/\.0$/, '');

/** Numeric parts of `v2.15.1` or `2.9.10-beta`; undefined for anything else. */
export function parseVersion(v: string | undefined): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(v ?? '');
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** Whether `v` is below `floor`; unknown versions are not judged. */
export function belowFloor(v: string | undefined, floor = FLOOR): boolean {
  const have = parseVersion(v);
  const min = parseVersion(floor)!;
  if (!have) return false;
  for (let i = 0; i < 3; i++) if (have[i] !== min[i]) return have[i]! < min[i]!;
  return false;
}

/** The refusal of a server below FLOOR at `url`; undefined when fine (or its version is unknown). */
export function floorError(version: string | undefined, url: string): ConfigError | undefined {
  if (!belowFloor(version)) return undefined;
  return new ConfigError('NATS_URL', `the nats-server at ${url} runs ${version}; hookstream needs ${short(FLOOR)} or newer (Debian stable and `
    + `Ubuntu 24.04 ship it; \`bin/fetch-nats-server\` downloads one): upgrade it, or set NATS_URL to a newer server`);
}

/** A server of the cluster as the client sees it: where, and the version its INFO names. */
export interface SeenServer { address: string; name?: string | undefined; version?: string | undefined }

/** The refusal for HOOKSTREAM_REPLICAS > 1 with a server below CLUSTER_FLOOR among `servers`; undefined when fine. */
export function clusterFloorError(replicas: number, servers: readonly SeenServer[]): ConfigError | undefined {
  if (replicas <= 1) return undefined;
  const old = servers.filter((s) => belowFloor(s.version, CLUSTER_FLOOR)).sort((a, b) => (a.name ?? a.address).localeCompare(b.name ?? b.address));
  if (old.length === 0) return undefined;
  const named = old.map((s) => `${s.name ?? s.address} runs ${s.version}`).join(', ');
  return new ConfigError('HOOKSTREAM_REPLICAS', `${replicas} needs nats-server ${short(CLUSTER_FLOOR)} or newer on every server `
    + `of the cluster (older servers can lose deliveries of replicated streams): ${named}; upgrade them, or set HOOKSTREAM_REPLICAS=1 `
    + 'on a single server');
}

/**
 * The version a server announces in the INFO line it sends first on every client connection, before any
 * login: how the client learns the versions of the cluster's other servers (its INFO's connect_urls).
 * Its version is undefined when it does not answer within `timeoutMs` (down, or not reachable from here).
 */
export function probeServer(address: string, timeoutMs = 2000): Promise<SeenServer> {
  const at = address.lastIndexOf(':');
  const host = address.slice(0, at).replace(/^\[|\]$/g, '');
  const port = Number(address.slice(at + 1));
  return new Promise((resolve) => {
    let buffer = '';
    const done = (info?: { server_name?: string; version?: string }) => {
      socket.destroy();
      clearTimeout(timer);
      resolve({ address, name: info?.server_name, version: info?.version });
    };
    const socket = tcpConnect(port, host);
    const timer = setTimeout(() => done(), timeoutMs);
    socket.on('error', () => done());
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      const end = buffer.indexOf('\r\n');
      if (end < 0) { if (buffer.length > 65_536) done(); return; }
      const m = /^INFO\s+(\{.*\})\s*$/.exec(buffer.slice(0, end));
      try {
        done(m ? JSON.parse(m[1]!) as { server_name?: string; version?: string } : undefined);
      } catch {
        done();
      }
    });
  });
}

/**
 * The servers of the cluster the client sees: the one it is connected to and those its INFO advertises
 * (`connect_urls`), each asked for its version. A server that does not answer is left out.
 */
export async function seenServers(info: { server_name?: string; version?: string; host?: string; port?: number; connect_urls?: string[] } | undefined): Promise<SeenServer[]> {
  if (!info) return [];
  const self = `${info.host ?? ''}:${info.port ?? ''}`;
  const others = (info.connect_urls ?? []).filter((u) => u !== self);
  const probed = await Promise.all(others.map((u) => probeServer(u)));
  // The connected server may be among them under another address (listening on 0.0.0.0, say).
  const rest = probed.filter((s) => s.version !== undefined && (s.name === undefined || s.name !== info.server_name));
  return [{ address: self, name: info.server_name, version: info.version }, ...rest];
}
