// One group of scenarios: its own nats-server (free port, temporary store; or a cluster, --cluster), its
// own Postgres database, its endpoints created through the real command side, and the environment its
// service process runs with. The servers and databases come from the test helpers, the one place tests
// and bench start them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { loadConfig, type Config } from '../src/config.ts';
import { connectNats } from '../src/nats/connect.ts';
import { ensureStreams } from '../streams/index.ts';
import { generateKeys, type GeneratedKeys } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { EventName } from '../src/domain/catalogue.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { startNatsServer } from '../test/helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from '../test/helpers/database.ts';
import type { Options } from './options.ts';
import { cleanups, type ServiceProcess } from './processes.ts';
import { fmt, progress, say } from './report.ts';

export const ORG_EVENTS: EventName[] = [
  'organization.created', 'organization.updated', 'organization.deleted', 'organization.restored',
  'organization.auth_policy.updated', 'organization.delivery_channels.updated', 'organization.social_providers.updated',
  'organization.outbound_saml_app.created', 'organization.outbound_saml_app.deleted', 'organization.scim_target.created',
];

export interface EndpointPlan {
  tenant: string;
  url: string;
  port: number;
  events: EventName[];
  /** v1a endpoints sign with ed25519 (issue 11); absent: v1. */
  scheme?: 'v1a';
  /** Issue 21: ordered per key; absent: none. */
  ordering?: 'key';
}

/**
 * `tenants` tenants of `perTenant` endpoints each, spread over the receiver ports. Endpoint j of a tenant
 * takes `user.updated` and (up to ten per tenant) the org event j, so a scenario can reach one of them.
 */
export function plan(tenants: number, perTenant: number, ports: number[], prefix: string, offset = 0): EndpointPlan[] {
  const out: EndpointPlan[] = [];
  for (let t = 0; t < tenants; t++) {
    for (let j = 0; j < perTenant; j++) {
      const n = offset + out.length;
      const port = n % ports.length;
      out.push({
        tenant: `${prefix}${t}`, port, url: `http://127.0.0.1:${ports[port]}/hook/${n}`,
        events: perTenant <= ORG_EVENTS.length ? ['user.updated', ORG_EVENTS[j]!] : ['user.updated'],
      });
    }
  }
  return out;
}

/** NATS servers a group runs against, started by its scenario (a cluster); by default one of its own. */
export interface NatsTarget {
  url: string;
  /** The service's login (nats.conf's `service`), when the servers run nats.conf. */
  service?: { user: string; password: string };
  /** The producer's login (nats.conf's `publisher`, in PRODUCERS): its acks come to `_INBOX.`. */
  producer?: { user: string; password: string };
  /** More environment for the service (HOOKSTREAM_REPLICAS). */
  env?: Record<string, string>;
  /** The nats-server processes, for CPU metering. */
  pids(): number[];
}

export interface Group {
  name: string;
  /** The group's nats-server processes. */
  natsPids(): number[];
  db: TestDatabase;
  keys: GeneratedKeys;
  config: Config;
  env: Record<string, string>;
  nc: NatsConnection;
  js: JetStreamClient;
  endpoints: EndpointPlan[];
  service?: ServiceProcess;
  logFile: string;
  dir: string;
}

/** A nats-server of the group's own, removed at exit (kept, stopped, with --keep). */
async function ownServer(name: string, opts: Options): Promise<NatsTarget> {
  const nats = await startNatsServer();
  cleanups.push(async () => {
    if (!opts.keep) return nats.dispose();
    await nats.stop();
    say(`kept ${name}: NATS store ${nats.storeDir}`);
  });
  return { url: nats.url, pids: () => (nats.pid === undefined ? [] : [nats.pid]) };
}

export async function startGroup(name: string, opts: Options, endpoints: EndpointPlan[], target?: NatsTarget): Promise<Group> {
  const dir = mkdtempSync(join(tmpdir(), `hookstream-bench-${name}-`));
  const nats = target ?? await ownServer(name, opts);
  const db = await createTestDatabase(`bench_${name}`);
  cleanups.push(async () => {
    if (opts.keep) {
      say(`kept ${name}: service log ${join(dir, 'service.log')}, database ${db.name}`);
      return;
    }
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });
  const keys = generateKeys();
  const env: Record<string, string> = {
    ...Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[1] !== undefined)),
    NATS_URL: nats.url,
    DATABASE_URL: db.url,
    PORT: '0',
    OPS_PORT: '0',
    HOOKSTREAM_ROLES: opts.roles,
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
    HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
    HOOKSTREAM_DATA_DIR: join(dir, 'data'),
    HOOKSTREAM_LOG_LEVEL: process.env['HOOKSTREAM_LOG_LEVEL'] ?? 'warn',
    ...(nats.service ? { NATS_USER: nats.service.user, NATS_PASSWORD: nats.service.password } : {}),
    ...nats.env,
  };
  const config = loadConfig(env);
  const connectAs = async (login: { user: string; password: string } | undefined, inboxPrefix?: string) => {
    const c = await connectNats({ url: nats.url, user: login?.user, password: login?.password, name: 'hookstream-bench-producer', inboxPrefix });
    cleanups.unshift(async () => { await c.close(); });
    return c;
  };
  const nc = await connectAs(nats.service);
  // Without logins one connection sets up and produces; with nats.conf only PRODUCERS may publish events.
  const producer = nats.producer ? await connectAs(nats.producer, '_INBOX') : nc;
  const jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, {
    shards: config.deliveryShards, maxQueued: config.maxQueuedPerEndpoint, retrySchedule: config.retrySchedule, replicas: config.replicas,
    partitions: config.eventPartitions, direct: config.directDelivery,
  });

  // Endpoints are created through the real command side (the same events the API appends).
  const { store } = createEndpoints({ js: jetstream(nc), jsm, masterKey: keys.masterKey, allowPrivateTargets: true });
  const queue = endpoints.map((e, i) => [e, i] as const);
  let made = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: 64 }, async () => {
    for (let item = queue.pop(); item; item = queue.pop()) {
      await store.create(item[0].tenant as TenantId, { url: item[0].url, events: item[0].events, signature_scheme: item[0].scheme, ordering: item[0].ordering });
      if (++made % 2000 === 0) progress(`${name}: ${made}/${endpoints.length} endpoints created`);
    }
  }));
  progress(`${name}: ${endpoints.length} endpoints created in ${fmt((performance.now() - started) / 1000)} s`);
  return { name, natsPids: nats.pids, db, keys, config, env, nc: producer, js: jetstream(producer), endpoints, logFile: join(dir, 'service.log'), dir };
}
