// The project's own nats.conf for tests: its path, and a fresh password for every variable it names
// (nats-server reads them from its environment and refuses to start when one is missing).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const NATS_CONF = fileURLToPath(new URL('../../nats.conf', import.meta.url));

/** nats-server parses a variable's value as a config value: a leading letter keeps it a string. */
export const password = () => `p${randomBytes(12).toString('hex')}`;

export interface NatsPasswords {
  /** Every variable with its password, by name: nats.conf's and the extra ones. */
  readonly env: Record<string, string>;
  /** The password of a nats.conf user (`ops_reader` → HOOKSTREAM_NATS_OPS_READER_PASSWORD). */
  user(name: string): string;
  /** The password of a variable by name (for the users a test adds to the configuration). */
  variable(name: string): string;
}

/**
 * Fresh passwords for every `$HOOKSTREAM_NATS_…_PASSWORD` in nats.conf and for each of `extra` (variables
 * of users a test adds), set nowhere: hand `env` to the nats-server process.
 */
export function natsConfPasswords(extra: readonly string[] = []): NatsPasswords {
  const named = readFileSync(NATS_CONF, 'utf8').match(/\$HOOKSTREAM_NATS_[A-Z_]+_PASSWORD/g)?.map((v) => v.slice(1)) ?? [];
  const env: Record<string, string> = {};
  for (const name of new Set([...named, ...extra])) env[name] = password();
  const variable = (name: string): string => {
    const value = env[name];
    if (value === undefined) throw new Error(`nats.conf names no $${name} (and the test added none)`);
    return value;
  };
  return { env, variable, user: (name) => variable(`HOOKSTREAM_NATS_${name.toUpperCase()}_PASSWORD`) };
}

/** `natsConfPasswords`, set in this process's environment (where a nats-server it starts reads them). */
export function useNatsConfPasswords(extra: readonly string[] = []): NatsPasswords {
  const passwords = natsConfPasswords(extra);
  Object.assign(process.env, passwords.env);
  return passwords;
}
