// Tenants drained at their rate, out of the router's shared window. Every tenant's events reach the router
// through one consumer whose window (max_ack_pending) all tenants share; an event held back for its
// tenant's limits keeps its place there, so a tenant publishing faster than its `events_per_second` would,
// held, fill the window and stall everyone's routing. Past a small bound of held events, the router starts
// a drain of the tenant instead: from then on its consumer acks the tenant's new events unrouted, and one
// router (the drain's owner) reads them from EVENTS itself (`next_by_subj events.<tenant>.>`, in stream
// order) and routes them at the tenant's rate. EVENTS keeps them (a week) whatever the consumer acked, so
// nothing is copied, nothing lost, and the drain costs no disk of its own. When the drain has caught up,
// the consumer routes the tenant's events again.
//
// Routers agree through one record per tenant in ROUTER_DRAINS (streams/router-drains.ts), written only
// with its subject's expected last sequence: `starting` → `draining` from F → `ending` → `ended` until U.
// An event is decided (routed, acked as the drain's, or held a moment) only after a read of the records
// that started after the router received it (`synced`, one read for every event received before it). The
// boundaries are read from EVENTS after the phase before them is stored: F is one past the tenant's last
// event once `starting` is stored, so every event a router decided to route (its read saw no drain) is
// before F; U is one past its last event once `ending` is stored, so every event a router acked as the
// drain's (its read saw `draining`) is before U, and the drain routes it. Events of a tenant from F on
// are routed only by the drain, in order; a key's next event is published only once its earlier one is
// stored, and its deliveries wait for the router's progress past F-1 (`hookstream-ordered-after`), so
// the tenant's events before the drain are handled first. Order per key holds, across routers.
//
// One owner per drain: it renews the record every second; a router that sees a drain's record unchanged
// for LEASE_MS takes it over (the same conditional write), and an owner that could not renew for half of
// that stops routing, so two routers never route a tenant's drain at once. A drain taken over looks up
// what its first events' earlier routing stored (ROUTED), as a redelivered event does.
import { randomUUID } from 'node:crypto';
import { type JetStreamManager, type JsMsg, type StoredMsg } from '@nats-io/jetstream';
import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { EVENTS_STREAM } from '../../streams/events.ts';
import { ROUTER_DRAINS_STREAM, ROUTER_DRAINS_SUBJECTS, routerDrainSubject, type DrainRecord } from '../../streams/router-drains.ts';
import { isTenantId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';
import { createNextMessages, NextBySubjectError, type StoredMessage } from '../nats/next-by-subject.ts';

/** What the router's consumer does with an event of a tenant. */
export type Decision = 'route' | 'skip' | 'hold';

export interface Drains {
  /** Resolves once a read of the drain records that started after this call has completed. */
  synced(): Promise<void>;
  /** `route`: the consumer routes it; `skip`: a drain routes (or routed) it, ack it; `hold`: ask again on `changed`. */
  decide(tenant: string, seq: number): Decision;
  /** The tenant's events wait past their bound in this router: start draining it (nothing if a drain is on). */
  start(tenant: string): void;
  /** Tenants this process drains now. */
  owned(): number;
  stop(): Promise<void>;
}

/** A drained event handed to the router: its pseudo-message settles through these. */
export interface DrainedRoute {
  /** Route `m` (an event read from EVENTS); its deliveries wait for the router's progress past `barrier`. */
  route(m: JsMsg, barrier: number, stored: () => void): void;
  /** The key that orders the event among the tenant's (null: none); its next event waits until it is stored. */
  keyOf(m: JsMsg): string | null;
}

/** A drain's record unchanged this long is taken over; its owner stops routing after half of it unrenewed. */
export const LEASE_MS = 10_000;
/** A `starting` record left this long (its router gone before it said from where) is taken over. */
const STARTING_MS = 1_000;
/** The owner renews its record (and the drain's place) this often, or after this many events. */
const RENEW_MS = 1_000;
const RENEW_EVENTS = 128;
/** Drained events routed at once (in EVENTS order; a key's next one waits for its earlier one's store). */
const DRAIN_WINDOW = 256;
/** After a takeover, the events this far past the record's place are looked up in ROUTED before routing. */
const TAKEOVER_CHECKED = 2048;
/**
 * Reads of the records at most this often, each for every event that came before it: back to back, a busy
 * router made thousands a second (each ~100 µs of the client's CPU), and routing lost a sixth of its pace.
 */
const READ_INTERVAL_MS = 2;
/** A read of the records unanswered this long fails (and is tried again): nats.js's JetStream API default. */
const RECORD_READ_TIMEOUT_MS = 5_000;
/** After a drain could not be started, none is tried for this long. */
const START_BACKOFF_MS = 30_000;
/** Waits after a failed NATS call, doubling to the longest. */
const RETRY_MS = 250;
const RETRY_MAX_MS = 4_000;
/** JetStream: wrong last sequence (the record moved), stream not found. */
const WRONG_LAST_SEQUENCE = 10071;
const STREAM_NOT_FOUND = 10059;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());
const utf8 = new TextDecoder();
const active = (r: DrainRecord | undefined): boolean => r !== undefined && r.phase !== 'ended';

