// DATA_KEYS: the keys delivery bodies are encrypted under (crypto-shredding, src/erasure/data-keys.ts).
// One message per key, `data_keys.<tenant>.<ref>`: the tenant's key on `…tenant`, a data subject's (user,
// organization) on a keyed hash of its id. Each value is sealed under a key derived from the master key.
// Erasure deletes a key with secure erase (its bytes overwritten in the store file), which makes every copy
// sealed under it unreadable: in the work queues' blocks, on replicas, in backups of the queues.
// Never limited by age or count: a key lives as long as what it seals may (a queued delivery, a dead letter).
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const DATA_KEYS_STREAM = 'DATA_KEYS';
/** The token of a tenant's own key (a subject's ref is 32 hex digits: never this). */
export const TENANT_KEY_REF = 'tenant';
export const dataKeySubject = (tenant: string, ref: string) => `data_keys.${tenant}.${ref}`;
export const tenantDataKeys = (tenant: string) => `data_keys.${tenant}.>`;
/**
 * Core NATS (no stream): erasure tells every process to forget a key it may hold in memory,
 * `hookstream.data_keys.erased.<tenant>` with the ref in the body (none: the whole tenant).
 */
export const DATA_KEY_ERASED_PREFIX = 'hookstream.data_keys.erased';

export async function ensureDataKeysStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: DATA_KEYS_STREAM,
    subjects: ['data_keys.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
  }, opts);
}
