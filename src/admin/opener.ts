// Opening sealed dead letters with the secret key alone: the public key a sealed box also needs is
// derived from it (X25519), so the admin process is configured with one variable, not two that must match.
import sodium from 'libsodium-wrappers';
import { decodeKey, initSodium, KeyVariable, openDeadLetter } from '../crypto/sodium.ts';
import { parseOriginalMessage, type OriginalMessage } from '../deadletter/sealed-message.ts';

export interface DeadLetterOpener {
  open(sealed: Uint8Array): OriginalMessage;
}

export async function createDeadLetterOpener(secretKeyB64: string): Promise<DeadLetterOpener> {
  await initSodium();
  const publicKeyB64 = Buffer.from(sodium.crypto_scalarmult_base(decodeKey(KeyVariable.DeadLetterSecret, secretKeyB64))).toString('base64');
  return {
    open: (sealed) => parseOriginalMessage(openDeadLetter(publicKeyB64, secretKeyB64, sealed)),
  };
}
