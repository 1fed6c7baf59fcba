import { tenantPartition } from '../../src/domain/partition.ts';
// `TEST_DIRECT_DELIVERY=1` runs every test's service with direct delivery on (partitioned events, no
// per-endpoint work queue for an unordered endpoint): defaults that a test's own environment still overrides.
export function directDeliveryDefaults(): Record<string, string> {
  return process.env['TEST_DIRECT_DELIVERY'] === '1'
    ? { HOOKSTREAM_EVENT_PARTITIONS: '16', HOOKSTREAM_DIRECT_DELIVERY: '1' }
    : {};
}

/** The subject EVENTS stores a tenant's event under: with partitions, its partition's token after the tenant. */
export function storedEventSubject(tenant: string, type: string, partitions: number): string {
  return partitions > 0 ? `events.${tenant}.${tenantPartition(tenant, partitions)}.${type}` : `events.${tenant}.${type}`;
}
