// Free text from tenants and operators (an endpoint's description, an API key's name) must be text every
// store can hold: Postgres refuses U+0000 in text columns, and a value it refuses, once appended to
// ENDPOINTS, would stop the projection for every tenant (issue 23). Refused at the boundary instead.

/** Why `value` is not storable text, or undefined. `multiline` allows newlines (and tabs, always). */
export function textProblem(value: string, opts: { multiline?: boolean } = {}): string | undefined {
  if (!value.isWellFormed()) return 'must not contain unpaired surrogates (it is not valid Unicode text)';
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x09 || (opts.multiline && c === 0x0a)) continue;
    if (c < 0x20 || c === 0x7f) {
      return `must not contain control characters (U+${c.toString(16).toUpperCase().padStart(4, '0')} at position ${i})`;
    }
  }
  return undefined;
}
