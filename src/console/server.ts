// The console role (issue 19): its own listener (CONSOLE_HOST:CONSOLE_PORT, loopback by default, never the
// API's port) and its own NATS connection as an operator (CONSOLE_NATS_USER; with nats.conf, the operator
// user), over which every page asks the admin subjects.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MikroORM } from '@mikro-orm/postgresql';
import { connectAsOperator, createAdminClient } from '../admin/client.ts';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { createConsoleApp } from './app.ts';
import { loadAssets } from './assets.ts';

export interface ConsoleServer {
  url: string;
  close(): Promise<void>;
}

export async function startConsole(opts: {
  orm: MikroORM;
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  host: string;
  port: number;
  log: Logger;
}): Promise<ConsoleServer> {
  const nc = await connectAsOperator({ url: opts.natsUrl, user: opts.natsUser, password: opts.natsPassword });
  let server: Server | undefined;
  try {
    const app = createConsoleApp({
      orm: opts.orm, assets: await loadAssets(), log: opts.log,
      admin: (operator) => createAdminClient(nc, { operator, timeoutMs: 15_000 }),
    });
    const s = createServer(app.callback());
    server = s;
    await new Promise<void>((resolve, reject) => {
      s.once('error', (e: NodeJS.ErrnoException) => reject(e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL'
        ? new ConfigError('CONSOLE_PORT', `cannot listen on ${opts.host}:${opts.port} (${e.code}); choose another CONSOLE_HOST or CONSOLE_PORT (0 picks a free one)`)
        : e));
      s.listen(opts.port, opts.host, () => resolve());
    });
  } catch (e) {
    await nc.close().catch(() => {});
    throw e;
  }
  const { port } = server.address() as AddressInfo;
  const url = `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}`;
  opts.log.info('console listening', { url });
  const listening = server;
  return {
    url,
    async close() {
      await new Promise<void>((resolve) => {
        listening.close(() => resolve());
        listening.closeIdleConnections();
        setTimeout(() => listening.closeAllConnections(), 5000).unref();
      });
      await nc.drain().catch(() => {});
    },
  };
}
