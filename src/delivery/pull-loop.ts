// One endpoint's lane in this process: it pulls only as many deliveries as it can attempt now (its
// concurrency limit less the attempts running), so a message is here only while it is attempted. A failed
// delivery waits for its retry at the server, in the consumer's pending set, which is far larger than the
// limit (streams/deliveries.ts): waiting never takes the place of a new delivery (issue 17).
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { BRIEF_PULL_MS, type PullFeeds } from '../nats/pull-feed.ts';
import type { PulledMsg } from '../nats/pulled-msg.ts';
import type { AttemptLane, Attempts } from './attempt.ts';
import { createConcurrencyLimit, type ConcurrencyLimit } from './concurrency.ts';
import type { HeldMessages, InFlight } from './in-flight.ts';
import type { WaitingRetries } from './waiting-retries.ts';
import type { RecentAcks } from './recent-acks.ts';
import type { KeyGate } from './ordered-gate.ts';
import type { Pace } from './tenant-pace.ts';

/**
 * Keyed deliveries one endpoint parks in this process at most (issue 21), by count and by their bytes
 * (the bound on memory); at the bound its keyed consumer pulls one delivery a second only, so that a head
 * due for its retry still comes out (the server hands out redeliveries before new messages). Large enough
 * that a few failing keys' backlogs park while the endpoint's other keys keep flowing (issue 29: at 1,000,
 * five failing keys held an unrelated key for minutes).
 */
export const MAX_PARKED_PER_ENDPOINT = 10_000;
export const MAX_PARKED_BYTES_PER_ENDPOINT = 16 * 1024 * 1024;
/**
 * And all the ordered endpoints of one tenant together, in this process: a tenant's memory here, and the
 * keep-alives its parked deliveries cost (one per half ack wait each), stay bounded however many it has.
 */
export const MAX_PARKED_PER_TENANT = 20_000;
export const MAX_PARKED_BYTES_PER_TENANT = 32 * 1024 * 1024;
const PARKED_TRICKLE_MS = 1000;
/** A paced lane pulls again at most this often: a high rate's tokens are asked for in batches. */
const PACED_PULL_MS = 20;

interface ParkedUsage { parked: number; bytes: number }

/**
 * How many more deliveries an endpoint may park: under its own bound and its tenant's (counts and bytes);
 * `tenant` is what all the tenant's ordered endpoints here park, this one's included.
 */
export function roomToPark(own: ParkedUsage, tenant?: ParkedUsage): number {
  if (own.bytes >= MAX_PARKED_BYTES_PER_ENDPOINT) return 0;
  let room = MAX_PARKED_PER_ENDPOINT - own.parked;
  if (tenant) {
    if (tenant.bytes >= MAX_PARKED_BYTES_PER_TENANT) return 0;
    room = Math.min(room, MAX_PARKED_PER_TENANT - tenant.parked);
  }
  return Math.max(0, room);
}

/** An endpoint's concurrency in this process, shared by its lanes (the plain one and, ordered, the keyed one). */
interface Slots {
  limit: ConcurrencyLimit;
  running: number;
  lanes: Set<Lane>;
}

/** One consumer's attempts in this process: who waits, and its endpoint's shared slots. */
interface Lane extends AttemptLane {
  slots: Slots;
  /** Its own attempts running (`slots.running` is its endpoint's, shared with its other lane). */
  running: number;
  /** When a message last came to it (or it started): an ask unfilled since long is no reservation. */
  heardAt: number;
  /** Arrived while the limit was lower than when they were pulled (a 429, probing): at most one pull's worth. */
  waiting: InFlight[];
  closed: boolean;
  /** Issue 21: the keyed consumer's deliveries wait here for their key's head. */
  gate?: KeyGate;
  /** The endpoint's tenant, whose ordered endpoints share a parked bound. */
  tenant?: string;
  /** Pull for the lanes just freed. */
  fill?: () => void;
  /** Deliveries its consumer was asked for and has not sent yet. */
  requested: () => number;
  /** The socket pool its POSTs use (a plain lane of a pooled endpoint), as last looked up. */
  pool?: { key: string; lanes: Set<Lane> };
  /** Direct delivery: its tenant's `events_per_second` (tenant-pace.ts), and the pull that waits for it. */
  pace?: Pace;
  paced?: ReturnType<typeof setTimeout> | undefined;
}

