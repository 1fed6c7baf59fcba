// API keys in Postgres (table api_keys): create, list, revoke, authenticate. A key is found by its
// sha256, so the database only ever compares digests of 256-bit random keys (timing there tells an
// attacker nothing about a key); the final decision is a constant-time compare of the digests.
import type { EntityManager } from '@mikro-orm/postgresql';
import { ApiKey } from '../db/entities.ts';
import type { TenantId } from '../domain/ids.ts';
import { notFound } from '../errors.ts';
import { generateKey, hashKey, isApiKeyId, isWellFormedKey, newApiKeyId, sameHash, type ApiKeyId } from './key.ts';

/** A key as listings show it: never the key, never its hash. */
export interface ApiKeyInfo {
  id: ApiKeyId;
  tenant: TenantId;
  name: string | null;
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
}

export interface Principal {
  keyId: ApiKeyId;
  tenant: TenantId;
}

const info = (r: ApiKey): ApiKeyInfo => ({
  id: r.id as ApiKeyId,
  tenant: r.tenant as TenantId,
  name: r.name ?? null,
  prefix: r.prefix,
  createdAt: r.createdAt.toISOString(),
  revokedAt: r.revokedAt ? r.revokedAt.toISOString() : null,
});

/** Create a key for a tenant; the returned `key` is the only copy there will ever be. */
export async function createApiKey(em: EntityManager, tenant: TenantId, name: string | null = null): Promise<ApiKeyInfo & { key: string }> {
  const { key, hash, prefix } = generateKey();
  const record = em.create(ApiKey, { id: newApiKeyId(), tenant, name, hash, prefix, createdAt: new Date(), revokedAt: null });
  await em.persist(record).flush();
  return { ...info(record), key };
}

/** The tenant's keys, oldest first, revoked ones included (with their revocation time). */
export async function listApiKeys(em: EntityManager, tenant: TenantId): Promise<ApiKeyInfo[]> {
  const records = await em.find(ApiKey, { tenant }, { orderBy: { createdAt: 'asc', id: 'asc' }, disableIdentityMap: true });
  return records.map(info);
}

/** Revoke a key; revoking a revoked key changes nothing and returns it as it is. */
export async function revokeApiKey(em: EntityManager, id: string, now = new Date()): Promise<ApiKeyInfo> {
  if (!isApiKeyId(id)) throw notFound(`API key ${id}`);
  await em.nativeUpdate(ApiKey, { id, revokedAt: null }, { revokedAt: now });
  const record = await em.findOne(ApiKey, { id }, { disableIdentityMap: true });
  if (!record) throw notFound(`API key ${id}`);
  return info(record);
}

/** The tenant a presented key belongs to, or undefined for a malformed, unknown or revoked key. */
export async function authenticate(em: EntityManager, presented: string): Promise<Principal | undefined> {
  if (!isWellFormedKey(presented)) return undefined;
  const hash = hashKey(presented);
  // A plain query, not an entity: it runs on every request, and hydrating an entity cost more CPU than the
  // rest of a refused request (measured under a flood of requests in the noisy-neighbour fault scenario).
  const [record] = await em.execute<{ id: string; tenant: string; hash: Buffer; revoked_at: Date | null }[]>(
    'select id, tenant, hash, revoked_at from api_keys where hash = ?', [hash]);
  if (!record || record.revoked_at || !sameHash(record.hash, hash)) return undefined;
  return { keyId: record.id as ApiKeyId, tenant: record.tenant as TenantId };
}
