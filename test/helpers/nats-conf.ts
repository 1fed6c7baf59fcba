// The project's own nats.conf for tests: its path, and a fresh password for every variable it names, set in
// this process's environment (nats-server reads them from there and refuses to start when one is missing).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const NATS_CONF = fileURLToPath(new URL('../../nats.conf', import.meta.url));

/** nats-server parses a variable's value as a config value: a leading letter keeps it a string. */
export const password = () => `p${randomBytes(12).toString('hex')}`;

/** Fresh passwords for every `$HOOKSTREAM_NATS_…_PASSWORD` in nats.conf, by variable name. */
export function useNatsConfPasswords(): Record<string, string> {
  const names = new Set(readFileSync(NATS_CONF, 'utf8').match(/\$HOOKSTREAM_NATS_[A-Z_]+_PASSWORD/g)?.map((v) => v.slice(1)));
  const passwords: Record<string, string> = {};
  for (const name of names) process.env[name] = passwords[name] = password();
  return passwords;
}
