// A real HTTP receiver on loopback that records every request and answers as the test decides.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  headers: IncomingMessage['headers'];
  /** The request's path and query (endpoints on one receiver told apart by their URL's path). */
  path: string;
  body: string;
  at: number;
  /** Requests open at this one's arrival, itself included: the concurrency the sender used. */
  concurrent: number;
}

/** A status with response headers, optionally answered after a delay (to make concurrency visible). */
export interface Answer {
  status: number;
  headers?: Record<string, string>;
  delayMs?: number;
}

/** Decides the answer to the n-th request (0-based); 'hang' never answers. */
export type Responder = (req: Received, n: number) => number | 'hang' | Answer;

export interface Receiver {
  url: string;
  received: Received[];
  respond: Responder;
  /** Resolves when at least `count` requests have arrived. */
  waitFor(count: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

/** `port`: listen there (a receiver brought back after an outage keeps its URL); a free one by default. */
export async function startReceiver(respond: Responder = () => 200, opts: { port?: number } = {}): Promise<Receiver> {
  const received: Received[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  const hanging = new Set<ServerResponse>();
  let open = 0;
  const receiver: Receiver = {
    url: '',
    received,
    respond,
    async waitFor(count, timeoutMs = 30_000) {
      if (received.length < count) {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`receiver got ${received.length} of ${count} requests within ${timeoutMs} ms`)), timeoutMs);
          waiters.push({ count, resolve: () => { clearTimeout(timer); resolve(); } });
        });
      }
      return received;
    },
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const server = createServer((req, res) => {
    open++;
    res.once('close', () => open--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: Received = { headers: req.headers, path: req.url ?? '', body: Buffer.concat(chunks).toString('utf8'), at: Date.now(), concurrent: open };
      const n = received.length;
      received.push(r);
      for (let i = waiters.length - 1; i >= 0; i--) if (received.length >= waiters[i]!.count) waiters.splice(i, 1)[0]!.resolve();
      const answer = receiver.respond(r, n);
      if (answer === 'hang') { hanging.add(res); return; }
      const a = typeof answer === 'number' ? { status: answer } : answer;
      const send = () => res.writeHead(a.status, { 'content-type': 'text/plain', ...a.headers }).end(a.status >= 400 ? 'nope' : 'ok');
      if (a.delayMs) {
        hanging.add(res);
        setTimeout(() => { hanging.delete(res); if (!res.destroyed) send(); }, a.delayMs);
      } else {
        send();
      }
    });
  });
  await new Promise<void>((r) => server.listen(opts.port ?? 0, '127.0.0.1', () => r()));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return receiver;
}
