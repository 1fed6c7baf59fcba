// The ids an event carries about a data subject (issue 22), and the keyed hash that stands for them in
// the erasure index and the dead letters: HMAC-SHA256 under a key derived from the master key, so
// neither the index stream nor a dead-letter row reveals an id, and nobody without the key can test a
// guessed id against them. During a master-key rotation both keys' hashes are looked up.
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { deriveSubkey } from '../crypto/subkey.ts';
import type { EventData } from '../domain/event-data.ts';

/**
 * The kinds of subject ids erasure finds: users and organizations from a field of the event's data, and
 * the ordering key (issue 21) the producer named in the Hookstream-Ordering-Key header.
 */
export const SubjectKind = { User: 'user', Organization: 'organization', Key: 'key' } as const;
export type SubjectKind = (typeof SubjectKind)[keyof typeof SubjectKind];
export const SUBJECT_KINDS: readonly SubjectKind[] = Object.values(SubjectKind);

const FIELD = { user: 'userId', organization: 'organizationId' } as const;

export interface SubjectRef {
  kind: SubjectKind;
  id: string;
}

/** Longer ids are not ids (and would not be hashed into the index: a producer's mistake, not a subject). */
const MAX_ID_LENGTH = 256;

/**
 * The subject ids of an event: data.userId and data.organizationId when they are non-empty strings, and
 * its ordering key unless that is one of those (a key derived from the data: erasing by key looks up the
 * user and organization ids too, see lookups).
 */
export function subjectsOf(data: EventData, orderingKey?: string): SubjectRef[] {
  const out: SubjectRef[] = [];
  for (const kind of [SubjectKind.User, SubjectKind.Organization] as const) {
    const v = data[FIELD[kind]];
    if (typeof v === 'string' && v !== '' && v.length <= MAX_ID_LENGTH) out.push({ kind, id: v });
  }
  if (orderingKey !== undefined && !out.some((s) => s.id === orderingKey)) out.push({ kind: SubjectKind.Key, id: orderingKey });
  return out;
}

/** What erasing `s` looks up: itself; for an ordering key also the user and organization ids it may have come from. */
export const lookups = (s: SubjectRef): SubjectRef[] =>
  (s.kind === SubjectKind.Key ? [s, { kind: SubjectKind.User, id: s.id }, { kind: SubjectKind.Organization, id: s.id }] : [s]);

/** Whether an event (its data and ordering key) carries the subject, as erasure understands it. */
export const carries = (data: EventData, orderingKey: string | undefined, s: SubjectRef): boolean =>
  s.kind === SubjectKind.Key
    ? orderingKey === s.id || lookups(s).some((l) => data[FIELD[l.kind as keyof typeof FIELD]] === s.id)
    : data[FIELD[s.kind]] === s.id;

/** The data of a delivery body (`{"type","data"}`, as the router encodes it); empty when it does not parse. */
export function deliveryData(body: Uint8Array): EventData {
  try {
    const parsed = JSON.parse(Buffer.from(body).toString('utf8')) as { data?: unknown };
    return typeof parsed.data === 'object' && parsed.data !== null && !Array.isArray(parsed.data) ? parsed.data as EventData : {};
  } catch {
    return {};
  }
}

const KEY_INFO = 'hookstream erasure index v1';

/** The erasure-index key of a master key (HKDF-SHA256, its own label): never the master key itself. */
export function deriveErasureKey(masterKey: Uint8Array): Buffer {
  return deriveSubkey(masterKey, KEY_INFO, 32);
}

export interface SubjectHasher {
  /** Under the current key: what the router and the dead-letter role write. */
  hash(s: SubjectRef): string;
  /** Under the current key and, during a rotation, the previous one, for `s` and its lookups: what erasure reads. */
  all(s: SubjectRef): string[];
}

/** 128 bits as 32 hex digits: a NATS subject token and a Postgres text value as they are. */
const mac = (key: KeyObject, s: SubjectRef): string =>
  createHmac('sha256', key).update(`${s.kind}\0${s.id}`).digest('hex').slice(0, 32);

export function createSubjectHasher(rawKey: Uint8Array, previousRawKeys: readonly Uint8Array[] = []): SubjectHasher {
  // KeyObjects made once, as signing does (src/domain/signature.ts): createHmac with raw bytes makes one
  // per call, about 25 µs against 4 µs, and the router hashes every event's subjects.
  const key = createSecretKey(rawKey);
  const previousKeys = previousRawKeys.map((k) => createSecretKey(k));
  return {
    hash: (s) => mac(key, s),
    all: (s) => lookups(s).flatMap((l) => [mac(key, l), ...previousKeys.map((k) => mac(k, l))]),
  };
}

/** The hasher of a master key and, during a rotation, the previous one (base64, as configured). */
export function subjectHasherOf(masterKeyB64: string, previousMasterKeyB64?: string): SubjectHasher {
  const key = (b64: string) => deriveErasureKey(Buffer.from(b64, 'base64'));
  return createSubjectHasher(key(masterKeyB64), previousMasterKeyB64 === undefined ? [] : [key(previousMasterKeyB64)]);
}
