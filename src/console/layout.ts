// The page shell of the operator console: Pico CSS (semantic HTML, readable contrast and visible focus
// without classes), a skip link, the main navigation and the signed-in operator with a Sign out form.
import { html, type Html, type Value } from './html.ts';

export const NAV = [
  { path: '/', label: 'Overview' },
  { path: '/dead-letters', label: 'Dead letters' },
  { path: '/deliveries', label: 'Deliveries' },
  { path: '/endpoints', label: 'Endpoints' },
  { path: '/rejected-events', label: 'Rejected events' },
  { path: '/audit', label: 'Audit log' },
] as const;

export interface Viewer {
  operator: string;
  csrf: string;
}

export const csrfField = (csrf: string): Html => html`<input type="hidden" name="csrf" value="${csrf}">`;

export type Flash = { kind: 'ok' | 'error'; text: string } | undefined;

export function flashOf(f: Flash): Html {
  if (!f) return html``;
  return f.kind === 'error'
    ? html`<p role="alert" class="flash error">${f.text}</p>`
    : html`<p role="status" class="flash ok">${f.text}</p>`;
}

function shell(title: string, header: Value, body: Value): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · hookstream console</title>
<link rel="stylesheet" href="/assets/pico.min.css">
<link rel="stylesheet" href="/assets/console.css">
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
${header}
<main id="main" class="container" tabindex="-1">
<h1>${title}</h1>
${body}
</main>
</body>
</html>`;
}

/** A page for a signed-in operator; `current` is the path of the navigation entry to mark. */
export function page(v: Viewer, current: string, title: string, body: Value, flash?: Flash): Html {
  const header = html`<header class="container">
<nav aria-label="Main">
<ul><li><strong>hookstream console</strong></li></ul>
<ul>${NAV.map((n) => html`<li><a href="${n.path}"${n.path === current ? html` aria-current="page"` : ''}>${n.label}</a></li>`)}</ul>
<ul><li><span class="operator">${v.operator}</span></li>
<li><form method="post" action="/sign-out" class="inline">${csrfField(v.csrf)}<button type="submit" class="secondary outline">Sign out</button></form></li></ul>
</nav>
</header>`;
  return shell(title, header, [flashOf(flash), body]);
}

/** A page for nobody signed in (the sign-in page, its errors). */
export const publicPage = (title: string, body: Value): Html => shell(title, html``, body);
