// What one nats-server does with the JetStream behaviours hookstream's 2.9-era workarounds rely on, and
// whether the newer primitives that could replace them exist and work there (issue 18). Starts its own
// nats-server (the tests' choice: test/helpers/nats-binary.ts) on free ports, one at a time:
//   npm run bench:nats [-- --only timing,new,scale] [--consumers 1000,10000]
//   npm run bench:nats -- --only gets [--reads 20000]
//   npm run bench:nats -- --only sources [--partitions 16]   (a 3-node cluster)
//   npm run bench:nats -- --only shapes [--endpoints 100,1000] [--shapes copy,direct,...] [--webhooks 20000] [--rate N] [--partitions 16]
//   npm run bench:nats -- --only crowd [--rate 200] [--flood 200000] [--partitions 16]
//   NATS_SERVER_BIN=$(bin/fetch-nats-server) npm run bench:nats
// Prints one line per figure and, last, one JSON object of them all. Times are of one run on a shared
// machine: compare the ratios within a run, and timings to the expected values printed beside them.
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { headers, nanos, type NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { endpointConsumer, ensureDeliveryStreams, deliveryAddress } from '../streams/deliveries.ts';
import { planNextAttempt } from '../src/delivery/next-attempt.ts';
import { createLogger } from '../src/log.ts';
import { createPullFeeds } from '../src/nats/pull-feed.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { cpuTicks, TICKS } from './metering.ts';
import { shapePartition, shapePartitionedSubject, shapeSubject, type PublishOrder } from './publish-child.ts';
import { describe } from '../src/errors.ts';
import { SERVICE_INBOX_PREFIX } from '../src/nats/connect.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { partitionStream, partitionTransform } from '../streams/events.ts';
import { NATS_BINARY as BINARY } from '../test/helpers/nats-binary.ts';
import { freePort, waitForPort } from '../test/helpers/nats-server.ts';
import { CLUSTER_PASSWORDS, startNatsCluster } from '../test/helpers/nats-cluster.ts';
import { sleep } from './time.ts';

const figures: Record<string, unknown> = {};
const say = (key: string, value: unknown, note = '') => {
  figures[key] = value;
  process.stderr.write(`  ${key.padEnd(34)} ${JSON.stringify(value).padStart(22)}  ${note}\n`);
};
const round = (ms: number) => Math.round(ms);

interface Server { url: string; pid: number; stop(): void }

/** A fresh server with its own store. Stopped with SIGKILL: 2.15.1 takes minutes to stop holding 10,000 consumers. */
async function startServer(): Promise<Server> {
  const port = await freePort();
  const store = mkdtempSync(join(tmpdir(), 'hookstream-primitives-'));
  const proc: ChildProcess = spawn(BINARY, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', store], { stdio: 'ignore' });
  await waitForPort(port, 10_000);
  return {
    url: `nats://127.0.0.1:${port}`, pid: proc.pid!,
    stop: () => { proc.kill('SIGKILL'); rmSync(store, { recursive: true, force: true }); },
  };
}

const rssMb = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 1024) : null;
};

async function withServer<T>(fn: (nc: NatsConnection, js: JetStreamClient, jsm: JetStreamManager, server: Server) => Promise<T>): Promise<T> {
  const server = await startServer();
  const nc = await connect({ servers: server.url });
  try {
    return await fn(nc, jetstream(nc), await jetstreamManager(nc, { timeout: 60_000 }), server);
  } finally {
    await nc.close();
    server.stop();
  }
}

async function workQueue(jsm: JetStreamManager, name: string, extra: Record<string, unknown> = {}): Promise<void> {
  await jsm.streams.add({ name, subjects: [`${name}.>`], retention: RetentionPolicy.Workqueue, storage: StorageType.File, ...extra });
}

/**
 * Consumes `stream`/`consumer` and calls `act` on each delivery (ms since the first, the message) until
 * `done` says so or `timeoutMs` passes; returns every delivery's time and count.
 */
async function observe(
  js: JetStreamClient, stream: string, consumer: string,
  act: (m: JsMsg, at: number) => void, done: (seen: { at: number; n: number; subject: string }[]) => boolean, timeoutMs: number,
): Promise<{ at: number; n: number; subject: string }[]> {
  const c = await js.consumers.get(stream, consumer);
  const msgs = await c.consume({ max_messages: 10, expires: 1000 });
  const seen: { at: number; n: number; subject: string }[] = [];
  const start = performance.now();
  const timer = setTimeout(() => void msgs.stop(), timeoutMs);
  for await (const m of msgs) {
    const at = performance.now() - start;
    seen.push({ at, n: m.info.deliveryCount, subject: m.subject });
    act(m, at);
    if (done(seen)) break;
  }
  clearTimeout(timer);
  await msgs.close().catch(() => {});
  return seen;
}

const gaps = (seen: { at: number }[]) => seen.slice(1).map((s, i) => round(s.at - seen[i]!.at));

/** A consumer like an endpoint's: explicit ack, the given backoff (ack_wait = backoff[0]), filtered to `subject`. */
async function backoffConsumer(jsm: JetStreamManager, stream: string, name: string, backoff: number[], maxDeliver: number, filter = `${stream}.${name}`) {
  await jsm.consumers.add(stream, {
    durable_name: name, filter_subject: filter, ack_policy: AckPolicy.Explicit,
    ...(backoff.length ? { ack_wait: nanos(backoff[0]!), backoff: backoff.map(nanos) } : { ack_wait: nanos(10_000) }),
    max_deliver: maxDeliver,
  });
}