export interface PullLoop {
  /** Pull afresh: the consumer elected a leader and pulls waiting at the old one are gone. */
  repull(): void;
  /** Stop pulling and let go of the messages that never got a slot. */
  stop(): void;
}

export interface PullLoops {
  /**
   * `gate`: the keyed consumer of an ordered endpoint; it shares the endpoint's concurrency with the plain
   * one. `pace`: a direct consumer, handed copies at its tenant's rate.
   */
  run(id: EndpointId, address: { stream: string; consumer: string }, gate?: KeyGate, pace?: Pace): PullLoop;
  /** Resolves once every attempt started so far has ended (each is bounded by the attempt timeout). */
  settle(): Promise<void>;
  /** Endpoints probed one attempt at a time (every recent attempt failed), in this process. */
  probing(): number;
  /** Deliveries in the lanes: in their attempt or waiting for it. */
  held(): number;
  /** Keyed deliveries parked behind their key's head (issue 21). */
  parked(): number;
}

export function createPullLoops(deps: {
  feeds: PullFeeds;
  attempt: Attempts['attempt'];
  /** What the sweep keeps alive; a message joins it on arrival and leaves when its attempt ends. */
  inFlight: HeldMessages;
  /** Failed deliveries waiting for their retry, by endpoint: an arrival is no longer waiting. */
  retries: WaitingRetries;
  /** How long the server waits on the n-th delivery before redelivering: the backoff step. */
  waitFor: (deliveryCount: number) => number;
  maxInFlight: number;
  /** The tenant of an endpoint (the parked bound per tenant); without it, each endpoint is on its own. */
  tenantOf?: (id: EndpointId) => string | undefined;
  /**
   * The socket pool an endpoint's POSTs wait in (its tenant and its URL's origin: http-sender.ts), and the
   * sockets each pool has: the endpoints of one pool pull only for what its sockets can send.
   */
  poolOf?: (id: EndpointId) => string | undefined;
  socketsPerPool?: number;
  /** 2xx deliveries acked in this process: one back after a lost ack is acked again, not attempted. */
  recentAcks: RecentAcks;
  log: Logger;
  /** Monotonic milliseconds (tests move it). */
  now?: () => number;
}): PullLoops {
  const { inFlight, log } = deps;
  const now = deps.now ?? (() => performance.now());
  /** Attempts started and not yet ended, and who waits for none to be left (settle). */
  let running = 0;
  let idle: (() => void)[] = [];
  const lanes = new Set<Lane>();
  const slotsOf = new Map<EndpointId, Slots>();
  /** Gated (keyed) lanes by tenant. */
  const gatedOf = new Map<string, Set<Lane>>();
  /** Plain lanes by socket pool. */
  const pools = new Map<string, Set<Lane>>();
  const sockets = deps.socketsPerPool ?? Infinity;

  /** The lane's pool as its endpoint's URL now says (a PATCH may move it to another origin). */
  function poolOf(lane: Lane): Set<Lane> | undefined {
    const key = lane.closed ? undefined : deps.poolOf?.(lane.id);
    if (lane.pool?.key === key) return lane.pool?.lanes;
    leavePool(lane);
    if (key === undefined) return undefined;
    const shared = pools.get(key) ?? new Set<Lane>();
    pools.set(key, shared.add(lane));
    lane.pool = { key, lanes: shared };
    return shared;
  }

  function leavePool(lane: Lane): void {
    if (!lane.pool) return;
    const { key, lanes: shared } = lane.pool;
    if (shared.delete(lane) && shared.size === 0) pools.delete(key);
    lane.pool = undefined;
  }

  /** Whether the lane's pool has more lanes than its sockets can serve at once (their pulls are shared out). */
  function crowded(lane: Lane): Set<Lane> | undefined {
    const shared = poolOf(lane);
    return shared && shared.size * deps.maxInFlight > sockets ? shared : undefined;
  }

  /**
   * The most deliveries a plain lane may hold, in its attempts and asked for, so that a pool's endpoints
   * together pull about what its sockets can send: more would only wait in this process for a socket, each
   * kept from redelivery by a keep-alive every few seconds (a tenant's 100 slow endpoints on one host held
   * 1,600 for its 128 sockets). What the other lanes hold or asked for is theirs, but for an idle lane's
   * one (so a tenant's many idle endpoints on a host never stop a busy one: they overshoot by one each at
   * most); the busy lanes share the sockets evenly; an idle lane asks for one, so it starts at once when its
   * next delivery comes.
   */
  function allowance(lane: Lane): number {
    const max = lane.slots.limit.current;
    const shared = crowded(lane);
    if (!shared) return max;
    // A lane's own: an endpoint with two lanes (direct delivery: its partition consumer and its queue's,
    // mostly idle) shares its slots between them, and counting the endpoint's attempts for each made every
    // busy endpoint look busy twice.
    const holds = (l: Lane) => l.running + l.waiting.length;
    const own = holds(lane);
    if (own === 0) return 1;
    let others = 0;
    let busy = 1;
    /** The least a busy other lane holds and asked for. */
    let least = Infinity;
    // An idle lane's ask that nothing has filled for a brief pull's time is no one's reservation either: a
    // long poll made before the pool was crowded (a queue's consumer beside a direct one asked for 16 at
    // start-up and sat on it for its 2 minutes, holding a busy lane's sockets).
    const quiet = now() - BRIEF_PULL_MS;
    for (const l of shared) {
      if (l === lane) continue;
      const held = holds(l);
      const asked = l.requested();
      if (held > 0) { busy++; least = Math.min(least, held + asked); }
      others += held + (held > 0 ? asked : asked > 0 && l.heardAt > quiet ? asked - 1 : 0);
    }
    const even = Math.floor(sockets / busy);
    // A lane held below its even part by those that came first makes the others give back down to theirs.
    const cap = least < even && own >= even ? even : Math.ceil(sockets / busy);
    return Math.min(max, Math.max(1, Math.min(sockets - others, cap)));
  }

  // Asked at every pull and every delivery: sums in place, no object per lane.
  function parkRoom(lane: Lane, gate: KeyGate): number {
    const own = { parked: gate.parked(), bytes: gate.parkedBytes() };
    const shared = lane.tenant === undefined ? undefined : gatedOf.get(lane.tenant);
    if (!shared || shared.size < 2) return roomToPark(own);
    const tenant = { parked: 0, bytes: 0 };
    for (const l of shared) {
      if (!l.gate) continue;
      tenant.parked += l.gate.parked();
      tenant.bytes += l.gate.parkedBytes();
    }
    return roomToPark(own, tenant);
  }

  function start(lane: Lane, tracked: InFlight): void {
    const { slots } = lane;
    slots.running++;
    lane.running++;
    let released = false;
    // The slot under the endpoint's limit is given back when the HTTP attempt ends, before any rate-limit hold.
    const release = () => {
      if (released) return;
      released = true;
      slots.running--;
      lane.running--;
      for (const l of slots.lanes) pump(l);
    };
    running++;
    // One reaction per attempt, not a catch, a finally and a set of promises (each a promise per delivery).
    const ended = () => {
      try {
        inFlight.delete(tracked);
        release();
        lane.gate?.ended(tracked);
      } finally {
        if (--running === 0 && idle.length > 0) {
          for (const resolve of idle) resolve();
          idle = [];
        }
      }
    };
    deps.attempt(lane, tracked, release).then(ended, (e: unknown) => {
      log.error('delivery attempt crashed; it will be retried', { endpoint: lane.id, seq: tracked.msg.seq, reason: describe(e) });
      ended();
    });
  }

  function pump(lane: Lane): void {
    const { slots } = lane;
    while (!lane.closed && slots.running < slots.limit.current && lane.waiting.length > 0) start(lane, lane.waiting.shift()!);
    lane.fill?.();
  }

  /** Into a free slot, or to wait for one. */
  function take(lane: Lane, tracked: InFlight): void {
    if (lane.closed) return void inFlight.delete(tracked);
    if (lane.slots.running < lane.slots.limit.current) start(lane, tracked);
    else lane.waiting.push(tracked);
  }

  /** How many more deliveries the lane's consumer may hand out now. */
  function capacity(lane: Lane, trickle: { at: number }): number {
    if (lane.closed) return 0;
    if (!lane.gate) return paced(lane, allowance(lane) - lane.slots.running - lane.waiting.length);
    const free = lane.slots.limit.current - lane.slots.running - lane.waiting.length;
    const room = parkRoom(lane, lane.gate);
    if (room > 0) return Math.min(free, room);
    return performance.now() - trickle.at >= PARKED_TRICKLE_MS ? 1 : 0;
  }

  /** `free` within the lane's pace; short of it, a pull again when the next tokens come. */
  function paced(lane: Lane, free: number): number {
    const { pace } = lane;
    if (!pace || free <= 0) return free;
    const tokens = pace.available();
    if (tokens >= free) return free;
    lane.paced ??= setTimeout(() => {
      lane.paced = undefined;
      if (!lane.closed) lane.fill?.();
    }, Math.max(PACED_PULL_MS, pace.wait()));
    lane.paced.unref();
    return tokens;
  }

  return {
    run(id, address, gate, pace) {
      let slots = slotsOf.get(id);
      if (!slots) slotsOf.set(id, (slots = { limit: createConcurrencyLimit(deps.maxInFlight), running: 0, lanes: new Set() }));
      const lane: Lane = {
        id, slots, running: 0, heardAt: now(), waiting: [], closed: false, gate, tenant: gate ? deps.tenantOf?.(id) : undefined, pace,
        get limit() { return slots.limit; },
        requested: () => 0,
      };
      slots.lanes.add(lane);
      if (lane.tenant !== undefined) {
        const shared = gatedOf.get(lane.tenant) ?? new Set<Lane>();
        gatedOf.set(lane.tenant, shared.add(lane));
      }
      const trickle = { at: -Infinity };
      const feed = deps.feeds.open({
        ...address,
        capacity: () => capacity(lane, trickle),
        // A crowded pool's lanes ask briefly for more than one: what is not there soon is no one's reservation.
        brief: () => !lane.gate && crowded(lane) !== undefined,
        onMessage(m: PulledMsg) {
          // After stop: left unacked, the server hands it out again after its ack wait.
          if (lane.closed) return;
          lane.heardAt = now();
          pace?.spend();
          // Back after an ack that was lost (a NATS restart): delivered already, acked again. Looked up on a
          // first delivery too: a partition stream keeps acked messages, and a restarted nats-server whose
          // consumer state had not yet saved the ack hands the message out again as new.
          if (deps.recentAcks.has(m)) return void m.ack();
          // Handed out again while held here, waiting or in its attempt: that delivery settles the message,
          // knowing the copy's count. (A keyed lane's gate keeps one attempt per message itself.)
          const held = gate ? undefined : inFlight.holding(m);
          if (held) return void (held.handedOut = Math.max(held.handedOut ?? 0, m.info.deliveryCount));
          deps.retries.arrived(id, m.info.stream, m.seq);
          const tracked: InFlight = { msg: m, touched: performance.now(), wait: deps.waitFor(m.info.deliveryCount) };
          inFlight.add(tracked);
          if (!gate) return take(lane, tracked);
          if (parkRoom(lane, gate) === 0) trickle.at = performance.now();
          gate.admit(tracked, () => take(lane, tracked));
        },
      });
      lane.fill = feed.fill;
      lane.requested = feed.requested;
      lanes.add(lane);
      // At the parked bound nothing else pulls again (no attempt ends): the trickle's own clock does.
      const trickling = gate ? setInterval(feed.fill, PARKED_TRICKLE_MS) : undefined;
      trickling?.unref();
      return {
        repull: feed.repull,
        stop() {
          lane.closed = true;
          clearInterval(trickling);
          clearTimeout(lane.paced);
          leavePool(lane);
          lanes.delete(lane);
          slots.lanes.delete(lane);
          const { tenant } = lane;
          if (tenant !== undefined && gatedOf.get(tenant)?.delete(lane) && gatedOf.get(tenant)?.size === 0) gatedOf.delete(tenant);
          if (slots.lanes.size === 0 && slotsOf.get(id) === slots) slotsOf.delete(id);
          feed.close();
          gate?.close();
          // Messages that never got a slot are let go: the server hands them out again after their ack wait.
          for (const t of lane.waiting) inFlight.delete(t);
          lane.waiting.length = 0;
        },
      };
    },
    settle() {
      return running === 0 ? Promise.resolve() : new Promise<void>((resolve) => idle.push(resolve));
    },
    held() {
      let n = 0;
      for (const slots of slotsOf.values()) n += slots.running;
      for (const lane of lanes) n += lane.waiting.length;
      return n;
    },
    parked() {
      let n = 0;
      for (const lane of lanes) n += lane.gate?.parked() ?? 0;
      return n;
    },
    probing() {
      let n = 0;
      for (const slots of slotsOf.values()) if (slots.limit.probing) n++;
      return n;
    },
  };
}
