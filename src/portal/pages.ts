// The tenant portal's pages (issue 19): the tenant's endpoints (id, URL, events, status, disabled reason),
// adding, editing, deleting, restoring, rotating and sending a test event, the event catalogue, and a secret shown once with a
// copy button. No delivery history: no webhook ids, attempts or payloads are ever rendered here.
import type { EndpointOut } from '../api/wire.ts';
import { EVENT_NAMES, WILDCARDS } from '../domain/catalogue.ts';
import { html, type Html, type Value } from '../console/html.ts';
import { csrfField } from '../console/layout.ts';

const PATTERNS: readonly string[] = [...WILDCARDS, ...EVENT_NAMES];

function shell(title: string, body: Value): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · webhooks</title>
<link rel="stylesheet" href="/portal/assets/pico.min.css">
<link rel="stylesheet" href="/portal/assets/console.css">
<script src="/portal/assets/portal.js" defer></script>
</head>
<body>
<main class="container">
<nav aria-label="Portal"><ul><li><a href="/portal">Endpoints</a></li><li><a href="/portal/event-types">Event catalogue</a></li></ul></nav>
<h1>${title}</h1>
${body}
</main>
</body>
</html>`;
}

export type Notice = { kind: 'ok' | 'error'; text: string; details?: string[] } | undefined;

const notice = (n: Notice): Html => (!n ? html`` : html`<div role="${n.kind === 'error' ? 'alert' : 'status'}" class="flash ${n.kind}"><p>${n.text}</p>
${n.details?.length ? html`<ul>${n.details.map((d) => html`<li>${d}</li>`)}</ul>` : ''}</div>`);

function eventBoxes(checked: readonly string[]): Html {
  return html`<fieldset><legend>Events</legend>
${PATTERNS.map((p, i) => html`<label for="ev-${i}"><input type="checkbox" id="ev-${i}" name="events" value="${p}"${checked.includes(p) ? html` checked` : ''}>${p}</label>`)}
</fieldset>`;
}

/** Issue 21: the ordering select of the create and edit forms. */
const orderingSelect = (current: string) => html`<label for="ordering">Ordering
<select id="ordering" name="ordering">${[['none', 'none (unordered, the default)'], ['key', 'key (each user\'s and organization\'s events in order)']].map(([value, label]) =>
  html`<option value="${value!}"${value === current ? ' selected' : ''}>${label!}</option>`)}</select></label>`;

export function endpointsPage(csrf: string, endpoints: EndpointOut[], n?: Notice, form: { url?: string; events?: string[]; ordering?: string } = {}): Html {
  return shell('Endpoints', html`${notice(n)}
${endpoints.length ? html`<div class="overflow-auto"><table>
<thead><tr><th scope="col">Endpoint</th><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Status</th></tr></thead>
<tbody>${endpoints.map((e) => html`<tr><td><a href="/portal/endpoints/${e.id}"><code>${e.id}</code></a></td><td><code>${e.url}</code></td>
<td>${e.events.join(', ')}</td><td>${e.status}${e.disabled_reason ? ` (${e.disabled_reason})` : ''}</td></tr>`)}</tbody></table></div>`
    : html`<p>No endpoints yet.</p>`}
<h2>Add an endpoint</h2>
<form method="post" action="/portal/endpoints">
${csrfField(csrf)}
<label for="url">URL<input id="url" name="url" type="url" required value="${form.url ?? ''}" placeholder="https://example.com/webhooks"></label>
<label for="scheme">Signature scheme
<select id="scheme" name="signature_scheme"><option value="v1">v1 (HMAC-SHA256, a signing secret)</option><option value="v1a">v1a (ed25519, a public key)</option></select></label>
${orderingSelect(form.ordering ?? 'none')}
${eventBoxes(form.events ?? [])}
<button type="submit">Add endpoint</button>
</form>`);
}

export function secretPage(title: string, endpointId: string, secret: { label: string; value: string }): Html {
  return shell(title, html`
<p role="status">Endpoint <code>${endpointId}</code>. ${secret.label} is shown only now: copy it into your receiver's configuration.</p>
<p><code id="secret" data-testid="secret">${secret.value}</code></p>
<button type="button" data-copy="secret">Copy</button>
<p><a href="/portal/endpoints/${endpointId}">Back to the endpoint</a></p>`);
}

export function endpointPage(csrf: string, e: EndpointOut, n?: Notice): Html {
  const action = (path: string, label: string, cls = 'secondary') => html`<form method="post" action="/portal/endpoints/${e.id}/${path}" class="inline">${csrfField(csrf)}<button type="submit" class="${cls}">${label}</button></form>`;
  return shell(`Endpoint ${e.id}`, html`${notice(n)}
<dl>
<dt>URL</dt><dd><code>${e.url}</code></dd>
<dt>Events</dt><dd>${e.events.join(', ')}</dd>
<dt>Status</dt><dd>${e.status}${e.disabled_reason ? ` (${e.disabled_reason} since ${e.disabled_at ?? '?'})` : ''}</dd>
<dt>Signature scheme</dt><dd>${e.signature_scheme}${e.signing_public_key ? html`, public key <code>${e.signing_public_key}</code>` : ''}</dd>
<dt>Ordering</dt><dd>${e.ordering}</dd>
</dl>
<p>
${e.status === 'active' ? action('send-test', 'Send test event', '') : ''}
${e.status !== 'deleted' ? action('rotate-secret', 'Rotate secret', '') : ''}
${e.status !== 'active' ? action('restore', 'Restore') : ''}
${e.status !== 'deleted' ? action('delete', 'Delete', 'secondary outline') : ''}
</p>
${e.status !== 'deleted' ? html`<h2>Edit</h2>
<form method="post" action="/portal/endpoints/${e.id}">
${csrfField(csrf)}
<label for="url">URL<input id="url" name="url" type="url" required value="${e.url}"></label>
${orderingSelect(e.ordering)}
${eventBoxes(e.events)}
<button type="submit">Save</button>
</form>` : ''}`);
}

export function cataloguePage(): Html {
  return shell('Event catalogue', html`<p>Subscribe to event names, or to the wildcards:</p>
<ul>${WILDCARDS.map((w) => html`<li><code>${w}</code></li>`)}</ul>
<h2>Events</h2><ul>${EVENT_NAMES.map((e) => html`<li><code>${e}</code></li>`)}</ul>`);
}

export const messagePage = (title: string, text: string): Html => shell(title, html`<p role="alert">${text}</p>`);
