// Pull requests sized to what the puller can start now. nats.js's consume() asks for more as soon as
// messages arrive, whether or not they can be worked on, so its buffer is bounded only by the consumer's
// max_ack_pending. The delivery role keeps that bound far above its concurrency (failed deliveries wait for
// their retry server-side, in the consumer's pending set), so it pulls only for its free lanes: a message
// is in this process only while it is attempted (issue 17).
//
// One subscription per feed on an inbox of its own; pull requests go to
// `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` with that inbox as reply, long-polling with idle
// heartbeats. The server answers on the inbox with messages (their subject is the stream's) and status
// messages (subject = the inbox): 100 heartbeat, 404/408 a request ended (Nats-Pending-Messages says how
// many of its messages were not sent), 409 a request refused or cut (leadership change, consumer deleted,
// max waiting), 503 no responders.
import { createInbox, type Msg, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { ackSubjectReader, toPulledMsg, type PulledMsg } from './pulled-msg.ts';

export interface PullFeed {
  /** Pull if the owner's capacity (read through `capacity()`) is not yet asked for. */
  fill(): void;
  /** Forget what earlier requests asked for and pull afresh (a leader election lost them). */
  repull(): void;
  /** Messages asked for and neither received nor reported unsent. */
  requested(): number;
  /** Stop pulling (a message still on its way is redelivered by the server after its ack wait). */
  close(): void;
}

export interface PullFeeds {
  open(opts: {
    stream: string;
    consumer: string;
    /** How many more messages the owner can take now (free lanes). */
    capacity: () => number;
    /** Whether a pull for more than one message should end after BRIEF_PULL_MS, not wait the long poll's expiry. */
    brief?: () => boolean;
    onMessage: (m: PulledMsg) => void;
  }): PullFeed;
  stop(): void;
}

const STATUS_HEARTBEAT = 100;
/** Back off this long after a refused or failed request (consumer gone, leader lost, no responders). */
const RETRY_AFTER_REFUSAL_MS = 1000;
/** A brief pull's expiry (no heartbeats: it ends first). */
export const BRIEF_PULL_MS = 5000;

export function createPullFeeds(nc: NatsConnection, opts: {
  /** A pull waits this long at the server (long poll). */
  expiresMs: number;
  /** The server's heartbeat while a pull waits; two missed mean the pull is lost. */
  heartbeatMs: number;
  /** The connection's inbox prefix (the subjects its user may subscribe to). */
  inboxPrefix: string;
  log: Logger;
}): PullFeeds {
  const { log } = opts;
  const feeds = new Set<FeedState>();
  // Encoded once per batch size and kind (negative keys: brief pulls): a busy endpoint pulls every few deliveries.
  const pullBodies = new Map<number, Uint8Array>();
  const pullBody = (batch: number, brief: boolean): Uint8Array => {
    const key = brief ? -batch : batch;
    let body = pullBodies.get(key);
    if (!body) {
      body = new TextEncoder().encode(JSON.stringify(brief
        ? { batch, expires: BRIEF_PULL_MS * 1e6 }
        : { batch, expires: opts.expiresMs * 1e6, idle_heartbeat: opts.heartbeatMs * 1e6 }));
      pullBodies.set(key, body);
    }
    return body;
  };

  interface FeedState {
    api: string;
    inbox: string;
    sub: Subscription;
    /** Messages asked for and neither received nor reported unsent. */
    requested: number;
    /** Heard from the server (message, heartbeat or status) at this monotonic time. */
    heard: number;
    closed: boolean;
    retry: NodeJS.Timeout | undefined;
    capacity: () => number;
    brief: (() => boolean) | undefined;
    onMessage: (m: PulledMsg) => void;
    threshold: number;
  }

  function fill(f: FeedState): void {
    if (f.closed || f.retry) return;
    const gap = f.capacity() - f.requested;
    // Small pulls only when nothing is asked for: otherwise wait until a quarter of the lanes are free,
    // so a busy endpoint costs one request per few messages, not one per message.
    if (gap <= 0 || (f.requested > 0 && gap < f.threshold)) return;
    f.requested += gap;
    if (f.requested === gap) f.heard = performance.now();
    try {
      nc.publish(f.api, pullBody(gap, gap > 1 && f.brief?.() === true), { reply: f.inbox });
    } catch (e) {
      f.requested -= gap;
      later(f, `pull failed: ${describe(e)}`);
    }
  }

  /** Everything asked for is void: pull again after a pause (a refusal repeats if retried at once). */
  function later(f: FeedState, reason: string): void {
    f.requested = 0;
    if (f.closed || f.retry) return;
    log.debug('pull refused; pulling again shortly', { subject: f.api, reason });
    f.retry = setTimeout(() => {
      f.retry = undefined;
      fill(f);
    }, RETRY_AFTER_REFUSAL_MS);
    f.retry.unref();
  }

  function onStatus(f: FeedState, m: Msg): void {
    const code = m.headers?.code ?? 0;
    if (code === STATUS_HEARTBEAT) return;
    const left = Number(m.headers?.get('Nats-Pending-Messages'));
    if (code === 404 || code === 408) {
      // A request ended (expired, or nothing to send): what it did not deliver is asked for no more.
      f.requested = Number.isSafeInteger(left) && left > 0 ? Math.max(0, f.requested - left) : 0;
      fill(f);
      return;
    }
    // 409 (leadership change, consumer deleted, max waiting exceeded, server shutdown), 503 (no responders).
    later(f, `${code} ${m.headers?.description ?? ''}`.trim());
  }

  // Two missed heartbeats: the pull is gone (a server restart, a lost leader): ask again.
  const sweep = setInterval(() => {
    const lost = performance.now() - 2 * opts.heartbeatMs;
    for (const f of feeds) {
      if (f.requested > 0 && f.heard < lost) {
        f.requested = 0;
        fill(f);
      }
    }
  }, opts.heartbeatMs);
  sweep.unref();

  // A reconnect may be to another server, or to one that restarted: pulls made before are gone.
  let stopped = false;
  void (async () => {
    for await (const s of nc.status()) {
      if (stopped) return;
      if (s.type === 'reconnect') for (const f of feeds) { f.requested = 0; fill(f); }
    }
  })().catch(() => {});

  return {
    open({ stream, consumer, capacity, brief, onMessage }) {
      const inbox = createInbox(opts.inboxPrefix);
      const readAck = ackSubjectReader();
      const f: FeedState = {
        api: `$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`, inbox, requested: 0, heard: performance.now(),
        closed: false, retry: undefined, capacity, brief, onMessage, threshold: Math.max(1, Math.ceil(capacity() / 4)),
        sub: nc.subscribe(inbox, {
          callback: (err, m) => {
            if (err) return later(f, describe(err));
            f.heard = performance.now();
            if (m.subject === inbox) return onStatus(f, m);
            if (f.requested > 0) f.requested--;
            const pulled = toPulledMsg(nc, m, readAck);
            if (!pulled) return log.error('pulled message without an ack subject; skipped', { subject: m.subject });
            f.onMessage(pulled);
            fill(f);
          },
        }),
      };
      feeds.add(f);
      fill(f);
      return {
        fill: () => fill(f),
        requested: () => f.requested,
        repull() {
          f.requested = 0;
          fill(f);
        },
        close() {
          f.closed = true;
          clearTimeout(f.retry);
          feeds.delete(f);
          // Unsubscribing drops whatever is still in flight to the inbox: the server redelivers it after
          // its ack wait (the message is pending at the consumer), so nothing is lost.
          f.sub.unsubscribe();
        },
      };
    },
    stop() {
      stopped = true;
      clearInterval(sweep);
      for (const f of feeds) { f.closed = true; clearTimeout(f.retry); f.sub.unsubscribe(); }
      feeds.clear();
    },
  };
}