// (a) redelivery timing, (c) working(), (e) the max-deliveries advisory: what next-attempt.ts, in-flight.ts
// and the dead-letter backstop assume.
async function timing(): Promise<void> {
  await withServer(async (nc, js, jsm) => {
    await workQueue(jsm, 'T');
    const backoff = [500, 1000, 2000];

    await backoffConsumer(jsm, 'T', 'noack', backoff, 5);
    await js.publish('T.noack', 'x');
    say('a_noack_gaps_ms', gaps(await observe(js, 'T', 'noack', () => {}, (s) => s.length >= 4, 8000)), `left unacked; backoff ${backoff}`);

    await backoffConsumer(jsm, 'T', 'nak300', backoff, 5);
    await js.publish('T.nak300', 'x');
    say('a_nak300_gaps_ms', gaps(await observe(js, 'T', 'nak300', (m) => m.nak(300), (s) => s.length >= 4, 8000)),
      'nak(300) with backoff; 2.9 quirk: 300 + backoff[n-1] - backoff[0] = 300, 800, 1800');

    await backoffConsumer(jsm, 'T', 'plain', [], 5);
    await js.publish('T.plain', 'x');
    say('a_nak300_nobackoff_gaps_ms', gaps(await observe(js, 'T', 'plain', (m) => m.nak(300), (s) => s.length >= 4, 8000)), 'nak(300) without backoff: 300 each');

    // next-attempt.ts's arithmetic: the nak it computes should land on the schedule's steps.
    await backoffConsumer(jsm, 'T', 'planned', backoff, 5);
    await js.publish('T.planned', 'x');
    say('a_planned_gaps_ms', gaps(await observe(js, 'T', 'planned', (m) => {
      m.nak(planNextAttempt({ now: 0, step: backoff[Math.min(m.info.deliveryCount, backoff.length) - 1]!, firstStep: backoff[0]! }).delayMs);
    }, (s) => s.length >= 4, 8000)), `planNextAttempt's nak; on schedule: ${backoff}`);

    // The one-timer quirk: B's first redelivery (500 ms step) while A waits on its 3,000 ms step, both unacked.
    await backoffConsumer(jsm, 'T', 'timer', [500, 3000], 5, 'T.timer.>');
    await js.publish('T.timer.a', 'a');
    const seen = await observe(js, 'T', 'timer', (m) => {
      if (m.subject === 'T.timer.a' && m.info.deliveryCount === 2) void js.publish('T.timer.b', 'b');
    }, (s) => s.filter((x) => x.subject === 'T.timer.b').length >= 2, 10_000);
    const b = seen.filter((x) => x.subject === 'T.timer.b');
    say('a_unacked_short_step_behind_long_ms', b.length >= 2 ? round(b[1]!.at - b[0]!.at) : seen.map((x) => [x.subject, x.n, round(x.at)]),
      'B unacked on a 500 ms step while A waits 3,000: 500 if each has its own timer');

    // (c) working() on the 2nd delivery (step 4,000 ms; ack_wait 1,000 ms), 1,000 ms after it arrived.
    await backoffConsumer(jsm, 'T', 'working', [1000, 4000], 5);
    await js.publish('T.working', 'x');
    const w = await observe(js, 'T', 'working', (m) => {
      if (m.info.deliveryCount === 2) setTimeout(() => m.working(), 1000);
    }, (s) => s.length >= 3, 10_000);
    say('c_working_next_ms', w.length >= 3 ? round(w[2]!.at - w[1]!.at) : null,
      'after working() at +1,000 on a 4,000 ms step: 5,000 = reset to the step, 2,000 = to ack_wait, 4,000 = ignored');

    // (e) max deliveries: the advisory, and what the counts the backstop compares say afterwards.
    for (const waiting of [true, false]) {
      const name = waiting ? 'dead' : 'deadidle';
      await backoffConsumer(jsm, 'T', name, [300], 2);
      const advisories: number[] = [];
      const t0 = performance.now();
      const sub = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.T.${name}`, { callback: () => void advisories.push(round(performance.now() - t0)) });
      await js.publish(`T.${name}`, 'x');
      if (waiting) await observe(js, 'T', name, () => {}, () => false, 1500);
      else {
        // One-message fetches: once each has its message, no pull request is left waiting at the server.
        const c = await js.consumers.get('T', name);
        for (let i = 0; i < 2; i++) for await (const m of await c.fetch({ max_messages: 1, expires: 3000 })) void m;
        await sleep(1500);
      }
      const ci = await jsm.consumers.info('T', name);
      const si = await jsm.streams.info('T', { subjects_filter: `T.${name}` });
      const stored = si.state.subjects?.[`T.${name}`] ?? 0;
      sub.unsubscribe();
      say(`e_advisory_${waiting ? 'pull_waiting' : 'no_pull'}`, { advisories: advisories.length, stored, pending: ci.num_pending, ack_pending: ci.num_ack_pending },
        'the backstop counts stored - pending - ack_pending as dropped');
    }
  });
}

/** `p` settles within `ms`, else the answer is "no answer". */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => { throw new Error(`no answer in ${ms} ms`); })]);

// (d) the newer primitives: does each exist and work here, by behaviour, not by version number.
async function newer(): Promise<void> {
  await withServer(async (nc, js, jsm) => {
    await workQueue(jsm, 'N');

    // Consumer pause (2.11) instead of the client-side hold: a delivery waiting for its retry while the
    // endpoint is disabled must neither come back nor die; it should come back after the resume.
    try {
      await backoffConsumer(jsm, 'N', 'paused', [300], 3);
      await js.publish('N.paused', 'x');
      const pauseMs = 2000;
      let pauseError: string | null = null;
      const seen = await observe(js, 'N', 'paused', (m) => {
        if (m.info.deliveryCount === 1) {
          jsm.consumers.pause('N', 'paused', new Date(Date.now() + pauseMs)).catch((e: unknown) => { pauseError = describe(e); });
        } else m.ack();
      }, (s) => s.length >= 2, 5000);
      const second = seen[1];
      const works = second !== undefined && second.at - seen[0]!.at >= pauseMs - 100;
      say('d_consumer_pause', { works, redelivered_after_ms: second ? round(second.at - seen[0]!.at) : null, error: pauseError },
        `paused ${pauseMs} ms right after the 1st delivery (retry due in 300 ms)`);
    } catch (e) {
      say('d_consumer_pause', { works: false, error: describe(e) });
    }

    // Per-message TTL (2.11).
    try {
      const si = await jsm.streams.add({ name: 'TTL', subjects: ['ttl.>'], allow_msg_ttl: true });
      const h = headers();
      h.set('Nats-TTL', '1s');
      await js.publish('ttl.x', 'x', { headers: h });
      await sleep(2500);
      const left = (await jsm.streams.info('TTL')).state.messages;
      say('d_message_ttl', { works: left === 0 && si.config.allow_msg_ttl === true, left_after_2500ms: left, config_kept: si.config.allow_msg_ttl ?? false });
    } catch (e) {
      say('d_message_ttl', { works: false, error: describe(e) });
    }

    // Delayed message scheduling (2.12): `@at` a time, published to a target subject then.
    try {
      await jsm.streams.add({ name: 'SCHED', subjects: ['sched.>'], allow_msg_schedules: true });
      const t0 = performance.now();
      await js.publish('sched.s1', 'x', { schedule: { specification: new Date(Date.now() + 1500), target: 'sched.t1' } });
      let at: number | null = null;
      while (performance.now() - t0 < 5000 && at === null) {
        const m = await jsm.streams.getMessage('SCHED', { last_by_subj: 'sched.t1' }).catch(() => null);
        if (m) at = round(performance.now() - t0);
        else await sleep(50);
      }
      say('d_delayed_schedule', { works: at !== null && at >= 1400, target_stored_after_ms: at }, 'asked for +1,500 ms');
    } catch (e) {
      say('d_delayed_schedule', { works: false, error: describe(e) });
    }

    // Atomic batch publish (2.12): within one stream; hookstream's fan-out spans delivery shards.
    try {
      await jsm.streams.add({ name: 'BATCH', subjects: ['batch.>'], allow_atomic: true });
      await jsm.streams.add({ name: 'BATCH2', subjects: ['batch2.>'], allow_atomic: true });
      const b = await within(js.startBatch('batch.1', 'a'), 3000);
      b.add('batch.2', 'b');
      const ack = await within(b.commit('batch.3', 'c'), 3000);
      const stored = (await jsm.streams.info('BATCH')).state.messages;
      let across = 'committed';
      try {
        const c = await within(js.startBatch('batch.4', 'a'), 3000);
        await within(c.commit('batch2.1', 'b'), 3000);
      } catch (e) {
        across = `refused: ${describe(e)}`;
      }
      say('d_atomic_batch', { works: stored === 3 && ack.count === 3, stored, across_two_streams: across });
    } catch (e) {
      say('d_atomic_batch', { works: false, error: describe(e), stored: (await jsm.streams.info('BATCH').catch(() => null))?.state.messages ?? null });
    }

    // Pinned-client priority groups (2.11): does the server keep the policy (nats.js refuses it below 2.11)?
    try {
      const ci = await jsm.consumers.add('N', {
        durable_name: 'pinned', filter_subject: 'N.pinned', ack_policy: AckPolicy.Explicit,
        priority_groups: ['g'], priority_policy: 'pinned_client',
      } as never);
      const kept = (ci.config as { priority_policy?: string }).priority_policy ?? null;
      say('d_pinned_client', { works: kept === 'pinned_client', policy_kept: kept });
    } catch (e) {
      say('d_pinned_client', { works: false, error: describe(e) });
    }

    // Message tracing (2.11): a publish with Nats-Trace-Dest yields trace events.
    const traces: number[] = [];
    const sub = nc.subscribe('trace.dest', { callback: () => void traces.push(1) });
    const h = headers();
    h.set('Nats-Trace-Dest', 'trace.dest');
    nc.publish('N.traced', 'x', { headers: h });
    await nc.flush();
    await sleep(500);
    sub.unsubscribe();
    say('d_message_trace', { works: traces.length > 0, trace_events: traces.length });
  });
}

// (b) consumers on one stream against the same consumers spread over 128 shards (HOOKSTREAM_DELIVERY_SHARDS).
async function scale(counts: number[]): Promise<void> {
  const schedule = [1000, 5000, 30_000];
  for (const n of counts) {
    for (const shards of [1, 128]) {
      await withServer(async (_nc, js, jsm, server) => {
        const tag = `b_${n}_on_${shards}`;
        await ensureDeliveryStreams(jsm, shards, 100_000);
        const ids = Array.from({ length: n }, (_, i) => `ep_${String(i).padStart(6, '0')}`);
        let t0 = performance.now();
        const queue = [...ids];
        await Promise.all(Array.from({ length: 32 }, async () => {
          for (let id = queue.pop(); id; id = queue.pop()) {
            await jsm.consumers.add(deliveryAddress(id, shards).stream, endpointConsumer(id, { shards, retrySchedule: schedule, maxQueued: 100_000 }));
          }
        }));
        const createS = (performance.now() - t0) / 1000;
        process.stderr.write(`  … ${tag}: ${n} consumers created in ${createS.toFixed(1)} s\n`);

        // Fan-out: 10,000 deliveries over every endpoint in turn, 64 publishes in flight.
        const total = 10_000;
        t0 = performance.now();
        let next = 0;
        await Promise.all(Array.from({ length: 64 }, async () => {
          for (let i = next++; i < total; i = next++) await js.publish(deliveryAddress(ids[i % n]!, shards).subject, 'x'.repeat(512));
        }));
        const publishRate = total / ((performance.now() - t0) / 1000);
        process.stderr.write(`  … ${tag}: ${Math.round(publishRate)} publishes/s\n`);

        // Delivery: 100 endpoints, 50 queued each, drained at once (fetch and ack).
        const active = ids.slice(0, 100);
        await Promise.all(active.map(async (id) => {
          for (let i = 0; i < 50; i++) await js.publish(deliveryAddress(id, shards).subject, 'y'.repeat(512));
        }));
        t0 = performance.now();
        let got = 0;
        let fetchErrors = 0;
        // Each also holds its share of the fan-out (endpoint k got every n-th delivery from k on).
        const fannedOut = (k: number) => Math.floor(total / n) + (k < total % n ? 1 : 0);
        await Promise.all(active.map(async (id, k) => {
          const c = await js.consumers.get(deliveryAddress(id, shards).stream, id);
          for (let left = 50 + fannedOut(k); left > 0;) {
            // A server too slow to send its heartbeats ends the fetch: counted, and fetched again.
            try {
              const batch = await c.fetch({ max_messages: Math.min(left, 25), expires: 20_000 });
              for await (const m of batch) { await m.ackAck(); got++; left--; }
            } catch {
              fetchErrors++;
            }
          }
        }));
        const drainRate = got / ((performance.now() - t0) / 1000);
        say(tag, { create_s: Math.round(createS * 10) / 10, publish_per_s: Math.round(publishRate), deliver_ack_per_s: Math.round(drainRate), fetch_errors: fetchErrors, server_rss_mb: rssMb(server.pid) },
          `${n} consumers on ${shards} stream(s)`);
      });
    }
  }
}

// (f) Shapes of the delivery path: what each costs nats-server and the client per webhook, with one durable
// consumer per endpoint and every endpoint answering at once (acked when it arrives: no HTTP, no signing,
// so the figures are the queueing alone). Events go one to one, event i to endpoint i % n, published by a
// child process (bench/publish-child.ts) so this process's CPU is the router's and the deliverers': a burst
// (consumers that fall behind catch up from the stream), or with --rate a steady rate (consumers waiting).
//   copy          today's: a router reads EVENTS through one consumer and copies each delivery, body and
//                 all, into its endpoint's work queue (DELIVERIES_<shard>, 128 shards), acking the event
//                 once the copy is stored; the endpoint's consumer reads the copy
//   direct        the design card's: each endpoint's consumer reads EVENTS through its filter subjects
//                 (two on ≥ 2.10: its event type and user.updated, never published here; one on 2.9), no router
//   ref           as copy, but the copy carries the event's EVENTS sequence and no body; the deliverer
//                 direct-gets the body, then acks
//   direct-noack  as direct with AckNone: no ack per delivery (retries would need a ledger of the client's)
//   direct-ackall as direct with AckAll: one ack per endpoint every 10 ms, for its newest delivery
//   direct-subjects as direct, the tenant's partition (--partitions, 16) a token of the subject
//                 (`events.<p>.<tenant>.<type>`, as a partition() mapping makes it), in the one EVENTS stream
//   direct-streams as direct-subjects, a stream per partition (EVENTS_<p> takes `events.<p>.>`): each
//                 consumer reads past its partition's messages only
//   direct-sourced as direct-streams, with no subject mapping in nats.conf: producers publish
//                 `events.<tenant>.<type>` into EVENTS, whose ingest transform (nats-server ≥ 2.10) stores it as
//                 `events.<tenant>.<p>.<type>`, and each EVENTS_<p> sources EVENTS' partition p (nats-server
//                 copies; the copy's Nats-Stream-Source header names the event's EVENTS sequence)
const SHAPES = ['copy', 'direct', 'ref', 'direct-noack', 'direct-ackall', 'direct-subjects', 'direct-streams', 'direct-sourced'] as const;
type Shape = (typeof SHAPES)[number];
const SHAPE_SHARDS = 128;
/** HOOKSTREAM_MAX_IN_FLIGHT's default, and the router's events in flight (its consumer's max_ack_pending is 4,096). */
const LANES = 16;
const ROUTER_LANES = 256;
const SHAPE_SCHEDULE = [5000, 30_000, 120_000, 900_000];
const EVENT_SEQ = 'hookstream-event-seq';

/**
 * EVENTS storing `events.<tenant>.<type>` as `events.<tenant>.<p>.<type>` (its ingest transform, nats-server
 * ≥ 2.10, one for every type's length; the tenant keeps its token, so `events.<tenant>.>` still finds all of
 * its events), and EVENTS_<p> for each partition p sourcing it: the direct-sourced shape.
 */
async function addSourcedEvents(jsm: JetStreamManager, partitions: number, opts: { replicas: number; duplicateWindowMs: number; maxConsumers?: number }): Promise<void> {
  await jsm.streams.add({
    name: 'EVENTS', subjects: ['events.*.>'], num_replicas: opts.replicas, storage: StorageType.File, retention: RetentionPolicy.Limits,
    duplicate_window: nanos(opts.duplicateWindowMs),
    subject_transform: partitionTransform(partitions),
  });
  for (let p = 0; p < partitions; p++) {
    await jsm.streams.add({
      name: partitionStream(p), num_replicas: opts.replicas, storage: StorageType.File, retention: RetentionPolicy.Limits,
      sources: [{ name: 'EVENTS', filter_subject: `events.*.${p}.>` }], ...(opts.maxConsumers ? { max_consumers: opts.maxConsumers } : {}),
    });
  }
}

const versionAtLeast = (v: string | undefined, major: number, minor: number) => {
  const [a = 0, b = 0] = (v ?? '0.0').split('.').map(Number);
  return a > major || (a === major && b >= minor);
};

async function shape(shapeName: Shape, n: number, webhooks: number, rate: number | undefined, partitions: number): Promise<void> {
  await withServer(async (nc, js, jsm, server) => {
    const sourced = shapeName === 'direct-sourced';
    const partitioned = shapeName === 'direct-subjects' || shapeName === 'direct-streams' || sourced;
    const tag = `f_${shapeName}_${n}${rate ? `_at_${rate}` : ''}${partitioned ? `_p${partitions}` : ''}`;
    const direct = shapeName.startsWith('direct');
    const manyFilters = versionAtLeast(nc.info?.version, 2, 10);
    const streams = shapeName === 'direct-streams' || sourced ? partitions : 1;
    /** Endpoint e's tenant token (shapeSubject's), and its partition: nats-server's partition() (FNV-1a of the token, modulo) where it decides, else the producer's. */
    const tenantOf = (e: number) => `t${Math.floor(e / 10)}`;
    const partitionOf = (e: number) => (sourced ? tenantPartition(tenantOf(e), partitions) : shapePartition(e, partitions));
    /** Endpoint e's event stream, and its subject there. */
    const eventsOf = (e: number) => (streams > 1 ? `EVENTS_${partitionOf(e)}` : 'EVENTS');
    const subjectOf = (e: number) => (sourced ? `events.${tenantOf(e)}.${partitionOf(e)}.e${e % 10}` : partitioned ? shapePartitionedSubject(e, partitions) : shapeSubject(e));
    // As the service's EVENTS (streams/events.ts), with room for an endpoint consumer each.
    if (!sourced) {
      for (let p = 0; p < streams; p++) {
        await jsm.streams.add({
          name: streams > 1 ? `EVENTS_${p}` : 'EVENTS', subjects: [streams > 1 ? `events.${p}.>` : 'events.>'], retention: RetentionPolicy.Limits,
          storage: StorageType.File, duplicate_window: nanos(100), max_consumers: 100_000, allow_direct: shapeName === 'ref',
        });
      }
    } else {
      await addSourcedEvents(jsm, partitions, { replicas: 1, duplicateWindowMs: 100, maxConsumers: 100_000 });
      // The partition computed here must be the server's, or no endpoint would get its events.
      await js.publish(`events.${tenantOf(0)}.probe`, 'x');
      const p = partitionOf(0);
      for (let tries = 0; (await jsm.streams.info(`EVENTS_${p}`)).state.messages < 1; tries++) {
        if (tries > 50) throw new Error(`${tag}: tenant t0's probe is not in EVENTS_${p}: partition() differs from tenantPartition here`);
        await sleep(100);
      }
      await jsm.streams.purge(`EVENTS_${p}`);
    }
    const ids = Array.from({ length: n }, (_, i) => `ep_${String(i).padStart(6, '0')}`);
    const endpointOf = (subject: string) => {
      const [, t, j] = /^events\.t(\d+)\.e(\d)$/.exec(subject) ?? [];
      return Number(t) * 10 + Number(j);
    };
    let t0 = performance.now();
    if (!direct) {
      await ensureDeliveryStreams(jsm, SHAPE_SHARDS, 100_000);
      await jsm.consumers.add('EVENTS', {
        durable_name: 'router', ack_policy: AckPolicy.Explicit, filter_subject: 'events.>', ack_wait: nanos(30_000), max_deliver: 10, max_ack_pending: 4096,
      });
    }
    const ackPolicy = shapeName === 'direct-noack' ? AckPolicy.None : shapeName === 'direct-ackall' ? AckPolicy.All : AckPolicy.Explicit;
    const queue = ids.map((id, e) => [id, e] as const);
    await Promise.all(Array.from({ length: 32 }, async () => {
      for (let next = queue.pop(); next; next = queue.pop()) {
        const [id, e] = next;
        if (!direct) {
          await jsm.consumers.add(deliveryAddress(id, SHAPE_SHARDS).stream, endpointConsumer(id, { shards: SHAPE_SHARDS, retrySchedule: SHAPE_SCHEDULE, maxQueued: 100_000 }));
          continue;
        }
        const subject = subjectOf(e);
        await jsm.consumers.add(eventsOf(e), {
          durable_name: id, ack_policy: ackPolicy, deliver_policy: DeliverPolicy.All, max_ack_pending: 100_000,
          ...(manyFilters ? { filter_subjects: [subject, `${subject.slice(0, subject.lastIndexOf('.'))}.user.updated`] } : { filter_subject: subject }),
          ...(ackPolicy === AckPolicy.None ? {} : { ack_wait: nanos(SHAPE_SCHEDULE[0]!), backoff: SHAPE_SCHEDULE.map(nanos), max_deliver: SHAPE_SCHEDULE.length + 1 }),
        });
      }
    }));
    const createS = (performance.now() - t0) / 1000;
    process.stderr.write(`  … ${tag}: ${n} endpoint consumers created in ${createS.toFixed(1)} s\n`);

    // The client: the service's pull feeds (pulls sized to free lanes), one per consumer.
    const feeds = createPullFeeds(nc, { expiresMs: 120_000, heartbeatMs: 30_000, inboxPrefix: '_INBOX', log: createLogger({ level: 'warn' }) });
    const count = { delivered: 0, routed: 0, acks: 0, gets: 0, errors: 0 };
    let target = Infinity;
    let reached: () => void = () => {};
    const delivered = () => { if (++count.delivered >= target) reached(); };
    const newest = new Map<number, PulledMsg>();
    const flushNewest = () => { for (const m of newest.values()) { m.ack(); count.acks++; } newest.clear(); };
    ids.forEach((id, e) => {
      let busy = 0;
      const feed = feeds.open({
        stream: direct ? eventsOf(e) : deliveryAddress(id, SHAPE_SHARDS).stream, consumer: id, capacity: () => LANES - busy,
        onMessage: (m) => {
          if (shapeName === 'direct-noack') return delivered();
          if (shapeName === 'direct-ackall') {
            if (newest.size === 0) setTimeout(flushNewest, 10);
            newest.set(e, m);
            return delivered();
          }
          if (shapeName !== 'ref') { m.ack(); count.acks++; return delivered(); }
          busy++;
          jsm.direct.getMessage('EVENTS', { seq: Number(m.headers?.get(EVENT_SEQ)) }).then((body) => {
            count.gets++;
            if (!body) count.errors++;
            m.ack();
            count.acks++;
            delivered();
          }, () => { count.errors++; }).finally(() => { busy--; feed.fill(); });
        },
      });
    });
    if (!direct) {
      let busy = 0;
      const router = feeds.open({
        stream: 'EVENTS', consumer: 'router', capacity: () => ROUTER_LANES - busy,
        onMessage: (m) => {
          count.routed++;
          busy++;
          const id = ids[endpointOf(m.subject)]!;
          const h = headers();
          if (shapeName === 'ref') h.set(EVENT_SEQ, String(m.seq));
          js.publish(deliveryAddress(id, SHAPE_SHARDS).subject, shapeName === 'ref' ? new Uint8Array(0) : m.data, { msgID: `${m.seq}.${id}`, headers: h })
            .then(() => { m.ack(); count.acks++; }, () => { count.errors++; })
            .finally(() => { busy--; router.fill(); });
        },
      });
    }

    /** Publishes `events` from the child; resolves with the wall time and CPU from its first publish to the last delivery. */
    const burst = async (events: number) => {
      Object.assign(count, { delivered: 0, routed: 0, acks: 0, gets: 0, errors: 0 });
      target = events;
      const all = new Promise<void>((r) => { reached = r; });
      const child = fork(new URL('./publish-child.ts', import.meta.url).pathname, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      const started = new Promise<void>((r) => child.once('message', () => r()));
      const order: PublishOrder = { url: server.url, count: events, endpoints: n, bytes: 512, ...(rate ? { rate } : {}), ...(partitioned && !sourced ? { partitions } : {}) };
      child.send(order);
      await started;
      const cpu0 = process.cpuUsage();
      const server0 = cpuTicks(server.pid);
      t0 = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${tag}: ${count.delivered} of ${events} delivered in 180 s`)), 180_000);
      });
      await Promise.race([all, timeout]).finally(() => clearTimeout(timer));
      const wall = (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      const serverS = (cpuTicks(server.pid) - server0) / TICKS;
      await new Promise<void>((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
      return { wall, clientS: (cpu.user + cpu.system) / 1e6, serverS };
    };
    await burst(Math.min(2000, webhooks));
    const r = await burst(webhooks);
    const done = { ...count };
    await sleep(500); // the router's last acks
    let stored = 0;
    for await (const si of jsm.streams.list()) stored += si.state.last_seq;
    feeds.stop();
    const per = (x: number) => Math.round((x / webhooks) * 100) / 100;
    say(tag, {
      create_s: Math.round(createS * 10) / 10, webhooks_per_s: Math.round(webhooks / r.wall),
      server_us: Math.round((r.serverS * 1e6) / webhooks), client_us: Math.round((r.clientS * 1e6) / webhooks),
      stored: Math.round((stored / (webhooks + Math.min(2000, webhooks))) * 100) / 100,
      deliveries: per(done.delivered + done.routed), acks: per(done.acks), gets: per(done.gets), errors: done.errors,
      server_rss_mb: rssMb(server.pid),
    }, `${n} endpoints; per webhook: stored messages, deliveries (router's too), acks, direct gets; CPU µs per webhook`);
  });
}

/** Which filters a quiet endpoint's consumer of `crowd` has. */
const CROWD_FILTERS = ['subjects', 'wildcard'] as const;
type CrowdFilter = (typeof CROWD_FILTERS)[number];

/**
 * A crowded partition (the direct-sourced shape, issue 33's step 5): quiet tenants' endpoint consumers
 * share their partition stream with a tenant that floods it. Each quiet consumer finds its next event by
 * reading past the flood's (limits retention: everything stays, read or not). Quiet events at a steady
 * rate, three phases of `seconds` each: alone, beside a flood into another partition, beside the same flood
 * into theirs. Per phase: the quiet events' latency from publish to pull, and nats-server's CPU; the
 * difference between the last two phases is what sharing a partition with the flood costs. The quiet
 * consumers' filters: `subjects`, two literal filter subjects each (an endpoint of two event types);
 * `wildcard`, one `events.<tenant>.<p>.>` each (an endpoint of every type).
 */
async function crowd(filter: CrowdFilter, partitions: number, quietRate: number, floodEvents: number, seconds = 10): Promise<void> {
  await withServer(async (nc, js, jsm, server) => {
    await addSourcedEvents(jsm, partitions, { replicas: 1, duplicateWindowMs: 100, maxConsumers: 100_000 });
    const p = tenantPartition('flood', partitions);
    const elsewhere = Array.from({ length: 1000 }, (_, i) => `flood${i}`).find((x) => tenantPartition(x, partitions) !== p)!;
    const quiet = Array.from({ length: 5000 }, (_, i) => `q${i}`).filter((x) => tenantPartition(x, partitions) === p).slice(0, 50);
    // Two endpoints per quiet tenant, of types e0 and e1.
    const endpoints = quiet.flatMap((tenant) => [0, 1].map((j) => ({ tenant, type: `e${j}`, id: `${tenant}_e${j}` })));
    for (const e of endpoints) {
      await jsm.consumers.add(`EVENTS_${p}`, {
        durable_name: e.id, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.New, max_ack_pending: 100_000,
        ack_wait: nanos(SHAPE_SCHEDULE[0]!), backoff: SHAPE_SCHEDULE.map(nanos), max_deliver: SHAPE_SCHEDULE.length + 1,
        ...(filter === 'subjects' ? { filter_subjects: [`events.${e.tenant}.${p}.${e.type}`, `events.${e.tenant}.${p}.user.updated`] } : { filter_subject: `events.${e.tenant}.${p}.>` }),
      });
    }
    const latencies: number[] = [];
    /** The quiet endpoints' pull feeds: their consumers keep their place while the feeds are stopped. */
    const openFeeds = () => {
      const feeds = createPullFeeds(nc, { expiresMs: 120_000, heartbeatMs: 30_000, inboxPrefix: '_INBOX', log: createLogger({ level: 'warn' }) });
      for (const e of endpoints) {
        feeds.open({
          stream: `EVENTS_${p}`, consumer: e.id, capacity: () => LANES,
          onMessage: (m) => {
            // A wildcard consumer gets its tenant's other type too: counted once, by the e0 endpoint.
            if (filter === 'wildcard' && !m.subject.endsWith(`.${e.type}`)) { m.ack(); return; }
            latencies.push(performance.timeOrigin + performance.now() - Number(Buffer.from(m.data).toString()));
            m.ack();
          },
        });
      }
      return feeds;
    };
    let feeds = openFeeds();
    /**
     * `behind`: the quiet consumers are not read while the events come (an outage of the delivery role),
     * then read again once the flood is stored: how long they take to catch up, reading past it.
     */
    const phase = async (name: string, floodSubject: string | undefined, behind = false) => {
      latencies.length = 0;
      if (behind) feeds.stop();
      const child = floodSubject ? fork(new URL('./publish-child.ts', import.meta.url).pathname, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }) : undefined;
      if (child) {
        const started = new Promise<void>((r) => child.once('message', () => r()));
        child.send({ url: server.url, count: floodEvents, endpoints: 1, bytes: 512, subject: floodSubject } satisfies PublishOrder);
        await started;
      }
      const server0 = cpuTicks(server.pid);
      const t0 = performance.now();
      let sent = 0;
      for (let tick = 0; performance.now() - t0 < seconds * 1000; tick++) {
        const due = Math.floor(((performance.now() - t0) / 1000) * quietRate);
        for (; sent < due; sent++) {
          const e = endpoints[sent % endpoints.length]!;
          void js.publish(`events.${e.tenant}.${e.type}`, String(performance.timeOrigin + performance.now())).catch(() => {});
        }
        await sleep(5);
      }
      const wall = (performance.now() - t0) / 1000;
      const serverS = (cpuTicks(server.pid) - server0) / TICKS;
      if (behind) {
        if (child) await new Promise<void>((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
        const server1 = cpuTicks(server.pid);
        const t1 = performance.now();
        feeds = openFeeds();
        for (let waited = 0; latencies.length < sent && waited < 60_000; waited += 10) await sleep(10);
        const catchupS = (performance.now() - t1) / 1000;
        say(`crowd_${filter}_${name}`, {
          quiet: sent, delivered: latencies.length, catchup_ms: Math.round(catchupS * 1000),
          server_cpu_ms: Math.round(((cpuTicks(server.pid) - server1) / TICKS) * 1000), events_stored: (await jsm.streams.info('EVENTS')).state.messages,
        }, `${endpoints.length} quiet endpoints read again after ${seconds} s away`);
        return;
      }
      for (let waited = 0; latencies.length < sent && waited < 30_000; waited += 100) await sleep(100);
      const flooded = floodSubject ? (await jsm.streams.info('EVENTS')).state.messages : 0;
      if (child) { child.kill(); await new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r()))); }
      const sorted = [...latencies].sort((a, b) => a - b);
      const pct = (q: number) => Math.round((sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN) * 10) / 10;
      say(`crowd_${filter}_${name}`, {
        quiet: sent, delivered: latencies.length, p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: pct(1),
        server_pct: Math.round((serverS / wall) * 100), events_stored: flooded,
      }, `${endpoints.length} quiet endpoints in EVENTS_${p}, ${quietRate}/s for ${seconds} s`);
    };
    await phase('alone', undefined);
    await phase('flood_elsewhere', `events.${elsewhere}.e0`);
    await phase('flood_same', 'events.flood.e0');
    await phase('behind_flood_elsewhere', `events.${elsewhere}.e0`, true);
    await phase('behind_flood_same', 'events.flood.e0', true);
    feeds.stop();
  });
}

