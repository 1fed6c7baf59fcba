import { headers as natsHeaders } from '@nats-io/nats-core';
import { isEventName } from '../../domain/catalogue.ts';
import { eventSubject } from '../../../streams/events.ts';
import { requireString, requireTenant, UsageError, type Command } from '../command.ts';
import { withNats } from '../context.ts';

export const eventsPublish: Command = {
  name: 'events publish',
  summary: 'Publish an event as a producer would (to events.<tenant>.<event>)',
  help: [
    'Options:',
    '  --tenant T     tenant id',
    '  --type EVENT   event name, e.g. user.created',
    '  --data JSON    the event data object, e.g. \'{"userId":"user_1"}\'',
    '  --id ID        optional Nats-Msg-Id for idempotent publishing: a repeat with the same id for the',
    '                 same tenant within 2 minutes is delivered once (it may still be stored again:',
    '                 "duplicate" only reports a repeat within 100 ms); other tenants\' ids never clash',
  ].join('\n'),
  options: { tenant: { type: 'string' }, type: { type: 'string' }, data: { type: 'string' }, id: { type: 'string' } },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const type = requireString(values, 'type');
    const raw = requireString(values, 'data');
    if (!isEventName(type)) throw new UsageError(`--type ${JSON.stringify(type)} is not an event name (see GET /v1/event-types)`);
    let data: unknown;
    try { data = JSON.parse(raw); } catch { throw new UsageError('--data is not valid JSON'); }
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new UsageError('--data must be a JSON object');
    const ack = await withNats(async ({ js }) => {
      const h = natsHeaders();
      const id = values['id'];
      return js.publish(eventSubject(tenant, type), JSON.stringify(data), typeof id === 'string' ? { msgID: id, headers: h } : {});
    });
    out.data({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate }, () =>
      `published ${type} for ${tenant} (EVENTS #${ack.seq}${ack.duplicate ? ', duplicate ignored' : ''})`);
  },
};
