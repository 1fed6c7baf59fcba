// `hookstream deliveries show WEBHOOK_ID --endpoint ID` and `deliveries list`: thin clients of
// admin.deliveries.show, admin.deliveries.list and admin.deliveries.attempts.
import type { DeliveriesListIn } from '../../admin/protocol.ts';
import { requireString, table, type Command } from '../command.ts';
import { withAdmin } from '../context.ts';
import { limitOf, timeOption } from './dead-letters.ts';

export const deliveriesShow: Command = {
  name: 'deliveries show',
  summary: 'Show where a delivery stands: pending, retrying, acknowledged or dead, and every failed attempt',
  help: [
    'Options:',
    '  --endpoint ID   the endpoint (webhook_…) the delivery is for',
    '',
    'WEBHOOK_ID is the webhook-id header (msg_…) the endpoint receives. The state is derived from the',
    "endpoint's work queue, the recorded failed attempts, the dead letters and the EVENTS stream; the",
    'reason line says which. Asks the admin subject, as the operator user.',
  ].join('\n'),
  options: { endpoint: { type: 'string' } },
  positionals: { min: 1, max: 1, names: 'WEBHOOK_ID' },
  async run({ values, positionals, out }) {
    const endpoint = requireString(values, 'endpoint');
    const s = await withAdmin((admin) => admin.showDelivery({ webhook_id: positionals[0]!, endpoint }));
    out.data(s, () => [
      `${s.webhook_id} to ${s.endpoint_id}: ${s.state.toUpperCase()}`,
      `  ${s.reason}`,
      `  tenant:        ${s.tenant ?? '-'}`,
      `  event:         ${s.event_type ?? '-'}`,
      `  attempts:      ${s.attempts}`,
      `  last failure:  ${s.last_status ?? '-'}${s.last_error ? `  ${s.last_error}` : ''}${s.last_attempt_at ? `  at ${s.last_attempt_at}` : ''}`,
      `  next attempt:  ${s.next_attempt_at ?? '-'}`,
      `  waiting on:    ${s.waiting_on ?? '-'}`,
      `  queued:        ${s.queued ? `${s.queued.stream} #${s.queued.seq}` : '-'}`,
      `  dead letter:   ${s.dead_letter ? `${s.dead_letter.id} (${s.dead_letter.status}, died ${s.dead_letter.dead_count}x, replayed ${s.dead_letter.replay_count}x)` : '-'}`,
      ...(s.history.length
        ? ['', 'Failed attempts:', table(['#', 'AT', 'STATUS', 'ERROR', 'MS', 'NEXT ATTEMPT'],
          s.history.map((r) => [r.attempt, r.at, r.status, r.error, r.duration_ms, r.next_attempt_at]))]
        : []),
    ].join('\n'));
  },
};

const shorten = (s: string | null, n: number) => (s && s.length > n ? `${s.slice(0, n - 1)}…` : s);

export const deliveriesList: Command = {
  name: 'deliveries list',
  summary: 'Search the delivery log (every attempt, successes too), newest first',
  help: [
    'Options:',
    '  --tenant T          only this tenant',
    '  --endpoint ID       only this endpoint (webhook_…)',
    '  --event NAME        only this event type, e.g. user.created',
    '  --user ID           only events about this user (data.userId; needs --tenant)',
    '  --organization ID   only events about this organization (data.organizationId; needs --tenant)',
    '  --webhook-id ID     only this delivery\'s webhook-id (msg_…)',
    '  --status S          ok, failed (the latest attempt failed), queued (failed, another attempt to come),',
    '                      dead (retries ran out) or dropped',
    '  --since TIME        latest attempt at or after TIME: ISO 8601 (2026-01-31T12:00:00Z) or an age (90m, 24h, 7d)',
    '  --until TIME        latest attempt before TIME (same forms)',
    '  --limit N           page size, 1-500 (default 50)',
    '  --cursor C          the page after the one that printed C',
    '  --attempts          also print each delivery\'s attempts (status, latency, error, the answer\'s first bytes)',
    '',
    'One row per delivery (webhook-id and endpoint) with its latest attempt. The log keeps attempts for',
    'HOOKSTREAM_ATTEMPT_RETENTION (7 days). Asks the admin subject (admin.deliveries.list), as the operator user.',
  ].join('\n'),
  options: {
    tenant: { type: 'string' }, endpoint: { type: 'string' }, event: { type: 'string' }, user: { type: 'string' }, organization: { type: 'string' },
    'webhook-id': { type: 'string' }, status: { type: 'string' }, since: { type: 'string' }, until: { type: 'string' }, limit: { type: 'string' },
    cursor: { type: 'string' }, attempts: { type: 'boolean' },
  },
  async run({ values, out }) {
    const req: DeliveriesListIn = {};
    for (const [option, field] of [['tenant', 'tenant'], ['endpoint', 'endpoint'], ['event', 'event'], ['user', 'user'], ['organization', 'organization'],
      ['webhook-id', 'webhook_id'], ['status', 'status'], ['cursor', 'cursor']] as const) {
      const v = values[option];
      if (typeof v === 'string' && v !== '') req[field] = v;
    }
    const since = timeOption(values, 'since');
    const until = timeOption(values, 'until');
    const limit = limitOf(values, 'limit');
    if (since) req.since = since;
    if (until) req.until = until;
    if (limit) req.limit = limit;
    const { page, attempts } = await withAdmin(async (admin) => {
      const page = await admin.listDeliveries(req);
      const attempts = values['attempts'] === true
        ? await Promise.all(page.data.map((d) => admin.deliveryAttempts({ webhook_id: d.webhook_id, endpoint: d.endpoint_id })))
        : undefined;
      return { page, attempts };
    });
    const data = attempts ? page.data.map((d, i) => ({ ...d, attempt_log: attempts[i]!.data })) : page.data;
    out.data({ data, next_cursor: page.next_cursor }, () => {
      if (page.data.length === 0) return 'no deliveries match';
      const rows = table(['LAST ATTEMPT', 'STATUS', 'WEBHOOK-ID', 'ENDPOINT', 'TENANT', 'EVENT', 'ATTEMPTS', 'CODE', 'MS', 'ERROR'],
        page.data.map((d) => [d.last_attempt_at, d.status, d.webhook_id, d.endpoint_id, d.tenant, d.event_type, d.attempts, d.status_code, d.latency_ms, shorten(d.error, 40)]));
      if (!attempts) return rows;
      return [rows, ...page.data.map((d, i) => [
        '', `${d.webhook_id} to ${d.endpoint_id}:`,
        table(['#', 'AT', 'STATUS', 'CODE', 'MS', 'ERROR', 'ANSWER'], attempts[i]!.data.map((a) => [a.attempt, a.at, a.status, a.status_code, a.latency_ms, shorten(a.error, 40), shorten(a.response_body, 60)])),
      ].join('\n'))].join('\n');
    });
    if (page.next_cursor) out.info(`more: --cursor ${page.next_cursor}`);
  },
};
