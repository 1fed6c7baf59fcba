// The console's pages, rendered on the server from the admin subjects' answers. Everything tenant-written
// (payloads, ids, URLs, error texts) goes through the `html` tag's escaping; payloads sit in <pre> as text.
import type {
  AttemptLogOut, AuditEntryOut, DeadLetterOut, DeadLetterShowOut, DeadLettersReplayManyOut, DeliveriesListOut, DeliveryLogOut, DeliveryShowOut,
  EndpointHealthOut, EndpointListOut, OverviewOut, WindowStatsOut, RejectedEventShowOut, RejectedEventsListOut,
} from '../admin/protocol.ts';
import { href, html, type Html, type Value } from './html.ts';
import { csrfField, page, publicPage, type Flash, type Viewer } from './layout.ts';
import { deliveriesChart } from './chart.ts';

export type Query = Record<string, string | undefined>;

const time = (t: string | null | undefined): Html => (t ? html`<time datetime="${t}">${t.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}</time>` : html`–`);
const dash = (v: string | number | null | undefined): Value => (v === null || v === undefined || v === '' ? '–' : v);

function field(name: string, label: string, value: string | undefined, opts: { placeholder?: string; type?: string; required?: boolean } = {}): Html {
  return html`<label for="f-${name}">${label}
<input id="f-${name}" name="${name}" type="${opts.type ?? 'text'}" value="${value ?? ''}"${opts.placeholder ? html` placeholder="${opts.placeholder}"` : ''}${opts.required ? html` required` : ''}>
</label>`;
}

const table = (caption: string, headers: string[], rows: Value[]): Html => html`<div class="overflow-auto"><table>
<caption class="visually-hidden">${caption}</caption>
<thead><tr>${headers.map((h) => html`<th scope="col">${h}</th>`)}</tr></thead>
<tbody>${rows}</tbody></table></div>`;

const nextLink = (path: string, q: Query, cursor: string | null): Html =>
  cursor ? html`<p><a href="${href(path, { ...q, cursor })}">Older entries</a></p>` : html``;

export function signInPage(csrf: string, error?: string): Html {
  return publicPage('Sign in', html`
${error ? html`<p role="alert" class="flash error">${error}</p>` : ''}
<form method="post" action="/sign-in">
${csrfField(csrf)}
<label for="operator-key">Operator key
<input id="operator-key" name="key" type="password" autocomplete="current-password" required autofocus aria-describedby="key-help">
</label>
<small id="key-help">The hs_op_… key that <code>hookstream operators create</code> printed for you.</small>
<button type="submit">Sign in</button>
</form>`);
}

export function errorPage(v: Viewer | undefined, title: string, message: string): Html {
  const body = html`<p role="alert">${message}</p><p><a href="/">Back to the overview</a></p>`;
  return v ? page(v, '', title, body) : publicPage(title, body);
}

const ratio = (r: number | null): string => (r === null ? '–' : `${(r * 100).toFixed(r === 1 || r === 0 ? 0 : 1)} %`);
const ms = (n: number | null): string => (n === null ? '–' : `${Math.round(n)} ms`);

const healthTable = (caption: string, rows: EndpointHealthOut[]) => table(caption,
  ['Endpoint', 'Tenant', 'State', 'Success, 1 h', 'Attempts, 1 h', 'p50 / p99, 1 h', 'Success, 24 h', 'Last error', 'Backlog'],
  rows.map((e) => html`<tr><td><a href="/endpoints/${e.id}"><code>${e.id}</code></a></td><td>${e.tenant}</td><td>${e.state}</td>
<td>${ratio(e.last_hour.success_ratio)}</td><td>${e.last_hour.attempts}</td><td>${ms(e.last_hour.p50_ms)} / ${ms(e.last_hour.p99_ms)}</td>
<td>${ratio(e.last_day.success_ratio)}</td><td>${e.last_error ? html`${time(e.last_error.at)} ${dash(e.last_error.status_code)} ${dash(e.last_error.error)}` : '–'}</td>
<td>${e.backlog ? `${e.backlog.pending} waiting, ${e.backlog.ack_pending} in flight` : '–'}</td></tr>`));

