// ENDPOINT_SNAPSHOTS: the endpoint directory's folded state at an ENDPOINTS sequence (issue 23), so a
// starting instance folds only the events after it instead of the whole history. A snapshot is its gzipped
// JSON in chunks (`endpoint_snapshots.chunk`, under the server's message size) and then a manifest
// (`endpoint_snapshots.manifest`) naming the chunks' sequences and their digest; a reader takes the latest
// manifest. Only the newest snapshots are kept (max_bytes, oldest discarded); losing them all costs a full
// fold, never a wrong state (src/endpoints/snapshot.ts).
import { nanos } from '@nats-io/nats-core';
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ENDPOINT_SNAPSHOTS_STREAM = 'ENDPOINT_SNAPSHOTS';
export const SNAPSHOT_CHUNK_SUBJECT = 'endpoint_snapshots.chunk';
export const SNAPSHOT_MANIFEST_SUBJECT = 'endpoint_snapshots.manifest';

export async function ensureEndpointSnapshotsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ENDPOINT_SNAPSHOTS_STREAM,
    subjects: ['endpoint_snapshots.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_bytes: 256 * 1024 * 1024,
    duplicate_window: nanos(60_000),
  }, opts);
}
