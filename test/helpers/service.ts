// The whole service for a test file: its own nats-server and database, real roles, quiet logs.
// A file may bring its own Postgres (`databaseUrl`) and see the log lines (`logWrite`).
import { loadConfig, type Config } from '../../src/config.ts';
import { createLogger, type Logger } from '../../src/log.ts';
import { startService, type RunningService } from '../../src/service.ts';
import { generateKeys, initSodium } from '../../src/crypto/sodium.ts';
import { createEndpoints } from '../../src/endpoints/index.ts';
import type { EndpointStore } from '../../src/endpoints/store.ts';
import { startNatsServer, type NatsServer } from './nats-server.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { deliveryAddress } from '../../streams/deliveries.ts';
import { directDeliveryDefaults } from './direct-env.ts';
import { directConsumerInfo } from '../../streams/direct.ts';

export interface Harness {
  nats: NatsServer;
  db: TestDatabase;
  config: Config;
  log: Logger;
  keys: ReturnType<typeof generateKeys>;
  service: RunningService;
  store: EndpointStore;
  /** Stop the service (not the servers) and start it again with the same configuration. */
  restart(overrides?: Record<string, string>): Promise<void>;
  close(): Promise<void>;
}

export interface HarnessOptions {
  /**
   * Use this database (created by the service when missing) instead of a fresh one on the machine's
   * Postgres; `close` then leaves it alone.
   */
  databaseUrl?: string;
  /** Receives every log line instead of stderr. */
  logWrite?: (line: string) => void;
}

export async function startHarness(label: string, env: Record<string, string> = {}, opts: HarnessOptions = {}): Promise<Harness> {
  await initSodium();
  const nats = await startNatsServer();
  const external = opts.databaseUrl;
  const db: TestDatabase = external
    ? { url: external, name: decodeURIComponent(new URL(external).pathname.slice(1)), drop: async () => {} }
    : await createTestDatabase(label);
  const keys = generateKeys();
  const makeConfig = (extra: Record<string, string> = {}) => loadConfig({
    NATS_URL: nats.url,
    DATABASE_URL: db.url,
    PORT: '0',
    // Free ports for the ops listener too: test files run in parallel, each with a service.
    OPS_PORT: '0',
    CONSOLE_PORT: '0',
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
    HOOKSTREAM_DELIVERY_SHARDS: '2',
    HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
    HOOKSTREAM_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'error',
    ...directDeliveryDefaults(),
    ...env,
    ...extra,
  });
  let config = makeConfig();
  const log = createLogger({ level: config.logLevel, write: opts.logWrite });
  let service: RunningService;
  try {
    service = await startService(config, log);
  } catch (e) {
    // A service that fails to start must not leave its servers behind.
    await nats.dispose();
    if (!external) await db.drop();
    throw e;
  }
  const storeFor = (s: RunningService) => createEndpoints({ js: s.js, jsm: s.jsm, masterKey: keys.masterKey, allowPrivateTargets: true, partitions: config.eventPartitions }).store;
  const harness: Harness = {
    nats, db, config, log, keys, service, store: storeFor(service),
    async restart(overrides) {
      await harness.service.stop();
      config = makeConfig(overrides);
      harness.config = config;
      service = await startService(config, log);
      harness.service = service;
      harness.store = storeFor(service);
    },
    async close() {
      await harness.service.stop();
      await nats.dispose();
      await db.drop();
    },
  };
  return harness;
}

/** Deliveries stored on an endpoint's (plain) subject of its work queue: waiting, retrying or held. */
export async function queuedDeliveries(h: Harness, endpoint: string): Promise<number> {
  const address = deliveryAddress(endpoint, h.config.deliveryShards);
  const info = await h.service.jsm.streams.info(address.stream, { subjects_filter: address.subject });
  return info.state.subjects?.[address.subject] ?? 0;
}

/**
 * Deliveries an endpoint holds, on either path: those on its work queue, plus with direct delivery what its
 * direct consumer has not had acked (pending or handed out).
 */
export async function heldDeliveries(h: Harness, endpoint: { id: string; tenant: string }): Promise<number> {
  const queued = await queuedDeliveries(h, endpoint.id);
  if (!h.config.directDelivery) return queued;
  const ci = await directConsumerInfo(h.service.jsm, endpoint, h.config.eventPartitions);
  return queued + (ci ? ci.num_pending + ci.num_ack_pending : 0);
}

/** Poll until `check` returns a value that is not undefined, or fail after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000, what = 'condition'): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
