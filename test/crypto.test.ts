// Secrets at rest (an AEAD bound to the endpoint, and the older secretbox format), dead letters (sealed boxes) and where keys come from (env or a generated
// development keys file).
import test from 'ava';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import sodium from 'libsodium-wrappers';
import { loadConfig } from '../src/config.ts';
import { ConfigError, ErrorCode, isHookstreamError } from '../src/errors.ts';
import { createLogger, type Logger } from '../src/log.ts';
import { generateKeyEnvLines, KEYS_FILE, loadKeys, type KeyNeeds } from '../src/crypto/keys.ts';
import {
  createDeadLetterKeyring, DecryptionError, decodeKey, deadLetterKeysMatch, deadLetterPublicKeyOf, generateKeys, initSodium, isDecryptionError,
  openDeadLetter, sealForDeadLetters, SecretSealer,
} from '../src/crypto/sodium.ts';

const ALL: KeyNeeds = { master: true, deadLetterPublic: true, deadLetterSecret: true };
const dirs: string[] = [];

test.before(async () => {
  await initSodium();
});

test.after.always(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'hookstream-crypto-'));
  dirs.push(dir);
  return dir;
}

function capture(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: createLogger({ level: 'debug', write: (l) => lines.push(l) }), lines };
}

const b64 = (n: number) => Buffer.alloc(n, 7).toString('base64');

// ---- sealed signing secrets ----

const EP_A = 'webhook_0mws8dye3000a';
const EP_B = 'webhook_0mws8dye3000b';

/** A value as sealed before issue 8: base64(nonce || secretbox), no prefix, no endpoint binding. */
function sealLegacy(masterKey: string, plaintext: string): string {
  const nonce = sodium.randombytes_buf(24);
  const box = sodium.crypto_secretbox_easy(sodium.from_string(plaintext), nonce, Buffer.from(masterKey, 'base64'));
  return Buffer.concat([nonce, box]).toString('base64');
}

test('a sealed secret opens to the same text for its endpoint, with a fresh nonce each time', (t) => {
  const sealer = new SecretSealer(generateKeys().masterKey);
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ünïcødé ✓';
  const a = sealer.seal(secret, EP_A);
  const b = sealer.seal(secret, EP_A);
  t.not(a, b);
  t.false(a.includes('MfKQ9r8'));
  t.is(sealer.open(a, EP_A), secret);
  t.is(sealer.open(b, EP_A), secret);
  // 'v2:' + base64(nonce (24) + ciphertext + tag (16))
  t.true(a.startsWith('v2:'));
  t.is(Buffer.from(a.slice(3), 'base64').length, 24 + 16 + Buffer.byteLength(secret));
  t.is(sealer.open(sealer.seal('', EP_A), EP_A), '');
});

test('a secret sealed for endpoint A does not open for endpoint B (issue 8)', (t) => {
  const sealer = new SecretSealer(generateKeys().masterKey);
  const sealed = sealer.seal('whsec_boundtoA', EP_A);
  const err = t.throws(() => sealer.open(sealed, EP_B), { instanceOf: DecryptionError });
  t.false(err.message.includes('boundtoA'));
  t.is(sealer.open(sealed, EP_A), 'whsec_boundtoA');
  // Nor with the prefix stripped: the legacy path does not accept a bound value's bytes.
  t.throws(() => sealer.open(sealed.slice(3), EP_B), { instanceOf: DecryptionError });
});

test('secrets sealed in the format before issue 8 still open (legacy path)', (t) => {
  const key = generateKeys().masterKey;
  const legacy = sealLegacy(key, 'whsec_fromlastyear');
  t.is(new SecretSealer(key).open(legacy, EP_A), 'whsec_fromlastyear');
  t.throws(() => new SecretSealer(generateKeys().masterKey).open(legacy, EP_A), { instanceOf: DecryptionError });
});

