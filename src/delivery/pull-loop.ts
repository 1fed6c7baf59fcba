// One endpoint's pull loop in this process: messages arrive from its durable consumer, and at most the
// lane's current concurrency limit of them are in their attempt at once (429s shrink it, successes grow
// it); the rest wait in the lane, kept alive by the sweep.
import type { ConsumerMessages } from '@nats-io/jetstream';
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { AttemptLane, Attempts } from './attempt.ts';
import { createConcurrencyLimit } from './concurrency.ts';
import type { InFlight } from './in-flight.ts';

/** One endpoint's attempts in this process: how many may run at once, how many do, and who waits. */
interface Lane extends AttemptLane {
  running: number;
  waiting: InFlight[];
  closed: boolean;
}

export interface PullLoop {
  /** Stop pulling and let go of the messages that never got a slot. */
  stop(): Promise<void>;
}

export interface PullLoops {
  run(id: EndpointId, messages: ConsumerMessages): PullLoop;
  /** Resolves once every attempt started so far has ended (each is bounded by the attempt timeout). */
  settle(): Promise<void>;
}

export function createPullLoops(deps: {
  attempt: Attempts['attempt'];
  /** What the sweep keeps alive; a message joins it on arrival and leaves when its attempt ends. */
  inFlight: Set<InFlight>;
  /** How long the server waits on the n-th delivery before redelivering: the backoff step. */
  waitFor: (deliveryCount: number) => number;
  maxInFlight: number;
  log: Logger;
}): PullLoops {
  const { inFlight, log } = deps;
  const attempts = new Set<Promise<void>>();

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
    const p = deps.attempt(lane, tracked, release).catch((e: unknown) => {
      log.error('delivery attempt crashed; it will be retried', { endpoint: lane.id, seq: tracked.msg.seq, reason: describe(e) });
    }).finally(() => {
      inFlight.delete(tracked);
      release();
    });
    attempts.add(p);
    void p.finally(() => attempts.delete(p));
  }

  function pump(lane: Lane): void {
    while (!lane.closed && lane.running < lane.limit.current && lane.waiting.length > 0) start(lane, lane.waiting.shift()!);
  }

  return {
    run(id, messages) {
      const lane: Lane = { id, limit: createConcurrencyLimit(deps.maxInFlight), running: 0, waiting: [], closed: false };
      const done = (async () => {
        // Never blocks: a message the lane's limit holds back waits in lane.waiting, where the sweep keeps
        // it alive, rather than in the client's buffer where its ack wait would run out and cost a delivery.
        for await (const m of messages) {
          const tracked: InFlight = { msg: m, touched: Date.now(), wait: deps.waitFor(m.info.deliveryCount) };
          inFlight.add(tracked);
          if (lane.running < lane.limit.current) start(lane, tracked);
          else lane.waiting.push(tracked);
        }
      })();
      return {
        async stop() {
          await messages.close();
          await done;
          // Messages that never got a slot are let go: the server hands them out again after their ack wait.
          lane.closed = true;
          for (const t of lane.waiting) inFlight.delete(t);
          lane.waiting.length = 0;
        },
      };
    },
    async settle() {
      await Promise.allSettled([...attempts]);
    },
  };
}
