// Dead-letter key rotation: every dead letter that opens only under the previous secret key is sealed again
// to the current public key, and every one whose authentication tag is under the previous master key, or
// that has none yet (stored before issue 23), is tagged under the current one, in place. Run by
// `hookstream keys reseal-dead-letters` while the service keeps running; rows are walked in id order in
// batches, so memory stays flat however many there are.
//
// A row without a tag is tagged only when its sealed message is the delivery its row names (the check a
// replay makes): the tag then vouches for what the table held when the operator ran the command. A row
// whose tag does not match is never tagged again: it is reported, and stays unreplayable.
//
// The keyed hashes of a row's subject ids (erasure) are computed again under the current master key from
// its message: once the previous key is retired, erasure still finds the row.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { OpenedDeadLetter } from '../crypto/sodium.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { originalHeader, parseOriginalMessage, recordMismatch } from './sealed-message.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { deliveryData, subjectsOf, type SubjectHasher } from '../erasure/subject-hash.ts';
import { countDeadLetters, replaceSealed, rowIdentity, sealedPage, type DeadLetterId, type SealedDeadLetterRow } from './store.ts';
import type { DeadLetterTagger } from './tag.ts';
import { isDataKeyErased, type DataKeys } from '../erasure/data-keys.ts';

export interface DeadLetterResealResult {
  /** Rows sealed again to the current public key, or tagged or their subjects hashed again under the current master key. */
  resealed: number;
  /** Rows that already opened under the current secret key with a tag and hashes under the current master key. */
  current: number;
  /** Rows that open under neither key, or whose tag does not match (left as they are). */
  failed: { id: DeadLetterId; reason: string }[];
}

const sameSet = (a: readonly string[], b: readonly string[] | undefined): boolean =>
  b !== undefined && a.length === new Set(b).size && a.every((h) => b.includes(h));

export async function resealDeadLetters(deps: {
  orm: MikroORM;
  /** Opens with the current secret key, then the previous one, saying which. */
  keyring: { open(sealed: Uint8Array): OpenedDeadLetter };
  /** Seals to the current public key. */
  seal: (bytes: Uint8Array) => Uint8Array;
  /** Tags under the current master key; checks under it and the previous one. */
  tagger: DeadLetterTagger;
  /** Hashes subject ids under the current master key. */
  hasher: Pick<SubjectHasher, 'hash'>;
  /** Delivery shards: where a row's endpoint's delivery subject is (the check of an untagged row). */
  shards: number;
  /** Opens a sealed delivery body (src/erasure/data-keys.ts) to read its subjects; absent: bodies are read as stored. */
  bodies?: Pick<DataKeys, 'open'>;
  log: Logger;
  batchSize?: number;
  onProgress?: (done: number, total: number) => void;
}): Promise<DeadLetterResealResult> {
  const batchSize = deps.batchSize ?? 100;
  const result: DeadLetterResealResult = { resealed: 0, current: 0, failed: [] };
  const fail = (id: DeadLetterId, reason: string) => {
    result.failed.push({ id, reason });
    deps.log.warn('dead letter not resealed', { id, reason });
  };

  /** Why the row cannot be resealed, or its opened message and whether its tag is written again. */
  function inspect(row: SealedDeadLetterRow): { problem: string } | { opened: OpenedDeadLetter; retag: boolean } {
    let opened: OpenedDeadLetter;
    try {
      opened = deps.keyring.open(new Uint8Array(row.sealed));
    } catch (e) {
      return { problem: describe(e) };
    }
    const tag = deps.tagger.check(rowIdentity(row), opened.bytes, row.tag);
    if (tag === 'invalid') return { problem: 'its authentication tag does not match its row and message (a forged or altered record)' };
    if (tag === 'missing') {
      let problem: string | undefined;
      try {
        problem = recordMismatch(row, parseOriginalMessage(opened.bytes), deps.shards);
      } catch (e) {
        problem = describe(e);
      }
      if (problem) return { problem: `untagged and ${problem}; not tagged` };
    }
    return { opened, retag: tag !== 'current' };
  }

  const em = deps.orm.em.fork();
  const total = await countDeadLetters(em);
  let done = 0;
  let after = '';
  for (;;) {
    // Keyset pages: no row skipped or seen twice, whatever is inserted meanwhile.
    const rows = await sealedPage(em, after, batchSize);
    if (rows.length === 0) break;
    await em.transactional(async (tx) => {
      for (const row of rows) {
        const seen = inspect(row);
        if ('problem' in seen) { fail(row.id, seen.problem); continue; }
        const { opened, retag } = seen;
        let hashes: string[];
        try {
          const message = parseOriginalMessage(opened.bytes);
          const raw = Buffer.from(message.body_base64, 'base64');
          hashes = subjectsOf(deliveryData(deps.bodies ? await deps.bodies.open(raw) : raw), originalHeader(message, DeliveryHeader.OrderingKey))
            .map(deps.hasher.hash);
        } catch (e) {
          // Its subject was erased: the body opens no more, and its hashes stay as they are.
          if (isDataKeyErased(e)) hashes = row.subject_hashes ?? [];
          else { fail(row.id, describe(e)); continue; }
        }
        const rehash = !sameSet(hashes, row.subject_hashes ?? undefined);
        if (!opened.previous && !retag && !rehash) { result.current++; continue; }
        // Only if the row still holds what was opened: the dead-letter role may have replaced it meanwhile
        // (a replay that died again), and then it is sealed to whichever key that role has, checked next run.
        const next = {
          sealed: opened.previous ? deps.seal(opened.bytes) : row.sealed,
          tag: retag || opened.previous ? deps.tagger.tag(rowIdentity(row), opened.bytes) : row.tag!,
          subjectHashes: hashes,
        };
        if (await replaceSealed(tx, row.id, row.sealed, next)) result.resealed++;
        else fail(row.id, 'changed while being resealed; run the command again');
      }
    });
    done += rows.length;
    after = rows[rows.length - 1]!.id;
    deps.onProgress?.(Math.min(done, Math.max(total, done)), Math.max(total, done));
  }
  return result;
}
