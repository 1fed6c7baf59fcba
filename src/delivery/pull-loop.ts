// One endpoint's lane in this process: it pulls only as many deliveries as it can attempt now (its
// concurrency limit less the attempts running), so a message is here only while it is attempted. A failed
// delivery waits for its retry at the server, in the consumer's pending set, which is far larger than the
// limit (streams/deliveries.ts): waiting never takes the place of a new delivery (issue 17).
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { PullFeeds } from '../nats/pull-feed.ts';
import type { PulledMsg } from '../nats/pulled-msg.ts';
import type { AttemptLane, Attempts } from './attempt.ts';
import { createConcurrencyLimit } from './concurrency.ts';
import type { InFlight } from './in-flight.ts';
import type { WaitingRetries } from './waiting-retries.ts';
import type { RecentAcks } from './recent-acks.ts';

/** One endpoint's attempts in this process: how many may run at once, how many do, and who waits. */
interface Lane extends AttemptLane {
  running: number;
  /** Arrived while the limit was lower than when they were pulled (a 429, probing): at most one pull's worth. */
  waiting: InFlight[];
  closed: boolean;
  /** Pull for the lanes just freed. */
  fill?: () => void;
}

export interface PullLoop {
  /** Pull afresh: the consumer elected a leader and pulls waiting at the old one are gone. */
  repull(): void;
  /** Stop pulling and let go of the messages that never got a slot. */
  stop(): void;
}

export interface PullLoops {
  run(id: EndpointId, address: { stream: string; consumer: string }): PullLoop;
  /** Resolves once every attempt started so far has ended (each is bounded by the attempt timeout). */
  settle(): Promise<void>;
  /** Endpoints probed one attempt at a time (every recent attempt failed), in this process. */
  probing(): number;
  /** Deliveries in the lanes: in their attempt or waiting for it. */
  held(): number;
}

export function createPullLoops(deps: {
  feeds: PullFeeds;
  attempt: Attempts['attempt'];
  /** What the sweep keeps alive; a message joins it on arrival and leaves when its attempt ends. */
  inFlight: Set<InFlight>;
  /** Failed deliveries waiting for their retry, by endpoint: an arrival is no longer waiting. */
  retries: WaitingRetries;
  /** How long the server waits on the n-th delivery before redelivering: the backoff step. */
  waitFor: (deliveryCount: number) => number;
  maxInFlight: number;
  /** 2xx deliveries acked in this process: one back after a lost ack is acked again, not attempted. */
  recentAcks: RecentAcks;
  log: Logger;
}): PullLoops {
  const { inFlight, log } = deps;
  const attempts = new Set<Promise<void>>();
  const lanes = new Set<Lane>();

  function start(lane: Lane, tracked: InFlight): void {
    lane.running++;
    let released = false;
    // The slot under the lane's limit is given back when the HTTP attempt ends, before any rate-limit hold.
    const release = () => {
      if (released) return;
      released = true;
      lane.running--;
      pump(lane);
    };
    const seq = tracked.msg.seq;
    const p = deps.attempt(lane, tracked, release).catch((e: unknown) => {
      log.error('delivery attempt crashed; it will be retried', { endpoint: lane.id, seq, reason: describe(e) });
    }).finally(() => {
      inFlight.delete(tracked);
      release();
    });
    attempts.add(p);
    void p.finally(() => attempts.delete(p));
  }

  function pump(lane: Lane): void {
    while (!lane.closed && lane.running < lane.limit.current && lane.waiting.length > 0) start(lane, lane.waiting.shift()!);
    lane.fill?.();
  }

  return {
    run(id, address) {
      const lane: Lane = {
        id, limit: createConcurrencyLimit(deps.maxInFlight), running: 0, waiting: [], closed: false,
      };
      const feed = deps.feeds.open({
        ...address,
        capacity: () => (lane.closed ? 0 : lane.limit.current - lane.running - lane.waiting.length),
        onMessage(m: PulledMsg) {
          // After stop: left unacked, the server hands it out again after its ack wait.
          if (lane.closed) return;
          // Back after an ack that was lost (a NATS restart): delivered already, acked again.
          if (m.info.deliveryCount > 1 && deps.recentAcks.has(m)) return void m.ack();
          deps.retries.arrived(id, m.seq);
          const tracked: InFlight = { msg: m, touched: performance.now(), wait: deps.waitFor(m.info.deliveryCount) };
          inFlight.add(tracked);
          if (lane.running < lane.limit.current) start(lane, tracked);
          else lane.waiting.push(tracked);
        },
      });
      lane.fill = feed.fill;
      lanes.add(lane);
      return {
        repull: feed.repull,
        stop() {
          lane.closed = true;
          lanes.delete(lane);
          feed.close();
          // Messages that never got a slot are let go: the server hands them out again after their ack wait.
          for (const t of lane.waiting) inFlight.delete(t);
          lane.waiting.length = 0;
        },
      };
    },
    async settle() {
      await Promise.allSettled([...attempts]);
    },
    held() {
      let n = 0;
      for (const lane of lanes) n += lane.running + lane.waiting.length;
      return n;
    },
    probing() {
      let n = 0;
      for (const lane of lanes) if (lane.limit.probing) n++;
      return n;
    },
  };
}
