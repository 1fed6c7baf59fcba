// Keys derived from the master key, one per purpose (webhook ids, dead-letter tags, the erasure index):
// HKDF-SHA256 with the purpose as its label, so no purpose ever holds the master key itself or another's key.
import { hkdfSync } from 'node:crypto';

export function deriveSubkey(masterKey: Uint8Array, label: string, bytes: 16 | 32): Buffer {
  return Buffer.from(hkdfSync('sha256', masterKey, new Uint8Array(0), label, bytes));
}
