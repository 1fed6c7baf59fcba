// Crypto-shredding of delivery bodies: the router seals each body under a data key of its event, and the
// delivery role opens it just before signing the POST. The data key is derived from the tenant's key and
// the keys of the data subjects the event names (data.userId, data.organizationId), each a random key kept
// in DATA_KEYS (streams/data-keys.ts) sealed under the master key and cached in memory. Erasure destroys a
// subject's key (or, for a tenant that leaves, the tenant's): every copy sealed under it, wherever it is
// (an acknowledged delivery's bytes in a work-queue block, a replica, a backup of the queues, a dead
// letter), can no longer be opened.
//
// A subject's key is found by a ref, a keyed hash of its id under a key derived from the tenant's key:
// DATA_KEYS names no id, and the ref does not change when the master key is rotated (only the sealing does).
// A body from before sealing (plain JSON) is delivered as it is: a sealed body starts with a NUL byte,
// which JSON text never does.
import { createHmac, createSecretKey, hkdfSync, randomFillSync, type KeyObject } from 'node:crypto';
import sodium from 'libsodium-wrappers';
import { JetStreamApiCodes, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';
import { DATA_KEY_ERASED_PREFIX, DATA_KEYS_STREAM, dataKeySubject, TENANT_KEY_REF, tenantDataKeys } from '../../streams/data-keys.ts';
import { messagesOf } from './by-subject.ts';
import { isApiError } from '../../streams/ensure.ts';
import { deriveSubkey } from '../crypto/subkey.ts';
import { ErrorCode, HookstreamError } from '../errors.ts';
import type { EventData } from '../domain/event-data.ts';

const MARK = 0x00;
const VERSION = 1;
const REF_BYTES = 16;
const NONCE_BYTES = 24;
const KEY_BYTES = 32;
/** Entries each cache keeps at most (oldest dropped first): about 10 MB for the largest. */
const CACHE_MAX = 100_000;
const WRAP_LABEL = 'hookstream data keys v1';
/** JetStream stores a key only where its subject holds none yet: two routers meeting a subject at once keep one key. */
const EXPECTED_LAST_SUBJECT_SEQ = 'Nats-Expected-Last-Subject-Sequence';
const REF_LABEL = 'hookstream data key ref v1';
const BODY_LABEL = 'hookstream delivery body v1';

/** A sealed body whose key was destroyed by erasure: it is never opened again. */
export class DataKeyErasedError extends HookstreamError {
  constructor() {
    super(ErrorCode.NotFound, 'the delivery body\'s data key was erased');
    this.name = 'DataKeyErasedError';
  }
}
export const isDataKeyErased = (e: unknown): e is DataKeyErasedError => e instanceof DataKeyErasedError;

/** Whether a delivery body is sealed (else it is the plain JSON of a delivery routed before sealing). */
export const isSealedBody = (body: Uint8Array): boolean => body.length > 0 && body[0] === MARK;

/** Longer ids are not ids (subject-hash.ts): such an event is sealed under its tenant's key alone. */
const MAX_ID_LENGTH = 256;

export interface DataKeys {
  /**
   * `body` sealed under the data key of the event's tenant and subjects. Synchronous when its keys are in
   * memory; otherwise a promise, and every seal asked after it settles after it too, so bodies come out in
   * the order they were asked for (the router publishes them in event order).
   */
  seal(tenant: string, data: EventData, body: Uint8Array | string): Uint8Array | Promise<Uint8Array>;
  /** The plain body of a delivery: as it is when not sealed; DataKeyErasedError when a key of it was erased. */
  open(body: Uint8Array): Uint8Array | Promise<Uint8Array>;
  /** The refs a subject's key is kept under, for erasure (the tenant's key is read, never created). */
  refsOf(tenant: string, subjects: readonly { kind: string; id: string }[]): Promise<string[]>;
  close(): void;
}

/** The key that seals the entries of DATA_KEYS: derived from a master key, never the master key. */
export const dataKeyWrapKey = (masterKeyB64: string): Buffer => deriveSubkey(Buffer.from(masterKeyB64, 'base64'), WRAP_LABEL, 32);

/**
 * Random bytes for nonces and keys, filled 24 KiB at a time: a `randomFillSync` per call costs 1.4 µs, a
 * slice of this 0.1. A Uint8Array, not a Buffer: its slice() copies (a Buffer's is a view).
 */
const pool = new Uint8Array(NONCE_BYTES * 1024);
let pooledAt = pool.length;

/** `n` random bytes, a view of the pool: copy them before the next call. */
function pooledRandom(n: number): Uint8Array {
  if (pooledAt + n > pool.length) { randomFillSync(pool); pooledAt = 0; }
  return pool.subarray(pooledAt, pooledAt += n);
}

/** A new data key (its bytes are wiped from the pool once copied). */
function newKey(): Uint8Array {
  const view = pooledRandom(KEY_BYTES);
  const key = view.slice();
  view.fill(0);
  return key;
}

/** An entry's value: nonce || AEAD(key) with its subject as additional data (a value copied elsewhere does not open). */
export function wrapDataKey(wrapKey: Uint8Array, subject: string, key: Uint8Array): Uint8Array {
  const nonce = pooledRandom(NONCE_BYTES);
  const box = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(key, sodium.from_string(subject), null, nonce, wrapKey);
  const out = new Uint8Array(NONCE_BYTES + box.length);
  out.set(nonce);
  out.set(box, NONCE_BYTES);
  return out;
}

/** The key of an entry, under the current wrap key or the previous one; undefined when neither opens it. */
export function unwrapDataKey(wrapKeys: readonly Uint8Array[], subject: string, value: Uint8Array): { key: Uint8Array; current: boolean } | undefined {
  for (const [i, wrapKey] of wrapKeys.entries()) {
    try {
      const key = sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(null, value.subarray(NONCE_BYTES), sodium.from_string(subject), value.subarray(0, NONCE_BYTES), wrapKey);
      return { key, current: i === 0 };
    } catch {
      // the next key
    }
  }
  return undefined;
}

/** Keep at most CACHE_MAX entries, the oldest going first. */
function remember<V>(map: Map<string, V>, key: string, value: V): V {
  if (map.size >= CACHE_MAX) map.delete(map.keys().next().value!);
  map.set(key, value);
  return value;
}

interface Sealing {
  head: Uint8Array;
  key: Uint8Array;
}

export function createDataKeys(deps: {
  nc: NatsConnection; jsm: JetStreamManager;
  /** Present in the roles that create keys (the router): where they are written; absent where keys are only read. */
  publisher?: Pick<AckedPublisher, 'publish'> | undefined;
  /**
   * The process also opens what it seals (the router and the delivery role in one process): a sealing is
   * remembered for opening too, so a new subject's body key is derived once, not once on each side.
   */
  opensWhatItSeals?: boolean;
  masterKey: string; previousMasterKey?: string | undefined;
}): DataKeys {
  const wrapKeys = [dataKeyWrapKey(deps.masterKey), ...(deps.previousMasterKey ? [dataKeyWrapKey(deps.previousMasterKey)] : [])];
  /** Key by DATA_KEYS subject (one found missing is not remembered: a later event may create it). */
  const keys = new Map<string, Uint8Array>();
  const loading = new Map<string, Promise<Uint8Array | undefined>>();
  /** A tenant's ref key (a KeyObject: createHmac with raw bytes makes one per call). */
  const refKeys = new Map<string, KeyObject>();
  /** `tenant\0kind\0id` → ref. */
  const refs = new Map<string, string>();
  /** What the router seals under, by `tenant\0userId\0organizationId`: the body's head and its data key. */
  const sealings = new Map<string, Sealing>();
  /** What the delivery role opens with, by a sealed body's head (latin1): its data key. */
  const openings = new Map<string, Uint8Array>();

  async function read(subject: string): Promise<Uint8Array | undefined> {
    const m = await deps.jsm.streams.getMessage(DATA_KEYS_STREAM, { last_by_subj: subject }).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.NoMessageFound)) return null;
      throw e;
    });
    if (!m || m.data.length === 0) return undefined;
    const opened = unwrapDataKey(wrapKeys, subject, m.data);
    // Sealed under a master key this process does not hold: a configuration fault, never "erased".
    if (!opened) throw new HookstreamError(ErrorCode.Internal, `the data key ${subject} does not open under the master key`);
    return opened.key;
  }

  /** A new key, stored unless another process stored one first (then that one). */
  async function create(subject: string): Promise<Uint8Array> {
    const key = newKey();
    const h = headers();
    h.set(EXPECTED_LAST_SUBJECT_SEQ, '0');
    try {
      await deps.publisher!.publish(subject, wrapDataKey(wrapKeys[0]!, subject, key), h);
      return key;
    } catch (e) {
      if (!(e instanceof PublishRejectedError && e.code === JetStreamApiCodes.StreamWrongLastSequence)) throw e;
      const winner = await read(subject);
      if (!winner) throw e;
      return winner;
    }
  }

  /** The key of `subject` from memory, or a promise of it (created when absent and `creating`). */
  function keyOf(subject: string, creating: boolean): Uint8Array | undefined | Promise<Uint8Array | undefined> {
    const k = keys.get(subject);
    if (k) return k;
    let p = loading.get(subject);
    if (!p) {
      // Creating, a key is written first and read only when one is there already: one round trip for a
      // subject never met (every new user), two for one met by another process or before a restart.
      p = (creating ? create(subject) : read(subject))
        .then((found) => (found ? remember(keys, subject, found) : undefined))
        .finally(() => loading.delete(subject));
      loading.set(subject, p);
    }
    return p;
  }

  function refOf(tenant: string, tenantKey: Uint8Array, kind: string, id: string): string {
    const at = `${tenant}\0${kind}\0${id}`;
    const known = refs.get(at);
    if (known) return known;
    const refKey = refKeys.get(tenant) ?? remember(refKeys, tenant, createSecretKey(Buffer.from(hkdfSync('sha256', tenantKey, new Uint8Array(0), REF_LABEL, 32))));
    return remember(refs, at, createHmac('sha256', refKey).update(`${kind}\0${id}`).digest('hex').slice(0, 2 * REF_BYTES));
  }

  /**
   * The data key of a tenant key and subject keys (in the order of their refs in the head). The input as a
   * KeyObject: hkdfSync given raw bytes checks them on a slower path (11 against 7 µs, the same bytes).
   */
  const dataKey = (tenantKey: Uint8Array, subjectKeys: readonly Uint8Array[]): Uint8Array =>
    new Uint8Array(hkdfSync('sha256', createSecretKey(Buffer.concat([tenantKey, ...subjectKeys])), new Uint8Array(0), BODY_LABEL, KEY_BYTES));

  /** A sealed body's head: mark, version, tenant, the refs of its subjects' keys (authenticated, in clear). */
  function headOf(tenant: string, refList: readonly string[]): Buffer {
    const t = Buffer.from(tenant, 'utf8');
    const head = Buffer.alloc(4 + t.length + refList.length * REF_BYTES);
    head[0] = MARK;
    head[1] = VERSION;
    head[2] = t.length;
    t.copy(head, 3);
    head[3 + t.length] = refList.length;
    refList.forEach((r, i) => head.write(r, 4 + t.length + i * REF_BYTES, 'hex'));
    return head;
  }

  /** An event's sealing from its keys, or a promise of it (keys read, or created, first). */
  function sealingOf(at: string, tenant: string, ids: readonly [string, string][]): Sealing | undefined | Promise<Sealing | undefined> {
    const finish = (tenantKey: Uint8Array | undefined) => {
      if (!tenantKey) return undefined;
      const refList = ids.map(([kind, id]) => refOf(tenant, tenantKey, kind, id));
      const got = refList.map((r) => keyOf(dataKeySubject(tenant, r), true));
      const done = (list: (Uint8Array | undefined)[]): Sealing | undefined => {
        if (!list.every((k) => k !== undefined)) return undefined;
        const head = headOf(tenant, refList);
        const sealing = remember(sealings, at, { head, key: dataKey(tenantKey, list) });
        if (deps.opensWhatItSeals) remember(openings, head.toString('latin1'), sealing.key);
        return sealing;
      };
      return got.some((k) => k instanceof Promise) ? Promise.all(got).then(done) : done(got as (Uint8Array | undefined)[]);
    };
    const tk = keyOf(dataKeySubject(tenant, TENANT_KEY_REF), true);
    return tk instanceof Promise ? tk.then(finish) : finish(tk);
  }

  function encrypt({ head, key }: Sealing, body: Uint8Array | string): Uint8Array {
    const nonce = pooledRandom(NONCE_BYTES);
    const box = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(typeof body === 'string' ? Buffer.from(body, 'utf8') : body, head, null, nonce, key);
    const out = new Uint8Array(head.length + NONCE_BYTES + box.length);
    out.set(head);
    out.set(nonce, head.length);
    out.set(box, head.length + NONCE_BYTES);
    return out;
  }

  const idOf = (v: unknown): string => (typeof v === 'string' && v.length <= MAX_ID_LENGTH ? v : '');

  let tail: Promise<unknown> | undefined;
  const noop = () => {};

  // Erasure tells every process to forget what it destroyed; a process that was away forgets everything.
  const forget = (tenant: string, ref: string) => {
    sealings.clear();
    openings.clear();
    if (ref !== '') return void keys.delete(dataKeySubject(tenant, ref));
    for (const k of keys.keys()) if (k.startsWith(`data_keys.${tenant}.`)) keys.delete(k);
    for (const k of refs.keys()) if (k.startsWith(`${tenant}\0`)) refs.delete(k);
    refKeys.delete(tenant);
  };
  const sub: Subscription = deps.nc.subscribe(`${DATA_KEY_ERASED_PREFIX}.*`, {
    callback: (err, m) => { if (!err) forget(m.subject.slice(DATA_KEY_ERASED_PREFIX.length + 1), m.string()); },
  });
  let closed = false;
  void (async () => {
    for await (const s of deps.nc.status()) {
      if (closed) return;
      if (s.type === 'reconnect') for (const map of [keys, refKeys, refs, sealings, openings] as Map<string, unknown>[]) map.clear();
    }
  })().catch(noop);

  return {
    seal(tenant, data, body) {
      const u = idOf(data['userId']);
      const o = idOf(data['organizationId']);
      const at = `${tenant}\0${u}\0${o}`;
      const known = tail === undefined ? sealings.get(at) : undefined;
      if (known) return encrypt(known, body);
      const ids: [string, string][] = [];
      if (u !== '') ids.push(['user', u]);
      if (o !== '') ids.push(['organization', o]);
      const ready = sealingOf(at, tenant, ids);
      if (!(ready instanceof Promise) && ready && tail === undefined) return encrypt(ready, body);
      // Bodies come out in the order they were asked for: this one after every one still waiting for keys.
      const before = tail;
      const p = (async () => {
        if (before) await before.catch(noop);
        const sealing = await ready;
        if (!sealing) throw new HookstreamError(ErrorCode.Unavailable, 'a data key was erased while it was being created; routed again');
        return encrypt(sealing, body);
      })();
      tail = p;
      p.finally(() => { if (tail === p) tail = undefined; }).catch(noop);
      return p;
    },

    open(body) {
      if (!isSealedBody(body)) return body;
      if (body.length < 4 || body[1] !== VERSION || body.length < 4 + body[2]!) throw new DataKeyErasedError();
      const tl = body[2]!;
      const n = body[3 + tl]!;
      const headEnd = 4 + tl + n * REF_BYTES;
      if (body.length < headEnd + NONCE_BYTES + 16) throw new DataKeyErasedError();
      const decrypt = (key: Uint8Array): Uint8Array => {
        try {
          return sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(null, body.subarray(headEnd + NONCE_BYTES), body.subarray(0, headEnd), body.subarray(headEnd, headEnd + NONCE_BYTES), key);
        } catch {
          // A key under the same ref made after the erasure: this body's key is gone all the same.
          throw new DataKeyErasedError();
        }
      };
      const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      const at = bytes.toString('latin1', 0, headEnd);
      const known = openings.get(at);
      if (known) return decrypt(known);
      const tenant = bytes.toString('utf8', 3, 3 + tl);
      const refList = Array.from({ length: n }, (_, i) => bytes.toString('hex', 4 + tl + i * REF_BYTES, 4 + tl + (i + 1) * REF_BYTES));
      const withTenant = async (tenantKey: Uint8Array | undefined) => {
        if (!tenantKey) throw new DataKeyErasedError();
        const list = await Promise.all(refList.map((r) => keyOf(dataKeySubject(tenant, r), false)));
        if (list.some((k) => k === undefined)) throw new DataKeyErasedError();
        return decrypt(remember(openings, at, dataKey(tenantKey, list as Uint8Array[])));
      };
      const tk = keyOf(dataKeySubject(tenant, TENANT_KEY_REF), false);
      return tk instanceof Promise ? tk.then(withTenant) : withTenant(tk);
    },

    async refsOf(tenant, subjects) {
      const tenantKey = await keyOf(dataKeySubject(tenant, TENANT_KEY_REF), false);
      if (!tenantKey) return [];
      return subjects.map((s) => refOf(tenant, tenantKey, s.kind, s.id));
    },

    close() {
      closed = true;
      sub.unsubscribe();
    },
  };
}

