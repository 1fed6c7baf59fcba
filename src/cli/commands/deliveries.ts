// `hookstream deliveries show WEBHOOK_ID --endpoint ID`: a thin client of admin.deliveries.show.
import { requireString, table, type Command } from '../command.ts';
import { withAdmin } from '../context.ts';

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
