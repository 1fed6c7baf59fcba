// Wiring: one process runs the roles it is given (HOOKSTREAM_ROLES or `serve --roles`), each started
// from the configuration and stopped in reverse order, so in-flight work finishes before connections close.
import { jetstream, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Config, Role } from './config.ts';
import { onLogLineDropped, type Logger } from './log.ts';
import { createServiceMetrics, type ServiceMetrics } from './metrics.ts';
import { clusterFloorError, floorError, seenServers, TESTED_VERSIONS } from './nats/server-version.ts';
import { connectNats, SERVICE_INBOX_PREFIX } from './nats/connect.ts';
import { logConnectionChanges } from './nats/connection-log.ts';
import { describe } from './errors.ts';
import { ensureStreams, startupJetStreamManager } from '../streams/index.ts';
import { loadKeys } from './crypto/keys.ts';
import { SecretSealer, sealForDeadLetters } from './crypto/sodium.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from './domain/webhook-id.ts';
import { openDatabase, closeDatabase, type Database } from './db/orm.ts';
import { startEndpointDirectory, type EndpointDirectory } from './endpoints/directory.ts';
import { ENDPOINTS_PROJECTION, startEndpointProjector, type EndpointProjector } from '../projections/endpoints.ts';
import { startErasureIndexProjector } from '../projections/erasure-index.ts';
import { startEventIndexProjector } from '../projections/event-index.ts';
import { DIRECT_DRAIN_GRACE_MS, EVENTS_STREAM, directWindowOf, eventsStart } from '../streams/events.ts';
import { countDirectConsumers } from '../streams/direct.ts';
import { createDirectEvents } from './delivery/direct-events.ts';
import { createDirectWindow, type DirectWindow } from './delivery/direct-window.ts';
import { createSampledWarnings } from './sampled-log.ts';
import { startErasureIndexRetention } from './erasure/index-retention.ts';
import { startAttemptLogProjector } from '../projections/attempt-log.ts';
import { startAttemptLogRetention } from './deliverylog/retention.ts';
import { createAttemptLogRecorder } from './deliverylog/recorder.ts';
import { waitForCheckpoint } from '../projections/wait.ts';
import { startRouter, type Router } from './router/router.ts';
import { MAX_EVENT_DEPTH } from './domain/event-data.ts';
import { startDelivery } from './delivery/worker.ts';
import { createHttpSender } from './delivery/http-sender.ts';
import { startDeadLetterHandler } from './deadletter/handler.ts';
import { startDeadLetterRetention } from './deadletter/retention.ts';
import { deadLetterTaggerOf } from './deadletter/tag.ts';
import { createAckedPublisher, type AckedPublisher } from './nats/acked-publisher.ts';
import { watchConsumerLeaders } from './nats/consumer-leaders.ts';
import { consumerStepdown } from './nats/stepdown.ts';
import { startAdmin } from './admin/server.ts';
import { subjectHasherOf } from './erasure/subject-hash.ts';
import { createErasureIndexWriter } from './erasure/index-writer.ts';
import { createDataKeys } from './erasure/data-keys.ts';
import { createServiceOps, startOpsServer, type Ops, type OpsServer } from './ops/index.ts';
import { atMost, runStops } from './supervisor/stops.ts';
import { createRoleSupervisor } from './supervisor/roles.ts';
import { createEndpoints, type Endpoints } from './endpoints/index.ts';
import { createApi } from './api/app.ts';
import { createTenantLimitsReader, createTenantLimitsStore } from './tenants/limits.ts';
import pg from 'pg';
import { withTenantQuotas } from './tenants/quotas.ts';
import { createTestEvents } from './endpoints/test-event.ts';
import { createOpsEvents } from './ops/events.ts';
import { startEndpointHealth } from './delivery/endpoint-health.ts';
import { startApiServer, type ApiServer } from './api/server.ts';
import { startConsole, type ConsoleServer } from './console/server.ts';
import { loadAssets } from './console/assets.ts';
import { createPortal } from './portal/app.ts';
import { tracing } from './telemetry/tracing.ts';

