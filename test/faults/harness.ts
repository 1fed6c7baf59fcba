// What the fault scenarios share: real hookstream instances as child processes (`hookstream serve`), real
// loopback receivers that count deliveries per event and endpoint, a producer that retries every failed
// publish under the same Nats-Msg-Id (as the README tells producers to), and the figures each scenario prints.
import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../../src/nats/connect.ts';
import { generateKeys, initSodium } from '../../src/crypto/sodium.ts';
import { createEndpoints } from '../../src/endpoints/index.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { startReceiver, type Receiver } from '../helpers/receiver.ts';

const BIN = resolve(import.meta.dirname, '../../bin/hookstream');

export interface Served {
  /** The last 200,000 characters of its stdout and stderr. */
  readonly output: string;
  readonly exited: boolean;
  /** Its exit code once it exited (null while running or when a signal ended it). */
  readonly exitCode: number | null;
  /** Send `signal` (SIGKILL by default) and resolve once the process exited. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export type Instance = Served;

/** `hookstream serve` in a child process, at once: the caller waits for what it needs. */
export function startServe(env: Record<string, string>): Served {
  // As `npm start` runs it: bin/hookstream's Node and node flags.
  const child: ChildProcess = spawn(BIN, ['serve'], {
    env: { ...process.env, PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const onData = (c: Buffer) => { output = (output + c.toString('utf8')).slice(-200_000); };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exit = new Promise<void>((r) => child.once('exit', () => r()));
  const served: Served = {
    get output() { return output; },
    get exited() { return child.exitCode !== null || child.signalCode !== null; },
    get exitCode() { return child.exitCode; },
    async kill(signal = 'SIGKILL') {
      if (served.exited) return;
      child.kill(signal);
      await exit;
    },
  };
  return served;
}

/** `hookstream serve` in a child process; resolves once it logged that it started (or rejects with its output). */
export async function startInstance(env: Record<string, string>, timeoutMs = 60_000): Promise<Instance> {
  const instance = startServe(env);
  const until = Date.now() + timeoutMs;
  while (!instance.output.includes('hookstream started')) {
    if (instance.exited) throw new Error(`instance exited at start-up:\n${instance.output.slice(-2000)}`);
    if (Date.now() > until) { await instance.kill(); throw new Error(`instance did not start within ${timeoutMs} ms:\n${instance.output.slice(-2000)}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  return instance;
}

export interface Endpoints {
  receivers: Receiver[];
  /** The endpoints' ids, in the receivers' order. */
  ids: string[];
  /** Deliveries of event n to receiver i, by the event number in the body. */
  counts(): Map<string, number>;
  close(): Promise<void>;
}

/** `count` receivers, each subscribed as an endpoint of `tenant` to user.*. */
export async function subscribeEndpoints(nc: NatsConnection, masterKey: string, tenant: TenantId, count: number): Promise<Endpoints> {
  await initSodium();
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const { store } = createEndpoints({ js, jsm, masterKey, allowPrivateTargets: true });
  const receivers = await Promise.all(Array.from({ length: count }, () => startReceiver()));
  const ids: string[] = [];
  for (const r of receivers) ids.push((await store.create(tenant, { url: r.url, events: ['user.*'] })).endpoint.id);
  return {
    receivers,
    ids,
    counts() {
      const m = new Map<string, number>();
      receivers.forEach((r, i) => {
        for (const g of r.received) {
          const k = `${i}:${(JSON.parse(g.body) as { data: { n: number } }).data.n}`;
          m.set(k, (m.get(k) ?? 0) + 1);
        }
      });
      return m;
    },
    async close() { await Promise.all(receivers.map((r) => r.close())); },
  };
}

export interface ProducerStats {
  published: number;
  /** Publishes that failed and were tried again. */
  failures: number;
  /** The longest time one event took from its first try to its acknowledgement. */
  longestMs: number;
}

/**
 * Publish events 0..total-1 (`user.updated`, data.n = i), `inFlight` at a time, each retried under the
 * same Nats-Msg-Id until acknowledged. `onProgress(i)` runs after each acknowledgement (to strike mid-burst).
 */
export async function produce(
  nc: NatsConnection, tenant: string, total: number,
  opts: { inFlight?: number; onProgress?: (done: number) => void; /** Events per second at most (spread over the run). */ ratePerSecond?: number } = {},
): Promise<ProducerStats> {
  const js = jetstream(nc, { timeout: 2000 });
  const stats: ProducerStats = { published: 0, failures: 0, longestMs: 0 };
  let next = 0;
  const began = Date.now();
  const worker = async () => {
    for (let i = next++; i < total; i = next++) {
      if (opts.ratePerSecond) {
        const due = began + (i * 1000) / opts.ratePerSecond - Date.now();
        if (due > 0) await new Promise((r) => setTimeout(r, due));
      }
      const started = Date.now();
      for (let attempt = 0; ; attempt++) {
        try {
          const h = natsHeaders();
          await js.publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: `user_${i}`, n: i }), { msgID: `fault-${tenant}-${i}`, headers: h });
          break;
        } catch {
          stats.failures++;
          if (Date.now() - started > 120_000) throw new Error(`event ${i} not accepted within 120 s`);
          await new Promise((r) => setTimeout(r, Math.min(1000, 100 * 2 ** attempt)));
        }
      }
      stats.longestMs = Math.max(stats.longestMs, Date.now() - started);
      stats.published++;
      opts.onProgress?.(stats.published);
    }
  };
  await Promise.all(Array.from({ length: opts.inFlight ?? 32 }, worker));
  return stats;
}

/**
 * Produce `total` events and run `strike` once 40 % of them are stored (its start time is `faultAt`); resolves
 * when both are done. Without a strike, a burst with no fault.
 */
export async function produceWithFault<T>(
  nc: NatsConnection, tenant: string, total: number, strike?: (faultAt: number) => Promise<T>,
): Promise<{ stats: ProducerStats; faultAt: number; struck: T | undefined }> {
  let faultAt = Date.now();
  let struck: Promise<T> | undefined;
  const stats = await produce(nc, tenant, total, {
    onProgress: (done) => {
      if (!strike || struck || done < total * 0.4) return;
      faultAt = Date.now();
      struck = strike(faultAt);
    },
  });
  return { stats, faultAt, struck: await struck };
}

export interface Figures {
  expected: number;
  delivered: number;
  missing: number;
  duplicates: number;
  duplicateRate: string;
  /** The longest pause between two deliveries after the fault: how long the service took to recover. */
  recoveryMs: number;
}

/** Wait until every (event, endpoint) arrived at least once or `timeoutMs` passed; then the figures. */
export async function settle(ep: Endpoints, events: number, faultAt: number, timeoutMs: number): Promise<Figures> {
  const expected = events * ep.receivers.length;
  const until = Date.now() + timeoutMs;
  while (ep.counts().size < expected && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
  // Late duplicates (redeliveries after an ack wait) get a moment to show.
  await new Promise((r) => setTimeout(r, 3000));
  const counts = ep.counts();
  let total = 0;
  for (const c of counts.values()) total += c;
  const arrivals = ep.receivers.flatMap((r) => r.received.map((g) => g.at)).filter((t) => t >= faultAt).sort((a, b) => a - b);
  let recoveryMs = arrivals.length > 0 ? arrivals[0]! - faultAt : 0;
  for (let i = 1; i < arrivals.length; i++) recoveryMs = Math.max(recoveryMs, arrivals[i]! - arrivals[i - 1]!);
  const duplicates = total - counts.size;
  return {
    expected, delivered: counts.size, missing: expected - counts.size, duplicates,
    duplicateRate: `${((duplicates / expected) * 100).toFixed(2)} %`, recoveryMs,
  };
}

export async function serviceConnection(url: string, user?: string, password?: string): Promise<NatsConnection> {
  return connectNats({ url, user, password, name: 'fault-test' });
}

export { generateKeys, initSodium };

/**
 * The environment of a scenario's instances: its NATS and database, fresh keys, 4 shards, loopback targets.
 * The retry schedule's first step is the ack wait: 5 s, as in production, so a loaded machine does not
 * redeliver attempts still in flight.
 */
/** HOOKSTREAM_DELIVERY_SHARDS of the scenarios' instances. */
export const FAULT_SHARDS = 4;

export function instanceEnv(opts: {
  natsUrl: string; databaseUrl: string; keys: ReturnType<typeof generateKeys>; retrySchedule?: string; extra?: Record<string, string>;
}): Record<string, string> {
  return {
    NATS_URL: opts.natsUrl, DATABASE_URL: opts.databaseUrl, HOOKSTREAM_DELIVERY_SHARDS: String(FAULT_SHARDS), HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
    HOOKSTREAM_RETRY_SCHEDULE: opts.retrySchedule ?? '5s,10s,20s,40s,60s',
    HOOKSTREAM_MASTER_KEY: opts.keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: opts.keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: opts.keys.deadLetterSecretKey,
    ...opts.extra,
  };
}

/**
 * Where a scenario's duplicates came from: `refanned` deliveries stored more than once in the delivery
 * streams (the router's fan-out published again past the duplicate window), and the POSTs repeated for one
 * stored delivery, by when the first copy arrived relative to the NATS restart (its ack lost with the server,
 * or an attempt cut short by the kill).
 */
export async function duplicateKinds(ep: Endpoints, nc: NatsConnection, restartedAt: number): Promise<{ refanned: number; repostedBeforeRestart: number; repostedAfterRestart: number; medianGapMs: number }> {
  const jsm = await jetstreamManager(nc);
  let stored = 0;
  for await (const si of jsm.streams.list('deliveries.>')) stored += si.state.last_seq;
  const firsts = new Map<string, number>();
  let before = 0;
  let after = 0;
  const gaps: number[] = [];
  ep.receivers.forEach((r, i) => {
    for (const g of r.received) {
      const k = `${i}:${(JSON.parse(g.body) as { data: { n: number } }).data.n}`;
      const first = firsts.get(k);
      if (first === undefined) { firsts.set(k, g.at); continue; }
      if (first < restartedAt) before++; else after++;
      gaps.push(g.at - first);
    }
  });
  gaps.sort((a, b) => a - b);
  return { refanned: stored - firsts.size, repostedBeforeRestart: before, repostedAfterRestart: after, medianGapMs: gaps[Math.floor(gaps.length / 2)] ?? 0 };
}