test('a secret sealed under another master key fails with DecryptionError that names no key', (t) => {
  const keyA = generateKeys().masterKey;
  const keyB = generateKeys().masterKey;
  const sealed = new SecretSealer(keyA).seal('whsec_topsecret', EP_A);
  const err = t.throws(() => new SecretSealer(keyB).open(sealed, EP_A), { instanceOf: DecryptionError });
  t.is(err.name, 'DecryptionError');
  t.true(isDecryptionError(err));
  t.true(isHookstreamError(err, ErrorCode.Internal));
  const shown = `${err.message} ${inspect(err)} ${JSON.stringify(err)}`;
  for (const leak of [keyA, keyB, 'topsecret', sealed]) t.false(shown.includes(leak), 'error shows key material or data');
});

test('tampered or malformed sealed secrets fail with DecryptionError', (t) => {
  const sealer = new SecretSealer(generateKeys().masterKey);
  const bytes = Buffer.from(sealer.seal('whsec_abc', EP_A).slice(3), 'base64');
  bytes[bytes.length - 1]! ^= 1;
  const legacy = Buffer.from(sealLegacy(generateKeys().masterKey, 'whsec_abc'), 'base64');
  for (const bad of [`v2:${bytes.toString('base64')}`, legacy.toString('base64'), '', 'v2:', 'not base64!', 'v2:not base64!', Buffer.alloc(39).toString('base64'), `v2:${Buffer.alloc(39).toString('base64')}`]) {
    t.throws(() => sealer.open(bad, EP_A), { instanceOf: DecryptionError }, JSON.stringify(bad));
  }
});

test('the sealer does not show its key when inspected or serialised', (t) => {
  const key = generateKeys().masterKey;
  const sealer = new SecretSealer(key);
  t.false(inspect(sealer, { showHidden: true, depth: 5 }).includes(key));
  t.false(JSON.stringify(sealer).includes(key));
});

// ---- key validation ----

const BAD_KEYS: [string, string][] = [
  ['31 bytes', b64(31)],
  ['33 bytes', b64(33)],
  ['64 bytes', b64(64)],
  ['empty', ''],
  ['not base64', 'this is not a key at all, not even close!!'],
  ['url-safe alphabet', Buffer.alloc(32, 0xfb).toString('base64url')],
  ['hex', Buffer.alloc(32, 0xab).toString('hex')],
];

for (const [what, value] of BAD_KEYS) {
  test(`a master key that is ${what} is a ConfigError naming HOOKSTREAM_MASTER_KEY and not the value`, (t) => {
    const err = t.throws(() => new SecretSealer(value), { instanceOf: ConfigError });
    t.is(err.variable, 'HOOKSTREAM_MASTER_KEY');
    t.true(err.message.startsWith('HOOKSTREAM_MASTER_KEY'));
    if (value) t.false(err.message.includes(value));
  });
}