export function overviewPage(v: Viewer, o: OverviewOut): Html {
  const statuses = Object.entries(o.endpoints_by_status);
  return page(v, '/', 'Overview', html`
<section aria-labelledby="h-failing"><h2 id="h-failing">Failing endpoints</h2>
${o.failing_endpoints.length ? healthTable('Failing endpoints, worst first', o.failing_endpoints) : html`<p>No endpoint failed an attempt in the last hour.</p>`}
</section>
<section aria-labelledby="h-rate"><h2 id="h-rate">Deliveries per minute</h2>
${deliveriesChart('chart-all', o.per_minute)}
</section>
<section aria-labelledby="h-endpoints"><h2 id="h-endpoints">Endpoints by status</h2>
${statuses.length ? table('Endpoints by status', ['Status', 'Endpoints'], statuses.map(([s, n]) => html`<tr><td><a href="${href('/endpoints', { status: s })}">${s}</a></td><td>${n}</td></tr>`)) : html`<p>No endpoints yet.</p>`}
</section>
<section aria-labelledby="h-backlogs"><h2 id="h-backlogs">Largest backlogs</h2>
${o.backlogs.length ? table('Largest backlogs', ['Endpoint', 'Waiting', 'In flight or retrying'], o.backlogs.map((b) => html`<tr><td><code>${b.endpoint}</code></td><td>${b.pending}</td><td>${b.ack_pending}</td></tr>`)) : html`<p>No endpoint has a backlog.</p>`}
</section>
<section aria-labelledby="h-day"><h2 id="h-day">Last 24 hours</h2>
<p><a href="${href('/dead-letters', { since: new Date(Date.now() - 24 * 3600_000).toISOString() })}">Dead letters: ${o.dead_letters_24h}</a></p>
<p><a href="/rejected-events">Rejected events: ${o.rejected_24h.total}${o.rejected_24h.capped ? '+' : ''}</a></p>
</section>
<section aria-labelledby="h-ops"><h2 id="h-ops">Latest operational events</h2>
${o.ops_events.length ? table('Latest operational events', ['At', 'Type', 'Tenant', 'Endpoint', 'Detail'], o.ops_events.map((e) => html`<tr><td>${time(e.at)}</td><td>${e.type}</td><td>${dash(e.tenant)}</td><td><code>${dash(e.endpoint)}</code></td><td>${dash(e.reason ?? e.webhook_id)}</td></tr>`)) : html`<p>None in the last 7 days.</p>`}
</section>`);
}

const DEAD_LETTER_FILTERS = ['tenant', 'endpoint', 'event', 'since', 'until', 'webhook_id', 'status'] as const;
export const deadLetterFilterOf = (q: Query): Query => Object.fromEntries(DEAD_LETTER_FILTERS.map((k) => [k, q[k] || undefined]));

function deadLetterFilterForm(q: Query): Html {
  return html`<form method="get" action="/dead-letters" aria-label="Filter dead letters">
<div class="filters">
${field('webhook_id', 'Webhook id', q['webhook_id'], { placeholder: 'msg_…' })}
${field('tenant', 'Tenant', q['tenant'])}
${field('endpoint', 'Endpoint', q['endpoint'], { placeholder: 'webhook_…' })}
${field('event', 'Event type', q['event'], { placeholder: 'user.created' })}
${field('since', 'Died since (UTC)', q['since'], { placeholder: '2026-01-31T08:00:00Z' })}
${field('until', 'Died before (UTC)', q['until'], { placeholder: '2026-01-31T09:00:00Z' })}
<label for="f-status">Status
<select id="f-status" name="status">${['', 'dead', 'replayed'].map((s) => html`<option value="${s}"${q['status'] === s ? html` selected` : ''}>${s || 'any'}</option>`)}</select>
</label>
</div>
<button type="submit">Filter</button>
</form>`;
}

