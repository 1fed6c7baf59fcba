// A pulled message's NATS headers read straight from their bytes: the read-only work the delivery role
// does with them (about eight lookups per delivery) without nats.js's decoder, which checks and rebuilds
// every name on the way in (an array per name, a String.fromCharCode spread, a regular expression per
// value) and lists and filters every name on each lookup: 14 % of the service's allocations at 1,000
// one-endpoint deliveries/s, the largest single source (heap sampling of the bench's steady phase).
// Names are kept as sent and matched exactly by default, as nats.js does.
import { canonicalMIMEHeaderKey, Match, type Msg, type MsgHdrs } from '@nats-io/nats-core';
import type { MsgImpl } from '@nats-io/nats-core/internal';

/**
 * The header block of a message as nats.js received it (its parser's fields); undefined when it has
 * none, null when nats.js no longer looks like this (then use its own decoder, `msg.headers`).
 */
export function headerBlock(msg: Msg): Uint8Array | undefined | null {
  const { _msg: arg, _rdata: raw } = msg as Partial<MsgImpl>;
  if (typeof arg?.hdr !== 'number' || !(raw instanceof Uint8Array)) return null;
  return arg.hdr > 0 ? raw.subarray(0, arg.hdr) : undefined;
}

const HEADER = 'NATS/1.0';
const decoder = new TextDecoder();
/** What String.prototype.trim removes, in the ASCII range a header value can hold unescaped. */
const isBlank = (c: number) => c === 32 || (c >= 9 && c <= 13);

export class WireHeaders implements MsgHdrs {
  code = 0;
  description = '';
  /** Parallel lists, in the order sent: a delivery carries a handful of names, so a scan beats a map. */
  readonly #names: string[] = [];
  readonly #values: string[] = [];

  /** `raw`: the header block of a message (`NATS/1.0…\r\n\r\n`), as the server sent it. */
  constructor(raw: Uint8Array) {
    const s = decoder.decode(raw);
    let end = s.indexOf('\r\n');
    if (end < 0) end = s.length;
    if (end > HEADER.length) this.#status(s.slice(HEADER.length, end).trim());
    for (let at = end + 2; at < s.length; at = end + 2) {
      end = s.indexOf('\r\n', at);
      if (end < 0) end = s.length;
      const colon = s.indexOf(':', at);
      if (colon < 0 || colon >= end) continue;
      // The value without the blanks around it (nats.js trims it), cut once.
      let from = colon + 1;
      let to = end;
      while (from < to && isBlank(s.charCodeAt(from))) from++;
      while (to > from && isBlank(s.charCodeAt(to - 1))) to--;
      this.#names.push(s.slice(at, colon));
      this.#values.push(s.slice(from, to));
    }
  }

  /** `503`, `408 Request Timeout`, `100 Idle Heartbeat`: what nats.js makes of a status line. */
  #status(line: string): void {
    const code = parseInt(line, 10);
    this.code = Number.isNaN(code) ? 0 : code;
    this.description = line.replace(String(this.code), '').trim();
  }

  get hasError(): boolean { return this.code >= 300; }
  get status(): string { return `${this.code} ${this.description}`.trim(); }

  #matches(name: string, k: string, match: Match): boolean {
    if (match === Match.Exact) return name === k;
    if (match === Match.CanonicalMIME) return name === canonicalMIMEHeaderKey(k);
    return name.toLowerCase() === k.toLowerCase();
  }

  get(k: string, match: Match = Match.Exact): string {
    const names = this.#names;
    for (let i = 0; i < names.length; i++) if (this.#matches(names[i]!, k, match)) return this.#values[i]!;
    return '';
  }

  has(k: string, match: Match = Match.Exact): boolean {
    const names = this.#names;
    for (let i = 0; i < names.length; i++) if (this.#matches(names[i]!, k, match)) return true;
    return false;
  }

  last(k: string, match: Match = Match.Exact): string {
    const names = this.#names;
    for (let i = names.length - 1; i >= 0; i--) if (this.#matches(names[i]!, k, match)) return this.#values[i]!;
    return '';
  }

  values(k: string, match: Match = Match.Exact): string[] {
    return this.#values.filter((_, i) => this.#matches(this.#names[i]!, k, match));
  }

  keys(): string[] {
    return [...new Set(this.#names)];
  }

  set(k: string, v: string, match: Match = Match.Exact): void {
    this.delete(k, match);
    this.append(k, v, match);
  }

  append(k: string, v: string, match: Match = Match.Exact): void {
    this.#names.push(match === Match.CanonicalMIME ? canonicalMIMEHeaderKey(k) : k);
    this.#values.push(v.trim());
  }

  delete(k: string, match: Match = Match.Exact): void {
    for (let i = this.#names.length - 1; i >= 0; i--) {
      if (!this.#matches(this.#names[i]!, k, match)) continue;
      this.#names.splice(i, 1);
      this.#values.splice(i, 1);
    }
  }

  *[Symbol.iterator](): Iterator<[string, string[]]> {
    for (const k of this.keys()) yield [k, this.values(k)];
  }
}