export interface RunningService {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly orm: Database | undefined;
  readonly metrics: ServiceMetrics;
  readonly directory: EndpointDirectory | undefined;
  readonly projector: EndpointProjector | undefined;
  /** /healthz, /readyz and /metrics of this process. */
  readonly ops: Ops;
  /** Where the ops listener (OPS_HOST:OPS_PORT) answers them. */
  readonly opsUrl: string;
  /** The management API's server when the api role runs. */
  readonly api: ApiServer | undefined;
  /** The operator console's server when the console role runs. */
  readonly console: ConsoleServer | undefined;
  /** Stop the roles, then the connections; past HOOKSTREAM_SHUTDOWN_TIMEOUT, close what is left. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Counters kept across start-up attempts (serve); a fresh set otherwise. */
  metrics?: ServiceMetrics;
  /** A listener opened before start-up: the service answers on it once it runs, and leaves closing it to its owner. */
  opsServer?: OpsServer;
  /** Told what start-up is doing as it goes, so that a failure names what it waits for (src/supervisor/start-up.ts). */
  step?: (name: string) => void;
  /** Aborted when start-up gave up on this attempt (a step that never ended): its connections are closed. */
  signal?: AbortSignal;
  /**
   * One half of a process split in two isolates (src/supervisor/threads.ts): `api` runs the roles that
   * answer requests and the endpoint projection they wait on, `work` the delivery path and the other
   * projections. Unset: every role given, in this isolate.
   */
  half?: Half;
}

export type Half = 'api' | 'work';

let announcedVersion: string | undefined;

export const needsDatabase = (roles: Role[]) => roles.some((r) => r === 'api' || r === 'projector' || r === 'deadletter' || r === 'admin' || r === 'console');