/**
 * The ordering gate's read of a key (src/nats/next-by-subject.ts): `next_by_subj` through the JetStream API
 * (STREAM.MSG.GET, base64 JSON) against a direct get (DIRECT.GET, answered in the connection), alternating,
 * 50 in flight; server and client CPU per read.
 */
async function gets(reads: number): Promise<void> {
  await withServer(async (nc, js, jsm, server) => {
    await workQueue(jsm, 'G', { allow_direct: true });
    const seqs: number[] = [];
    for (let i = 0; i < 2000; i++) {
      const h = headers();
      h.set('hookstream-event-seq', String(i + 1));
      seqs.push((await js.publish(`G.ep.k.key${i % 200}`, 'x'.repeat(600), { headers: h })).seq);
    }
    const readers = { msg_get: createNextBySubject(nc, { timeoutMs: 10_000 }), direct_get: createNextBySubject(nc, { timeoutMs: 10_000, direct: true }) };
    const out: Record<string, { server_us: number[]; client_us: number[] }> = { msg_get: { server_us: [], client_us: [] }, direct_get: { server_us: [], client_us: [] } };
    for (let round = 0; round < 3; round++) {
      for (const [name, reader] of Object.entries(readers)) {
        const server0 = cpuTicks(server.pid);
        const client0 = process.cpuUsage();
        for (let i = 0; i < reads; i += 50) {
          await Promise.all(Array.from({ length: 50 }, (_, j) => {
            const k = (i + j) % seqs.length;
            return reader.next('G', `G.ep.k.key${k % 200}`, seqs[k]!);
          }));
        }
        const client = process.cpuUsage(client0);
        out[name]!.server_us.push(Math.round(((cpuTicks(server.pid) - server0) / TICKS) * 1e6 / reads));
        out[name]!.client_us.push(Math.round((client.user + client.system) / reads));
      }
    }
    for (const r of Object.values(readers)) r.close();
    say('gets', out, `${reads} next_by_subj reads each, 3 rounds: CPU µs per read`);
  });
}