export function deadLettersPage(v: Viewer, q: Query, rows: DeadLetterOut[], next: string | null, flash?: Flash): Html {
  const filter = deadLetterFilterOf(q);
  const { status: _status, webhook_id: _id, ...bulk } = filter;
  const canBulk = Object.values(bulk).some(Boolean);
  return page(v, '/dead-letters', 'Dead letters', html`
${deadLetterFilterForm(filter)}
${canBulk
    ? html`<p><a href="${href('/dead-letters/replay-all', bulk)}" role="button" class="secondary">Replay all matching</a></p>`
    : html`<p><small>Filter by tenant, endpoint, event type or time to replay all matching dead letters.</small></p>`}
${rows.length
    ? table('Dead letters', ['Webhook id', 'Died at', 'Tenant', 'Endpoint', 'Event', 'Attempts', 'Last status', 'Status'], rows.map((d) => html`<tr>
<td><a href="/dead-letters/${d.id}"><code>${d.webhook_id}</code></a></td><td>${time(d.failed_at)}</td><td>${d.tenant}</td><td><code>${d.endpoint_id}</code></td>
<td>${d.event_type}</td><td>${d.attempts}</td><td>${dash(d.last_status ?? d.last_error)}</td><td>${d.status}${d.replay_count ? ` (replayed ${d.replay_count}×)` : ''}</td></tr>`))
    : html`<p>No dead letters match.</p>`}
${nextLink('/dead-letters', filter, next)}`, flash);
}

/**
 * What a link to a stored payload shows: a button that opens it. Opening is audited, so it is a form post
 * with the session's CSRF token: a same-site GET (an image, a link on another page of the host) opens nothing.
 */
export function openPayloadPage(v: Viewer, current: string, title: string, action: string, flash?: Flash): Html {
  return page(v, current, title, html`
<p>Opening its payload is written to the audit log with your name.</p>
<form method="post" action="${action}">
${csrfField(v.csrf)}
<button type="submit">Open</button>
</form>`, flash);
}

export function deadLetterPage(v: Viewer, s: DeadLetterShowOut, flash?: Flash): Html {
  const d = s.dead_letter;
  const body = typeof s.message.body === 'string' ? s.message.body : JSON.stringify(s.message.body, null, 2);
  return page(v, '/dead-letters', `Dead letter ${d.webhook_id}`, html`
<dl>
<dt>Webhook id</dt><dd><code>${d.webhook_id}</code></dd>
<dt>Dead letter</dt><dd><code>${d.id}</code></dd>
<dt>Tenant</dt><dd>${d.tenant}</dd>
<dt>Endpoint</dt><dd><code>${d.endpoint_id}</code> · <a href="${href('/deliveries', { webhook_id: d.webhook_id, endpoint: d.endpoint_id })}">where the delivery stands</a></dd>
<dt>Event</dt><dd>${d.event_type}</dd>
<dt>Died</dt><dd>${time(d.failed_at)} after ${d.attempts} attempts; last: ${dash(d.last_status)} ${dash(d.last_error)}</dd>
<dt>Status</dt><dd>${d.status}, died ${d.dead_count}×, replayed ${d.replay_count}×${d.last_replayed_at ? html`, last ${time(d.last_replayed_at)}` : ''}</dd>
${d.trace_id ? html`<dt>Trace</dt><dd><code>${d.trace_id}</code></dd>` : ''}
<dt>Authentication tag</dt><dd>${s.tag === 'current' || s.tag === 'previous' ? 'valid' : s.tag === 'missing' ? 'missing (stored before tags: see keys reseal-dead-letters)' : 'DOES NOT MATCH: a forged or altered record, not replayable'}</dd>
</dl>
<form method="post" action="/dead-letters/${d.id}/replay">
${csrfField(v.csrf)}
${d.status === 'replayed' ? html`<label><input type="checkbox" name="force" value="1"> Replay again (its last replay may still be running)</label>` : ''}
<button type="submit">Replay</button>
</form>
<h2>Payload</h2>
<p><small>Opening it was written to the audit log. The tenant's data, shown as text.</small></p>
<pre class="payload" data-testid="payload">${body}</pre>
<h2>Headers</h2>
<pre class="payload">${Object.entries(s.message.headers).map(([k, vs]) => `${k}: ${vs.join(', ')}\n`).join('')}</pre>`, flash);
}

