// Opening sealed dead letters with the secret key alone: the public key a sealed box also needs is
// derived from it (X25519), so the admin process is configured with one variable, not two that must match.
// During a key-pair rotation the previous secret key opens the dead letters sealed before it.
import { createDeadLetterKeyring, initSodium } from '../crypto/sodium.ts';
import { parseOriginalMessage, type OriginalMessage } from '../deadletter/sealed-message.ts';

export interface DeadLetterOpener {
  open(sealed: Uint8Array): OriginalMessage;
}

export async function createDeadLetterOpener(secretKeyB64: string, previousSecretKeyB64?: string): Promise<DeadLetterOpener> {
  await initSodium();
  const keyring = createDeadLetterKeyring(secretKeyB64, previousSecretKeyB64);
  return {
    open: (sealed) => parseOriginalMessage(keyring.open(sealed).bytes),
  };
}
