// `hookstream dead-letters list|show|replay`: thin clients of the admin subject (admin.dead_letters.*).
import type { DeadLetterFilterIn, DeadLetterOut, DeadLettersReplayManyOut } from '../../admin/protocol.ts';
import { DEAD_LETTER_STATUSES, isDeadLetterStatus } from '../../deadletter/store.ts';
import type { TagCheck } from '../../deadletter/tag.ts';
import { parseDuration } from '../../domain/duration.ts';
import { ErrorCode, HookstreamError } from '../../errors.ts';
import { table, UsageError, type Command, type OptionValues } from '../command.ts';
import { withAdmin } from '../context.ts';

const FILTER_HELP = [
  '  --tenant T         only this tenant',
  '  --endpoint ID      only this endpoint (webhook_…)',
  '  --event NAME       only this event type, e.g. user.created',
  '  --since TIME       died at or after TIME: ISO 8601 (2026-01-31T12:00:00Z) or an age (90m, 24h, 7d)',
  '  --until TIME       died before TIME (same forms)',
];

const FILTER_OPTIONS = {
  tenant: { type: 'string' }, endpoint: { type: 'string' }, event: { type: 'string' }, since: { type: 'string' }, until: { type: 'string' },
} as const;

/** An ISO time as given, or an age like 24h turned into the time that long ago. */
export function timeOption(values: OptionValues, name: string, now = Date.now()): string | undefined {
  const v = values[name];
  if (typeof v !== 'string' || v === '') return undefined;
  const age = parseDuration(v);
  return age === undefined ? v : new Date(now - age).toISOString();
}

function filterOf(values: OptionValues): DeadLetterFilterIn {
  const f: DeadLetterFilterIn = {};
  for (const name of ['tenant', 'endpoint', 'event'] as const) {
    const v = values[name];
    if (typeof v === 'string' && v !== '') f[name] = v;
  }
  const since = timeOption(values, 'since');
  const until = timeOption(values, 'until');
  if (since) f.since = since;
  if (until) f.until = until;
  return f;
}

export function limitOf(values: OptionValues, name: string): number | undefined {
  const v = values[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 500) throw new UsageError(`--${name} must be a whole number from 1 to 500`);
  return Number(v);
}

const lastFailure = (d: Pick<DeadLetterOut, 'last_status' | 'last_error'>) =>
  d.last_status !== null ? String(d.last_status) : d.last_error ? (d.last_error.length > 40 ? `${d.last_error.slice(0, 39)}…` : d.last_error) : null;

const listTable = (rows: DeadLetterOut[]) => table(
  ['ID', 'FAILED AT', 'TENANT', 'ENDPOINT', 'EVENT', 'WEBHOOK-ID', 'ATTEMPTS', 'LAST', 'STATUS', 'REPLAYS'],
  rows.map((d) => [d.id, d.failed_at, d.tenant, d.endpoint_id, d.event_type, d.webhook_id, d.attempts, lastFailure(d), d.status, d.replay_count]),
);

export const deadLettersList: Command = {
  name: 'dead-letters list',
  summary: 'List dead letters (deliveries that ran out of retries), newest first',
  help: [
    'Options:',
    ...FILTER_HELP,
    '  --status S         dead (not replayed since it died) or replayed',
    '  --limit N          page size, 1-500 (default 50)',
    '  --cursor C         the page after the one that printed C',
    '  --all              every page',
    '',
    'Asks the admin subject (admin.dead_letters.list); NATS_URL, NATS_USER and NATS_PASSWORD select the',
    'server and the operator user.',
  ].join('\n'),
  options: { ...FILTER_OPTIONS, status: { type: 'string' }, limit: { type: 'string' }, cursor: { type: 'string' }, all: { type: 'boolean' } },
  async run({ values, out }) {
    const status = values['status'];
    if (status !== undefined && !isDeadLetterStatus(status)) throw new UsageError(`--status must be ${DEAD_LETTER_STATUSES.join(' or ')}`);
    const limit = limitOf(values, 'limit');
    const cursor = typeof values['cursor'] === 'string' ? values['cursor'] : undefined;
    const { data, next } = await withAdmin(async (admin) => {
      const rows: DeadLetterOut[] = [];
      let c = cursor;
      for (;;) {
        const page = await admin.listDeadLetters({
          ...filterOf(values), ...(status ? { status } : {}), ...(limit ? { limit } : {}), ...(c ? { cursor: c } : {}),
        });
        rows.push(...page.data);
        c = page.next_cursor ?? undefined;
        if (!c || values['all'] !== true) return { data: rows, next: page.next_cursor };
      }
    });
    out.data({ data, next_cursor: next }, () => (data.length ? listTable(data) : 'no dead letters match'));
    if (next) out.info(`more: --cursor ${next}`);
  },
};