/**
 * Destroy keys of DATA_KEYS, every message of each (secure erase: the bytes are overwritten in the store
 * file), then tell every process to forget them. `refs`: a tenant's subjects' refs, or 'all' (the tenant's
 * own key too: nothing of the tenant opens any more). Returns the messages deleted.
 */
export async function destroyDataKeys(deps: { jsm: JetStreamManager; nc: NatsConnection }, tenant: string, refs: readonly string[] | 'all'): Promise<number> {
  let n = 0;
  const subjects = refs === 'all' ? [tenantDataKeys(tenant)] : refs.map((r) => dataKeySubject(tenant, r));
  for (const subject of subjects) {
    for await (const m of messagesOf(deps.jsm, DATA_KEYS_STREAM, subject)) {
      if (await deps.jsm.streams.deleteMessage(DATA_KEYS_STREAM, m.seq, true).catch((e: unknown) => {
        if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return false;
        throw e;
      })) n++;
    }
  }
  for (const ref of refs === 'all' ? [''] : refs) deps.nc.publish(`${DATA_KEY_ERASED_PREFIX}.${tenant}`, ref);
  await deps.nc.flush();
  return n;
}

/**
 * `hookstream keys reseal-secrets`, during a master-key rotation: every key of DATA_KEYS sealed under the
 * previous master key is stored again under the current one, and its old message deleted with secure erase
 * (once the previous key is retired, nothing would open it, and a leaked old key must not open it either).
 */
export async function resealDataKeys(deps: {
  jsm: JetStreamManager; js: JetStreamClient; masterKey: string; previousMasterKey?: string | undefined;
}): Promise<{ resealed: number; current: number; unopened: number }> {
  await sodium.ready;
  const wrapKeys = [dataKeyWrapKey(deps.masterKey), ...(deps.previousMasterKey ? [dataKeyWrapKey(deps.previousMasterKey)] : [])];
  const out = { resealed: 0, current: 0, unopened: 0 };
  const end = await deps.jsm.streams.info(DATA_KEYS_STREAM).then((i) => i.state.last_seq, () => 0);
  for await (const m of messagesOf(deps.jsm, DATA_KEYS_STREAM, 'data_keys.>', 1, end)) {
    const opened = unwrapDataKey(wrapKeys, m.subject, m.data);
    // Under neither key given (a wrong key, or one retired too early): left as it is, and counted.
    if (!opened) { out.unopened++; continue; }
    if (opened.current) { out.current++; continue; }
    await deps.js.publish(m.subject, wrapDataKey(wrapKeys[0]!, m.subject, opened.key));
    await deps.jsm.streams.deleteMessage(DATA_KEYS_STREAM, m.seq, true);
    out.resealed++;
  }
  return out;
}
