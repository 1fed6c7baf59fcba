// Rejected events for operators: read from the REJECTED stream, newest first. A listing never carries
// the bodies (tenant data); `show` returns one record's body, and the admin role logs each time it does.
import { JetStreamApiCodes, type JetStreamManager, type StoredMsg } from '@nats-io/jetstream';
import { REJECTED_STREAM, RejectedHeader, rejectedTenantSubject } from '../../streams/rejected.ts';
import { isApiError } from '../../streams/ensure.ts';
import { notFound } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { RejectedEventOut, RejectedEventShowOut, RejectedEventsListOut } from './protocol.ts';
import { encodeRejectedCursor, type RejectedQuery } from './requests.ts';

/**
 * Records read per request at most: with a tenant filter, other tenants' records are skipped one by one
 * (JetStream has no "previous message on this subject"), so a page may come back short, with a cursor.
 */
const MAX_SCAN = 1000;
const UTF8 = new TextDecoder('utf-8', { fatal: true });

const num = (v: string | undefined): number | null => (v && /^\d+$/.test(v) ? Number(v) : null);

export function rejectedOut(m: StoredMsg): RejectedEventOut {
  const h = (name: string) => m.header?.get(name) || undefined;
  const subject = h(RejectedHeader.Subject) ?? '';
  const parts = subject.split('.');
  return {
    seq: m.seq,
    rejected_at: m.time.toISOString(),
    reason: h(RejectedHeader.Reason) ?? 'unknown',
    detail: h(RejectedHeader.Detail) ?? '',
    subject,
    tenant: h(RejectedHeader.Tenant) ?? null,
    event: parts.length >= 3 ? parts.slice(2).join('.') : null,
    events_seq: num(h(RejectedHeader.EventsSeq)),
    event_time: h(RejectedHeader.EventTime) ?? null,
    deliveries: num(h(RejectedHeader.Deliveries)),
    size: num(h(RejectedHeader.Size)),
    truncated: h(RejectedHeader.Truncated) === '1',
    producer_msg_id: h(RejectedHeader.ProducerMsgId) ?? null,
  };
}

export function createRejectedEvents(deps: { jsm: JetStreamManager; log: Logger }) {
  const { jsm, log } = deps;

  async function lastSeq(): Promise<{ first: number; last: number }> {
    try {
      const { state } = await jsm.streams.info(REJECTED_STREAM);
      // An empty stream says first_seq 0, and there is no message 0 to ask for (JetStream: bad request).
      return { first: Math.max(state.first_seq, 1), last: state.last_seq };
    } catch (e) {
      // Not created yet (no router has started): nothing was rejected.
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return { first: 1, last: 0 };
      throw e;
    }
  }

  async function list(q: RejectedQuery): Promise<RejectedEventsListOut> {
    const { first, last } = await lastSeq();
    let seq = Math.min(last, (q.before ?? Infinity) - 1);
    if (q.tenant !== undefined && seq >= first) {
      // Start at the tenant's newest record at or below seq: skips every newer record of other tenants.
      const newest = await jsm.streams.getMessage(REJECTED_STREAM, { last_by_subj: rejectedTenantSubject(q.tenant) });
      if (!newest) return { data: [], next_cursor: null };
      seq = Math.min(seq, newest.seq);
    }
    const data: RejectedEventOut[] = [];
    for (let scanned = 0; seq >= first && data.length < q.limit && scanned < MAX_SCAN; scanned++, seq--) {
      const m = await jsm.streams.getMessage(REJECTED_STREAM, { seq });
      if (!m) continue; // aged out or deleted meanwhile
      if (q.tenant !== undefined && m.subject !== rejectedTenantSubject(q.tenant)) continue;
      data.push(rejectedOut(m));
    }
    return { data, next_cursor: seq >= first ? encodeRejectedCursor(seq + 1) : null };
  }

  async function show(seq: number): Promise<RejectedEventShowOut> {
    const m = await jsm.streams.getMessage(REJECTED_STREAM, { seq }).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return null;
      throw e;
    });
    if (!m) throw notFound(`rejected event ${seq}`);
    const rejected = rejectedOut(m);
    // The body is a tenant's data: each viewing is on record.
    log.info('rejected event body shown', { seq, subject: rejected.subject, tenant: rejected.tenant, reason: rejected.reason });
    let text: string | null;
    try { text = UTF8.decode(m.data); } catch { text = null; }
    return { rejected, body_base64: Buffer.from(m.data).toString('base64'), body_text: text };
  }

  return { list, show };
}
