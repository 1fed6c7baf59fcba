// A live, in-memory view of every endpoint, folded from the ENDPOINTS stream by an ordered consumer.
// The router and the delivery role learn endpoint changes from it as they happen, never by polling
// Postgres. `sync()` gives causal consistency: it returns once every endpoint event stored before
// the call has been applied.
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { applyEndpointEvent, EndpointStatus, isEndpointEvent, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import { describe } from '../errors.ts';

export type EndpointChange = (next: EndpointState, previous: EndpointState | undefined) => void;

export interface EndpointDirectory {
  get(id: EndpointId): EndpointState | undefined;
  /** Active endpoints of a tenant. */
  activeFor(tenant: TenantId): Iterable<EndpointState>;
  all(): Iterable<EndpointState>;
  onChange(listener: EndpointChange): () => void;
  /** Resolves once every endpoint event stored before this call is applied. Concurrent calls share one request. */
  sync(): Promise<void>;
  lastSeq(): number;
  stop(): Promise<void>;
}

export async function startEndpointDirectory(deps: { js: JetStreamClient; jsm: JetStreamManager; log: Logger }): Promise<EndpointDirectory> {
  const byId = new Map<EndpointId, EndpointState>();
  const activeByTenant = new Map<TenantId, Map<EndpointId, EndpointState>>();
  const listeners = new Set<EndpointChange>();
  const waiters: { seq: number; resolve: () => void }[] = [];
  let applied = 0;

  const apply = (seq: number, event: unknown) => {
    if (!isEndpointEvent(event)) {
      deps.log.warn('skipping malformed endpoint event', { stream: ENDPOINTS_STREAM, seq });
      return;
    }
    const previous = byId.get(event.id);
    let next: EndpointState;
    try {
      next = applyEndpointEvent(previous, event, seq);
    } catch (e) {
      deps.log.warn('skipping endpoint event', { stream: ENDPOINTS_STREAM, seq, reason: describe(e) });
      return;
    }
    byId.set(next.id, next);
    let tenantMap = activeByTenant.get(next.tenant);
    if (!tenantMap) activeByTenant.set(next.tenant, (tenantMap = new Map()));
    if (next.status === EndpointStatus.Active) tenantMap.set(next.id, next);
    else tenantMap.delete(next.id);
    for (const l of listeners) l(next, previous);
  };

  const advance = (seq: number) => {
    applied = seq;
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (waiters[i]!.seq <= applied) waiters.splice(i, 1)[0]!.resolve();
    }
  };

  const waitFor = (seq: number) =>
    seq <= applied ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ seq, resolve }));

  const consumer = await deps.js.consumers.get(ENDPOINTS_STREAM, { deliver_policy: DeliverPolicy.All });
  const messages: ConsumerMessages = await consumer.consume({ max_messages: 1024 });
  const loop = (async () => {
    for await (const m of messages) {
      let event: unknown;
      try { event = m.json(); } catch { event = undefined; }
      apply(m.seq, event);
      advance(m.seq);
    }
  })();

  // A shared request is safe only for callers that arrived before it was sent, so callers that come
  // while one is running share the next one.
  let running: Promise<void> | undefined;
  let queued: Promise<void> | undefined;
  const runOnce = async () => {
    const info = await deps.jsm.streams.info(ENDPOINTS_STREAM);
    await waitFor(info.state.last_seq);
  };
  const sync = (): Promise<void> => {
    if (queued) return queued;
    if (!running) {
      running = runOnce().finally(() => { running = undefined; });
      return running;
    }
    queued = running.catch(() => {}).then(() => { queued = undefined; return sync(); });
    return queued;
  };

  await sync();
  deps.log.info('endpoint directory loaded', { endpoints: byId.size, seq: applied });

  return {
    get: (id) => byId.get(id),
    activeFor: (tenant) => activeByTenant.get(tenant)?.values() ?? [],
    all: () => byId.values(),
    onChange: (l) => { listeners.add(l); return () => listeners.delete(l); },
    sync,
    lastSeq: () => applied,
    stop: async () => { await messages.close(); await loop; },
  };
}
