// The erasure index through a master-key rotation: subject hashes are keyed by the master key, so once the
// previous key is retired erasure finds only what is hashed under the current one. Run by
// `keys reseal-dead-letters` once every instance runs on the new key: each row not under the current key
// is replaced by the current hashes of the subjects of what it points to (the event in EVENTS, else one of
// its deliveries still queued). A row whose event and deliveries are all gone points at no payload any
// more: it is left to expire with the index. Rows are walked in key order in pages, so memory stays flat.
import type { MikroORM } from '@mikro-orm/postgresql';
import { JetStreamApiCodes, type JetStreamManager, type StoredMsg } from '@nats-io/jetstream';
import { Match } from '@nats-io/nats-core';
import { EVENTS_STREAM } from '../../streams/events.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { isApiError } from '../../streams/ensure.ts';
import { parseEvent } from '../domain/event-data.ts';
import { ORDERING_KEY_HEADER } from '../domain/ordering-key.ts';
import { indexPage, replaceIndexRow, type KeyedIndexRow } from './index-store.ts';
import { deliveryData, subjectsOf, type SubjectHasher } from './subject-hash.ts';
import { isDataKeyErased, type DataKeys } from './data-keys.ts';

export interface IndexRehashResult {
  /** Rows replaced by their hashes under the current key. */
  rehashed: number;
  /** Rows already under the current key. */
  current: number;
  /** Rows whose event and deliveries are all gone (nothing left to erase through them). */
  unresolved: number;
}

export async function rehashErasureIndex(deps: {
  orm: MikroORM; jsm: JetStreamManager; hasher: Pick<SubjectHasher, 'hash'>; batchSize?: number;
  /** Opens a sealed delivery body (data-keys.ts); absent: bodies are read as stored. */
  bodies?: Pick<DataKeys, 'open'>;
  onProgress?: (done: number) => void;
}): Promise<IndexRehashResult> {
  const { jsm } = deps;
  const result: IndexRehashResult = { rehashed: 0, current: 0, unresolved: 0 };
  const get = (stream: string, seq: number): Promise<StoredMsg | null> => jsm.streams.getMessage(stream, { seq }).catch((e: unknown) => {
    if (isApiError(e, JetStreamApiCodes.StreamNotFound) || isApiError(e, JetStreamApiCodes.NoMessageFound)) return null;
    throw e;
  });
  const header = (m: StoredMsg, name: string) => (m.header?.has(name, Match.IgnoreCase) ? m.header.get(name, Match.IgnoreCase) || undefined : undefined);

  /** The current hashes of the subjects of what `row` points to; undefined when nothing of it is left. */
  async function currentHashes(row: KeyedIndexRow): Promise<string[] | undefined> {
    const event = await get(EVENTS_STREAM, row.events_seq);
    if (event && event.subject.startsWith(`events.${row.tenant}.`)) {
      const parsed = parseEvent(event.subject, event.data, { maxBytes: Number.MAX_SAFE_INTEGER, maxDepth: Number.MAX_SAFE_INTEGER });
      if (parsed.ok) return subjectsOf(parsed.data, header(event, ORDERING_KEY_HEADER)).map(deps.hasher.hash);
    }
    for (const [stream, seq] of row.deliveries) {
      const d = await get(stream, seq);
      if (d && header(d, DeliveryHeader.WebhookId) === row.webhook_id) {
        // A body whose key was erased holds nothing to find any more.
        const body = await Promise.resolve().then(() => (deps.bodies ? deps.bodies.open(d.data) : d.data)).catch((e: unknown) => {
          if (isDataKeyErased(e)) return undefined;
          throw e;
        });
        return body && subjectsOf(deliveryData(body), header(d, DeliveryHeader.OrderingKey)).map(deps.hasher.hash);
      }
    }
    return undefined;
  }

  const em = deps.orm.em.fork();
  let after: KeyedIndexRow | undefined;
  let done = 0;
  for (;;) {
    const rows = await indexPage(em, after, deps.batchSize ?? 500);
    if (rows.length === 0) break;
    // One event's rows (one per hash) lie apart in key order: its subjects are read once per page.
    const found = new Map<string, Promise<string[] | undefined>>();
    for (const row of rows) {
      const at = `${row.tenant}/${row.events_seq}`;
      if (!found.has(at)) found.set(at, currentHashes(row));
      const hashes = await found.get(at)!;
      if (hashes === undefined) result.unresolved++;
      else if (hashes.includes(row.subject_hash)) result.current++;
      // A row deleted meanwhile (erased, expired) is simply gone.
      else if (await replaceIndexRow(em, row, hashes)) result.rehashed++;
    }
    done += rows.length;
    after = rows[rows.length - 1];
    deps.onProgress?.(done);
  }
  return result;
}
