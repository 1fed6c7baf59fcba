// The command side of endpoints: decide the event, append it to the endpoint's subject with optimistic
// concurrency (expected last subject sequence), so two concurrent commands cannot both win. Input arrives
// checked and typed (parseNewEndpoint / parseEndpointPatch at the API or the command line), never again here.
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM, endpointSubject } from '../../streams/endpoints.ts';
import { isApiError } from '../../streams/ensure.ts';
import type { DirectEndpoint } from '../../streams/direct.ts';
import {
  applyEndpointEvent, assertNotDeleted, assertRestorable, EndpointStatus, Ordering,
  type DisabledReason, type EndpointEvent, type EndpointPatch, type EndpointState, type NewEndpoint,
} from '../domain/endpoint.ts';
import { newEndpointId, type EndpointId, type TenantId } from '../domain/ids.ts';
import { newEd25519KeyPair, newSigningSecret, SignatureScheme } from '../domain/signature.ts';
import { conflict, describe, ErrorCode, isHookstreamError, notFound } from '../errors.ts';
import { readEndpoint, saveEndpointState } from './read.ts';
import { messagesOf } from '../erasure/by-subject.ts';
import type { Logger } from '../log.ts';
import { createSampledWarnings } from '../sampled-log.ts';

/** Secure deletes of a compaction in flight at once. */
const SECURE_DELETES_AT_ONCE = 32;
/** Endpoints whose latest state a store keeps for its next command (about 1 KB each), and for how long. */
const KEPT_STATES = 10_000;
const KEPT_MS = 60_000;

const WRONG_LAST_SEQUENCE = 10071;
export const MAX_GRACE_MS = 7 * 24 * 3600_000;
export const DEFAULT_GRACE_MS = 24 * 3600_000;
const DISABLE_ROUNDS = 5;
/**
 * Events on an endpoint's subject before the command side replaces them with one endpoint.compacted: the
 * history, and what a rebuild or a fold from the start reads of it, stays bounded per endpoint.
 */
export const COMPACT_EVERY = 256;

export interface SecretSealerLike {
  /** Seal bound to the endpoint: the sealed value opens only for this id (issue 8). */
  seal(plaintext: string, endpointId: EndpointId): string;
  open(sealed: string, endpointId: EndpointId): string;
}

/** What a create or rotation hands out once: a v1 endpoint's whsec_ secret; v1a endpoints get none (their whpk_ key is in the state). */
export interface NewSecret {
  signingSecret: string | undefined;
}

export interface CommandResult {
  endpoint: EndpointState;
  /** Stream sequence of the event; the API waits for the projection to reach it. */
  seq: number;
}

export interface EndpointStore {
  /**
   * With `id` (claimed by an Idempotency-Key), a create that finds that endpoint already created by an
   * earlier try answers it, its current secret included, with `existed`.
   */
  create(tenant: TenantId, fields: NewEndpoint, opts?: { id?: EndpointId }): Promise<CommandResult & NewSecret & { existed?: true }>;
  update(tenant: TenantId, id: EndpointId, patch: EndpointPatch): Promise<CommandResult>;
  delete(tenant: TenantId, id: EndpointId): Promise<CommandResult>;
  restore(tenant: TenantId, id: EndpointId): Promise<CommandResult>;
  rotateSecret(tenant: TenantId, id: EndpointId, graceMs?: number): Promise<CommandResult & NewSecret>;
  /**
   * The delivery role's command (no tenant): disable an active endpoint. A concurrent change is re-read
   * and retried; undefined when the endpoint is no longer active (deleted, already disabled, gone).
   */
  disable(id: EndpointId, reason: DisabledReason): Promise<CommandResult | undefined>;
  /** The current state from the stream, scoped to the tenant (another tenant's id is not found). */
  get(tenant: TenantId, id: EndpointId): Promise<EndpointState>;
}

/** The store as its maker holds it: the saves still running behind its commands can be waited for. */
export interface OwnedEndpointStore extends EndpointStore {
  /**
   * Resolves once every state saved so far is written and every compaction's deletes are done (a stop, a
   * tenant's erasure, or a command line before it closes NATS).
   */
  flush(): Promise<void>;
}

/** A fresh signing secret (v1) or ed25519 key pair (v1a); only `secret` is sealed. */
function newKey(scheme: SignatureScheme): { secret: string; publicKey: string | undefined } {
  if (scheme === SignatureScheme.V1a) {
    const pair = newEd25519KeyPair();
    return { secret: pair.secretKey, publicKey: pair.publicKey };
  }
  return { secret: newSigningSecret(), publicKey: undefined };
}

