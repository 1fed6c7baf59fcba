// Dead-letter key-pair rotation: every dead letter that opens only under the previous secret key is sealed
// again to the current public key, in place. Run by `hookstream keys reseal-dead-letters` while the service
// keeps running; rows are walked in id order in batches, so memory stays flat however many there are.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { OpenedDeadLetter } from '../crypto/sodium.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { countDeadLetters, replaceSealed, sealedPage, type DeadLetterId } from './store.ts';

export interface DeadLetterResealResult {
  /** Rows sealed again to the current public key. */
  resealed: number;
  /** Rows that already opened under the current secret key. */
  current: number;
  /** Rows that open under neither key (left as they are). */
  failed: { id: DeadLetterId; reason: string }[];
}

export async function resealDeadLetters(deps: {
  orm: MikroORM;
  /** Opens with the current secret key, then the previous one, saying which. */
  keyring: { open(sealed: Uint8Array): OpenedDeadLetter };
  /** Seals to the current public key. */
  seal: (bytes: Uint8Array) => Uint8Array;
  log: Logger;
  batchSize?: number;
  onProgress?: (done: number, total: number) => void;
}): Promise<DeadLetterResealResult> {
  const batchSize = deps.batchSize ?? 100;
  const result: DeadLetterResealResult = { resealed: 0, current: 0, failed: [] };
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
        let opened: OpenedDeadLetter;
        try {
          opened = deps.keyring.open(new Uint8Array(row.sealed));
        } catch (e) {
          result.failed.push({ id: row.id, reason: describe(e) });
          deps.log.warn('dead letter not resealed', { id: row.id, reason: describe(e) });
          continue;
        }
        if (!opened.previous) { result.current++; continue; }
        // Only if the row still holds what was opened: the dead-letter role may have replaced it meanwhile
        // (a replay that died again), and then it is sealed to whichever key that role has, checked next run.
        if (await replaceSealed(tx, row.id, row.sealed, deps.seal(opened.bytes))) result.resealed++;
        else result.failed.push({ id: row.id, reason: 'changed while being resealed; run the command again' });
      }
    });
    done += rows.length;
    after = rows[rows.length - 1]!.id;
    deps.onProgress?.(Math.min(done, Math.max(total, done)), Math.max(total, done));
  }
  return result;
}
