// A tenant's partition: where nats-server's partition() puts its events (EVENTS' ingest transform in the
// delivery path's next shape, docs/architecture.md). nats-server hashes the token's bytes with 32-bit FNV-1a
// and takes the rest modulo the count; the service computes the same to find a tenant's partition stream.

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** The partition, 0 to `partitions - 1`, that `{{partition(partitions, n)}}` gives a subject whose n-th token is `tenant`. */
export function tenantPartition(tenant: string, partitions: number): number {
  let h = FNV_OFFSET;
  for (const b of Buffer.from(tenant)) h = Math.imul(h ^ b, FNV_PRIME) >>> 0;
  return h % partitions;
}
