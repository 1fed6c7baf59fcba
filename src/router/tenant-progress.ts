// How far the router has handled each tenant's events, for the ordering gates (src/delivery/ordered-gate.ts).
// Ordering keys are per tenant, so a keyed delivery of event S needs only every earlier event of its own
// key handled, not every earlier event of every tenant: the router's shared floor (its consumer's ack
// floor) would hold tenant B's ordered deliveries behind tenant A's fan-out, its deferred events (its
// limits) or an event of A handed back for NATS's reasons.
//
// Each keyed delivery carries a barrier B (`hookstream-ordered-after`): once the router's floor is at B or
// more, every earlier event of its key is handled. The router knows which events it holds unfinished
// (received and not yet acked or terminated; one it handed back stays unfinished), and the key of each once
// it has read it. It knows every event after D0, the EVENTS sequence before the first event first delivered
// to it after the last break in its consumer's delivery sequence: while the deliveries it gets follow one
// another, no other router got one in between, and first deliveries come in stream order, so every event
// between D0 and S was delivered here. So B = the highest of D0 and the tenant's highest unfinished event
// below S of the same key (or whose key it has not read yet), at most S-1: the shared floor, as before,
// when nothing is known (another router, a redelivery after a break).
//
// An earlier event of the key still being routed here does not count once its whole fan-out is stored
// (`stored`, just before its ack is written down): its deliveries are then in their queues, where the
// ordering gate sees them on the key's subject. So the router publishes a keyed event's deliveries only
// once the key's earlier events here are stored or handed back (`settled`), and the barrier passes over
// the stored ones: one key's events published within the router's time to route one wait for each other,
// not for the router's progress over every tenant's events.
import type { JsMsg } from '@nats-io/jetstream';

export interface TenantProgress {
  /** A message of the router's consumer, before anything is done with it (in the order they come). */
  received(m: JsMsg, tenant: string): void;
  /** The router read the event's ordering key (its token; null: none). */
  keyed(tenant: string, seq: number, token: string | null): void;
  /** The barrier of a keyed delivery of event `seq` of `tenant` with key `token`, stamped now. */
  barrier(tenant: string, seq: number, token: string): number;
  /** The event's whole fan-out is stored (its ack follows). */
  stored(seq: number): void;
  /**
   * Settles once every earlier unfinished event of the tenant with key `token` is stored, or handed back;
   * undefined when there is none to wait for.
   */
  settled(tenant: string, seq: number, token: string): Promise<void> | undefined;
}

/** Unfinished events looked at below a delivery's, at most: past them the barrier is the last one looked at. */
const MAX_SCAN = 256;
/**
 * Events of one key waiting for their earlier ones' stores, at most: past them an event goes at once with its
 * barrier at the earlier one (the shared progress), so a key published faster than its events are stored
 * never fills the router's window with its waits.
 */
const MAX_CHAINED = 4;

