// `hookstream erase --tenant T --user ID | --organization ID | --key K`: a thin client of admin.erasure.subject
// (issue 22). Prints what was found and erased in each store.
import { requireTenant, table, UsageError, type Command } from '../command.ts';
import { withAdmin } from '../context.ts';
import { SUBJECT_KINDS } from '../../erasure/subject-hash.ts';

export const erase: Command = {
  name: 'erase',
  summary: "Erase every stored payload of a tenant that carries a user's or an organization's id",
  help: [
    'Options:',
    '  --tenant T            the tenant',
    '  --user ID             the user id (data.userId of its events), or',
    '  --organization ID     the organization id (data.organizationId), or',
    '  --key K               the ordering key (the Hookstream-Ordering-Key header; also finds the events',
    '                        whose user or organization id is K)',
    '',
    'Removes the events, queued deliveries (which are then never delivered), attempt records, dead',
    "letters and rejected events of the tenant that carry the id, published before the command ran, and",
    'prints how many it erased in each store. Copies already delivered to receivers are not erased.',
    'Running it again erases nothing more. Audited, with the id; the payloads are never logged.',
    'Asks the admin subject, as the operator user.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, user: { type: 'string' }, organization: { type: 'string' }, key: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const given = SUBJECT_KINDS.filter((k) => typeof values[k] === 'string');
    if (given.length !== 1) throw new UsageError(`name exactly one of ${SUBJECT_KINDS.map((k) => `--${k}`).join(', ')}`);
    const kind = given[0]!;
    const r = await withAdmin((admin) => admin.eraseSubject({ tenant, [kind]: String(values[kind]) }));
    const s = r.stores;
    out.data(r, () => [
      `erased ${r.subject.kind} ${r.subject.id} of ${r.tenant} (events up to #${r.events_up_to_seq})`,
      table(['STORE', 'ERASED', 'NOTE'], [
        ['events (routed)', s.events.erased, `${s.index.entries} index entries read`],
        ['events (not yet routed)', s.unrouted_events.erased, `${s.unrouted_events.scanned} of the tenant scanned`],
        ['deliveries queued', s.deliveries.erased, `never delivered; ${s.deliveries.already_gone} were delivered (or dead) before`],
        ['attempt records', s.attempts.erased, ''],
        ['dead letters', s.dead_letters.erased, ''],
        ['rejected events', s.rejected.erased, `${s.rejected.scanned} of the tenant scanned`],
        ['index entries', s.index.erased, ''],
      ]),
      ...(r.routing_caught_up ? [] : ['The router had not routed everything published before the erasure: run it again.']),
    ].join('\n'));
  },
};