/**
 * Partitions made by nats-server (the direct-sourced shape) on a 3-node cluster with replicas 3, across a
 * node's crash: EVENTS with its ingest transform, a stream per partition sourcing it. Events are published
 * (each with a Nats-Msg-Id, retried until acked, as a producer does) while the node leading the most
 * partition streams is killed and started again; then every partition stream must hold exactly its
 * partition's events, each once, in EVENTS order, each naming its EVENTS sequence in Nats-Stream-Source.
 */
async function sources(partitions: number, events = 20_000): Promise<void> {
  const cluster = await startNatsCluster();
  // As nats.conf's users: the service with its own inboxes, a producer in its own account.
  const login = (user: string, pass: string, inboxPrefix?: string) => connect({ servers: cluster.url, user, pass, inboxPrefix, reconnectTimeWait: 250, maxReconnectAttempts: -1 });
  const nc = await login('service', CLUSTER_PASSWORDS.service, SERVICE_INBOX_PREFIX);
  const producer = await login('publisher', CLUSTER_PASSWORDS.publisher);
  try {
    await cluster.waitForMetaLeader(30_000);
    const jsm = await jetstreamManager(nc, { timeout: 20_000 });
    await addSourcedEvents(jsm, partitions, { replicas: 3, duplicateWindowMs: 120_000 });
    const leaders = new Map<string, number>();
    for (let p = 0; p < partitions; p++) {
      const l = (await jsm.streams.info(`EVENTS_${p}`)).cluster?.leader ?? '';
      leaders.set(l, (leaders.get(l) ?? 0) + 1);
    }
    const victim = cluster.node([...leaders.entries()].sort((a, b) => b[1] - a[1])[0]![0]);
    const js = jetstream(producer, { timeout: 5000 });
    let retries = 0;
    let next = 0;
    const t0 = performance.now();
    const publishing = Promise.all(Array.from({ length: 32 }, async () => {
      for (let i = next++; i < events; i = next++) {
        for (;;) {
          try {
            await js.publish(`events.t${i % 1000}.user.updated`, JSON.stringify({ i }), { msgID: `e${i}` });
            break;
          } catch {
            retries++;
            await sleep(100);
          }
        }
      }
    }));
    while (next < events / 3) await sleep(20);
    await victim.kill();
    const killedAt = next;
    await sleep(3000);
    await victim.start();
    await publishing;
    const publishS = (performance.now() - t0) / 1000;
    // Wait for the sources to catch up: every partition's count adds up to EVENTS'. A stream info can go
    // unanswered for a while after the restart (a leader being elected): asked again.
    const total = async () => {
      let n = 0;
      for (let p = 0; p < partitions; p++) n += (await jsm.streams.info(`EVENTS_${p}`)).state.messages;
      return n;
    };
    const stored = (await jsm.streams.info('EVENTS')).state.messages;
    const t1 = performance.now();
    let copied = 0;
    while (performance.now() - t1 < 120_000) {
      copied = await total().catch(() => copied);
      if (copied >= stored) break;
      await sleep(250);
    }
    const catchUpS = (performance.now() - t1) / 1000;
    // Read every partition stream: each event once, in EVENTS order, in the partition its tenant hashes to.
    const problems: string[] = [];
    const seen = new Set<number>();
    for (let p = 0; p < partitions; p++) {
      const c = await jsm.consumers.add(`EVENTS_${p}`, { ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All, mem_storage: true, inactive_threshold: nanos(60_000) });
      const consumer = await jetstream(nc).consumers.get(`EVENTS_${p}`, c.name);
      const want = (await jsm.streams.info(`EVENTS_${p}`)).state.messages;
      let last = 0;
      for (let got = 0; got < want;) {
        const batch = await consumer.fetch({ max_messages: 1000, expires: 5000 });
        for await (const m of batch) {
          got++;
          const src = m.headers?.get('Nats-Stream-Source')?.split(' ') ?? [];
          const seq = Number(src[1]);
          if (src[0] !== 'EVENTS' || !Number.isSafeInteger(seq)) { problems.push(`EVENTS_${p}: no source sequence`); continue; }
          if (seq <= last) problems.push(`EVENTS_${p}: ${seq} after ${last}`);
          if (seen.has(seq)) problems.push(`EVENTS sequence ${seq} copied twice`);
          const [, tenant, partition] = m.subject.split('.');
          if (tenantPartition(tenant!, partitions) !== p || partition !== String(p)) problems.push(`${m.subject} in EVENTS_${p}`);
          seen.add(seq);
          last = seq;
        }
      }
    }
    say('sources_across_node_kill', {
      partitions, published: events, events_stored: stored, copied, distinct: seen.size, problems: problems.length,
      publish_retries: retries, killed_after: killedAt, publish_s: Math.round(publishS * 10) / 10, catch_up_s: Math.round(catchUpS * 10) / 10,
    }, `R3, ${victim.name} (leading ${leaders.get(victim.name)} partition streams) killed for 3 s`);
    for (const x of problems.slice(0, 5)) process.stderr.write(`    ${x}\n`);
  } finally {
    await producer.close().catch(() => {});
    await nc.close().catch(() => {});
    await cluster.dispose();
  }
}

