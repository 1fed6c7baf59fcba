// The router's fan-out publishes, shared fairly between tenants: each tenant's publishes wait in a queue of
// its own, and a free place in the window goes to the next tenant in turn that has one waiting and is under
// its own share of the window. So a tenant's 10,000-delivery fan-out is sent at the same pace as before
// when it is alone, and another tenant's delivery waits behind at most one turn, not behind the whole
// fan-out.
//
// What is in the window waits in nats-server, in the order it was sent, and every other request of the
// connection (another tenant's publish, the drain records' read, the directory's sync) waits behind it: a
// window of thousands was seconds of waiting for every tenant on a server storing a few thousand a second
// (a loaded machine). So the window aims at a short wait, TARGET_ACK_MS, not at the publish timeout: an ack
// that waited longer halves it (once per round trip: the late acks of what was sent before a halving were
// its cause), and while it is full, each ack answered within half of that grows it by one (doubling per
// round trip). A server that stores quickly gets the window it keeps busy; a slow one holds about
// TARGET_ACK_MS of publishes, and no publish comes near its 5 s timeout (which hands its event back).
//
// A tenant's publishes leave in the order they were queued, so its deliveries are stored in event order as
// before; between tenants the order changes, which the late marks see and mark (src/router/late-marks.ts).
import type { MsgHdrs } from '@nats-io/nats-core';
import type { AckedPublisher, StoredAt } from '../nats/acked-publisher.ts';

export interface FairPublishes {
  /** Queued behind the tenant's earlier publishes; settles as the publish does. */
  publish(tenant: string, subject: string, body: string | Uint8Array, headers: MsgHdrs): Promise<StoredAt>;
  /** The tenant's publishes queued or awaiting their ack. */
  pending(tenant: string): number;
  /** `go` runs once the tenant has fewer than `below` publishes pending (at once if it has). */
  whenBelow(tenant: string, below: number, go: () => void): void;
  /** Publishes in flight at most now. */
  window(): number;
}

interface Job {
  subject: string;
  body: string | Uint8Array;
  headers: MsgHdrs;
  resolve: (at: StoredAt) => void;
  reject: (e: unknown) => void;
}

interface TenantQueue {
  jobs: Job[];
  /** Index of the next job to send: the array is compacted now and then, not shifted per job. */
  head: number;
  running: number;
  waiters: { below: number; go: () => void }[];
}

/** The wait for an ack the window aims under: longer halves it, within half of it grows it. */
export const TARGET_ACK_MS = 100;
/** The window never shrinks below this, and starts here. */
export const MIN_WINDOW = 16;
export const FIRST_WINDOW = 64;

export function createFairPublishes(publisher: AckedPublisher, opts: {
  window: number; perTenant: number; now?: () => number;
}): FairPublishes {
  const now = opts.now ?? (() => performance.now());
  const queues = new Map<string, TenantQueue>();
  /** Tenants with a publish waiting, in turn order (a Map keeps insertion order: a served tenant goes last). */
  const turns = new Map<string, TenantQueue>();
  let running = 0;
  /** Publishes in flight at most now (opts.window at most), and when it was last halved. */
  let window = Math.min(opts.window, FIRST_WINDOW);
  let shrunkAt = -Infinity;
  const answered = (sentAt: number): void => {
    const t = now();
    const waited = t - sentAt;
    // Grown only while it bounds what is sent: a window that was never full says nothing of the server.
    if (waited <= TARGET_ACK_MS / 2) { if (running >= window) window = Math.min(opts.window, window + 1); }
    // Once per round trip: the late acks of publishes sent before the last halving were its cause.
    else if (waited > TARGET_ACK_MS && sentAt > shrunkAt) {
      window = Math.max(MIN_WINDOW, Math.floor(window / 2));
      shrunkAt = t;
    }
  };

  const pendingOf = (q: TenantQueue) => q.jobs.length - q.head + q.running;

  function send(tenant: string, q: TenantQueue): void {
    const job = q.jobs[q.head]!;
    q.jobs[q.head++] = undefined as unknown as Job;
    if (q.head === q.jobs.length) { q.jobs.length = 0; q.head = 0; } else if (q.head > 1024 && q.head * 2 > q.jobs.length) { q.jobs = q.jobs.slice(q.head); q.head = 0; }
    running++;
    q.running++;
    const sentAt = now();
    let sent: Promise<StoredAt>;
    try {
      sent = publisher.publish(job.subject, job.body, job.headers);
    } catch (e) {
      sent = Promise.reject(e);
    }
    sent.then(job.resolve, job.reject).finally(() => {
      answered(sentAt);
      running--;
      q.running--;
      if (q.head < q.jobs.length && !turns.has(tenant)) turns.set(tenant, q);
      done(tenant, q);
      pump();
    });
  }

  function done(tenant: string, q: TenantQueue): void {
    if (q.waiters.length > 0) {
      const n = pendingOf(q);
      const ready = q.waiters.filter((w) => n < w.below);
      if (ready.length > 0) {
        q.waiters = q.waiters.filter((w) => n >= w.below);
        for (const w of ready) w.go();
      }
    }
    if (pendingOf(q) === 0 && q.waiters.length === 0) queues.delete(tenant);
  }

  function pump(): void {
    // Each tenant served goes to the end of the turns (and is visited again in this pass if it has more).
    for (const [tenant, q] of turns) {
      if (running >= window) return;
      turns.delete(tenant);
      if (q.running >= opts.perTenant) continue; // back in turn when one of its publishes is answered
      send(tenant, q);
      if (q.head < q.jobs.length) turns.set(tenant, q);
    }
  }

  const queueOf = (tenant: string): TenantQueue => {
    let q = queues.get(tenant);
    if (!q) queues.set(tenant, (q = { jobs: [], head: 0, running: 0, waiters: [] }));
    return q;
  };

  return {
    publish(tenant, subject, body, headers) {
      const q = queueOf(tenant);
      return new Promise<StoredAt>((resolve, reject) => {
        q.jobs.push({ subject, body, headers, resolve, reject });
        if (!turns.has(tenant)) turns.set(tenant, q);
        pump();
      });
    },
    pending(tenant) {
      const q = queues.get(tenant);
      return q ? pendingOf(q) : 0;
    },
    window: () => window,
    whenBelow(tenant, below, go) {
      const q = queues.get(tenant);
      if (!q || pendingOf(q) < below) return go();
      q.waiters.push({ below, go });
    },
  };
}