/** A stored event as the router's consumer would hand it over, settled through `on`. */
function drainedMessage(sm: StoredMsg, deliveryCount: number, on: { done(): void; retry(delayMs: number): void }): JsMsg {
  const headers: MsgHdrs | undefined = sm.header.keys().length > 0 ? sm.header : undefined;
  // The server's time to the nanosecond, as the consumer's reply subject gives it (the webhook id takes its ms).
  const [secs, frac = ''] = sm.timestamp.replace(/Z$/, '').split('.');
  const timestampNanos = BigInt(Date.parse(`${secs}Z`)) * 1_000_000n + BigInt(frac.padEnd(9, '0').slice(0, 9));
  let settled = false;
  const settle = (f: () => void) => { if (!settled) { settled = true; f(); } };
  return {
    seq: sm.seq, subject: sm.subject, data: sm.data, headers, timestampNanos,
    info: { deliveryCount, deliverySequence: 0, stream: EVENTS_STREAM, streamSequence: sm.seq, pending: 0 },
    ack: () => settle(on.done),
    term: () => settle(on.done),
    nak: (delay?: number) => settle(() => on.retry(delay ?? RETRY_MS)),
    working: () => {},
  } as unknown as JsMsg;
}

export function createDrains(deps: {
  jsm: JetStreamManager;
  /** The records' reads go through it (src/nats/next-by-subject.ts), their answers to `inboxPrefix`. */
  nc: NatsConnection;
  inboxPrefix: string;
  publisher: AckedPublisher;
  log: Logger;
  /** The tenant's record changed: what `decide` said `hold` to may go now. */
  changed(tenant: string): void;
  /** Undefined when the tenant's next event may be routed now (taking its share), else how long to wait. */
  pace(tenant: string): number | undefined;
  drained: DrainedRoute;
  owner?: string;
  leaseMs?: number;
  /** How many tenants this process drains, whenever that changes. */
  owning?(n: number): void;
}): Drains {
  const { jsm, log } = deps;
  const owner = deps.owner ?? `${process.pid}-${randomUUID().slice(0, 8)}`;
  const leaseMs = deps.leaseMs ?? LEASE_MS;
  /** Each tenant's record as last read or written, with its sequence and when this process first saw it. */
  const records = new Map<string, { r: DrainRecord; seq: number; seen: number }>();
  /** Tenants whose drain this process is starting (their events are held meanwhile). */
  const starting = new Set<string>();
  const running = new Map<string, Promise<void>>();
  let lastSeq = 0;
  let stopped = false;
  let noStartUntil = 0;

  const apply = (tenant: string, r: DrainRecord, seq: number): void => {
    const known = records.get(tenant);
    if (known && known.seq >= seq) return;
    records.set(tenant, { r, seq, seen: performance.now() });
    if (!known || known.r.phase !== r.phase || known.r.from !== r.from || known.r.until !== r.until) deps.changed(tenant);
  };

  // ---- reading the records: every read starts after the calls it answers ----
  let waiters: (() => void)[] = [];
  let reading = false;
  let lastRead = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  // Read up to every READ_INTERVAL_MS while events arrive: plain requests, not nats.js's (next-by-subject.ts).
  const recordReads = createNextMessages(deps.nc, { timeoutMs: RECORD_READ_TIMEOUT_MS, inboxPrefix: deps.inboxPrefix });
  async function readNew(): Promise<void> {
    for (;;) {
      let m: StoredMessage | null;
      try {
        m = await recordReads.next(ROUTER_DRAINS_STREAM, ROUTER_DRAINS_SUBJECTS, lastSeq + 1);
      } catch (e) {
        // No ROUTER_DRAINS (an older deployment's streams): no drain can exist.
        if (e instanceof NextBySubjectError && e.code === STREAM_NOT_FOUND) return;
        throw e;
      }
      if (!m) return;
      lastSeq = m.seq;
      const tenant = m.subject.slice(ROUTER_DRAINS_SUBJECTS.length - 1);
      try {
        const r = JSON.parse(utf8.decode(m.data)) as DrainRecord;
        if (r.v === 1 && typeof r.phase === 'string') apply(tenant, r, m.seq);
      } catch {
        log.warn('unreadable drain record skipped', { seq: m.seq });
      }
    }
  }
  const kick = (): void => {
    if (reading || timer || waiters.length === 0 || stopped) return;
    const wait = lastRead + READ_INTERVAL_MS - performance.now();
    if (wait > 0) {
      timer = setTimeout(() => { timer = undefined; kick(); }, wait);
      return;
    }
    lastRead = performance.now();
    const batch = waiters;
    waiters = [];
    reading = true;
    void (async () => {
      for (let wait = RETRY_MS; !stopped; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
        try {
          await readNew();
          break;
        } catch (e) {
          // A stop closes the reads: its router hands back the events waiting for this one.
          if (stopped) break;
          log.warn('could not read the tenants\' drain records; their events wait', { reason: describe(e) });
          await sleep(wait);
        }
      }
      reading = false;
      for (const w of batch) w();
      kick();
    })();
  };

  // ---- writing a record: only over the one this process last saw ----
  /** The new record's sequence, or undefined when another router wrote the tenant's record first. */
  async function write(tenant: string, r: DrainRecord, expected: number): Promise<number | undefined> {
    const h = natsHeaders();
    h.set('Nats-Expected-Last-Subject-Sequence', String(expected));
    try {
      const at = await deps.publisher.publish(routerDrainSubject(tenant), JSON.stringify(r), h);
      apply(tenant, r, at.seq);
      return at.seq;
    } catch (e) {
      if (e instanceof PublishRejectedError && e.code === WRONG_LAST_SEQUENCE) return undefined;
      throw e;
    }
  }

  /** The tenant's last event in EVENTS (0: none). */
  async function lastEvent(tenant: string): Promise<number> {
    for (let wait = RETRY_MS; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      try {
        const m = await jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: `events.${tenant}.>` });
        return m?.seq ?? 0;
      } catch (e) {
        if (stopped) throw e;
        log.warn('could not read a drained tenant\'s last event; trying again', { tenant, reason: describe(e) });
        await sleep(wait);
      }
    }
  }

  // ---- the drain of one tenant, while this process owns its record ----
  async function drain(tenant: string, taken: { seq: number; r: DrainRecord }, takeover: boolean): Promise<void> {
    let recSeq = taken.seq;
    let r = taken.r;
    let renewedAt = performance.now();
    let routedSince = 0;
    let lost = false;
    /** Events routed and not yet done (EVENTS sequence → their key), and each key's last one's store. */
    const inFlight = new Map<number, string | null>();
    const keyStored = new Map<string, Promise<void>>();
    let slot: (() => void) | undefined;
    const idle = new Set<() => void>();

    let readPos = 0;
    /** Write the record as `update` makes it from the current one, keeping ownership; false once another router owns it. */
    const write1 = async (update: (cur: DrainRecord) => DrainRecord): Promise<boolean> => {
      for (let wait = RETRY_MS; !stopped && !lost; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
        const sentAt = performance.now();
        const next = update(r);
        try {
          const seq = await write(tenant, next, recSeq);
          if (seq === undefined) { lost = true; return false; }
          recSeq = seq;
          r = next;
          renewedAt = sentAt;
          routedSince = 0;
          return true;
        } catch (e) {
          log.warn('could not write a tenant\'s drain record; trying again', { tenant, reason: describe(e) });
          await sleep(wait);
        }
      }
      return false;
    };
    // One write at a time: the heartbeat's and the phases' (each made from the record as it is then).
    let writing: Promise<unknown> = Promise.resolve();
    const renew = (update: (cur: DrainRecord) => DrainRecord): Promise<boolean> => {
      const p = writing.then(() => write1(update));
      writing = p.catch(() => {});
      return p;
    };
    const place = (): number => Math.min(readPos, ...inFlight.keys());
    // Renewed on a timer, whatever the drain waits for (its share, a key's retry, the window).
    const beat = setInterval(() => {
      if (!stopped && !lost && performance.now() - renewedAt >= RENEW_MS) void renew((cur) => ({ ...cur, next: place(), owner }));
    }, RENEW_MS / 2);
    beat.unref();
    /** Whether this process still owns the drain; waits while it could not renew for half the lease (NATS away). */
    const owning = async (): Promise<boolean> => {
      while (!stopped && !lost && performance.now() - renewedAt > leaseMs / 2) await sleep(RETRY_MS);
      return !stopped && !lost;
    };
    /** Wait until nothing routed is left undone. */
    const settled = async (): Promise<void> => { while (inFlight.size > 0) await new Promise<void>((res) => idle.add(res)); };

    /** Route one event; its key's next event waits for `stored` (or its end). */
    const routeOne = (sm: StoredMsg, deliveryCount: number, key: string | null): void => {
      let release: () => void = () => {};
      if (key !== null) {
        const stored = new Promise<void>((res) => (release = () => { res(); if (keyStored.get(key) === stored) keyStored.delete(key); }));
        keyStored.set(key, stored);
      }
      inFlight.set(sm.seq, key);
      const finish = () => {
        release();
        inFlight.delete(sm.seq);
        slot?.();
        if (inFlight.size === 0) { for (const res of idle) res(); idle.clear(); }
      };
      const attempt = (count: number): void => {
        const m = drainedMessage(sm, count, {
          done: finish,
          retry: (delayMs) => void sleep(delayMs).then(owning).then((mine) => (mine ? attempt(count + 1) : finish())),
        });
        deps.drained.route(m, (r.from ?? sm.seq) - 1, release);
      };
      attempt(deliveryCount);
    };

    try {
      if (r.phase === 'starting') {
        // Stored `starting` first: every event a router routed itself is at most the tenant's last now.
        const last = await lastEvent(tenant);
        if (!await renew(() => ({ v: 1, phase: 'draining', from: last + 1, next: last + 1, owner }))) return;
        log.info('tenant over its limit: its events are drained from EVENTS at its rate', { tenant, from: last + 1 });
      }
      readPos = r.next ?? r.from ?? 1;
      const checkedUntil = takeover ? readPos + TAKEOVER_CHECKED : 0;
      let upTo = r.phase === 'ending' ? await lastEvent(tenant) : Infinity;
      /** The next event, read and waiting for its share. */
      let next: StoredMsg | null = null;
      for (let wait = RETRY_MS; !stopped && !lost;) {
        if (routedSince >= RENEW_EVENTS && !await renew((cur) => ({ ...cur, next: place(), owner }))) return;
        // Not renewed for half the lease (NATS away): another router may own it by now; route nothing.
        if (!await owning()) return;
        while (inFlight.size >= DRAIN_WINDOW) await new Promise<void>((res) => (slot = res));
        if (!next) {
          try {
            next = await jsm.streams.getMessage(EVENTS_STREAM, { seq: readPos, next_by_subj: `events.${tenant}.>` } as never);
            wait = RETRY_MS;
          } catch (e) {
            log.warn('could not read a drained tenant\'s next event; trying again', { tenant, reason: describe(e) });
            await sleep(wait);
            wait = Math.min(wait * 2, RETRY_MAX_MS);
            continue;
          }
        }
        if (!next || next.seq > upTo) {
          next = null;
          // Caught up. Draining: say so, then take what came meanwhile (up to the last event once `ending`
          // is stored: whatever a router acked as the drain's is before it). Ending: hand the tenant back.
          await settled();
          if (r.phase === 'draining') {
            if (!await renew((cur) => ({ ...cur, phase: 'ending', next: readPos, owner }))) return;
            upTo = await lastEvent(tenant);
            continue;
          }
          if (!await renew((cur) => ({ ...cur, phase: 'ended', until: upTo + 1, next: upTo + 1, owner }))) return;
          log.info('tenant drained: its events are routed as they come again', { tenant, until: upTo + 1 });
          return;
        }
        // Its share first (paced; the record renewed meanwhile), then its key's earlier event's store.
        const ms = deps.pace(tenant);
        if (ms !== undefined) { await sleep(Math.min(ms, RENEW_MS)); continue; }
        const m = next;
        next = null;
        const key = deps.drained.keyOf(drainedMessage(m, 1, { done: () => {}, retry: () => {} }));
        if (key !== null) await keyStored.get(key);
        if (!await owning()) break;
        routeOne(m, m.seq < checkedUntil ? 2 : 1, key);
        routedSince++;
        readPos = m.seq + 1;
      }
    } catch (e) {
      log.warn('a tenant\'s drain stopped; another router (or this one) takes it over', { tenant, reason: describe(e) });
    } finally {
      clearInterval(beat);
      await settled().catch(() => {});
    }
  }

  const run = (tenant: string, taken: { seq: number; r: DrainRecord }, takeover: boolean): void => {
    if (running.has(tenant) || stopped) return;
    const p = drain(tenant, taken, takeover).finally(() => { running.delete(tenant); deps.owning?.(running.size); });
    running.set(tenant, p);
    deps.owning?.(running.size);
  };

  // ---- takeovers: a live drain whose record did not move for a lease ----
  const supervise = setInterval(() => {
    if (stopped) return;
    waiters.push(() => {
      const now = performance.now();
      for (const [tenant, { r, seq, seen }] of records) {
        // A drain still `starting` has routed nothing: whoever sets its start takes it after a moment.
        if (!active(r) || running.has(tenant) || now - seen < (r.phase === 'starting' ? STARTING_MS : leaseMs)) continue;
        void write(tenant, { ...r, owner }, seq).then((at) => {
          if (at === undefined) return;
          log.info('took over a tenant\'s drain', { tenant, previous_owner: r.owner, phase: r.phase });
          run(tenant, { seq: at, r: { ...r, owner } }, true);
        }, (e: unknown) => log.warn('could not take over a tenant\'s drain', { tenant, reason: describe(e) }));
      }
    });
    kick();
  }, Math.min(500, leaseMs / 4));
  supervise.unref();

  return {
    synced: () => new Promise<void>((res) => { waiters.push(res); kick(); }),
    decide(tenant, seq) {
      if (starting.has(tenant)) return 'hold';
      const known = records.get(tenant)?.r;
      if (!known) return 'route';
      const from = known.from ?? Infinity;
      switch (known.phase) {
        case 'starting': return 'hold';
        case 'draining': return seq >= from ? 'skip' : 'route';
        case 'ending': return seq >= from ? 'hold' : 'route';
        case 'ended': return seq >= from && seq < (known.until ?? 0) ? 'skip' : 'route';
      }
    },
    start(tenant) {
      if (stopped || starting.has(tenant) || !isTenantId(tenant) || active(records.get(tenant)?.r)) return;
      if (performance.now() < noStartUntil) return;
      starting.add(tenant);
      const known = records.get(tenant);
      const r: DrainRecord = { v: 1, phase: 'starting', owner };
      void write(tenant, r, known?.seq ?? 0).then((at) => {
        starting.delete(tenant);
        if (at !== undefined) run(tenant, { seq: at, r }, false);
        // Another router wrote first: read what it wrote before deciding again.
        else waiters.push(() => deps.changed(tenant));
        deps.changed(tenant);
        kick();
      }, (e: unknown) => {
        // NATS away, or a NATS user not allowed ROUTER_DRAINS (nats.conf): the bounded wait in the router
        // meanwhile, and no other start for a while (each try holds the tenant's events while it lasts).
        noStartUntil = performance.now() + START_BACKOFF_MS;
        starting.delete(tenant);
        deps.changed(tenant);
        log.warn('could not start draining a tenant over its limit; its events wait in the router', { tenant, reason: describe(e) });
      });
    },
    owned: () => running.size,
    async stop() {
      stopped = true;
      clearInterval(supervise);
      clearTimeout(timer);
      for (const w of waiters.splice(0)) w();
      await Promise.allSettled([...running.values()]);
      recordReads.close();
    },
  };
}

/**
 * Where a tenant's unrouted events start, if it is being drained: one before the drain's place (events
 * past the router's consumer's floor are not all there is to erase then). Undefined: no drain.
 */
export async function drainFloor(jsm: JetStreamManager, tenant: string): Promise<number | undefined> {
  const m = await jsm.streams.getMessage(ROUTER_DRAINS_STREAM, { last_by_subj: routerDrainSubject(tenant) }).catch(() => null);
  if (!m) return undefined;
  let r: DrainRecord;
  try { r = m.json<DrainRecord>(); } catch { return undefined; }
  if (!active(r)) return undefined;
  return (r.next ?? r.from ?? 1) - 1;
}
