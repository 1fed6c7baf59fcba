// Snapshots of the endpoint directory (issue 23): start-up folds the events after the latest snapshot
// instead of the whole ENDPOINTS history. A snapshot is trusted no more than the events it stands for:
// every state in it must pass the fold's checks (fold.ts), its digest must match, and the directory still
// proves itself against the stream (a removal or a recreated stream since the snapshot folds from the
// start). Anything wrong with a snapshot costs a full fold and a warning, never a wrong view.
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINT_SNAPSHOTS_STREAM, SNAPSHOT_CHUNK_SUBJECT, SNAPSHOT_MANIFEST_SUBJECT } from '../../streams/endpoint-snapshots.ts';
import type { EndpointState } from '../domain/endpoint.ts';
import { isEndpointId } from '../domain/ids.ts';
import { endpointStateProblem } from './fold.ts';

/** Under nats-server's default max_payload (1 MiB). */
const CHUNK_BYTES = 512 * 1024;

/** The directory at one point of the stream. */
export interface DirectorySnapshot {
  /** ENDPOINTS sequence reached: the next fold starts after it. */
  seq: number;
  /** Messages applied up to it (the directory compares it with the stream's count to notice removals). */
  count: number;
  states: EndpointState[];
  /** Messages of each endpoint in `count` since its last compaction (directory.ts); absent in older snapshots. */
  seen?: Record<string, number>;
}

interface Manifest {
  v: 1;
  seq: number;
  count: number;
  endpoints: number;
  /** ENDPOINT_SNAPSHOTS sequences of the chunks, in order. */
  chunks: number[];
  /** sha256 (hex) of the gzipped bytes. */
  sha256: string;
  at: string;
}

const zip = promisify(gzip);
const unzip = promisify(gunzip);

/** The latest manifest's ENDPOINTS sequence, or 0 when there is none. */
export async function latestSnapshotSeq(jsm: JetStreamManager): Promise<number> {
  const m = await jsm.streams.getMessage(ENDPOINT_SNAPSHOTS_STREAM, { last_by_subj: SNAPSHOT_MANIFEST_SUBJECT });
  return m ? m.json<Manifest>().seq : 0;
}

/** Store a snapshot: its chunks, then the manifest that makes it the latest. Compressed off the event loop. */
export async function writeSnapshot(js: JetStreamClient, snapshot: DirectorySnapshot): Promise<{ bytes: number }> {
  const bytes = await zip(JSON.stringify({ v: 1, states: snapshot.states, seen: snapshot.seen }));
  const chunks: number[] = [];
  for (let i = 0; i * CHUNK_BYTES < bytes.length || i === 0; i++) {
    // Instances snapshotting the same sequence write it once (the stream's duplicate window).
    const ack = await js.publish(SNAPSHOT_CHUNK_SUBJECT, bytes.subarray(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES), { msgID: `${snapshot.seq}.${i}` });
    chunks.push(ack.seq);
  }
  const manifest: Manifest = {
    v: 1, seq: snapshot.seq, count: snapshot.count, endpoints: snapshot.states.length, chunks,
    sha256: createHash('sha256').update(bytes).digest('hex'), at: new Date().toISOString(),
  };
  await js.publish(SNAPSHOT_MANIFEST_SUBJECT, JSON.stringify(manifest), { msgID: `${snapshot.seq}.manifest` });
  return { bytes: bytes.length };
}

export class UnusableSnapshotError extends Error {
  override readonly name = 'UnusableSnapshotError';
}

/** The latest snapshot, undefined when there is none; UnusableSnapshotError when it cannot be trusted. */
export async function readSnapshot(jsm: JetStreamManager): Promise<DirectorySnapshot | undefined> {
  const m = await jsm.streams.getMessage(ENDPOINT_SNAPSHOTS_STREAM, { last_by_subj: SNAPSHOT_MANIFEST_SUBJECT });
  if (!m) return undefined;
  let manifest: Manifest;
  try {
    manifest = m.json<Manifest>();
  } catch {
    throw new UnusableSnapshotError('its manifest is not JSON');
  }
  if (manifest.v !== 1 || !Number.isSafeInteger(manifest.seq) || manifest.seq < 1 || !Number.isSafeInteger(manifest.count) || manifest.count < 0
    || !Array.isArray(manifest.chunks) || !manifest.chunks.every(Number.isSafeInteger) || typeof manifest.sha256 !== 'string') {
    throw new UnusableSnapshotError('its manifest is malformed');
  }
  const parts: Uint8Array[] = [];
  for (const seq of manifest.chunks) {
    const chunk = await jsm.streams.getMessage(ENDPOINT_SNAPSHOTS_STREAM, { seq });
    if (!chunk || chunk.subject !== SNAPSHOT_CHUNK_SUBJECT) throw new UnusableSnapshotError(`its chunk ${seq} is gone`);
    parts.push(chunk.data);
  }
  const bytes = Buffer.concat(parts);
  if (createHash('sha256').update(bytes).digest('hex') !== manifest.sha256) throw new UnusableSnapshotError('its digest does not match');
  let body: unknown;
  try {
    body = JSON.parse((await unzip(bytes)).toString('utf8'));
  } catch {
    throw new UnusableSnapshotError('it does not unpack');
  }
  const states = (body as { v?: unknown; states?: unknown }).states;
  if ((body as { v?: unknown }).v !== 1 || !Array.isArray(states)) throw new UnusableSnapshotError('it holds no version-1 states');
  for (const s of states as EndpointState[]) {
    const problem = typeof s === 'object' && s !== null && Array.isArray(s.secrets) && isEndpointId(s.id) && Number.isSafeInteger(s.version) && s.version <= manifest.seq
      ? endpointStateProblem(s) : 'not an endpoint state';
    if (problem) throw new UnusableSnapshotError(`a state in it is malformed: ${problem}`);
  }
  if (states.length !== manifest.endpoints) throw new UnusableSnapshotError('it holds another number of endpoints than its manifest says');
  const seen = (body as { seen?: unknown }).seen;
  const seenOk = typeof seen === 'object' && seen !== null && Object.values(seen).every((n) => Number.isSafeInteger(n) && (n as number) >= 0);
  return { seq: manifest.seq, count: manifest.count, states: states as EndpointState[], ...(seenOk ? { seen: seen as Record<string, number> } : {}) };
}