const TAG_TEXT: Record<TagCheck, string> = {
  current: 'valid',
  previous: 'valid (previous master key; keys reseal-dead-letters tags it again)',
  missing: 'none (stored before tags; check it, then keys reseal-dead-letters tags it)',
  invalid: 'DOES NOT MATCH: forged or altered record, replay refused',
};

export const deadLettersShow: Command = {
  name: 'dead-letters show',
  summary: 'Show a dead letter: why it died, and the original message opened',
  help: 'Asks admin.dead_letters.show; the admin role opens the sealed record with HOOKSTREAM_DEAD_LETTER_SECRET_KEY.',
  positionals: { min: 1, max: 1, names: 'ID' },
  async run({ positionals, out }) {
    const shown = await withAdmin((admin) => admin.showDeadLetter({ id: positionals[0]! }));
    const d = shown.dead_letter;
    out.data(shown, () => [
      `${d.id}  ${d.status}`,
      `  tenant:        ${d.tenant}`,
      `  endpoint:      ${d.endpoint_id}`,
      `  event:         ${d.event_type}`,
      `  webhook-id:    ${d.webhook_id}`,
      `  attempts:      ${d.attempts}`,
      `  last failure:  ${d.last_status ?? '-'}${d.last_error ? `  ${d.last_error}` : ''}`,
      `  failed at:     ${d.failed_at}`,
      `  died:          ${d.dead_count}x`,
      `  replayed:      ${d.replay_count}x${d.last_replayed_at ? `, last at ${d.last_replayed_at}` : ''}`,
      `  tag:           ${TAG_TEXT[shown.tag]}`,
      ...(d.trace_id ? [`  trace:         ${d.trace_id}`] : []),
      '',
      `subject: ${shown.message.subject}`,
      ...Object.entries(shown.message.headers).map(([k, v]) => `${k}: ${v.join(', ')}`),
      '',
      JSON.stringify(shown.message.body, null, 2),
    ].join('\n'));
  },
};

export const deadLettersReplay: Command = {
  name: 'dead-letters replay',
  summary: 'Deliver dead letters again, with their original webhook-id: one by ID, or all matching a filter',
  help: [
    'Forms:',
    '  hookstream dead-letters replay ID [--force]',
    '  hookstream dead-letters replay --endpoint ID | --tenant T | --event NAME | --since TIME | --until TIME',
    '',
    'Options:',
    ...FILTER_HELP,
    '  --batch N          dead letters replayed per request, 1-500 (default 100)',
    '  --force            with ID: replay even if it was replayed already',
    '',
    'A bulk replay takes the dead letters still dead (not replayed) that match, oldest first, each once.',
    'Check what matches first with `hookstream dead-letters list --status dead` and the same filter.',
    'A replayed delivery runs the whole retry schedule again and dies again if the endpoint still fails.',
    'Exits 1 if any replay was refused (e.g. the endpoint is deleted).',
  ].join('\n'),
  options: { ...FILTER_OPTIONS, batch: { type: 'string' }, force: { type: 'boolean' } },
  positionals: { min: 0, max: 1, names: '[ID]' },
  async run({ values, positionals, out }) {
    const filter = filterOf(values);
    const id = positionals[0];
    if (id !== undefined) {
      if (Object.keys(filter).length) throw new UsageError('give an ID or filters, not both');
      const r = await withAdmin((admin) => admin.replayDeadLetter({ id, force: values['force'] === true }));
      out.data(r, () => `replayed ${r.dead_letter.id} (${r.dead_letter.webhook_id} to ${r.dead_letter.endpoint_id}), replay #${r.dead_letter.replay_count}`);
      return;
    }
    if (Object.keys(filter).length === 0) throw new UsageError('give an ID, or at least one filter (--endpoint, --tenant, --event, --since, --until)');
    if (values['force'] === true) throw new UsageError('--force applies to one ID only');
    const batch = limitOf(values, 'batch');
    const result = await withAdmin(async (admin) => {
      const all: DeadLettersReplayManyOut = { replayed: [], failed: [], total: 0, next_cursor: null };
      let cursor: string | undefined;
      do {
        const r = await admin.replayDeadLetters({ ...filter, ...(batch ? { limit: batch } : {}), ...(cursor ? { cursor } : {}) });
        all.replayed.push(...r.replayed);
        all.failed.push(...r.failed);
        all.total = r.total;
        out.progress(all.replayed.length + all.failed.length, r.total, 'replaying');
        cursor = r.next_cursor ?? undefined;
      } while (cursor);
      return all;
    });
    out.data({ total: result.total, replayed: result.replayed, failed: result.failed }, () => [
      `replayed ${result.replayed.length} of ${result.total} dead letter(s)${result.failed.length ? `; ${result.failed.length} refused:` : ''}`,
      ...(result.failed.length ? [table(['ID', 'CODE', 'REASON'], result.failed.map((f) => [f.id, f.error.code, f.error.message]))] : []),
    ].join('\n'));
    if (result.failed.length) throw new HookstreamError(ErrorCode.Conflict, `${result.failed.length} dead letter(s) were not replayed`);
  },
};
