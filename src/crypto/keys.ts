// Where the service's keys come from: the environment, or in development a generated keys file, so
// `npm start` works with no setup and keeps its keys across restarts. Production refuses to guess.
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Config } from '../config.ts';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { decodeKey, deadLetterKeysMatch, generateKeys, initSodium, KeyVariable, PreviousKeyVariable } from './sodium.ts';

export interface KeyNeeds {
  /** api and delivery (signing secrets), router and admin (webhook ids are keyed by it). */
  master: boolean;
  deadLetterPublic: boolean;
  /** Only the role that opens dead letters; delivery workers seal with the public key alone. */
  deadLetterSecret: boolean;
}

/** Validated base64 keys; a key that was not asked for is undefined, even when it is available. */
export interface Keys {
  masterKey: string | undefined;
  deadLetterPublicKey: string | undefined;
  deadLetterSecretKey: string | undefined;
  /** HOOKSTREAM_PREVIOUS_MASTER_KEY, with the master key, during a rotation; from the environment only. Absent otherwise. */
  previousMasterKey?: string;
  /** HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY, with the secret key, during a rotation; from the environment only. Absent otherwise. */
  previousDeadLetterSecretKey?: string;
}

export const KEYS_FILE = 'keys.json';

type KeySet = Record<KeyVariable, string>;

const GENERATE_HINT = 'create keys with `hookstream keys generate`';

export async function loadKeys(config: Config, log: Logger, need: KeyNeeds): Promise<Keys> {
  await initSodium();
  const wanted: [boolean, KeyVariable, string | undefined][] = [
    [need.master, KeyVariable.Master, config.masterKey],
    [need.deadLetterPublic, KeyVariable.DeadLetterPublic, config.deadLetterPublicKey],
    [need.deadLetterSecret, KeyVariable.DeadLetterSecret, config.deadLetterSecretKey],
  ];
  const missing = wanted.filter(([needed, , value]) => needed && value === undefined).map(([, variable]) => variable);
  if (missing.length > 0 && config.production) {
    const others = missing.length > 1 ? ` (also missing: ${missing.slice(1).join(', ')})` : '';
    throw new ConfigError(missing[0]!, `is required when NODE_ENV=production${others}; ${GENERATE_HINT}`);
  }
  const file = missing.length > 0 ? await developmentKeys(config.dataDir, log) : undefined;

  const pick = ([needed, variable, value]: [boolean, KeyVariable, string | undefined]): string | undefined => {
    if (!needed) return undefined;
    if (value === undefined) return file!.keys[variable];
    decodeKey(variable, value);
    return value.trim();
  };
  const [masterKey, deadLetterPublicKey, deadLetterSecretKey] = wanted.map(pick);

  // A public key from the environment with a secret key from the file (or the other way round) would
  // seal dead letters that nothing can open; say so at start-up rather than at the first replay.
  if (deadLetterPublicKey && deadLetterSecretKey && !deadLetterKeysMatch(deadLetterPublicKey, deadLetterSecretKey)) {
    const where = file ? `; one of them comes from ${file.path}: set both in the environment or neither` : '';
    throw new ConfigError(KeyVariable.DeadLetterSecret, `does not belong to ${KeyVariable.DeadLetterPublic}${where}`);
  }
  // Previous keys exist only while an operator rotates: never generated, never read from the keys file.
  const previous = (needed: boolean, variable: PreviousKeyVariable, value: string | undefined, current: string | undefined): string | undefined => {
    if (!needed || value === undefined) return undefined;
    decodeKey(variable, value);
    if (current !== undefined && Buffer.from(value.trim(), 'base64').equals(Buffer.from(current, 'base64'))) {
      log.warn('the previous key is the current key: nothing is being rotated', { variable });
    }
    return value.trim();
  };
  const previousMasterKey = previous(need.master, PreviousKeyVariable.Master, config.previousMasterKey, masterKey);
  const previousDeadLetterSecretKey = previous(need.deadLetterSecret, PreviousKeyVariable.DeadLetterSecret, config.previousDeadLetterSecretKey, deadLetterSecretKey);
  return {
    masterKey, deadLetterPublicKey, deadLetterSecretKey,
    ...(previousMasterKey ? { previousMasterKey } : {}),
    ...(previousDeadLetterSecretKey ? { previousDeadLetterSecretKey } : {}),
  };
}

/** The keys file of `dataDir`, created with all three keys on first use. */
async function developmentKeys(dataDir: string, log: Logger): Promise<{ path: string; keys: KeySet }> {
  const dir = resolve(dataDir);
  const path = join(dir, KEYS_FILE);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const existing = await readKeysFile(path, log);
  if (existing) {
    log.info('using development keys', { file: path });
    return { path, keys: existing };
  }
  const generated = generateKeys();
  const keys: KeySet = {
    [KeyVariable.Master]: generated.masterKey,
    [KeyVariable.DeadLetterPublic]: generated.deadLetterPublicKey,
    [KeyVariable.DeadLetterSecret]: generated.deadLetterSecretKey,
  };
  // Write aside, then link into place: link fails if the file exists, so two processes starting at once
  // agree on one set of keys, and nobody ever reads a half-written file.
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    await writeFile(tmp, JSON.stringify(keys, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
    await link(tmp, path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    const winner = await readKeysFile(path, log);
    if (!winner) throw e;
    log.info('using development keys', { file: path });
    return { path, keys: winner };
  } finally {
    await rm(tmp, { force: true });
  }
  log.info('generated development keys; set the HOOKSTREAM_*_KEY variables in production', { file: path });
  return { path, keys };
}

async function readKeysFile(path: string, log: Logger): Promise<KeySet | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  const mode = (await stat(path)).mode & 0o777;
  if (mode & 0o077) log.warn('development keys file is readable by other users; chmod 600 it', { file: path, mode: mode.toString(8) });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) {
    // Deleting the file would lose every secret sealed with its keys, so never do it for the user.
    throw new ConfigError('HOOKSTREAM_DATA_DIR', `${path} is not a keys file (bad JSON); fix it or move it away`);
  }
  const record = parsed as Record<string, unknown>;
  const keys = {} as KeySet;
  for (const variable of Object.values(KeyVariable)) {
    const value = record[variable];
    if (typeof value !== 'string') throw new ConfigError(variable, `missing from ${path}`);
    decodeKey(variable, value, path);
    keys[variable] = value;
  }
  return keys;
}

/** `hookstream keys generate`: a fresh key set as environment lines (VAR=value). */
export async function generateKeyEnvLines(): Promise<string[]> {
  await initSodium();
  const keys = generateKeys();
  return [
    `${KeyVariable.Master}=${keys.masterKey}`,
    `${KeyVariable.DeadLetterPublic}=${keys.deadLetterPublicKey}`,
    `${KeyVariable.DeadLetterSecret}=${keys.deadLetterSecretKey}`,
  ];
}
