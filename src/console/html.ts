// HTML built only through the `html` tag: every interpolated value is escaped unless it is itself Html
// made by the tag. Payloads, tenant ids, URLs and error messages are attacker-written (anyone who can
// publish an event or create an endpoint), so no page string is ever concatenated by hand.
const HTML = Symbol('html');

export interface Html {
  readonly [HTML]: string;
}

export type Value = Html | string | number | boolean | null | undefined | readonly Value[];

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

const isHtml = (v: unknown): v is Html => typeof v === 'object' && v !== null && HTML in v;

function render(v: Value): string {
  if (v === null || v === undefined || v === false) return '';
  if (isHtml(v)) return v[HTML];
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return { [HTML]: out };
}

export const toString = (h: Html): string => h[HTML];

/** A path with a query string of the non-empty values (values encoded). */
export function href(path: string, query: Record<string, string | number | undefined | null> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}
