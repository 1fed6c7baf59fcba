// Requests answered on one wildcard reply subscription, matched by a counter, with one timer sweeping
// for answers that never come: what nats.js's request does, without its per-request machinery (a mux
// entry, a deferred, a timer and, on every answer, an Error with a stack trace). Used where the service
// makes one request per delivery: JetStream publishes (acked-publisher.ts) and the ordering gate's reads
// (next-by-subject.ts).
import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/nats-core';

export interface Replies<T> {
  /** Publish with a reply subject of ours; resolves with `read(answer)`, rejects with what it throws. */
  request(subject: string, body: string | Uint8Array, headers?: MsgHdrs): Promise<T>;
  /** Rejects whatever is still waiting and stops listening. */
  close(): void;
  /** Takes no new request, waits for the answers still due (each within its timeout), then closes. */
  drain(): Promise<void>;
}

export type NoAnswer = 'timeout' | 'disconnected' | 'closed';

interface Waiting<T> {
  resolve: (value: T) => void;
  reject: (e: Error) => void;
  deadline: number;
}

export function createReplies<T>(nc: NatsConnection, opts: {
  timeoutMs: number;
  inboxPrefix?: string;
  /** The value of an answer, or throws the error the request rejects with. */
  read: (m: Msg) => T;
  /** The error of a request left without an answer: timed out, its connection closed, or close() called. */
  fail: (why: NoAnswer) => Error;
}): Replies<T> {
  const prefix = createInbox(opts.inboxPrefix);
  const waiting = new Map<number, Waiting<T>>();
  let next = 0;
  let closed = false;
  let draining: Promise<void> | undefined;
  /** Called when the last waiting request is settled, while draining. */
  let drained: (() => void) | undefined;

  const sub: Subscription = nc.subscribe(`${prefix}.*`, {
    callback: (err, m) => {
      if (err) return;
      const id = Number(m.subject.slice(prefix.length + 1));
      const w = waiting.get(id);
      if (!w) return; // timed out already
      settle(id);
      let value: T;
      try {
        value = opts.read(m);
      } catch (e) {
        return w.reject(e instanceof Error ? e : new Error(String(e)));
      }
      w.resolve(value);
    },
  });
  const settle = (id: number) => {
    waiting.delete(id);
    if (waiting.size === 0) drained?.();
  };

  const failAll = (why: NoAnswer) => {
    for (const w of waiting.values()) w.reject(opts.fail(why));
    waiting.clear();
    drained?.();
  };
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(sweep);
    sub.unsubscribe();
    failAll('closed');
  };

  // Map order is request order and every request has the same timeout: expired ones are at the front.
  const sweep = setInterval(() => {
    const now = performance.now();
    for (const [id, w] of waiting) {
      if (w.deadline > now) break;
      settle(id);
      w.reject(opts.fail('timeout'));
    }
  }, Math.max(10, Math.min(1000, opts.timeoutMs / 4)));
  sweep.unref();

  void sub.closed.then(() => failAll('disconnected'), () => failAll('disconnected'));

  return {
    request(subject, body, headers) {
      if (closed || draining) return Promise.reject(opts.fail('closed'));
      const id = next++;
      return new Promise<T>((resolve, reject) => {
        waiting.set(id, { resolve, reject, deadline: performance.now() + opts.timeoutMs });
        try {
          nc.publish(subject, body, headers ? { reply: `${prefix}.${id}`, headers } : { reply: `${prefix}.${id}` });
        } catch (e) {
          settle(id);
          reject(e instanceof Error ? e : new Error(String(e)));
        }
      });
    },
    drain() {
      draining ??= (waiting.size > 0 ? new Promise<void>((resolve) => { drained = resolve; }) : Promise.resolve()).then(close);
      return draining;
    },
    close,
  };
}