test('dead-letter key errors name their own variables', (t) => {
  const { deadLetterPublicKey, deadLetterSecretKey } = generateKeys();
  const bad = b64(16);
  t.is(t.throws(() => sealForDeadLetters(bad, new Uint8Array(1)), { instanceOf: ConfigError }).variable, 'HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY');
  t.is(t.throws(() => openDeadLetter(bad, deadLetterSecretKey, new Uint8Array(60)), { instanceOf: ConfigError }).variable, 'HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY');
  const err = t.throws(() => openDeadLetter(deadLetterPublicKey, bad, new Uint8Array(60)), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY');
  t.false(err.message.includes(bad));
});

test('decodeKey accepts generated keys (and surrounding white space) as 32 bytes', (t) => {
  const keys = generateKeys();
  t.is(decodeKey('HOOKSTREAM_MASTER_KEY', keys.masterKey).length, 32);
  t.deepEqual(decodeKey('HOOKSTREAM_MASTER_KEY', `${keys.masterKey}\n`), decodeKey('HOOKSTREAM_MASTER_KEY', keys.masterKey));
  t.deepEqual([...decodeKey('HOOKSTREAM_MASTER_KEY', b64(32))], new Array(32).fill(7));
});

test('generated keys are distinct, valid and the dead-letter pair belongs together', (t) => {
  const a = generateKeys();
  const b = generateKeys();
  t.not(a.masterKey, b.masterKey);
  t.not(a.deadLetterSecretKey, b.deadLetterSecretKey);
  t.not(a.deadLetterPublicKey, a.deadLetterSecretKey);
  t.true(deadLetterKeysMatch(a.deadLetterPublicKey, a.deadLetterSecretKey));
  t.false(deadLetterKeysMatch(a.deadLetterPublicKey, b.deadLetterSecretKey));
});

// ---- sealed boxes ----

test('a dead letter sealed with the public key opens with the key pair', (t) => {
  const { deadLetterPublicKey: pk, deadLetterSecretKey: sk } = generateKeys();
  const message = new TextEncoder().encode(JSON.stringify({ type: 'user.created', data: { userId: 'user_1' } }));
  const sealed = sealForDeadLetters(pk, message);
  t.is(sealed.length, message.length + 48);
  t.notDeepEqual(sealed.subarray(48), message);
  t.deepEqual(openDeadLetter(pk, sk, sealed), message);
  // Sealing is randomised (ephemeral key), so the same message seals differently.
  t.notDeepEqual(sealForDeadLetters(pk, message), sealed);
  t.deepEqual(openDeadLetter(pk, sk, sealForDeadLetters(pk, new Uint8Array(0))), new Uint8Array(0));
});

test('a dead letter does not open with another key pair or when tampered', (t) => {
  const mine = generateKeys();
  const other = generateKeys();
  const sealed = sealForDeadLetters(mine.deadLetterPublicKey, new Uint8Array([1, 2, 3]));
  const err = t.throws(() => openDeadLetter(other.deadLetterPublicKey, other.deadLetterSecretKey, sealed), { instanceOf: DecryptionError });
  for (const k of [mine.deadLetterSecretKey, other.deadLetterSecretKey]) t.false(err.message.includes(k));
  const tampered = Uint8Array.from(sealed);
  tampered[tampered.length - 1]! ^= 1;
  t.throws(() => openDeadLetter(mine.deadLetterPublicKey, mine.deadLetterSecretKey, tampered), { instanceOf: DecryptionError });
  t.throws(() => openDeadLetter(mine.deadLetterPublicKey, mine.deadLetterSecretKey, sealed.subarray(0, 20)), { instanceOf: DecryptionError });
});

// ---- loadKeys ----

test('development: keys are generated once into <dataDir>/keys.json (0600 in a 0700 folder) and reused', async (t) => {
  const dataDir = join(await tempDir(), 'nested', 'data');
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: dataDir });
  const first = capture();
  const a = await loadKeys(config, first.log, ALL);
  const file = join(dataDir, KEYS_FILE);
  t.is((await stat(file)).mode & 0o777, 0o600);
  t.is((await stat(dataDir)).mode & 0o777, 0o700);
  t.truthy(a.masterKey && a.deadLetterPublicKey && a.deadLetterSecretKey);
  t.true(deadLetterKeysMatch(a.deadLetterPublicKey!, a.deadLetterSecretKey!));

  // The log says where, never what.
  t.true(first.lines.some((l) => JSON.parse(l).file === file && JSON.parse(l).level === 'info'));
  for (const key of [a.masterKey!, a.deadLetterPublicKey!, a.deadLetterSecretKey!]) t.false(first.lines.join('\n').includes(key));

  const second = capture();
  const b = await loadKeys(config, second.log, ALL);
  t.deepEqual(b, a);
  t.true(second.lines.some((l) => JSON.parse(l).file === file));

  // The file holds what was returned, under the variables' names.
  const onDisk = JSON.parse(await readFile(file, 'utf8')) as Record<string, string>;
  t.deepEqual(onDisk, {
    HOOKSTREAM_MASTER_KEY: a.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: a.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: a.deadLetterSecretKey,
  });
});

test('development: a secret sealed after one start opens after the next', async (t) => {
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: await tempDir() });
  const sealed = new SecretSealer((await loadKeys(config, capture().log, ALL)).masterKey!).seal('whsec_stable', EP_A);
  t.is(new SecretSealer((await loadKeys(config, capture().log, ALL)).masterKey!).open(sealed, EP_A), 'whsec_stable');
});

