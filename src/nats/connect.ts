// Connect to NATS or fail within seconds with one line naming the URL and how to start a server.
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { UnreachableError, describe } from '../errors.ts';
import { redactUrl } from '../config.ts';

export interface NatsOptions {
  url: string;
  user?: string | undefined;
  password?: string | undefined;
  name?: string;
  timeoutMs?: number;
}

export async function connectNats(opts: NatsOptions): Promise<NatsConnection> {
  const servers = opts.url.split(',').map((s) => s.trim());
  const shown = servers.map(redactUrl).join(',');
  const timeoutMs = opts.timeoutMs ?? 5000;
  try {
    return await connect({
      servers,
      name: opts.name ?? 'hookstream',
      ...(opts.user ? { user: opts.user, pass: opts.password ?? '' } : {}),
      timeout: timeoutMs,
      // After the first connection, ride out NATS restarts instead of failing.
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
    });
  } catch (e) {
    throw new UnreachableError(
      `cannot connect to NATS at ${shown} (${describe(e)}); start one with: nats-server -js (or docker compose up nats)`,
      e,
    );
  }
}
