// `hookstream keys generate|reseal-secrets|reseal-dead-letters`: new keys, and moving what is sealed under a
// previous key to the current one during a rotation (README "Rotating keys"). Output is counts and ids,
// never a secret or a key (apart from `generate`, whose whole point is printing new keys).
import { access } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { loadConfig, type Config } from '../../config.ts';
import { generateKeyEnvLines, KEYS_FILE, loadKeys, type KeyNeeds, type Keys } from '../../crypto/keys.ts';
import { createDeadLetterKeyring, deadLetterPublicKeyOf, KeyVariable, PreviousKeyVariable, sealForDeadLetters, SecretSealer } from '../../crypto/sodium.ts';
import { resealDeadLetters } from '../../deadletter/reseal.ts';
import { deadLetterTaggerOf } from '../../deadletter/tag.ts';
import { closeDatabase, openDatabase } from '../../db/orm.ts';
import { resealEndpointSecrets } from '../../endpoints/reseal.ts';
import { ConfigError, ErrorCode, HookstreamError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { table, UsageError, type Command, type Output } from '../command.ts';
import { cliLogger, withNats } from '../context.ts';
import { rehashErasureIndex, type IndexRehashResult } from '../../erasure/rehash.ts';
import { subjectHasherOf } from '../../erasure/subject-hash.ts';
import { createDataKeys, resealDataKeys } from '../../erasure/data-keys.ts';

export const keysGenerate: Command = {
  name: 'keys generate',
  summary: 'Print a fresh master key and dead-letter key pair as environment lines',
  help: 'Put the lines in your environment (or a secrets manager). The dead-letter secret key belongs only to\nthe process that runs the admin role. To rotate keys, see the README (Rotating keys).',
  async run({ out }) {
    const lines = await generateKeyEnvLines();
    out.data(Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])), () => lines.join('\n'));
  },
};

/**
 * The keys a reseal needs. Unlike the service, a reseal never generates a development keys file: sealing
 * under a fresh key would move nothing anywhere useful.
 */
async function rotationKeys(config: Config, log: Logger, need: KeyNeeds, current: readonly KeyVariable[]): Promise<Keys> {
  const fromEnv = (v: KeyVariable) => (v === KeyVariable.Master ? config.masterKey : config.deadLetterSecretKey);
  const unset = current.find((v) => fromEnv(v) === undefined);
  if (unset !== undefined && !config.production) {
    const file = join(resolve(config.dataDir), KEYS_FILE);
    try {
      await access(file);
    } catch {
      throw new ConfigError(unset, `is not set and there is no development keys file (${file}); set the current key`);
    }
  }
  return loadKeys(config, log, need);
}

interface Counts { resealed: number; current: number; failed: { id: string; reason: string }[] }

function report(out: Output, what: string, counts: Counts, index?: IndexRehashResult): void {
  const summary = {
    resealed: counts.resealed, already_current: counts.current, failed: counts.failed.length, failures: counts.failed,
    ...(index ? { erasure_index: index } : {}),
  };
  out.data(summary, () => [
    `${what}: ${counts.resealed} resealed, ${counts.current} already current, ${counts.failed.length} failed`,
    ...(index ? [`erasure index: ${index.rehashed} rehashed, ${index.current} already current, ${index.unresolved} pointing at nothing left`] : []),
    ...(counts.failed.length > 0 ? ['', table(['ID', 'REASON'], counts.failed.map((f) => [f.id, f.reason]))] : []),
  ].join('\n'));
  // Exit 1 so a script notices; the counts above say what is left, and a second run retries it.
  if (counts.failed.length > 0) throw new HookstreamError(ErrorCode.Internal, `${counts.failed.length} ${what} not resealed (listed above)`);
}

const dataKeysLine = (r: { resealed: number; current: number; unopened: number }) =>
  `data keys: ${r.resealed} resealed, ${r.current} already under the current key`
  + (r.unopened > 0 ? `, ${r.unopened} open under neither key (left as they are: check the keys before retiring the previous one)` : '');

export const keysResealSecrets: Command = {
  name: 'keys reseal-secrets',
  summary: 'Seal every endpoint signing secret again under the current master key (master-key rotation)',
  help: [
    'For every endpoint of the ENDPOINTS stream whose signing secrets (or v1a keys) are not yet sealed under',
    `${KeyVariable.Master} (bound to the endpoint), appends an endpoint.secrets_resealed event with the same`,
    `secrets sealed under it. Values under ${PreviousKeyVariable.Master} and values in the format from`,
    'before endpoint binding are both moved. The secrets themselves do not change; tenants notice nothing.',
    'The keys delivery bodies are sealed under (DATA_KEYS) are sealed again too, each old copy deleted with',
    'secure erase.',
    '',
    'Safe while the service runs and safe to repeat: a second run reports 0 resealed. An endpoint changed',
    'concurrently is read again and retried. Prints counts and endpoint ids, never a secret; exits 1 when an',
    'endpoint could not be resealed.',
    '',
    `Needs ${KeyVariable.Master} (the new key), ${PreviousKeyVariable.Master} (the old one) and a NATS user`,
    'allowed to use JetStream (the service user): NATS_URL, NATS_USER, NATS_PASSWORD.',
  ].join('\n'),
  async run({ out }) {
    const config = loadConfig();
    const log = cliLogger(config);
    const keys = await rotationKeys(config, log, { master: true, deadLetterPublic: false, deadLetterSecret: false }, [KeyVariable.Master]);
    if (keys.previousMasterKey === undefined) {
      out.info(`${PreviousKeyVariable.Master} is not set: only values in the old unbound format are moved`);
    }
    const sealer = new SecretSealer(keys.masterKey!, keys.previousMasterKey);
    const [result, dataKeys] = await withNats(async ({ js, jsm }) => [await resealEndpointSecrets({
      js, jsm, sealer, log, onProgress: (done, total) => out.progress(done, total, 'endpoints'),
    }), await resealDataKeys({ js, jsm, masterKey: keys.masterKey!, previousMasterKey: keys.previousMasterKey })] as const);
    report(out, 'endpoints', result);
    out.info(dataKeysLine(dataKeys));
  },
};