test('development: processes starting at once agree on one set of keys', async (t) => {
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: await tempDir() });
  const results = await Promise.all(Array.from({ length: 8 }, () => loadKeys(config, capture().log, ALL)));
  for (const r of results) t.deepEqual(r, results[0]);
});

test('only the keys asked for are returned; a delivery worker never gets the dead-letter secret key', async (t) => {
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: await tempDir() });
  const all = await loadKeys(config, capture().log, ALL);
  const worker = await loadKeys(config, capture().log, { master: true, deadLetterPublic: true, deadLetterSecret: false });
  t.deepEqual(worker, { masterKey: all.masterKey, deadLetterPublicKey: all.deadLetterPublicKey, deadLetterSecretKey: undefined });
  const none = await loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: join(await tempDir(), 'unused') }), capture().log,
    { master: false, deadLetterPublic: false, deadLetterSecret: false });
  t.deepEqual(none, { masterKey: undefined, deadLetterPublicKey: undefined, deadLetterSecretKey: undefined });
});

test('production refuses to start without a needed key, naming the variable, and writes no file', async (t) => {
  const dataDir = join(await tempDir(), 'prod');
  const config = loadConfig({ NODE_ENV: 'production', HOOKSTREAM_DATA_DIR: dataDir });
  const err = await t.throwsAsync(loadKeys(config, capture().log, ALL), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_MASTER_KEY');
  t.regex(err.message, /HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY/);
  t.regex(err.message, /production/);
  const only = await t.throwsAsync(
    loadKeys(loadConfig({ NODE_ENV: 'production', HOOKSTREAM_DATA_DIR: dataDir, HOOKSTREAM_MASTER_KEY: generateKeys().masterKey }),
      capture().log, { master: true, deadLetterPublic: true, deadLetterSecret: false }),
    { instanceOf: ConfigError });
  t.is(only.variable, 'HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY');
  await t.throwsAsync(stat(dataDir), { code: 'ENOENT' });
});

test('production with every key in the environment loads them', async (t) => {
  const keys = generateKeys();
  const dataDir = join(await tempDir(), 'prod');
  const config = loadConfig({
    NODE_ENV: 'production', HOOKSTREAM_DATA_DIR: dataDir, HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
  });
  t.deepEqual(await loadKeys(config, capture().log, ALL), keys);
  await t.throwsAsync(stat(dataDir), { code: 'ENOENT' });
});

test('a key in the environment wins over the keys file', async (t) => {
  const dataDir = await tempDir();
  const fromFile = await loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir }), capture().log, ALL);
  const envMaster = generateKeys().masterKey;
  const mixed = await loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir, HOOKSTREAM_MASTER_KEY: envMaster }), capture().log, ALL);
  t.is(mixed.masterKey, envMaster);
  t.not(mixed.masterKey, fromFile.masterKey);
  t.is(mixed.deadLetterPublicKey, fromFile.deadLetterPublicKey);
  t.is(mixed.deadLetterSecretKey, fromFile.deadLetterSecretKey);
});

test('a bad key in the environment is a ConfigError naming the variable, not the value', async (t) => {
  const bad = b64(20);
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: await tempDir(), HOOKSTREAM_DEAD_LETTER_SECRET_KEY: bad });
  const err = await t.throwsAsync(loadKeys(config, capture().log, ALL), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY');
  t.false(err.message.includes(bad));
});

test('a dead-letter public key that does not match the secret key is refused at start-up', async (t) => {
  const dataDir = await tempDir();
  await loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir }), capture().log, ALL);
  const stray = generateKeys().deadLetterPublicKey;
  const config = loadConfig({ HOOKSTREAM_DATA_DIR: dataDir, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: stray });
  const err = await t.throwsAsync(loadKeys(config, capture().log, ALL), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY');
  t.false(err.message.includes(stray));
  // Sealing alone (a delivery worker) has nothing to check against and works.
  const worker = await loadKeys(config, capture().log, { master: false, deadLetterPublic: true, deadLetterSecret: false });
  t.is(worker.deadLetterPublicKey, stray);
});

