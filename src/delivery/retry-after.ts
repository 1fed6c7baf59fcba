// The Retry-After header of a 429 or 503 answer (RFC 9110 10.2.3): delay-seconds or an HTTP date.
// Pure: the caller passes the clock. Anything unparsable is ignored (the schedule decides alone).

/** The longest wait a receiver may ask for (issue 10): beyond it, an attempt would be parked for hours. */
export const MAX_RETRY_AFTER_MS = 3600_000;

/** Statuses whose Retry-After is honoured. */
export const honoursRetryAfter = (status: number | null): boolean => status === 429 || status === 503;

/** Milliseconds from `now` the receiver asked to wait, capped at MAX_RETRY_AFTER_MS; undefined when absent or invalid. */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (v === '') return undefined;
  let ms: number;
  if (/^\d+$/.test(v)) {
    ms = Number(v) * 1000;
  } else {
    // Date.parse accepts many shapes; an HTTP date always names a weekday and GMT, which rules out bare numbers
    // with signs or fractions ("1.5", "-3") that would otherwise parse as years.
    if (!/GMT$/i.test(v)) return undefined;
    const at = Date.parse(v);
    if (Number.isNaN(at)) return undefined;
    ms = at - now;
  }
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}