export const keysResealDeadLetters: Command = {
  name: 'keys reseal-dead-letters',
  summary: 'Seal, tag and hash every dead letter and erasure index row under the current dead-letter key pair and master key',
  help: [
    `Every dead letter that opens only under ${PreviousKeyVariable.DeadLetterSecret} is sealed again to the`,
    `current public key (derived from ${KeyVariable.DeadLetterSecret}; ${KeyVariable.DeadLetterPublic}, when`,
    `set, must match it), and every one whose authentication tag is under ${PreviousKeyVariable.Master} is`,
    `tagged again under ${KeyVariable.Master}, in place, in batches. A dead letter stored before tags existed`,
    'is tagged when its sealed message is the delivery its row names (run it with the service\'s',
    'HOOKSTREAM_DELIVERY_SHARDS: the delivery subject depends on it); one that is not, or whose tag does not',
    'match, is listed and left as it is (a replay refuses it).',
    '',
    `The keyed hashes of the user, organization and ordering-key ids that erasure looks up are computed`,
    `again under ${KeyVariable.Master}: for each dead letter from its message, for each erasure index row`,
    'from the event or delivery it points to (a row whose event and deliveries are all gone is counted and',
    'left to expire). Run it once every instance runs on the new master key, before the old one is retired.',
    '',
    'Safe while the service runs and safe to repeat: a second run reports 0 resealed. Prints counts and',
    'dead-letter ids, never their contents; exits 1 when a dead letter was left as it is.',
    '',
    'Options:',
    '  --batch N          rows per transaction, 1-1000 (default 100)',
    '',
    `Needs DATABASE_URL, ${KeyVariable.DeadLetterSecret} and ${KeyVariable.Master} (the current keys),`,
    `during a rotation ${PreviousKeyVariable.DeadLetterSecret} or ${PreviousKeyVariable.Master} (the old ones), and a`,
    'NATS user allowed to read the streams (the service user): NATS_URL, NATS_USER, NATS_PASSWORD.',
  ].join('\n'),
  options: { batch: { type: 'string' } },
  async run({ values, out }) {
    const batchRaw = values['batch'];
    if (batchRaw !== undefined && (typeof batchRaw !== 'string' || !/^\d+$/.test(batchRaw) || Number(batchRaw) < 1 || Number(batchRaw) > 1000)) {
      throw new UsageError('--batch must be a whole number from 1 to 1000');
    }
    await withNats(async ({ config, nc, js, jsm }) => {
      const log = cliLogger(config);
      // The public key is checked against the secret key only when it is given; otherwise it is derived.
      const keys = await rotationKeys(config, log, {
        master: true, deadLetterPublic: config.deadLetterPublicKey !== undefined, deadLetterSecret: true,
      }, [KeyVariable.DeadLetterSecret, KeyVariable.Master]);
      if (keys.previousDeadLetterSecretKey === undefined && keys.previousMasterKey === undefined) {
        out.info(`neither ${PreviousKeyVariable.DeadLetterSecret} nor ${PreviousKeyVariable.Master} is set: only dead letters without a tag are tagged`);
      }
      const publicKey = keys.deadLetterPublicKey ?? deadLetterPublicKeyOf(keys.deadLetterSecretKey!);
      const keyring = createDeadLetterKeyring(keys.deadLetterSecretKey!, keys.previousDeadLetterSecretKey);
      const hasher = subjectHasherOf(keys.masterKey!);
      const orm = await openDatabase(config.databaseUrl, log, { poolSize: 2 });
      // Dead letters and queued deliveries keep their bodies sealed under data keys: opened to hash their subjects.
      const bodies = createDataKeys({ nc, jsm, masterKey: keys.masterKey!, previousMasterKey: keys.previousMasterKey });
      try {
        const dataKeys = await resealDataKeys({ js, jsm, masterKey: keys.masterKey!, previousMasterKey: keys.previousMasterKey });
        out.info(dataKeysLine(dataKeys));
        const result = await resealDeadLetters({
          orm, keyring, seal: (bytes) => sealForDeadLetters(publicKey, bytes), log, hasher, bodies,
          tagger: deadLetterTaggerOf(keys.masterKey!, keys.previousMasterKey), shards: config.deliveryShards,
          batchSize: batchRaw === undefined ? undefined : Number(batchRaw),
          onProgress: (done, total) => out.progress(done, total, 'dead letters'),
        });
        const index = await rehashErasureIndex({ orm, jsm, hasher, bodies });
        report(out, 'dead letters', result, index);
      } finally {
        bodies.close();
        await closeDatabase(orm);
      }
    });
  },
};