test('a damaged keys file is an error, never silently replaced', async (t) => {
  const dataDir = await tempDir();
  const file = join(dataDir, KEYS_FILE);
  await writeFile(file, '{"HOOKSTREAM_MASTER_KEY": "', { mode: 0o600 });
  const err = await t.throwsAsync(loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir }), capture().log, ALL), { instanceOf: ConfigError });
  t.true(err.message.includes(file));
  t.is(await readFile(file, 'utf8'), '{"HOOKSTREAM_MASTER_KEY": "');

  await writeFile(file, JSON.stringify({ HOOKSTREAM_MASTER_KEY: b64(32), HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: b64(32), HOOKSTREAM_DEAD_LETTER_SECRET_KEY: b64(12) }));
  const short = await t.throwsAsync(loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir }), capture().log, ALL), { instanceOf: ConfigError });
  t.is(short.variable, 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY');
  t.true(short.message.includes(file));
});

test('a keys file readable by others is used but warned about', async (t) => {
  const dataDir = await tempDir();
  const keys = generateKeys();
  await writeFile(join(dataDir, KEYS_FILE), JSON.stringify({
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
  }), { mode: 0o644 });
  const { log, lines } = capture();
  t.deepEqual(await loadKeys(loadConfig({ HOOKSTREAM_DATA_DIR: dataDir }), log, ALL), keys);
  t.true(lines.some((l) => JSON.parse(l).level === 'warn'));
});

