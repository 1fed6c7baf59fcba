// The ops paths on their own HTTP server, in every process, on OPS_HOST:OPS_PORT (loopback by default):
// orchestrators probe them and Prometheus scrapes them there. Never on the API's listener: the metrics
// name every tenant's endpoints, and the API is reachable by tenants.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Ops } from './ops.ts';

export interface OpsServer {
  url: string;
  /** Answer with `ops` from now on (start-up's answers give way to the running service's). */
  use(ops: Ops): void;
  close(): Promise<void>;
}

export async function startOpsServer(initial: Ops, opts: { host: string; port: number; log: Logger }): Promise<OpsServer> {
  let ops = initial;
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const send = (status: number, type: string, body: string) => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      send(405, 'application/json', JSON.stringify({ error: { code: 'method_not_allowed', message: 'only GET' } }));
      return;
    }
    ops.handle(path).then(
      (r) => (r ? send(r.status, r.contentType, r.body) : send(404, 'application/json', JSON.stringify({ error: { code: 'not_found', message: `no route ${path}` } }))),
      (e: unknown) => {
        opts.log.error('ops request failed', { path, reason: describe(e) });
        send(500, 'application/json', JSON.stringify({ error: { code: 'internal_error', message: 'internal error' } }));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(
      e.code === 'EADDRINUSE' || e.code === 'EACCES'
        ? new ConfigError('OPS_PORT', `cannot listen on ${opts.host}:${opts.port} (${e.code}); give each process its own OPS_PORT (0 picks a free one)`)
        : e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND'
          ? new ConfigError('OPS_HOST', `cannot listen on ${opts.host} (${e.code}); name an address of this machine`)
          : e));
    server.listen(opts.port, opts.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}`;
  opts.log.info('ops listening', { url, paths: '/healthz /readyz /metrics' });
  return {
    url,
    use: (next) => { ops = next; },
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      // Probes and scrapes are short; idle keep-alive sockets must not hold the shutdown.
      server.closeIdleConnections();
    }),
  };
}
