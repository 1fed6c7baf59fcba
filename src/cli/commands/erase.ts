// `hookstream erase --tenant T --user ID | --organization ID | --key K`: a thin client of admin.erasure.subject
// (issue 22). `hookstream erase --tenant T --everything`: the whole tenant, done here as the service user
// with Postgres (src/erasure/tenant.ts). Both print what was erased in each store.
import { requireTenant, table, UsageError, type Command, type Output } from '../command.ts';
import { cliLogger, cliOperator, withAdmin, withNats } from '../context.ts';
import { SUBJECT_KINDS } from '../../erasure/subject-hash.ts';
import { eraseTenant } from '../../erasure/tenant.ts';
import { loadKeys } from '../../crypto/keys.ts';
import { createEndpoints } from '../../endpoints/index.ts';
import { closeDatabase, openDatabase } from '../../db/orm.ts';
import { AUDIT_OK, AuditAction, recordAudit } from '../../audit/store.ts';
import type { TenantId } from '../../domain/ids.ts';
import { waitForCheckpoint } from '../../../projections/wait.ts';

async function eraseWholeTenant(tenant: TenantId, out: Output): Promise<void> {
  const by = cliOperator();
  const r = await withNats(async ({ config, log, nc, js, jsm }) => {
    const keys = await loadKeys(config, cliLogger(config), { master: true, deadLetterPublic: false, deadLetterSecret: false });
    const { store } = createEndpoints({ js, jsm, masterKey: keys.masterKey!, allowPrivateTargets: config.allowPrivateTargets, partitions: config.eventPartitions, log });
    const orm = await openDatabase(config.databaseUrl, log, { poolSize: 1 });
    try {
      const em = orm.em.fork();
      const result = await eraseTenant({
        nc, jsm, em, store, shards: config.deliveryShards, partitions: config.eventPartitions, waitForProjection: (name, seq) => waitForCheckpoint(orm, name, seq),
      }, tenant);
      const counts = Object.entries(result.stores).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(', ');
      await recordAudit(em, { operator: by, action: AuditAction.EraseTenant, target: tenant, outcome: AUDIT_OK, detail: `${result.endpoints} endpoints; ${counts || 'nothing stored'}` });
      return result;
    } finally {
      await closeDatabase(orm);
    }
  });
  out.data(r, () => [
    `erased tenant ${r.tenant}: ${r.endpoints} endpoints`,
    table(['STORE', 'REMOVED'], Object.entries(r.stores)),
  ].join('\n'));
}

export const erase: Command = {
  name: 'erase',
  summary: "Erase a tenant's stored payloads that carry a user's or an organization's id",
  help: [
    'Options:',
    '  --tenant T            the tenant',
    '  --user ID             the user id (data.userId of its events), or',
    '  --organization ID     the organization id (data.organizationId), or',
    '  --key K               the ordering key (the Hookstream-Ordering-Key header; also finds the events',
    '                        whose user or organization id is K), or',
    '  --everything          everything of the tenant: endpoints and their secrets (their whole history),',
    '                        API keys, portal sessions, idempotency records, queued deliveries, attempt',
    '                        records, events, rejected events, dead letters (as the service user, with',
    '                        DATABASE_URL and HOOKSTREAM_MASTER_KEY)',
    '',
    'Removes the events, queued deliveries (which are then never delivered), attempt records, dead',
    "letters, their queued replays and rejected events of the tenant that carry the id, published before",
    'the command ran, and prints how many it erased in each store. It destroys the subject\'s data keys',
    'first, so every sealed copy of its deliveries (acknowledged ones still in a queue\'s store file, replicas,',
    'backups of the queues) can no longer be opened. Copies already delivered to receivers are not erased;',
    "on a cluster each node's raft log keeps the destroyed key until it is compacted, minutes later",
    '(docs/erasure-and-retention.md, "What is left on disk after an erasure").',
    'Running it again erases nothing more. Audited, with the id; the payloads are never logged.',
    'Asks the admin subject, as the operator user.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, user: { type: 'string' }, organization: { type: 'string' }, key: { type: 'string' }, everything: { type: 'boolean' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const given = SUBJECT_KINDS.filter((k) => typeof values[k] === 'string');
    // A whole tenant only when asked in so many words: a forgotten --user must not erase everything.
    if (values['everything'] === true && given.length === 0) return eraseWholeTenant(tenant, out);
    if (given.length !== 1) throw new UsageError(`name exactly one of ${[...SUBJECT_KINDS.map((k) => `--${k}`), '--everything'].join(', ')}`);
    const kind = given[0]!;
    const r = await withAdmin((admin) => admin.eraseSubject({ tenant, [kind]: String(values[kind]) }));
    const s = r.stores;
    out.data(r, () => [
      `erased ${r.subject.kind} ${r.subject.id} of ${r.tenant} (events up to #${r.events_up_to_seq})`,
      table(['STORE', 'ERASED', 'NOTE'], [
        ['data keys', s.data_keys.destroyed, 'every sealed copy under them no longer opens'],
        ['events (routed)', s.events.erased, `${s.index.entries} index entries read`],
        ['events (not yet routed)', s.unrouted_events.erased, `${s.unrouted_events.scanned} of the tenant scanned`],
        ['deliveries queued', s.deliveries.erased, `never delivered; ${s.deliveries.already_gone} were delivered (or dead) before`],
        ['attempt records', s.attempts.erased, ''],
        ['dead letters', s.dead_letters.erased, ''],
        ['replays queued', s.replays.erased, 'never delivered'],
        ['rejected events', s.rejected.erased, `${s.rejected.scanned} of the tenant scanned`],
        ['index entries', s.index.erased, ''],
      ]),
      ...(r.routing_caught_up ? [] : ['The router had not routed everything published before the erasure: run it again.']),
    ].join('\n'));
  },
};
