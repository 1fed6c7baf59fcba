// `hookstream audit list` (issue 19): the audit log, newest first, over admin.audit.list (the console's
// Audit log page asks the same).
import type { AuditEntryOut } from '../../admin/protocol.ts';
import { table, UsageError, type Command } from '../command.ts';
import { withAdmin } from '../context.ts';

export const auditList: Command = {
  name: 'audit list',
  summary: 'List operator actions (opened bodies, replays, retry-now, revokes), newest first',
  help: [
    'Options:',
    "  --by NAME              only this operator's actions",
    '  --action A             only this action (dead_letter.show, dead_letter.replay, dead_letters.replay_many,',
    '                         rejected_event.show, endpoint.retry_now, operator.create, operator.revoke,',
    '                         api_key.revoke, console.sign_in)',
    '  --target T             only actions on this target (a dl_… id, a seq, a webhook_… id, …)',
    '  --limit N              entries per page (1-500, default 50)',
    '  --cursor C             the next page, as printed after a full page',
  ].join('\n'),
  options: { by: { type: 'string' }, action: { type: 'string' }, target: { type: 'string' }, limit: { type: 'string' }, cursor: { type: 'string' } },
  async run({ values, out }) {
    const str = (k: string) => (typeof values[k] === 'string' && values[k] !== '' ? values[k] : undefined);
    const limitText = str('limit');
    if (limitText !== undefined && !/^\d+$/.test(limitText)) throw new UsageError('--limit must be a whole number');
    const page = await withAdmin((admin) => admin.listAudit({
      ...(str('by') ? { operator: str('by')! } : {}), ...(str('action') ? { action: str('action')! } : {}),
      ...(str('target') ? { target: str('target')! } : {}), ...(limitText ? { limit: Number(limitText) } : {}),
      ...(str('cursor') ? { cursor: str('cursor')! } : {}),
    }));
    if (page.next_cursor) out.info(`more: --cursor ${page.next_cursor}`);
    out.data(page, () => page.data.length === 0
      ? 'no audit entries'
      : table(['AT', 'OPERATOR', 'ACTION', 'TARGET', 'OUTCOME', 'DETAIL'], page.data.map((e: AuditEntryOut) => [e.at, e.operator, e.action, e.target, e.outcome, e.detail])));
  },
};
