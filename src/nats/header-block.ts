// NATS headers written straight as their wire bytes (`NATS/1.0\r\nname: value\r\n…\r\n`): the router's
// fan-out publishes, without nats.js's headers object. Building one of those costs a Map, and on every set
// a list of every name (twice), a canonical copy of the name (an array and a String.fromCharCode spread)
// and a regular expression; then a string of the whole block at publish: 8.7 of the service's 62 KB
// allocated per one-endpoint delivery at 1,000/s (heap sampling of the bench's steady phase), the largest
// single source. Here the headers every delivery of an event shares are written once as text (`copy()`
// shares that text, V8 strings being immutable), each delivery adds its own lines and is encoded once.
//
// nats.js publishes a headers object by calling its `encode()` (ProtocolHandler.publish: `hdrs.encode()`,
// the method MsgHdrsImpl declares), so `EncodedHeaders` is published like any MsgHdrs and sends these
// bytes as they are. test/header-block.test.ts publishes through a real nats-server and reads the message
// back with nats.js's own decoder: a nats.js that stopped calling `encode()` fails it.
//
// Values are checked as nats.js checks them: CR or LF refused (a producer's value must never start a
// header line of its own), the rest trimmed. Names must be what nats.js accepts: printable ASCII, no colon.
import { InvalidArgumentError, type Match, type MsgHdrs } from '@nats-io/nats-core';
import { WireHeaders } from './wire-headers.ts';

const HEADER_LINE = 'NATS/1.0\r\n';
const te = new TextEncoder();
const LINE_BREAK = /[\r\n]/;

/** A name nats.js would send: 1+ characters, each printable ASCII (33-126) but the colon. */
function checkName(name: string): void {
  if (name.length === 0) throw InvalidArgumentError.format('header', 'names cannot be empty');
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c < 33 || c > 126 || c === 58) throw InvalidArgumentError.format('header', `'${name[i]}' is not a valid character in a header name`);
  }
}

/** The value as sent: refused with CR or LF (the error nats.js throws), trimmed as nats.js trims it. */
function checkValue(value: string): string {
  if (LINE_BREAK.test(value)) throw InvalidArgumentError.format('header', 'values cannot contain \\r or \\n');
  return value.trim();
}

/** A header block being written: each `add` adds one line; `encoded()` gives what a publish sends. */
export class HeaderBlock {
  /** The status line and every header line, each ending in CRLF; the block's closing CRLF is added at encoding. */
  #text: string;

  /** An empty block, or one starting with `from`'s lines (lines added later to either stay its own). */
  constructor(from?: HeaderBlock) {
    this.#text = from ? from.#text : HEADER_LINE;
  }

  copy(): HeaderBlock {
    return new HeaderBlock(this);
  }

  /**
   * Adds the line `name: value`. Earlier lines are not searched for the name (that would flatten the text
   * at every line): the router writes each name once; a name added twice is sent twice, which nats.js
   * reads as two values of it.
   */
  add(name: string, value: string): void {
    checkName(name);
    this.#text += `${name}: ${checkValue(value)}\r\n`;
  }

  /** The block as a publish's headers. */
  encoded(): EncodedHeaders {
    return new EncodedHeaders(te.encode(`${this.#text}\r\n`));
  }
}

/**
 * Headers already encoded, published as they are. Read like any MsgHdrs (decoded on the first read, which
 * the publish path never makes); changing them is refused, as the bytes would no longer say the same.
 */
export class EncodedHeaders implements MsgHdrs {
  readonly #bytes: Uint8Array;
  #read: WireHeaders | undefined;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
  }

  /** What nats.js sends for a headers object at publish. */
  encode(): Uint8Array {
    return this.#bytes;
  }

  get #headers(): WireHeaders {
    return (this.#read ??= new WireHeaders(this.#bytes));
  }

  get hasError(): boolean { return this.#headers.hasError; }
  get status(): string { return this.#headers.status; }
  get code(): number { return this.#headers.code; }
  get description(): string { return this.#headers.description; }
  get(k: string, match?: Match): string { return this.#headers.get(k, match); }
  has(k: string, match?: Match): boolean { return this.#headers.has(k, match); }
  last(k: string, match?: Match): string { return this.#headers.last(k, match); }
  values(k: string, match?: Match): string[] { return this.#headers.values(k, match); }
  keys(): string[] { return this.#headers.keys(); }
  [Symbol.iterator](): Iterator<[string, string[]]> { return this.#headers[Symbol.iterator](); }

  set(): void { throw readOnly(); }
  append(): void { throw readOnly(); }
  delete(): void { throw readOnly(); }
}

const readOnly = () => new TypeError('encoded headers cannot be changed: build a new HeaderBlock');