/** Index of the first element ≥ `x` in a sorted array. */
function lowerBound(xs: number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export function createTenantProgress(): TenantProgress {
  /** Each tenant's unfinished events, ascending. */
  const unfinished = new Map<string, number[]>();
  /** The key token of an unfinished event the router has read (null: it has none). */
  const keys = new Map<number, string | null>();
  /** Unfinished events whose fan-out is stored. */
  const storedNow = new Set<number>();
  /** Unfinished events handed back (a nak): nothing waits for them here, their barrier holds what follows. */
  const handedBack = new Set<number>();
  /** Events waiting in `settled`, per tenant and key. */
  const chained = new Map<string, number>();
  /** Who waits for an unfinished event to be stored, handed back or finished. */
  const waiters = new Map<number, (() => void)[]>();
  const wake = (seq: number): void => {
    const ws = waiters.get(seq);
    if (!ws) return;
    waiters.delete(seq);
    for (const w of ws) w();
  };
  let lastDelivery: number | undefined;
  /** Every event after it was delivered to this router first (undefined: not known since the last break). */
  let d0: number | undefined;

  const finish = (tenant: string, seq: number): void => {
    const xs = unfinished.get(tenant);
    if (!xs) return;
    const i = lowerBound(xs, seq);
    if (xs[i] === seq) xs.splice(i, 1);
    if (xs.length === 0) unfinished.delete(tenant);
    keys.delete(seq);
    storedNow.delete(seq);
    handedBack.delete(seq);
    wake(seq);
  };

  return {
    received(m, tenant) {
      const delivery = m.info.deliverySequence;
      // A break: a delivery went to another router (or was lost on the way); what came first is not known.
      if (lastDelivery === undefined || delivery !== lastDelivery + 1) d0 = undefined;
      lastDelivery = delivery;
      if (d0 === undefined && m.info.deliveryCount === 1) {
        d0 = m.seq - 1;
        // Events up to D0 are the shared floor's: their entries no longer matter.
        for (const [t, xs] of unfinished) {
          for (const seq of xs.splice(0, lowerBound(xs, d0 + 1))) { keys.delete(seq); storedNow.delete(seq); handedBack.delete(seq); wake(seq); }
          if (xs.length === 0) unfinished.delete(t);
        }
      }
      let xs = unfinished.get(tenant);
      if (!xs) unfinished.set(tenant, (xs = []));
      const i = lowerBound(xs, m.seq);
      if (xs[i] !== m.seq) xs.splice(i, 0, m.seq);
      // Here again (a redelivery): routed afresh, not stored yet.
      storedNow.delete(m.seq);
      handedBack.delete(m.seq);
      // Acked once its whole fan-out is stored (src/router/routed-log.ts), terminated once rejected; a nak
      // leaves it unfinished until it comes back and ends so (what waited for it goes on, and its barrier holds).
      const { ack, term, nak } = m;
      m.ack = () => { finish(tenant, m.seq); ack.call(m); };
      m.term = (reason?: string) => { finish(tenant, m.seq); term.call(m, reason); };
      m.nak = (delay?: number) => { handedBack.add(m.seq); wake(m.seq); nak.call(m, delay); };
    },
    keyed(tenant, seq, token) {
      const xs = unfinished.get(tenant);
      if (xs && xs[lowerBound(xs, seq)] === seq) keys.set(seq, token);
    },
    barrier(tenant, seq, token) {
      if (d0 === undefined) return seq - 1;
      const xs = unfinished.get(tenant) ?? [];
      let below = 0;
      for (let i = lowerBound(xs, seq) - 1, scanned = 0; i >= 0; i--, scanned++) {
        if (storedNow.has(xs[i]!) && scanned < MAX_SCAN) continue;
        const key = keys.get(xs[i]!);
        if (key === token || key === undefined || scanned === MAX_SCAN) { below = xs[i]!; break; }
      }
      return Math.min(seq - 1, Math.max(d0, below));
    },
    stored(seq) {
      if (!keys.has(seq)) return;
      storedNow.add(seq);
      wake(seq);
    },
    settled(tenant, seq, token) {
      const xs = unfinished.get(tenant);
      if (!xs) return undefined;
      const pending: Promise<void>[] = [];
      for (let i = lowerBound(xs, seq) - 1, scanned = 0; i >= 0 && scanned < MAX_SCAN; i--, scanned++) {
        const s = xs[i]!;
        if (keys.get(s) !== token || storedNow.has(s) || handedBack.has(s)) continue;
        pending.push(new Promise<void>((res) => { const ws = waiters.get(s); if (ws) ws.push(res); else waiters.set(s, [res]); }));
      }
      if (pending.length === 0) return undefined;
      const chain = `${tenant} ${token}`;
      const n = chained.get(chain) ?? 0;
      if (n >= MAX_CHAINED) return undefined;
      chained.set(chain, n + 1);
      return Promise.all(pending).then(() => {
        const left = (chained.get(chain) ?? 1) - 1;
        if (left > 0) chained.set(chain, left);
        else chained.delete(chain);
      });
    },
  };
}
