// The API's HTTP server: listens, answers requests Node's parser rejects with the same JSON envelope,
// and on close lets in-flight requests finish before the connections go.
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type Koa from 'koa';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { newRequestId } from './envelope.ts';
import type { ApiState } from './state.ts';
import type { RefuseEarly } from './early.ts';

export interface ApiServer {
  /** Base URL, e.g. http://127.0.0.1:8080 */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** How long close() waits for in-flight requests before cutting their connections. */
const DRAIN_MS = 10_000;

function rawError(status: number, reason: string, code: string, message: string): string {
  const body = JSON.stringify({ error: { code, message, details: [] } });
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`
    + `x-request-id: ${newRequestId()}\r\nconnection: close\r\n\r\n${body}`;
}

/** Requests Node rejects before Koa sees them (bad request line, oversized headers) get the envelope too. */
function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const response = err.code === 'HPE_HEADER_OVERFLOW'
    ? rawError(431, 'Request Header Fields Too Large', 'bad_request', 'request headers are too large')
    : rawError(400, 'Bad Request', 'bad_request', 'malformed HTTP request');
  socket.end(response);
}

export async function startApiServer(app: Koa<ApiState>, opts: {
  host: string; port: number; log: Logger;
  /** createApi's refuseEarly: floods over a rate or throttle answered before Koa. */
  refuseEarly?: RefuseEarly;
}): Promise<ApiServer> {
  const handle = app.callback();
  const { refuseEarly } = opts;
  // Without requireHostHeader Node would answer a Host-less HTTP/1.1 request itself, without the envelope;
  // the API does not use Host, so such a request goes through like any other.
  const server: Server = createServer({ requireHostHeader: false }, refuseEarly ? (req, res) => { if (!refuseEarly(req, res)) void handle(req, res); } : handle);
  server.on('clientError', answerClientError);
  await new Promise<void>((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => {
      reject(e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL'
        ? new ConfigError('PORT', `cannot listen on ${opts.host}:${opts.port} (${e.code}); choose another HOST or PORT`)
        : e);
    };
    server.once('error', onError);
    server.listen(opts.port, opts.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  const url = `http://${host}:${port}`;
  opts.log.info('api listening', { url });

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    close() {
      closing ??= new Promise<void>((resolve) => {
        const cut = setTimeout(() => server.closeAllConnections(), DRAIN_MS);
        server.close(() => {
          clearTimeout(cut);
          resolve();
        });
        // Keep-alive connections with no request in flight would hold close() open until they time out.
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
