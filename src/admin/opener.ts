// Opening sealed dead letters with the secret key alone: the public key a sealed box also needs is
// derived from it (X25519), so the admin process is configured with one variable, not two that must match.
// During a key-pair rotation the previous secret key opens the dead letters sealed before it. Every opened
// message is checked against its row's authentication tag (src/deadletter/tag.ts).
import { createDeadLetterKeyring, initSodium } from '../crypto/sodium.ts';
import { parseOriginalMessage, type OriginalMessage } from '../deadletter/sealed-message.ts';
import { rowIdentity, type SealedDeadLetterRow } from '../deadletter/store.ts';
import type { DeadLetterTagger, TagCheck } from '../deadletter/tag.ts';

export interface OpenedRecord {
  message: OriginalMessage;
  /** Whether the row's tag vouches for this message under this row's identity. */
  tag: TagCheck;
}

export interface DeadLetterOpener {
  open(row: Pick<SealedDeadLetterRow, 'endpoint_id' | 'tenant' | 'webhook_id' | 'event_type' | 'sealed' | 'tag'>): OpenedRecord;
}

export async function createDeadLetterOpener(tagger: DeadLetterTagger, secretKeyB64: string, previousSecretKeyB64?: string): Promise<DeadLetterOpener> {
  await initSodium();
  const keyring = createDeadLetterKeyring(secretKeyB64, previousSecretKeyB64);
  return {
    open(row) {
      const { bytes } = keyring.open(new Uint8Array(row.sealed));
      return { message: parseOriginalMessage(bytes), tag: tagger.check(rowIdentity(row), bytes, row.tag) };
    },
  };
}