export function replayAllConfirmPage(v: Viewer, filter: Query, total: number): Html {
  const described = Object.entries(filter).filter(([, x]) => x).map(([k, x]) => `${k} ${x}`).join(', ');
  return page(v, '/dead-letters', 'Replay all matching', html`
<p data-testid="dry-run">${total} dead ${total === 1 ? 'letter matches' : 'letters match'} (${described}).</p>
${total > 0 ? html`<form method="post" action="/dead-letters/replay-all">
${csrfField(v.csrf)}
${Object.entries(filter).filter(([, x]) => x).map(([k, x]) => html`<input type="hidden" name="${k}" value="${x}">`)}
<input type="hidden" name="expected" value="${total}">
<button type="submit">Replay ${total} dead ${total === 1 ? 'letter' : 'letters'}</button>
<a href="${href('/dead-letters', filter)}" role="button" class="secondary">Cancel</a>
</form>` : html`<p><a href="${href('/dead-letters', filter)}">Back</a></p>`}`);
}

export function replayAllResultPage(v: Viewer, filter: Query, replayed: number, failed: DeadLettersReplayManyOut['failed']): Html {
  return page(v, '/dead-letters', 'Replay all matching', html`
<p role="status">Replayed ${replayed}; ${failed.length} could not be replayed.</p>
${failed.length ? table('Not replayed', ['Dead letter', 'Why'], failed.map((f) => html`<tr><td><a href="/dead-letters/${f.id}"><code>${f.id}</code></a></td><td>${f.error.message}</td></tr>`)) : ''}
<p><a href="${href('/dead-letters', filter)}">Back to the dead letters</a></p>`);
}

const DELIVERY_STATUSES = ['', 'ok', 'failed', 'queued', 'dead', 'dropped'];
export const DELIVERY_SEARCH_FIELDS = ['tenant', 'endpoint', 'event', 'user', 'status', 'webhook_id', 'since', 'until'] as const;

function deliverySearchForm(q: Query): Html {
  return html`<form method="get" action="/deliveries" aria-label="Search deliveries">
<div class="filters">
${field('tenant', 'Tenant', q['tenant'])}
${field('endpoint', 'Endpoint', q['endpoint'], { placeholder: 'webhook_…' })}
${field('event', 'Event type', q['event'], { placeholder: 'user.created' })}
${field('user', 'User id', q['user'], { placeholder: 'with a tenant' })}
<label for="f-status">Status
<select id="f-status" name="status">${DELIVERY_STATUSES.map((s) => html`<option value="${s}"${q['status'] === s ? html` selected` : ''}>${s || 'any'}</option>`)}</select>
</label>
${field('webhook_id', 'Webhook id', q['webhook_id'], { placeholder: 'msg_…' })}
${field('since', 'Since (UTC)', q['since'], { placeholder: '2026-01-31T08:00:00Z' })}
${field('until', 'Before (UTC)', q['until'], { placeholder: '2026-01-31T09:00:00Z' })}
</div>
<button type="submit" name="search" value="1">Search</button>
</form>`;
}

const deliveryLink = (d: Pick<DeliveryLogOut, 'webhook_id' | 'endpoint_id'>) => href('/deliveries', { webhook_id: d.webhook_id, endpoint: d.endpoint_id });

