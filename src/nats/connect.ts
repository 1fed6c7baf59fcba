// Connect to NATS or fail within seconds with one line naming the URL and how to start a server.
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import type { NatsConnectionImpl } from '@nats-io/nats-core/internal';
import { UnreachableError, describe } from '../errors.ts';
import { redactUrl } from '../config.ts';

export interface NatsOptions {
  url: string;
  user?: string | undefined;
  password?: string | undefined;
  name?: string;
  timeoutMs?: number;
  /** Reply subjects of this connection's requests (JetStream API, pulls); see SERVICE_INBOX_PREFIX. */
  inboxPrefix?: string;
}

/**
 * The service's own inbox prefix. Producers and operators are kept out of its replies (pulled
 * deliveries) by their NATS accounts; the prefix still keeps them from any user ever added to the
 * service's account with `_INBOX.>` (see nats.conf).
 */
export const SERVICE_INBOX_PREFIX = '_INBOX_hookstream';

export async function connectNats(opts: NatsOptions): Promise<NatsConnection> {
  const servers = opts.url.split(',').map((s) => s.trim());
  const shown = servers.map(redactUrl).join(',');
  const timeoutMs = opts.timeoutMs ?? 5000;
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers,
      name: opts.name ?? 'hookstream',
      inboxPrefix: opts.inboxPrefix ?? SERVICE_INBOX_PREFIX,
      ...(opts.user ? { user: opts.user, pass: opts.password ?? '' } : {}),
      timeout: timeoutMs,
      // After the first connection, ride out NATS restarts instead of failing.
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      // nats.js otherwise builds two Error objects (stack traces) for every request, i.e. for every
      // JetStream publish: 7% of the service's CPU under load (issue 5, bench profile). Errors keep
      // their message and code; only the async stack is lost.
      noAsyncTraces: true,
    });
  } catch (e) {
    throw new UnreachableError(
      `cannot connect to NATS at ${shown} (${describe(e)}); start one with: nats-server -js (or docker compose up nats)`,
      e,
    );
  }
  boundFlush(nc, timeoutMs);
  writeOncePerTurn(nc);
  return nc;
}

const TE = new TextEncoder();

/**
 * One socket write per event-loop turn (setImmediate: after the turn's I/O callbacks), or at once past
 * nats.js's pending limit as before. nats.js writes at the next microtask checkpoint after a publish, so
 * publishes between awaits (the router's fan-out of a pulled batch, acks of HTTP answers) were a write each.
 */
function writeOncePerTurn(nc: NatsConnection): void {
  const p = (nc as NatsConnectionImpl).protocol;
  const flush = (p as unknown as { flushPending(): void }).flushPending.bind(p); // private in the typings
  let due = false;
  const close = p.close.bind(p);
  // close() does not write out the buffer: what was published just before it goes first.
  p.close = (err) => (flush(), close(err));
  p.sendCommand = (cmd, ...payloads) => {
    p.outbound.fill(typeof cmd === 'string' ? TE.encode(cmd) : cmd, ...payloads);
    if (!due) setImmediate(() => ((due = false), flush()));
    else if (p.outbound.size() >= p.pendingLimit) flush();
    due = true;
  };
}

/**
 * nats.js's flush() stayed pending for good when the server went away as its PING was sent (seen at
 * start-up: the admin role's flush held start-up after a NATS restart). Bounded like a request: it rejects
 * after `timeoutMs`, and whoever awaited it handles a failure as for any request.
 */
function boundFlush(nc: NatsConnection, timeoutMs: number): void {
  const flush = nc.flush.bind(nc);
  nc.flush = () => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`NATS did not answer a flush within ${timeoutMs} ms`)), timeoutMs);
    });
    return Promise.race([flush(), late]).finally(() => clearTimeout(timer));
  };
}