export async function startService(config: Config, log: Logger, opts: StartOptions = {}): Promise<RunningService> {
  const roles = new Set(config.roles);
  const stops: (() => Promise<void>)[] = [];
  const step = opts.step ?? (() => {});
  const metrics = opts.metrics ?? createServiceMetrics();
  if (!opts.metrics) onLogLineDropped(() => metrics.logLinesDropped.inc());
  step('NATS');
  const nc = await connectNats({ url: config.natsUrl, user: config.natsUser, password: config.natsPassword });
  stops.push(() => nc.drain());
  logConnectionChanges(nc, log);
  let orm: Database | undefined;
  // Whatever the attempt awaits then fails, and it undoes what it started as for any failure.
  const abandon = () => { void nc.close().catch(() => {}); if (orm) void orm.close(true).catch(() => {}); };
  if (opts.signal?.aborted) abandon();
  else opts.signal?.addEventListener('abort', abandon, { once: true });
  // What a stop or a failed start-up leaves past its deadline: closed without waiting for NATS or Postgres.
  // Quiet when start-up failed: start-up logs what it waits for, once.
  const stopAll = async (quiet = false) => {
    const onError = (e: unknown) => { if (!quiet) log.error('error while stopping', { reason: describe(e) }); };
    if (await runStops(stops.splice(0).reverse(), config.shutdownTimeoutMs, onError)) return;
    if (!quiet) log.warn('stopping took longer than HOOKSTREAM_SHUTDOWN_TIMEOUT; closing the connections', { timeout_ms: config.shutdownTimeoutMs });
    await atMost(nc.close(), 1000);
    if (orm) await atMost(orm.close(true), 1000);
  };
  try {
    const serverVersion = nc.info?.version;
    // Once per server version, not at every start-up attempt.
    if (serverVersion !== announcedVersion) {
      log.info('connected to nats-server', { version: serverVersion ?? 'unknown', tested: TESTED_VERSIONS.join(', ') });
    }
    const tooOld = floorError(serverVersion, nc.getServer());
    if (tooOld) throw tooOld;
    announcedVersion = serverVersion;
    if (config.replicas > 1) {
      const tooOldForReplicas = clusterFloorError(config.replicas, await seenServers(nc.info));
      if (tooOldForReplicas) throw tooOldForReplicas;
    }
    step('JetStream');
    const js = jetstream(nc);
    const jsm = await startupJetStreamManager(nc);
    await ensureStreams(jsm, {
      shards: config.deliveryShards, maxQueued: config.maxQueuedPerEndpoint, retrySchedule: config.retrySchedule, replicas: config.replicas,
      queueRetentionMs: config.queueRetentionMs, partitions: config.eventPartitions, direct: config.directDelivery,
      onRetry: (reason) => log.warn('JetStream did not answer while creating the streams; trying again', { reason }),
    });
    const keys = await loadKeys(config, log, {
      // router and admin: webhook ids are encrypted under a key derived from it (src/domain/webhook-id.ts);
      // deadletter and admin: dead letters are tagged under another (src/deadletter/tag.ts).
      master: roles.has('api') || roles.has('delivery') || roles.has('router') || roles.has('admin') || roles.has('deadletter')
        || (roles.has('projector') && config.eventPartitions > 0),
      deadLetterPublic: roles.has('deadletter'),
      deadLetterSecret: roles.has('admin'),
    });

    // Built once: the router encodes webhook ids, the admin role decodes them (during a master-key
    // rotation, also the ids made under the previous key).
    const webhookIds = keys.masterKey
      ? createWebhookIdCodec(
        deriveWebhookIdKey(Buffer.from(keys.masterKey, 'base64')),
        keys.previousMasterKey ? [deriveWebhookIdKey(Buffer.from(keys.previousMasterKey, 'base64'))] : [],
      )
      : undefined;
    const deadLetterTags = keys.masterKey ? deadLetterTaggerOf(keys.masterKey, keys.previousMasterKey) : undefined;
    // Issue 22: the keyed hash of subject ids, written by the router and the dead-letter role, looked up by erasure.
    const subjectHasher = keys.masterKey ? subjectHasherOf(keys.masterKey, keys.previousMasterKey) : undefined;

    // Events as the roles read them: the router's limits; with direct delivery (streams/direct.ts), when it
    // started; EVENTS' creation time, which webhook-ids name.
    const eventLimits = { maxBytes: config.maxEventBytes, maxDepth: MAX_EVENT_DEPTH };
    const readAt = Date.now();
    const start = await eventsStart(jsm);
    // Direct delivery's window, kept fresh for the roles that decide events (the router, the direct
    // consumers' cut): it changes while they run, when another instance turns direct delivery off.
    let directWindow: DirectWindow | undefined;
    if (config.eventPartitions > 0 && (roles.has('router') || roles.has('delivery'))) {
      const warnings = createSampledWarnings(log, { intervalMs: 60_000 });
      const w = createDirectWindow({
        read: async () => directWindowOf((await jsm.streams.info(EVENTS_STREAM)).config),
        initial: { window: start, at: readAt },
        onError: (e) => warnings.warn('window', 'could not read direct delivery\'s window from EVENTS; events it does not cover wait', { reason: describe(e) }),
      });
      directWindow = w;
      stops.push(async () => w.stop());
    }
    // The direct consumers run while direct delivery is on, and once it is turned off until its window is
    // drained: `until` past by the grace and no endpoint's direct consumer left.
    const drained = async (until: number | undefined) =>
      until !== undefined && Date.now() >= until + DIRECT_DRAIN_GRACE_MS && (await countDirectConsumers(jsm, config.eventPartitions)) === 0;
    const directRuns = start.directSince !== undefined && (config.directDelivery || !(await drained(start.directUntil)));
    const direct = directRuns && start.directSince !== undefined && webhookIds
      ? { since: start.directSince, events: createDirectEvents({ webhookIds, epochMs: start.epochMs, limits: eventLimits }) }
      : undefined;
    // Direct delivery was on once: the partition streams' consumers count in backlogs and delivery states.
    const directEver = start.directSince !== undefined;

    if (needsDatabase(config.roles)) {
      step('Postgres');
      const db = await openDatabase(config.databaseUrl, log);
      orm = db;
      stops.push(() => closeDatabase(db));
    }

    // Health, readiness and metrics on a listener of their own in every process, never the API's (the
    // metrics name every tenant's endpoints). Pushed early, so it answers until the roles have stopped.
    let directory: EndpointDirectory | undefined;
    let router: Router | undefined;
    const supervisor = createRoleSupervisor({ log, restarts: metrics.roleRestarts });
    const ops = createServiceOps({
      nc, jsm, orm, metrics, shards: config.deliveryShards, partitions: config.eventPartitions, direct: directEver,
      checkProjection: roles.has('api'), roles: supervisor.down,
      // The backlog gauges once per process: the half that delivers lists them.
      backlog: opts.half !== 'api',
      ...(roles.has('router') || roles.has('delivery') ? { directory: () => directory } : {}),
      ...(roles.has('router') ? { router: () => router } : {}),
    });
    let opsServer = opts.opsServer;
    if (opsServer) opsServer.use(ops);
    else {
      const own = await startOpsServer(ops, { host: config.opsHost, port: config.opsPort, log: log.child({ role: 'ops' }) });
      opsServer = own;
      stops.push(() => own.close());
    }
    step('the roles');

    let projector: EndpointProjector | undefined;
    // Split in two isolates, the endpoint projection goes with the API (its writes wait on it), the others
    // (an index entry per event, a row per attempt) with the delivery work that makes them.
    if (roles.has('projector') && orm && opts.half !== 'work') {
      const p = await startEndpointProjector({ js, orm, log: log.child({ role: 'projector' }), skipped: metrics.projectionSkipped });
      projector = p;
      stops.push(() => p.stop());
    }
    if (roles.has('projector') && orm && opts.half !== 'api') {
      // Issue 22: the erasure index's rows, where erasure finds one subject's copies, and their retention.
      const index = await startErasureIndexProjector({ js, orm, log: log.child({ role: 'projector' }), skipped: metrics.projectionSkipped });
      const indexRetention = startErasureIndexRetention({ orm, log: log.child({ role: 'projector' }) });
      stops.push(() => index.stop(), () => indexRetention.stop());
      // Every event's index rows from EVENTS, where the routers index only the deliveries they store.
      if (config.eventPartitions > 0 && webhookIds && subjectHasher) {
        const events = await startEventIndexProjector({
          js, orm, log: log.child({ role: 'projector' }), skipped: metrics.projectionSkipped,
          hasher: subjectHasher, webhookIds, limits: eventLimits, epochMs: start.epochMs,
        });
        stops.push(() => events.stop());
      }
      // Issue 31: the operators' delivery log (every attempt), and its retention.
      const attemptLog = await startAttemptLogProjector({ js, orm, log: log.child({ role: 'projector' }), skipped: metrics.projectionSkipped });
      stops.push(() => attemptLog.stop());
      if (config.attemptRetentionMs > 0) {
        const attemptRetention = startAttemptLogRetention({ orm, retentionMs: config.attemptRetentionMs, log: log.child({ role: 'projector' }) });
        stops.push(() => attemptRetention.stop());
      }
    }

    if (roles.has('router') || roles.has('delivery')) {
      const d = await startEndpointDirectory({ js, jsm, log: log.child({ role: 'directory' }), lag: metrics.directoryLag, skipped: metrics.directorySkipped });
      directory = d;
      stops.push(() => d.stop());
    }

    // One publisher for the router's fan-out and the delivery role's attempt records; pushed before both,
    // so it closes after them, once their last publishes are acknowledged. 5 s for JetStream's
    // acknowledgement, as js.publish's default. With direct delivery the dead-letter role seals a dead
    // copy's body under its data key as the router seals a queued one, and writes the key where no router
    // did (an event sent only directly) through it too.
    const sealsDeadCopies = roles.has('deadletter') && direct !== undefined && config.sealDeliveries;
    let publisher: AckedPublisher | undefined;
    if (directory || sealsDeadCopies) {
      const p = createAckedPublisher(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
      publisher = p;
      stops.push(() => p.drain());
    }
    // The operators' delivery log: the delivery role's attempts and the router's refusals (issue 31); its
    // last batch is written after both have stopped.
    const attemptRecorder = publisher && directory ? createAttemptLogRecorder({ publisher, log: log.child({ role: 'delivery-log' }) }) : undefined;
    if (attemptRecorder) stops.push(async () => attemptRecorder.flush());
    // The delivery role and the router pull again when one of their consumers elects a leader.
    const leaders = roles.has('delivery') || roles.has('router') ? watchConsumerLeaders(nc, { log, metrics }) : undefined;
    if (leaders) stops.push(async () => leaders.stop());

    // Crypto-shredding (src/erasure/data-keys.ts): the router seals delivery bodies (and, with direct delivery,
    // the dead-letter role the bodies of dead copies), the delivery, dead-letter and admin roles open them;
    // only those that seal create keys.
    const dataKeys = keys.masterKey && (roles.has('router') || roles.has('delivery') || roles.has('deadletter') || roles.has('admin'))
      ? createDataKeys({ nc, jsm, publisher: roles.has('router') || sealsDeadCopies ? publisher : undefined, opensWhatItSeals: roles.has('router') && roles.has('delivery'), masterKey: keys.masterKey, previousMasterKey: keys.previousMasterKey })
      : undefined;
    if (dataKeys) stops.push(async () => dataKeys.close());

    // Operational events (issue 10: ops.<tenant>.<type>), published by the dead-letter and delivery roles.
    const opsEvents = createOpsEvents({ js, log: log.child({ role: 'ops-events' }), metrics });

    if (roles.has('deadletter') && orm && deadLetterTags && subjectHasher) {
      const publicKey = keys.deadLetterPublicKey!;
      const db = orm;
      const handler = await supervisor.supervise('deadletter', () => startDeadLetterHandler({
        js, jsm, orm: db, sealer: { seal: (b) => sealForDeadLetters(publicKey, b), tag: deadLetterTags.tag, subjects: subjectHasher.hash }, bodies: dataKeys,
        log: log.child({ role: 'deadletter' }), metrics, opsEvents,
        backstop: { intervalMs: config.deadLetterBackstopMs, shards: config.deliveryShards, maxDeliver: config.retrySchedule.length + 1, stepdown: consumerStepdown(nc) },
        direct: direct ? { events: direct.events, shards: config.deliveryShards, bodies: sealsDeadCopies ? dataKeys : undefined } : undefined,
      }));
      stops.push(() => handler.stop());
      if (config.deadLetterRetentionMs > 0) {
        const retention = startDeadLetterRetention({ orm, retentionMs: config.deadLetterRetentionMs, log: log.child({ role: 'deadletter' }), metrics });
        stops.push(() => retention.stop());
      }
    }

    // One endpoint store (and target policy) for the roles that command endpoints: delivery disables, the API writes,
    // operators act through the admin role (issue 31).
    const endpoints: Endpoints | undefined = roles.has('delivery') || roles.has('api') || roles.has('admin')
      ? createEndpoints({ js, jsm, masterKey: keys.masterKey!, allowPrivateTargets: config.allowPrivateTargets, partitions: config.eventPartitions, log: log.child({ role: 'endpoints' }) })
      : undefined;
    // Pushed before the roles that command endpoints, so it runs after they stopped: their last states are saved.
    if (endpoints) stops.push(() => endpoints.store.flush());

    // The tenants' limits as every role reads them (a copy in memory, reloaded from Postgres every few seconds).
    // A router or delivery process with no role of the ORM reads them through one pooled connection of its
    // own, never waiting for it: the defaults apply until Postgres answers.
    const limitsStore = orm ? createTenantLimitsStore(orm, { log }) : undefined;
    const tenantLimits = limitsStore ?? (roles.has('router') || roles.has('delivery') ? limitsReader(config.databaseUrl, log, stops) : undefined);

    if (roles.has('delivery') && directory && publisher && endpoints) {
      tracing.forwardTraceparent = config.forwardTraceparent;
      const sender = createHttpSender({ attemptTimeoutMs: config.attemptTimeoutMs, allowPrivateTargets: config.allowPrivateTargets });
      stops.push(() => sender.close());
      const sealer = new SecretSealer(keys.masterKey!, keys.previousMasterKey);
      // Pushed before the delivery role, so it stops after it: the last attempts' outcomes still count.
      const health = await startEndpointHealth({
        js, jsm, directory, ops: opsEvents, disableAfterMs: config.disableAfterMs, log: log.child({ role: 'delivery' }), metrics,
        store: endpoints.store,
      });
      stops.push(() => health.stop());
      const delivery = await startDelivery({
        nc, jsm, inboxPrefix: SERVICE_INBOX_PREFIX, directory, sender, publisher, secrets: sealer, health, leaders,
        attemptLog: attemptRecorder, bodies: dataKeys,
        options: { shards: config.deliveryShards, retrySchedule: config.retrySchedule, maxInFlight: config.maxInFlightPerEndpoint,
          maxQueued: config.maxQueuedPerEndpoint, replicas: config.replicas,
          ...(direct && directWindow ? { direct: { partitions: config.eventPartitions, since: direct.since, window: directWindow } } : {}) },
        ...(direct ? { directEvents: direct.events, tenantLimits } : {}),
        log: log.child({ role: 'delivery' }), metrics,
      });
      stops.push(() => delivery.stop());
    }

    if (roles.has('router') && directory && publisher && webhookIds && subjectHasher) {
      const r = await supervisor.supervise('router', () => startRouter({
        nc, js, jsm, publisher, directory, shards: config.deliveryShards, log: log.child({ role: 'router' }), metrics, webhookIds,
        limits: eventLimits, leaders, ops: opsEvents, ...(directWindow ? { window: directWindow } : {}),
        maxQueued: config.maxQueuedPerEndpoint, erasureIndex: createErasureIndexWriter({ publisher, hasher: subjectHasher, deliveriesOnly: config.eventPartitions > 0 }), attemptLog: attemptRecorder,
        // The tenants' events a second and queued deliveries (the defaults while Postgres has not answered).
        ...(tenantLimits ? { tenantLimits } : {}),
        ...(config.sealDeliveries ? { bodies: dataKeys } : {}),
      }), (started) => { router = started; });
      stops.push(() => r.stop());
    }

    let api: ApiServer | undefined;
    if (roles.has('api') && orm && endpoints) {
      const db = orm;
      // Without a projector in this process, another instance's progress shows in the checkpoint row.
      const local = projector;
      const waitForProjection = local ? (seq: number) => local.waitFor(seq) : (seq: number) => waitForCheckpoint(db, ENDPOINTS_PROJECTION, seq);
      // The tenants' quotas on their endpoint commands, for the API and the portal alike.
      const tenantStore = withTenantQuotas(endpoints.store, { orm: db, limits: limitsStore ?? createTenantLimitsStore(db, { log }), hits: metrics.tenantLimitHits });
      const testEvents = createTestEvents({ js, shards: config.deliveryShards, store: tenantStore, write: tenantStore.write });
      const portal = createPortal({
        orm: db, store: tenantStore, waitForProjection, checkUrl: endpoints.checkUrl, frameAncestors: config.portalFrameAncestors,
        assets: await loadAssets(), rateLimitPerSecond: config.rateLimitPerSecond, log: log.child({ role: 'portal' }),
        testEvents,
      });
      let listening = `http://${config.host}:${config.port}`;
      const { app, refuseEarly } = createApi({
        orm: db, store: tenantStore, waitForProjection, checkUrl: endpoints.checkUrl, rateLimitPerSecond: config.rateLimitPerSecond, log: log.child({ role: 'api' }),
        authFailureBurst: config.authFailureBurst, authThrottled: metrics.authThrottled,
        portal, testEvents, sealer: new SecretSealer(keys.masterKey!, keys.previousMasterKey), publicUrl: () => config.publicUrl ?? listening,
      });
      const server = await startApiServer(app, { host: config.host, port: config.port, log: log.child({ role: 'api' }), refuseEarly });
      api = server;
      listening = server.url;
      // Pushed after the roles it relies on, so it stops before them: no new commands while they wind down.
      stops.push(() => server.close());
    }

    // Last, so it stops first: no admin request starts a replay while the roles below shut down.
    if (roles.has('admin') && orm && webhookIds && deadLetterTags && subjectHasher) {
      const admin = await startAdmin({
        nc, js, jsm, orm, deadLetterSecretKey: keys.deadLetterSecretKey!, deadLetterTags,
        previousDeadLetterSecretKey: keys.previousDeadLetterSecretKey, shards: config.deliveryShards, partitions: config.eventPartitions,
        direct: directEver, webhookIds, subjectHasher,
        endpointStore: endpoints?.store, bodies: dataKeys,
        log: log.child({ role: 'admin' }), metrics,
      });
      stops.push(() => admin.stop());
    }

    // A client of the admin subjects like the CLI, on a connection of its own; stops before the admin role.
    let consoleServer: ConsoleServer | undefined;
    if (roles.has('console') && orm) {
      if (!config.consoleNatsUser && config.natsUser) {
        log.warn('the console asks the admin subjects as NATS_USER; with nats.conf set CONSOLE_NATS_USER=operator (and CONSOLE_NATS_PASSWORD)', { user: config.natsUser });
      }
      const c = await startConsole({
        orm, natsUrl: config.natsUrl, natsUser: config.consoleNatsUser ?? config.natsUser,
        natsPassword: config.consoleNatsUser ? config.consoleNatsPassword : config.natsPassword,
        host: config.consoleHost, port: config.consolePort, log: log.child({ role: 'console' }),
      });
      consoleServer = c;
      stops.push(() => c.close());
    }

    // A half's start is one of two: `serve` says when both have (src/supervisor/api-thread.ts).
    if (opts.half) log.info('roles started', { roles: config.roles.join(','), thread: opts.half === 'api' ? 'api' : 'main' });
    else log.info('hookstream started', { roles: config.roles.join(',') });
    return {
      nc, js, jsm, orm, metrics, directory, projector, api, console: consoleServer, ops, opsUrl: opsServer.url,
      // Reverse order: the roles that take work stop first, connections last.
      stop: () => stopAll(),
    };
  } catch (e) {
    await stopAll(true);
    throw e;
  }
}

/** The tenants' limits read from Postgres through a pool of one connection (closed at stop). */
function limitsReader(databaseUrl: string, log: Logger, stops: (() => Promise<void>)[]) {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1, connectionTimeoutMillis: 5000, idleTimeoutMillis: 30_000 });
  // An idle connection's error (Postgres restarted) is the pool's to replace, not the process's to die of.
  pool.on('error', () => {});
  stops.push(() => pool.end());
  return createTenantLimitsReader((sql) => pool.query(sql), { log });
}