export function deliveriesPage(v: Viewer, q: Query, list: DeliveriesListOut | undefined, error?: string): Html {
  const filter = Object.fromEntries(DELIVERY_SEARCH_FIELDS.map((k) => [k, q[k]]));
  return page(v, '/deliveries', 'Deliveries', html`
${deliverySearchForm(q)}
${error ? html`<p role="alert" class="flash error">${error}</p>` : ''}
${list ? (list.data.length
    ? table('Deliveries', ['Last attempt', 'Status', 'Webhook id', 'Endpoint', 'Tenant', 'Event', 'Attempts', 'Code', 'Latency'], list.data.map((d) => html`<tr>
<td>${time(d.last_attempt_at)}</td><td>${d.status}</td><td><a href="${deliveryLink(d)}" aria-label="Attempts of ${d.webhook_id} to ${d.endpoint_id}"><code>${d.webhook_id}</code></a></td>
<td><a href="${href('/endpoints/' + d.endpoint_id)}"><code>${d.endpoint_id}</code></a></td><td>${d.tenant}</td><td>${d.event_type}</td><td>${d.attempts}</td><td>${dash(d.status_code ?? d.error)}</td><td>${d.latency_ms} ms</td></tr>`))
    : html`<p>No deliveries match.</p>`) : html`<p><small>Every attempt is kept for HOOKSTREAM_ATTEMPT_RETENTION (7 days). A user id needs its tenant.</small></p>`}
${list ? nextLink('/deliveries', { ...filter, search: '1' }, list.next_cursor) : ''}`);
}

/** One delivery: where it stands (admin.deliveries.show, when it could be told) and every attempt in the log. */
export function deliveryPage(v: Viewer, webhookId: string, endpoint: string, s: DeliveryShowOut | undefined, attempts: AttemptLogOut[], note?: string): Html {
  return page(v, '/deliveries', `Delivery ${webhookId}`, html`
<p><code>${webhookId}</code> to <a href="${href('/endpoints/' + endpoint)}"><code>${endpoint}</code></a></p>
${note ? html`<p role="status">${note}</p>` : ''}
${s ? html`<section aria-labelledby="h-state"><h2 id="h-state">${s.state}</h2>
<p>${s.reason}</p>
<dl>
<dt>Tenant</dt><dd>${dash(s.tenant)}</dd><dt>Event</dt><dd>${dash(s.event_type)}</dd>
<dt>Attempts</dt><dd>${s.attempts}</dd><dt>Next attempt</dt><dd>${time(s.next_attempt_at)}</dd>
${s.waiting_on ? html`<dt>Waiting on</dt><dd>${s.waiting_on}</dd>` : ''}
${s.dead_letter ? html`<dt>Dead letter</dt><dd><a href="/dead-letters/${s.dead_letter.id}"><code>${s.dead_letter.id}</code></a> (${s.dead_letter.status})</dd>` : ''}
</dl></section>` : ''}
<h2>Attempts</h2>
${attempts.length
    ? table('Attempts', ['#', 'At', 'Status', 'Code', 'Latency', 'Error', 'Answer'], attempts.map((a) => html`<tr>
<td>${a.attempt}</td><td>${time(a.at)}</td><td>${a.status}</td><td>${dash(a.status_code)}</td><td>${a.latency_ms} ms</td><td>${dash(a.error)}</td><td><code>${dash(a.response_body)}</code></td></tr>`))
    : s && s.history.length
      ? html`<ol class="timeline">${s.history.map((a) => html`<li>${time(a.at)}: attempt ${a.attempt} failed, ${dash(a.status)} ${dash(a.error)} (${a.duration_ms} ms)</li>`)}</ol>`
      : html`<p>No attempt in the delivery log.</p>`}`);
}