export function createEndpointStore(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  sealer: SecretSealerLike;
  now?: () => Date;
  /** Where reads report the endpoint events they skip. */
  log?: Logger;
  /**
   * Direct delivery (HOOKSTREAM_EVENT_PARTITIONS): before a PATCH of `events` is stored, the endpoint's
   * direct consumer takes the new types (streams/direct.ts, widenDirectConsumer).
   */
  widenDirect?: (endpoint: DirectEndpoint) => Promise<void>;
  /**
   * Direct delivery: EVENTS' last sequence, read just before a write that has an endpoint's direct
   * consumer start, and carried by it (`events_seq`: what the consumer reads up to there is not its own).
   */
  eventsSeq?: () => Promise<number>;
}): OwnedEndpointStore {
  const clock = () => (deps.now ? deps.now() : new Date()).getTime();
  const now = () => new Date(clock()).toISOString();

  // Said once a minute at most: a NATS configuration that refuses them refuses every one.
  const warnings = deps.log ? createSampledWarnings(deps.log, { intervalMs: 60_000 }) : undefined;
  /** The state saved for the next command's read (a cache: a failure costs that read a fold, and a warning). */
  const saveNow = (state: EndpointState) => saveEndpointState(deps.js, deps.jsm, state).catch((e: unknown) => warnings?.warn('save',
    'endpoint state not saved; the next command on it folds its events (is endpoint_states.> allowed for the service user in nats.conf?)',
    { endpoint: state.id, reason: describe(e) }));

  // Saves run behind the command, not in it: a command is done once its event is appended, and the save
  // (a publish, a check and a secure delete of the state before it: 4 round trips, the delete the slowest of
  // a write under load) only spares the next read a fold. Per endpoint one save at a time, of the newest
  // state waiting, so saves never overtake each other and a burst of commands saves once or twice.
  /** The newest state waiting to be saved, per endpoint. */
  const waiting = new Map<EndpointId, EndpointState>();
  /** The save loop of each endpoint with one running. */
  const saving = new Map<EndpointId, Promise<void>>();
  const saveLoop = async (id: EndpointId) => {
    for (let next = waiting.get(id); next; next = waiting.get(id)) {
      waiting.delete(id);
      await saveNow(next);
    }
    // Deleted in the same step that found nothing waiting: a state queued later starts a loop of its own.
    saving.delete(id);
  };
  const save = (state: EndpointState): Promise<void> => {
    const queued = waiting.get(state.id);
    if (!queued || queued.version < state.version) waiting.set(state.id, state);
    if (!saving.has(state.id)) saving.set(state.id, saveLoop(state.id));
    return Promise.resolve();
  };

  /** The compactions' deletes still running, behind the commands that started them. */
  const removing = new Set<Promise<void>>();
  /** Secure-delete the subject's events before `seq`, then purge what is left before it. */
  async function removeBefore(subject: string, seq: number): Promise<void> {
    const before: number[] = [];
    for await (const m of messagesOf(deps.jsm, ENDPOINTS_STREAM, subject, 1, seq - 1)) before.push(m.seq);
    for (let i = 0; i < before.length; i += SECURE_DELETES_AT_ONCE) {
      await Promise.all(before.slice(i, i + SECURE_DELETES_AT_ONCE).map((n) => deps.jsm.streams.deleteMessage(ENDPOINTS_STREAM, n, true).catch(() => false)));
    }
    await deps.jsm.streams.purge(ENDPOINTS_STREAM, { filter: subject, seq });
  }

  /**
   * Replace the subject's events with one carrying the whole state; the events before it are removed
   * behind the command. Best effort: the command is done; a lost race or a failure is tried again at the
   * next command.
   */
  async function compact(state: EndpointState): Promise<EndpointState> {
    const subject = endpointSubject(state.id);
    try {
      const removes = (await deps.jsm.streams.info(ENDPOINTS_STREAM, { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
      const { version: _v, eventsSince: _n, ...carried } = state;
      const event: EndpointEvent = { v: 1, type: 'endpoint.compacted', id: state.id, state: carried as EndpointState, removes, at: now() };
      const ack = await deps.js.publish(subject, JSON.stringify(event), { expect: { lastSubjectSequence: state.version } });
      // The events before it hold sealed secrets (rotated-out ones too): deleted with secure erase, as a
      // purge leaves their bytes in the store file, where a leaked master key would open them (issue 30);
      // 2.3 ms each on nats-server 2.15.1, up to a second for all of them under load, so not in the command.
      // Removing them never changes the subject's last sequence, so commands after this one go on meanwhile,
      // and a read meanwhile folds from the compaction (read.ts).
      const removal: Promise<void> = removeBefore(subject, ack.seq)
        .catch((e: unknown) => warnings?.warn('compact', 'endpoint history before its compaction not removed; removed at the next compaction', { endpoint: state.id, reason: describe(e) }))
        .finally(() => removing.delete(removal));
      removing.add(removal);
      const compacted = applyEndpointEvent(state, event, ack.seq);
      void save(compacted);
      return compacted;
    } catch (e) {
      warnings?.warn('compact', 'endpoint history not compacted; tried again at its next command', { endpoint: state.id, reason: describe(e) });
      return state;
    }
  }

  // The state each endpoint's last command in this process left, which the next command starts from
  // instead of reading the streams: its append expects the stream's last sequence of the endpoint to be this
  // state's, so a state another process has moved on from fails the append, and the command is decided
  // again on a fresh read. A refusal (404, 409) is never answered from a kept state either. Kept a minute
  // at most: an endpoint written now and then is read each time, and a state (sealed secrets included)
  // whose history was erased by another process does not stay in this one's memory.
  const kept = new Map<EndpointId, { state: EndpointState; until: number }>();
  const keep = (state: EndpointState) => {
    kept.delete(state.id);
    kept.set(state.id, { state, until: clock() + KEPT_MS });
    if (kept.size > KEPT_STATES) kept.delete(kept.keys().next().value!);
  };
  const keptState = (id: EndpointId): EndpointState | undefined => {
    const k = kept.get(id);
    if (k && k.until < clock()) {
      kept.delete(id);
      return undefined;
    }
    return k?.state;
  };

  async function append(state: EndpointState | undefined, event: EndpointEvent): Promise<CommandResult> {
    try {
      const ack = await deps.js.publish(endpointSubject(event.id), JSON.stringify(event), {
        expect: { lastSubjectSequence: state?.version ?? 0 },
      });
      let endpoint = applyEndpointEvent(state, event, ack.seq);
      // The event is written: a state not saved (yet) only costs the next read a fold of this one event.
      if ((endpoint.eventsSince ?? 0) >= COMPACT_EVERY) endpoint = await compact(endpoint);
      else void save(endpoint);
      keep(endpoint);
      return { endpoint, seq: Math.max(ack.seq, endpoint.version) };
    } catch (e) {
      if (isApiError(e, WRONG_LAST_SEQUENCE)) {
        if (state) kept.delete(state.id);
        throw conflict(`endpoint ${event.id} was changed concurrently; retry`);
      }
      throw e;
    }
  }

  /** The current state from the streams, scoped to the tenant. */
  async function read(tenant: TenantId, id: EndpointId): Promise<EndpointState> {
    // The tenant is checked before the stream is folded: another tenant's id costs what a missing one does.
    const state = await readEndpoint(deps.js, deps.jsm, id, { tenant, log: deps.log, save });
    if (!state || state.tenant !== tenant) throw notFound(`webhook endpoint ${id}`);
    keep(state);
    return state;
  }

  /**
   * Decide a command's event on the endpoint's state and append it. From the kept state when there is one;
   * when that state turns out stale (the append conflicts) or the decision is a refusal, decided again on
   * a fresh read, so what the command answers never rests on a state only this process had.
   */
  async function command(tenant: TenantId, id: EndpointId, decide: (state: EndpointState) => EndpointEvent): Promise<CommandResult> {
    const mine = keptState(id);
    if (mine && mine.tenant === tenant) {
      try {
        return await append(mine, decide(mine));
      } catch (e) {
        if (!isHookstreamError(e)) throw e;
      }
    }
    const state = await read(tenant, id);
    return append(state, decide(state));
  }

  return {
    get: read,
    async flush() {
      while (saving.size > 0 || removing.size > 0) await Promise.all([...saving.values(), ...removing]);
    },
    async create(tenant, fields, opts = {}) {
      const scheme = fields.signature_scheme ?? SignatureScheme.V1;
      const id = opts.id ?? newEndpointId();
      const key = newKey(scheme);
      const eventsSeq = await deps.eventsSeq?.();
      const created = append(undefined, {
        v: 1, type: 'endpoint.created', id, tenant,
        url: fields.url, events: fields.events, description: fields.description ?? null,
        ...(fields.rate_limit != null ? { rate_limit: fields.rate_limit } : {}),
        ...(fields.ordering !== undefined && fields.ordering !== Ordering.None ? { ordering: fields.ordering } : {}),
        secret: deps.sealer.seal(key.secret, id), at: now(),
        signature_scheme: scheme, ...(key.publicKey ? { signing_public_key: key.publicKey } : {}),
        ...(eventsSeq !== undefined ? { events_seq: eventsSeq } : {}),
      });
      try {
        return { ...(await created), signingSecret: key.publicKey ? undefined : key.secret };
      } catch (e) {
        if (opts.id === undefined || !isHookstreamError(e, ErrorCode.Conflict)) throw e;
        // An earlier try with this id created it: answer that endpoint.
        const state = await read(tenant, id);
        const current = state.secrets[0];
        const signingSecret = state.signatureScheme === SignatureScheme.V1 && current ? deps.sealer.open(current.sealed, id) : undefined;
        return { endpoint: state, seq: state.version, signingSecret, existed: true };
      }
    },
    async update(tenant, id, patch) {
      // An empty patch changes nothing, so it appends nothing: it answers the state as the streams hold it.
      if (Object.keys(patch).length === 0) {
        const state = await read(tenant, id);
        assertNotDeleted(state);
        return { endpoint: state, seq: state.version };
      }
      if (patch.events && deps.widenDirect) {
        // The tenant's own endpoint only: its state is read (or kept) for that tenant first.
        const mine = keptState(id);
        const state = mine?.tenant === tenant ? mine : await read(tenant, id);
        assertNotDeleted(state);
        await deps.widenDirect({ id, tenant, events: patch.events });
      }
      // Back to no ordering: the direct consumer it gets takes the events after this sequence.
      const eventsSeq = patch.ordering === Ordering.None ? await deps.eventsSeq?.() : undefined;
      return command(tenant, id, (state) => {
        assertNotDeleted(state);
        const switched = eventsSeq !== undefined && state.ordering === Ordering.Key;
        return { v: 1, type: 'endpoint.updated', id, ...patch, ...(switched ? { events_seq: eventsSeq } : {}), at: now() };
      });
    },
    delete: (tenant, id) => command(tenant, id, (state) => {
      assertNotDeleted(state);
      return { v: 1, type: 'endpoint.deleted', id, at: now() };
    }),
    async restore(tenant, id) {
      const eventsSeq = await deps.eventsSeq?.();
      return command(tenant, id, (state) => {
        assertRestorable(state);
        return { v: 1, type: 'endpoint.restored', id, ...(eventsSeq !== undefined && state.status === EndpointStatus.Deleted ? { events_seq: eventsSeq } : {}), at: now() };
      });
    },
    async disable(id, reason) {
      // A few rounds: each lost race means someone else changed the endpoint, which is rare and quick.
      for (let round = 0; round < DISABLE_ROUNDS; round++) {
        const state = await readEndpoint(deps.js, deps.jsm, id, { log: deps.log, save });
        if (!state || state.status !== EndpointStatus.Active) return undefined;
        try {
          return await append(state, { v: 1, type: 'endpoint.disabled', id, reason, at: now() });
        } catch (e) {
          if (!isHookstreamError(e, ErrorCode.Conflict)) throw e;
        }
      }
      throw conflict(`endpoint ${id} kept changing; not disabled`);
    },
    async rotateSecret(tenant, id, graceMs = DEFAULT_GRACE_MS) {
      let key: ReturnType<typeof newKey> | undefined;
      const result = await command(tenant, id, (state) => {
        // A rotation keeps the endpoint's scheme: a v1a endpoint gets a new key pair.
        key = newKey(state.signatureScheme);
        const at = deps.now ? deps.now() : new Date();
        return {
          v: 1, type: 'endpoint.secret_rotated', id, secret: deps.sealer.seal(key.secret, id),
          previous_expires_at: graceMs > 0 ? new Date(at.getTime() + graceMs).toISOString() : null,
          at: at.toISOString(), ...(key.publicKey ? { signing_public_key: key.publicKey } : {}),
        };
      });
      return { ...result, signingSecret: key!.publicKey ? undefined : key!.secret };
    },
  };
}
