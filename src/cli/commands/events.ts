// `hookstream events publish` (as a producer), `events rejected` and `events trace` (thin clients of
// admin.events.rejected* and admin.events.trace).
import { headers as natsHeaders } from '@nats-io/nats-core';
import type { EventsTraceIn, EventVerdictOut, RejectedEventOut } from '../../admin/protocol.ts';
import { limitOf } from './dead-letters.ts';
import { isEventName } from '../../domain/catalogue.ts';
import { isOrderingKey, MAX_ORDERING_KEY, ORDERING_KEY_HEADER } from '../../domain/ordering-key.ts';
import { eventSubject } from '../../../streams/events.ts';
import { requireString, requireTenant, table, UsageError, type Command } from '../command.ts';
import { withAdmin, withProducer } from '../context.ts';
import { randomUUID } from 'node:crypto';
import { ErrorCode, HookstreamError, UnreachableError, describe } from '../../errors.ts';
import { eventsPublishAttributes, startPublish, tracing } from '../../telemetry/tracing.ts';

/** How long a publish is retried: longer than a NATS cluster takes to elect new leaders after a node loss. */
const PUBLISH_RETRY_MS = 30_000;

/** How long `events publish` waits for the router's verdict unless --wait says otherwise. */
const VERDICT_WAIT_MS = 5_000;

type PublishVerdict = Omit<EventVerdictOut, 'verdict'> & { verdict: EventVerdictOut['verdict'] | 'unknown' };