/** One endpoint: its health, a day of its deliveries per minute, its latest deliveries and the operators' actions. */
export function endpointPage(v: Viewer, e: EndpointHealthOut, recent: DeliveriesListOut, flash?: Flash): Html {
  const act = (action: string, label: string, extra: Html = html``) => html`<form method="post" action="/endpoints/${e.id}/${action}" class="inline">
${csrfField(v.csrf)}${extra}<button type="submit" class="secondary">${label}</button></form>`;
  const windows: [string, WindowStatsOut][] = [['Last hour', e.last_hour], ['Last 24 hours', e.last_day]];
  return page(v, '/endpoints', `Endpoint ${e.id}`, html`
<dl>
<dt>State</dt><dd data-testid="state">${e.state}</dd>
<dt>Tenant</dt><dd>${e.tenant}</dd><dt>URL</dt><dd><code>${e.url}</code></dd><dt>Events</dt><dd>${e.events.join(', ')}</dd>
<dt>Rate limit</dt><dd>${e.rate_limit === null ? '–' : `${e.rate_limit}/s`}</dd>
<dt>Backlog</dt><dd>${e.backlog ? `${e.backlog.pending} waiting, ${e.backlog.ack_pending} in flight or retrying` : '–'}</dd>
<dt>Last error</dt><dd>${e.last_error ? html`${time(e.last_error.at)} ${dash(e.last_error.status_code)} ${dash(e.last_error.error)}` : '–'}</dd>
</dl>
${table('Rates', ['Window', 'Attempts', 'Ok', 'Failed', 'Success', 'p50', 'p99'], windows.map(([label, w]) => html`<tr><th scope="row">${label}</th>
<td>${w.attempts}</td><td>${w.ok}</td><td>${w.failed}</td><td>${ratio(w.success_ratio)}</td><td>${ms(w.p50_ms)}</td><td>${ms(w.p99_ms)}</td></tr>`))}
${deliveriesChart('chart-endpoint', e.per_minute ?? [])}
<section aria-labelledby="h-actions"><h2 id="h-actions">Actions</h2>
${e.status === 'active' ? html`<form method="post" action="/endpoints/${e.id}/disable">
${csrfField(v.csrf)}
<label for="f-reason">Reason<input id="f-reason" name="reason" required maxlength="200" placeholder="receiver down for maintenance"></label>
<button type="submit">Disable</button>
</form>
${act('retry-now', 'Retry now')}` : ''}
${e.status === 'disabled' ? act('enable', 'Enable') : ''}
</section>
<section aria-labelledby="h-recent"><h2 id="h-recent">Latest deliveries</h2>
${recent.data.length ? table('Latest deliveries', ['Last attempt', 'Status', 'Webhook id', 'Event', 'Attempts', 'Code', 'Latency'], recent.data.map((d) => html`<tr>
<td>${time(d.last_attempt_at)}</td><td>${d.status}</td><td><a href="${deliveryLink(d)}"><code>${d.webhook_id}</code></a></td><td>${d.event_type}</td><td>${d.attempts}</td><td>${dash(d.status_code ?? d.error)}</td><td>${d.latency_ms} ms</td></tr>`)) : html`<p>None in the delivery log.</p>`}
<p><a href="${href('/deliveries', { endpoint: e.id, search: '1' })}">Search this endpoint's deliveries</a></p>
</section>`, flash);
}

export function endpointsPage(v: Viewer, q: Query, list: EndpointListOut, flash?: Flash): Html {
  return page(v, '/endpoints', 'Endpoints', html`
<form method="get" action="/endpoints" aria-label="Filter endpoints">
<div class="filters">
${field('tenant', 'Tenant', q['tenant'])}
<label for="f-status">Status
<select id="f-status" name="status">${['', 'active', 'disabled', 'deleted'].map((s) => html`<option value="${s}"${q['status'] === s ? html` selected` : ''}>${s || 'any'}</option>`)}</select>
</label>
</div>
<button type="submit">Filter</button>
</form>
${list.data.length ? table('Endpoints', ['Endpoint', 'Tenant', 'URL', 'Status', 'Failing since', 'Rate limit', 'Backlog', ''], list.data.map((e) => html`<tr>
<td><a href="/endpoints/${e.id}"><code>${e.id}</code></a></td><td>${e.tenant}</td><td><code>${e.url}</code></td>
<td>${e.status}${e.disabled_reason ? html` (${e.disabled_reason} since ${time(e.disabled_at)})` : ''}</td>
<td>${time(e.failing_since)}</td><td>${e.rate_limit === null ? '–' : `${e.rate_limit}/s`}</td>
<td>${e.backlog ? `${e.backlog.pending} waiting, ${e.backlog.ack_pending} in flight or retrying` : '–'}</td>
<td>${e.status === 'active' ? html`<form method="post" action="/endpoints/${e.id}/retry-now" class="inline">${csrfField(v.csrf)}<button type="submit" class="secondary" aria-label="Retry now: ${e.id}">Retry now</button></form>` : ''}</td></tr>`)) : html`<p>No endpoints match.</p>`}
${nextLink('/endpoints', { tenant: q['tenant'], status: q['status'] }, list.next_cursor)}`, flash);
}

