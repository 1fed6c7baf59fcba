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
// when nothing is known (another router, a redelivery after a break) or when an earlier event of the key
// is still being routed.
import type { JsMsg } from '@nats-io/jetstream';

export interface TenantProgress {
  /** A message of the router's consumer, before anything is done with it (in the order they come). */
  received(m: JsMsg, tenant: string): void;
  /** The router read the event's ordering key (its token; null: none). */
  keyed(tenant: string, seq: number, token: string | null): void;
  /** The barrier of a keyed delivery of event `seq` of `tenant` with key `token`, stamped now. */
  barrier(tenant: string, seq: number, token: string): number;
}

/** Unfinished events looked at below a delivery's, at most: past them the barrier is the last one looked at. */
const MAX_SCAN = 256;

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
          for (const seq of xs.splice(0, lowerBound(xs, d0 + 1))) keys.delete(seq);
          if (xs.length === 0) unfinished.delete(t);
        }
      }
      let xs = unfinished.get(tenant);
      if (!xs) unfinished.set(tenant, (xs = []));
      const i = lowerBound(xs, m.seq);
      if (xs[i] !== m.seq) xs.splice(i, 0, m.seq);
      // Acked once its whole fan-out is stored (src/router/routed-log.ts), terminated once rejected; a nak
      // leaves it unfinished until it comes back and ends so.
      const { ack, term } = m;
      m.ack = () => { finish(tenant, m.seq); ack.call(m); };
      m.term = (reason?: string) => { finish(tenant, m.seq); term.call(m, reason); };
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
        const key = keys.get(xs[i]!);
        if (key === token || key === undefined || scanned === MAX_SCAN) { below = xs[i]!; break; }
      }
      return Math.min(seq - 1, Math.max(d0, below));
    },
  };
}
