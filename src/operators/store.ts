// Operators (issue 19) in Postgres: create, list, revoke, authenticate. An operator key is `hs_op_` + 32
// random bytes (base64url), shown once and kept only as its sha256, as API keys are (src/apikeys): the
// database compares digests of 256-bit random keys, the final check is a constant-time compare.
import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { Operator } from '../db/entities.ts';
import { newIdBody } from '../domain/ids.ts';
import { conflict, notFound } from '../errors.ts';
import { hashKey, sameHash } from '../apikeys/key.ts';

const KEY_PREFIX = 'hs_op_';
const KEY_SHAPE = /^hs_op_[A-Za-z0-9_-]{43}$/;
/** Listings show the prefix and four random characters, far too few to guess the rest. */
const SHOWN_CHARS = KEY_PREFIX.length + 4;

export type OperatorId = string & { readonly __brand: 'OperatorId' };
const OPERATOR_ID = /^op_[0-9a-z]{26}$/;
export const isOperatorId = (s: unknown): s is OperatorId => typeof s === 'string' && OPERATOR_ID.test(s);

/** What an operator is called in the audit log: also the CLI's `--operator` / HOOKSTREAM_OPERATOR. */
export const OPERATOR_NAME_RULE = '1-64 characters of A-Z, a-z, 0-9 and . _ @ : + -, starting with a letter or digit';
const OPERATOR_NAME = /^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,63}$/;
export const isOperatorName = (s: unknown): s is string => typeof s === 'string' && OPERATOR_NAME.test(s);

export const isWellFormedOperatorKey = (s: string): boolean => KEY_SHAPE.test(s);
/** The characters of a key that listings show (and that the console's sign-in throttle counts by). */
export const operatorKeyPrefix = (key: string): string => key.slice(0, SHOWN_CHARS);

/** An operator as listings show it: never the key, never its hash. */
export interface OperatorInfo {
  id: OperatorId;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
}

const info = (r: Operator): OperatorInfo => ({
  id: r.id as OperatorId, name: r.name, prefix: r.prefix,
  created_at: r.createdAt.toISOString(), revoked_at: r.revokedAt ? r.revokedAt.toISOString() : null,
});

/** Create an operator; the returned `key` is the only copy there will ever be. Names are never reused. */
export async function createOperator(em: EntityManager, name: string): Promise<OperatorInfo & { key: string }> {
  const key = KEY_PREFIX + randomBytes(32).toString('base64url');
  const taken = await em.count(Operator, { name });
  if (taken > 0) throw conflict(`an operator named ${name} exists (or existed: names stay with their audit entries)`);
  const record = em.create(Operator, {
    id: `op_${newIdBody()}`, name, hash: hashKey(key), prefix: key.slice(0, SHOWN_CHARS), createdAt: new Date(), revokedAt: null,
  });
  await em.persist(record).flush();
  return { ...info(record), key };
}

export async function listOperators(em: EntityManager): Promise<OperatorInfo[]> {
  const records = await em.find(Operator, {}, { orderBy: { createdAt: 'asc', id: 'asc' }, disableIdentityMap: true });
  return records.map(info);
}

/** Revoke by id or name: the key stops working and the operator's console sessions end. */
export async function revokeOperator(em: EntityManager, idOrName: string, now = new Date()): Promise<OperatorInfo> {
  const where = isOperatorId(idOrName) ? { id: idOrName } : { name: idOrName };
  await em.nativeUpdate(Operator, { ...where, revokedAt: null }, { revokedAt: now });
  const record = await em.findOne(Operator, where, { disableIdentityMap: true });
  if (!record) throw notFound(`operator ${idOrName}`);
  await em.execute('delete from console_sessions where operator_id = ?', [record.id]);
  return info(record);
}

/** The operator a presented key belongs to, or undefined for a malformed, unknown or revoked key. */
export async function authenticateOperator(em: EntityManager, presented: string): Promise<OperatorInfo | undefined> {
  if (!isWellFormedOperatorKey(presented)) return undefined;
  const hash = hashKey(presented);
  const record = await em.findOne(Operator, { hash }, { disableIdentityMap: true });
  if (!record || record.revokedAt || !sameHash(record.hash, hash)) return undefined;
  return info(record);
}