test('`keys generate` prints three env lines that production accepts', async (t) => {
  const lines = await generateKeyEnvLines();
  t.is(lines.length, 3);
  const env: Record<string, string> = { NODE_ENV: 'production', HOOKSTREAM_DATA_DIR: join(await tempDir(), 'never') };
  for (const line of lines) {
    const m = /^(HOOKSTREAM_[A-Z_]+)=([A-Za-z0-9+/]{43}=)$/.exec(line);
    t.truthy(m, line);
    env[m![1]!] = m![2]!;
  }
  t.deepEqual(Object.keys(env).filter((k) => k.endsWith('_KEY')).sort(),
    ['HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY', 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY', 'HOOKSTREAM_MASTER_KEY']);
  const keys = await loadKeys(loadConfig(env), capture().log, ALL);
  const sealed = sealForDeadLetters(keys.deadLetterPublicKey!, new Uint8Array([9]));
  t.deepEqual(openDeadLetter(keys.deadLetterPublicKey!, keys.deadLetterSecretKey!, sealed), new Uint8Array([9]));
  t.not((await generateKeyEnvLines())[0], lines[0]);
});

// ---- rotation: previous keys ----

test('with a previous master key, values sealed under it open and say they need resealing; new ones seal under the current key', (t) => {
  const k1 = generateKeys().masterKey;
  const k2 = generateKeys().masterKey;
  const old = new SecretSealer(k1);
  const rotating = new SecretSealer(k2, k1);
  const bound = old.seal('whsec_underk1', EP_A);
  const legacy = sealLegacy(k1, 'whsec_legacyk1');
  t.deepEqual(rotating.openWithOrigin(bound, EP_A), { plaintext: 'whsec_underk1', current: false });
  t.deepEqual(rotating.openWithOrigin(legacy, EP_A), { plaintext: 'whsec_legacyk1', current: false });
  t.deepEqual(rotating.openWithOrigin(sealLegacy(k2, 'whsec_legacyk2'), EP_A), { plaintext: 'whsec_legacyk2', current: false }, 'unbound is never current');
  const fresh = rotating.seal('whsec_new', EP_A);
  t.deepEqual(rotating.openWithOrigin(fresh, EP_A), { plaintext: 'whsec_new', current: true });
  t.is(new SecretSealer(k2).open(fresh, EP_A), 'whsec_new', 'sealed under the current key alone');
  t.throws(() => old.open(fresh, EP_A), { instanceOf: DecryptionError });
  // The binding holds under the previous key too.
  t.throws(() => rotating.open(bound, EP_B), { instanceOf: DecryptionError });
  const err = t.throws(() => new SecretSealer(k2, generateKeys().masterKey).open(bound, EP_A), { instanceOf: DecryptionError });
  t.regex(err.message, /under HOOKSTREAM_MASTER_KEY or HOOKSTREAM_PREVIOUS_MASTER_KEY/);
  for (const leak of [k1, k2, 'underk1']) t.false(err.message.includes(leak));
  t.false(inspect(rotating, { showHidden: true, depth: 5 }).includes(k1));
});

test('a malformed previous master key is a ConfigError naming HOOKSTREAM_PREVIOUS_MASTER_KEY', (t) => {
  const err = t.throws(() => new SecretSealer(generateKeys().masterKey, b64(31)), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_PREVIOUS_MASTER_KEY');
});

test('the dead-letter keyring opens with the current pair, then the previous secret key, and names both when neither opens', (t) => {
  const p1 = generateKeys();
  const p2 = generateKeys();
  const ring = createDeadLetterKeyring(p2.deadLetterSecretKey, p1.deadLetterSecretKey);
  const underP1 = sealForDeadLetters(p1.deadLetterPublicKey, Buffer.from('one'));
  const underP2 = sealForDeadLetters(p2.deadLetterPublicKey, Buffer.from('two'));
  t.deepEqual(ring.open(underP1), { bytes: new Uint8Array(Buffer.from('one')), previous: true });
  t.deepEqual(ring.open(underP2), { bytes: new Uint8Array(Buffer.from('two')), previous: false });
  t.is(deadLetterPublicKeyOf(p2.deadLetterSecretKey), p2.deadLetterPublicKey);
  const err = t.throws(() => createDeadLetterKeyring(p2.deadLetterSecretKey).open(underP1), { instanceOf: DecryptionError });
  t.regex(err.message, /under HOOKSTREAM_DEAD_LETTER_SECRET_KEY \(/);
  const both = t.throws(() => ring.open(sealForDeadLetters(generateKeys().deadLetterPublicKey, Buffer.from('x'))), { instanceOf: DecryptionError });
  t.regex(both.message, /HOOKSTREAM_DEAD_LETTER_SECRET_KEY or HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY/);
  t.is(t.throws(() => createDeadLetterKeyring(p2.deadLetterSecretKey, b64(16)), { instanceOf: ConfigError }).variable, 'HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY');
});

test('previous keys come from the environment only, and only for the roles that hold the current key', async (t) => {
  const k = generateKeys();
  const prev = generateKeys();
  const config = loadConfig({
    HOOKSTREAM_DATA_DIR: await tempDir(), HOOKSTREAM_MASTER_KEY: k.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: k.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k.deadLetterSecretKey, HOOKSTREAM_PREVIOUS_MASTER_KEY: ` ${prev.masterKey}\n`,
    HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY: prev.deadLetterSecretKey,
  });
  const all = await loadKeys(config, capture().log, ALL);
  t.is(all.previousMasterKey, prev.masterKey);
  t.is(all.previousDeadLetterSecretKey, prev.deadLetterSecretKey);
  const worker = await loadKeys(config, capture().log, { master: false, deadLetterPublic: true, deadLetterSecret: false });
  t.is(worker.previousMasterKey, undefined);
  t.is(worker.previousDeadLetterSecretKey, undefined, 'a sealing worker never gets a secret key, old or new');
  const bad = loadConfig({ HOOKSTREAM_MASTER_KEY: k.masterKey, HOOKSTREAM_DATA_DIR: await tempDir(), HOOKSTREAM_PREVIOUS_MASTER_KEY: 'nope' });
  const err = await t.throwsAsync(loadKeys(bad, capture().log, { master: true, deadLetterPublic: false, deadLetterSecret: false }), { instanceOf: ConfigError });
  t.is(err.variable, 'HOOKSTREAM_PREVIOUS_MASTER_KEY');
  const same = capture();
  await loadKeys(loadConfig({ HOOKSTREAM_MASTER_KEY: k.masterKey, HOOKSTREAM_PREVIOUS_MASTER_KEY: k.masterKey }), same.log, { master: true, deadLetterPublic: false, deadLetterSecret: false });
  t.true(same.lines.some((l) => l.includes('the previous key is the current key')));
  t.false(same.lines.join('\n').includes(k.masterKey));
});