export function rejectedPage(v: Viewer, q: Query, counts: OverviewOut['rejected_24h'], list: RejectedEventsListOut): Html {
  const reasons = Object.entries(counts.by_reason).sort((a, b) => b[1] - a[1]);
  return page(v, '/rejected-events', 'Rejected events', html`
<section aria-labelledby="h-reasons"><h2 id="h-reasons">Reasons, last 24 hours</h2>
${reasons.length ? table('Reasons', ['Reason', 'Events'], reasons.map(([r, n]) => html`<tr><td>${r}</td><td>${n}${counts.capped ? '+' : ''}</td></tr>`)) : html`<p>No event was rejected in the last 24 hours.</p>`}
</section>
<section aria-labelledby="h-list"><h2 id="h-list">Newest first</h2>
<form method="get" action="/rejected-events" aria-label="Filter rejected events">
${field('tenant', 'Tenant', q['tenant'])}<button type="submit">Filter</button>
</form>
${list.data.length ? table('Rejected events', ['Rejected at', 'Reason', 'Subject', 'Size', ''], list.data.map((r) => html`<tr>
<td>${time(r.rejected_at)}</td><td>${r.reason}${r.detail ? html`: ${r.detail}` : ''}</td><td><code>${r.subject}</code></td><td>${dash(r.size)}</td>
<td><a href="/rejected-events/${r.seq}" aria-label="Show body of rejected event ${r.seq}">Show body</a></td></tr>`)) : html`<p>None.</p>`}
${nextLink('/rejected-events', { tenant: q['tenant'] }, list.next_cursor)}
</section>`);
}

export function rejectedShowPage(v: Viewer, s: RejectedEventShowOut): Html {
  const r = s.rejected;
  return page(v, '/rejected-events', `Rejected event ${r.seq}`, html`
<dl><dt>Reason</dt><dd>${r.reason}${r.detail ? html`: ${r.detail}` : ''}</dd><dt>Subject</dt><dd><code>${r.subject}</code></dd>
<dt>Rejected at</dt><dd>${time(r.rejected_at)}</dd><dt>Tenant</dt><dd>${dash(r.tenant)}</dd></dl>
<h2>Body</h2>
<p><small>Opening it was written to the audit log.${r.truncated ? ' Only its first part was kept.' : ''}</small></p>
<pre class="payload" data-testid="payload">${s.body_text ?? `(not UTF-8; base64) ${s.body_base64}`}</pre>`);
}

export function auditPage(v: Viewer, q: Query, rows: AuditEntryOut[], next: string | null): Html {
  const filter = { by: q['by'], action: q['action'], target: q['target'] };
  return page(v, '/audit', 'Audit log', html`
<form method="get" action="/audit" aria-label="Filter the audit log">
<div class="filters">${field('by', 'Operator', filter.by)}${field('action', 'Action', filter.action, { placeholder: 'dead_letter.replay' })}${field('target', 'Target', filter.target)}</div>
<button type="submit">Filter</button>
</form>
${rows.length ? table('Audit log', ['At', 'Operator', 'Action', 'Target', 'Outcome', 'Detail'], rows.map((e) => html`<tr>
<td>${time(e.at)}</td><td>${e.operator}</td><td>${e.action}</td><td><code>${e.target}</code></td><td>${e.outcome}</td><td>${dash(e.detail)}</td></tr>`)) : html`<p>No entries.</p>`}
${nextLink('/audit', filter, next)}`);
}
