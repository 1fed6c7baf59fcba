// A query's text as a trace may show it: without its literals. The ORM inlines values into the SQL it
// sends (hashes of API keys and session tokens among them), and a span's db.query.text would carry them.

/** `text` with every string literal (standard, E'…' with backslash escapes, and $tag$…$tag$) replaced by `?`. */
export function sqlWithoutLiterals(text: string): string {
  return text
    .replace(/\$([A-Za-z_]*)\$[\s\S]*?\$\1\$/g, '?')
    .replace(/\b[Ee]'(?:[^'\\]|''|\\[\s\S])*'/g, '?')
    .replace(/'(?:[^']|'')*'/g, '?');
}