/** The router's verdict on EVENTS `seq`, asked until it is given or `waitMs` pass; `unknown` (why in detail) if not. */
async function verdictOf(tenant: string, seq: number, waitMs: number): Promise<PublishVerdict> {
  const unknown = (why: string): PublishVerdict => ({ verdict: 'unknown', endpoints: null, reason: null, detail: why });
  const until = Date.now() + waitMs;
  return withAdmin(async (admin) => {
    for (;;) {
      const v = await admin.eventVerdict({ tenant, seq });
      if (v.verdict !== 'pending') return v;
      if (Date.now() > until) return unknown(`not decided within ${waitMs / 1000} s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, { timeoutMs: waitMs }).catch((e: unknown) => unknown(`the admin subject did not answer: ${describe(e)}`));
}

export const eventsPublish: Command = {
  name: 'events publish',
  summary: 'Publish an event as a producer would (to events.<tenant>.<event>)',
  help: [
    'Options:',
    '  --tenant T     tenant id',
    '  --type EVENT   event name, e.g. user.created',
    '  --data JSON    the event data object, e.g. \'{"userId":"user_1"}\'',
    '  --id ID        Nats-Msg-Id for idempotent publishing (a random one when absent; failed publishes are',
    '                 retried under it for 30 s): a repeat with the same id for the',
    '                 same tenant within 2 minutes is delivered once (it may still be stored again:',
    '                 "duplicate" only reports a repeat within 100 ms); other tenants\' ids never clash',
    '  --ordering-key K  the Hookstream-Ordering-Key header: the event\'s key at endpoints with ordering key',
    '                 (without it, data.userId / data.organizationId of identity events)',
    `  --wait S       wait up to S seconds (1-300) for the router's verdict (default ${VERDICT_WAIT_MS / 1000})`,
    `  --no-wait      do not wait for the router's verdict`,
    '',
    `Then waits (--wait) for the router's verdict (asked of admin.events.verdict as the operator user):`,
    '"routed to N endpoints" (the active endpoints subscribed to the type), or "the router rejected it: <reason>" and exit',
    'code 1. The verdict is "unknown" (exit code 0: the event is stored) when the router has not decided',
    'by then or the admin subject does not answer this user.',
  ].join('\n'),
  options: {
    tenant: { type: 'string' }, type: { type: 'string' }, data: { type: 'string' }, id: { type: 'string' }, 'ordering-key': { type: 'string' },
    wait: { type: 'string' }, 'no-wait': { type: 'boolean' },
  },
  async run({ values, out }) {
    const tenant = requireTenant(values);
    const type = requireString(values, 'type');
    const raw = requireString(values, 'data');
    if (!isEventName(type)) throw new UsageError(`--type ${JSON.stringify(type)} is not an event name (see GET /v1/event-types)`);
    let data: unknown;
    try { data = JSON.parse(raw); } catch { throw new UsageError('--data is not valid JSON'); }
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new UsageError('--data must be a JSON object');
    // Retried under one Nats-Msg-Id (ours when --id is absent) until acknowledged, as the README tells
    // producers to: on a cluster a node loss makes publishes fail for a few seconds, and a repeat is dropped.
    const id = typeof values['id'] === 'string' ? values['id'] : `cli-${randomUUID()}`;
    const orderingKey = values['ordering-key'];
    // Checked here too, so a wrong key is a usage error rather than a rejected event.
    if (orderingKey !== undefined && !isOrderingKey(orderingKey)) throw new UsageError(`--ordering-key must be 1-${MAX_ORDERING_KEY} printable ASCII characters`);
    const waitRaw = values['wait'];
    if (waitRaw !== undefined && (typeof waitRaw !== 'string' || !/^\d+$/.test(waitRaw) || Number(waitRaw) < 1 || Number(waitRaw) > 300)) {
      throw new UsageError('--wait must be a whole number of seconds from 1 to 300');
    }
    const waitMs = waitRaw === undefined ? VERDICT_WAIT_MS : Number(waitRaw) * 1000;
    const subject = eventSubject(tenant, type);
    // Traced (OTEL_* set): the producer's span, whose traceparent the event carries to the router and the attempts.
    const traced = tracing.on ? startPublish('send EVENTS', eventsPublishAttributes(subject)) : undefined;
    const ack = await withProducer(async ({ js }) => {
      const until = Date.now() + PUBLISH_RETRY_MS;
      for (let attempt = 0; ; attempt++) {
        try {
          const h = natsHeaders();
          if (typeof orderingKey === 'string') h.set(ORDERING_KEY_HEADER, orderingKey);
          traced?.carry(h);
          return await js.publish(subject, JSON.stringify(data), { msgID: id, headers: h });
        } catch (e) {
          if (Date.now() > until) throw new UnreachableError(`the event was not stored within ${PUBLISH_RETRY_MS / 1000} s (${describe(e)}); publish it again with --id ${id}`, e);
          out.info(`publish failed (${describe(e)}); trying again`);
          await new Promise((r) => setTimeout(r, Math.min(2000, 200 * 2 ** attempt)));
        }
      }
    }).finally(() => traced?.end());
    const published = `published ${type} for ${tenant} (EVENTS #${ack.seq}${ack.duplicate ? ', duplicate ignored' : ''})`;
    if (values['no-wait'] === true) {
      out.data({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate }, () => published);
      return;
    }
    const v = await verdictOf(tenant, ack.seq, waitMs);
    const rejected = `the router rejected it: ${v.reason}${v.detail ? ` (${v.detail})` : ''}`;
    // Rejected: with --json the verdict on stdout too; either way one line on stderr and exit code 1.
    if (v.verdict === 'rejected' && !out.json) throw new HookstreamError(ErrorCode.ValidationFailed, `${published}, but ${rejected}`);
    out.data({ stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate, ...v }, () => `${published}: ${v.verdict === 'routed'
      ? `routed to ${v.endpoints} endpoint${v.endpoints === 1 ? '' : 's'}`
      : `verdict unknown (${v.detail}); see \`hookstream events rejected --tenant ${tenant}\``}`);
    if (v.verdict === 'rejected') throw new HookstreamError(ErrorCode.ValidationFailed, rejected);
  },
};

/** Bytes of a body printed for people by --show; --json carries all of it. */
const SHOWN_BODY = 4096;

const rejectedTable = (rows: RejectedEventOut[]) => table(
  ['SEQ', 'REJECTED AT', 'REASON', 'TENANT', 'EVENT', 'SIZE', 'EVENTS SEQ', 'DETAIL'],
  rows.map((r) => [r.seq, r.rejected_at, r.reason, r.tenant, r.event, r.size, r.events_seq, r.detail.length > 60 ? `${r.detail.slice(0, 59)}…` : r.detail]),
);

export const eventsRejected: Command = {
  name: 'events rejected',
  summary: 'List the events the router rejected (kept 7 days), newest first, or show one with its body',
  help: [
    'Options:',
    '  --tenant T     only this tenant',
    '  --limit N      page size, 1-500 (default 50)',
    '  --cursor C     the page after the one that printed C',
    '  --all          every page',
    '  --show SEQ     one rejected event with its body (tenant data: each showing is logged by the admin role)',
    '',
    'The list gives the reason, the subject, the size and where the event was in EVENTS, never the body.',
    'Asks the admin subject (admin.events.rejected, admin.events.rejected.show) as the operator user.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, limit: { type: 'string' }, cursor: { type: 'string' }, all: { type: 'boolean' }, show: { type: 'string' } },
  async run({ values, out }) {
    const show = values['show'];
    if (show !== undefined) {
      if (typeof show !== 'string' || !/^\d+$/.test(show) || Number(show) < 1) throw new UsageError('--show takes the SEQ of a listed rejected event');
      const r = await withAdmin((admin) => admin.showRejectedEvent({ seq: Number(show) }));
      const e = r.rejected;
      const bytes = Buffer.from(r.body_base64, 'base64');
      const text = r.body_text === null ? `(not UTF-8; ${bytes.length} bytes, base64 with --json)` : r.body_text;
      const shown = text.length > SHOWN_BODY ? `${text.slice(0, SHOWN_BODY)}\n… (${bytes.length} bytes stored; all of it with --json)` : text;
      out.data(r, () => [
        `rejected event ${e.seq}: ${e.reason}`,
        `  detail:        ${e.detail}`,
        `  subject:       ${e.subject}`,
        `  tenant:        ${e.tenant ?? '-'}`,
        `  EVENTS seq:    ${e.events_seq ?? '-'}${e.event_time ? ` (stored ${e.event_time})` : ''}`,
        `  rejected at:   ${e.rejected_at} after ${e.deliveries ?? '?'} deliver${e.deliveries === 1 ? 'y' : 'ies'}`,
        `  size:          ${e.size ?? '?'} bytes${e.truncated ? ' (only the first part is kept)' : ''}`,
        `  producer id:   ${e.producer_msg_id ?? '-'}`,
        '',
        shown,
      ].join('\n'));
      return;
    }
    const tenant = values['tenant'] === undefined ? undefined : requireTenant(values);
    const limitRaw = values['limit'];
    if (limitRaw !== undefined && (typeof limitRaw !== 'string' || !/^\d+$/.test(limitRaw) || Number(limitRaw) < 1 || Number(limitRaw) > 500)) {
      throw new UsageError('--limit must be a whole number from 1 to 500');
    }
    const limit = limitRaw === undefined ? undefined : Number(limitRaw);
    const cursor = typeof values['cursor'] === 'string' ? values['cursor'] : undefined;
    const { data, next } = await withAdmin(async (admin) => {
      const rows: RejectedEventOut[] = [];
      let c = cursor;
      for (;;) {
        const page = await admin.listRejectedEvents({ ...(tenant ? { tenant } : {}), ...(limit ? { limit } : {}), ...(c ? { cursor: c } : {}) });
        rows.push(...page.data);
        c = page.next_cursor ?? undefined;
        if (!c || values['all'] !== true) return { data: rows, next: page.next_cursor };
      }
    });
    out.data({ data, next_cursor: next }, () => (data.length ? rejectedTable(data) : 'no rejected events'));
    if (next) out.info(`more: --cursor ${next}`);
  },
};

export const eventsTrace: Command = {
  name: 'events trace',
  summary: "Where a user's (or organization's) events, or one webhook-id's event, went: routed to which endpoints, or why not",
  help: [
    'Options:',
    '  --tenant T           tenant id (with --user or --organization)',
    '  --user ID            the events whose data.userId is ID',
    '  --organization ID    the events whose data.organizationId is ID',
    '  --webhook-id ID      one event, by the webhook-id (msg_…) its deliveries carry',
    '  --limit N            the newest N events (1-500, default 20)',
    '',
    'Each event says "routed to N endpoints: <endpoint> delivered|retrying|dead|queued, …" or "not routed:',
    '<reason>": no subscriber, filtered by event type, endpoint disabled or deleted, rejected by the router,',
    'or not routed yet. The reason is read from the endpoints as they are now. Users and organizations are',
    'found through the erasure index. Asks the admin subject (admin.events.trace), as the operator user.',
  ].join('\n'),
  options: { tenant: { type: 'string' }, user: { type: 'string' }, organization: { type: 'string' }, 'webhook-id': { type: 'string' }, limit: { type: 'string' } },
  async run({ values, out }) {
    const req: EventsTraceIn = {};
    for (const [option, field] of [['tenant', 'tenant'], ['user', 'user'], ['organization', 'organization'], ['webhook-id', 'webhook_id']] as const) {
      const v = values[option];
      if (typeof v === 'string' && v !== '') req[field] = v;
    }
    if (!req.webhook_id && !((req.user || req.organization) && req.tenant)) throw new UsageError('name --webhook-id, or --tenant with --user or --organization');
    const limit = limitOf(values, 'limit');
    if (limit) req.limit = limit;
    const r = await withAdmin((admin) => admin.traceEvents(req));
    out.data(r, () => (r.data.length === 0
      ? 'no events found (the erasure index keeps 30 days; EVENTS and the delivery log 7)'
      : r.data.map((e) => `${e.at ?? '?'}  ${e.event_type ?? '?'}  ${e.webhook_id ?? '(rejected)'}\n  ${e.summary}`).join('\n')));
  },
};