const args = process.argv.slice(2);
const opt = (name: string) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const only = new Set((opt('--only') ?? 'timing,new,scale').split(','));
const counts = (opt('--consumers') ?? '1000,10000').split(',').map(Number);
const shapeCounts = (opt('--endpoints') ?? '100,1000').split(',').map(Number);
const shapeList = (opt('--shapes') ?? SHAPES.join(',')).split(',') as Shape[];
for (const x of shapeList) if (!SHAPES.includes(x)) throw new Error(`--shapes: unknown shape ${x}; shapes are ${SHAPES.join(', ')}`);
const webhooks = Number(opt('--webhooks') ?? 20_000);
/** Events per second of the shapes' producer; absent: bursts, as fast as it can. */
const shapeRate = opt('--rate') === undefined ? undefined : Number(opt('--rate'));

const version = await withServer(async (nc) => nc.info?.version ?? 'unknown');
process.stderr.write(`nats-server ${version} (${BINARY})\n`);
figures['server_version'] = version;
if (only.has('timing')) await timing();
if (only.has('new')) await newer();
if (only.has('scale')) await scale(counts);
if (only.has('gets')) await gets(Number(opt('--reads') ?? 20_000));
/** Tenant partitions of the direct-subjects, direct-streams and direct-sourced shapes and of `sources`. */
const shapePartitions = Number(opt('--partitions') ?? 16);
if (!Number.isSafeInteger(shapePartitions) || shapePartitions < 1) throw new Error('--partitions expects a whole number of 1 or more');
if (only.has('sources')) await sources(shapePartitions);
if (only.has('shapes')) for (const n of shapeCounts) for (const x of shapeList) await shape(x, n, webhooks, shapeRate, shapePartitions);
if (only.has('crowd')) for (const f of CROWD_FILTERS) await crowd(f, shapePartitions, shapeRate ?? 200, Number(opt('--flood') ?? 200_000));
process.stdout.write(JSON.stringify(figures) + '\n');
