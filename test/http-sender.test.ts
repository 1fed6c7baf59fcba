// The sender against real HTTP servers on 127.0.0.1. allowPrivateTargets=true lets it reach them over
// plain http; the forbidden-target tests turn it off and show that nothing reaches the server. A public
// name resolving to a private address is staged with a stand-in resolver (the sender's `resolve`
// option) instead of nock: the guard sits in the connector, below anything nock intercepts, and the
// real server proves that no connection was made.
import test from 'ava';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { createHttpSender, type AttemptOutcome, type HttpSender } from '../src/delivery/http-sender.ts';
import { checkTargetUrl } from '../src/delivery/target-policy.ts';

interface Received {
  method: string | undefined;
  url: string | undefined;
  headers: IncomingMessage['headers'];
  body: string;
}

interface Receiver {
  url: string;
  port: number;
  received: Received[];
  connections: number;
  close(): Promise<void>;
}

/** A real HTTP server; `respond` answers after the request body has been read. */
async function receiver(respond: (req: IncomingMessage, res: ServerResponse) => void = (_q, res) => res.end('ok')): Promise<Receiver> {
  const received: Received[] = [];
  const state = { connections: 0 };
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      respond(req, res);
    });
  });
  server.on('connection', () => { state.connections++; });
  return listen(server, received, state);
}

async function listen(server: Server, received: Received[], state: { connections: number }): Promise<Receiver> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    get connections() { return state.connections; },
    close: async () => {
      const closed = once(server, 'close');
      server.close();
      if ('closeAllConnections' in server && typeof server.closeAllConnections === 'function') server.closeAllConnections();
      await closed;
    },
  };
}

/** Accepts connections and never answers. */
async function blackHole(): Promise<Receiver> {
  const sockets = new Set<Socket>();
  const state = { connections: 0 };
  const server = createNetServer((socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.resume();
  });
  const r = await listen(server, [], state);
  const close = r.close;
  return Object.assign(r, { close: async () => { for (const s of sockets) s.destroy(); await close(); } });
}

const SIGNATURE = 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=';
const HEADERS = {
  'content-type': 'application/json',
  'webhook-id': 'msg_01jd7x2y3z4a5b6c7d8e9f0g1h',
  'webhook-timestamp': '1767225600',
  'webhook-signature': SIGNATURE,
  'service-webhook-event': 'user.created',
};
const BODY = JSON.stringify({ type: 'user.created', data: { userId: 'user_42' } });

function sender(t: { teardown(fn: () => Promise<void>): void }, opts: Partial<Parameters<typeof createHttpSender>[0]> = {}): HttpSender {
  const s = createHttpSender({ attemptTimeoutMs: 5000, allowPrivateTargets: true, ...opts });
  t.teardown(() => s.close());
  return s;
}

function failure(outcome: AttemptOutcome): Extract<AttemptOutcome, { ok: false }> {
  if (outcome.ok) throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  return outcome;
}

test('a 2xx acknowledges, and exactly the headers and body arrive', async (t) => {
  const server = await receiver((_q, res) => { res.statusCode = 204; res.end(); });
  t.teardown(() => server.close());
  const outcome = await sender(t).send({ url: `${server.url}/hooks/in?x=1`, headers: HEADERS, body: BODY });
  t.true(outcome.ok);
  t.is(outcome.status, 204);
  t.true(outcome.durationMs >= 0);
  t.is(server.received.length, 1);
  const got = server.received[0]!;
  t.is(got.method, 'POST');
  t.is(got.url, '/hooks/in?x=1');
  t.is(got.body, BODY);
  for (const [name, value] of Object.entries(HEADERS)) t.is(got.headers[name], value, name);
  t.is(got.headers['user-agent'], 'hookstream/0.1');
  t.is(got.headers['content-length'], String(Buffer.byteLength(BODY)));
});

test('a Buffer body is sent byte for byte', async (t) => {
  const server = await receiver();
  t.teardown(() => server.close());
  const body = Buffer.from(BODY);
  const outcome = await sender(t).send({ url: server.url, headers: HEADERS, body });
  t.true(outcome.ok);
  t.is(server.received[0]!.body, BODY);
});

test('a 500 is a status failure with a sanitized snippet of the body and no header values in the error', async (t) => {
  const server = await receiver((_q, res) => {
    res.statusCode = 500;
    res.end(`{"error":"database\u0000 down"}\n\u001b[31mred\u001b[0m ${'x'.repeat(3000)}`);
  });
  t.teardown(() => server.close());
  const outcome = failure(await sender(t).send({ url: server.url, headers: HEADERS, body: BODY }));
  t.is(outcome.kind, 'status');
  t.is(outcome.status, 500);
  t.is(outcome.error, 'HTTP 500');
  t.truthy(outcome.bodySnippet);
  t.true(outcome.bodySnippet!.startsWith('{"error":"database down"} [31mred [0m xxx'));
  t.true(outcome.bodySnippet!.length <= 1024);
  t.false(/[\u0000-\u001f\u007f]/.test(outcome.bodySnippet!));
});

for (const status of [301, 302, 307, 308]) {
  test(`a ${status} redirect is a failure and is not followed`, async (t) => {
    const target = await receiver();
    t.teardown(() => target.close());
    const server = await receiver((_q, res) => {
      res.writeHead(status, { location: `${target.url}/elsewhere` });
      res.end('moved');
    });
    t.teardown(() => server.close());
    const outcome = failure(await sender(t).send({ url: server.url, headers: HEADERS, body: BODY }));
    t.is(outcome.kind, 'status');
    t.is(outcome.status, status);
    t.regex(outcome.error, /redirect to http:\/\/127\.0\.0\.1:\d+\/elsewhere \(redirects are not followed\)/);
    t.is(server.received.length, 1);
    t.is(target.received.length, 0);
    t.is(target.connections, 0);
  });
}

test('a server that accepts and never answers times out', async (t) => {
  const hole = await blackHole();
  t.teardown(() => hole.close());
  const outcome = failure(await sender(t, { attemptTimeoutMs: 2000 }).send({ url: hole.url, headers: HEADERS, body: BODY }));
  t.is(outcome.kind, 'timeout');
  t.is(outcome.status, null);
  t.is(hole.connections, 1);
  t.false(outcome.error.includes(SIGNATURE));
});

test('headers that arrive with a 2xx acknowledge even when the body then stalls', async (t) => {
  const server = await receiver((_q, res) => {
    res.writeHead(200, { 'content-length': '100' });
    res.write('partial'); // and never the rest
  });
  t.teardown(() => server.close());
  const outcome = await sender(t, { attemptTimeoutMs: 2000 }).send({ url: server.url, headers: HEADERS, body: BODY });
  t.true(outcome.ok);
  t.is(outcome.status, 200);
});

test('a refused connection is a connection failure', async (t) => {
  const server = await receiver();
  const url = server.url;
  await server.close();
  const outcome = failure(await sender(t).send({ url, headers: HEADERS, body: BODY }));
  t.is(outcome.kind, 'connection');
  t.is(outcome.status, null);
  t.regex(outcome.error, /ECONNREFUSED/);
  t.false(outcome.error.includes(SIGNATURE));
});

test('a huge response body is not read: the sender stops and the connection closes', async (t) => {
  const TOTAL = 50 * 1024 * 1024;
  const chunk = Buffer.alloc(64 * 1024, 'a');
  const server = { written: 0, closedEarly: false };
  let finished!: () => void;
  const done = new Promise<void>((resolve) => { finished = resolve; });
  const http = await receiver((_q, res) => {
    res.writeHead(500, { 'content-length': String(TOTAL) });
    res.on('close', () => { server.closedEarly = server.written < TOTAL; finished(); });
    const pump = () => {
      while (server.written < TOTAL) {
        server.written += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  });
  t.teardown(() => http.close());
  const outcome = failure(await sender(t).send({ url: http.url, headers: HEADERS, body: BODY }));
  t.is(outcome.kind, 'status');
  t.is(outcome.status, 500);
  t.is(outcome.bodySnippet, 'a'.repeat(1024));
  await done;
  t.true(server.closedEarly, `server wrote ${server.written} of ${TOTAL} bytes before the socket closed`);
});

// undici (pipelining 1) hands a socket back to its pool only one event-loop turn after a response ends
// ("non-spec compliant servers" guard in client-h1.js), so a send issued in the same turn opens a
// second connection; from then on the two are reused.
test('keep-alive: sequential sends to one origin reuse their connection', async (t) => {
  const server = await receiver();
  t.teardown(() => server.close());
  const s = sender(t);
  for (let i = 0; i < 10; i++) {
    const outcome = await s.send({ url: `${server.url}/n/${i}`, headers: HEADERS, body: BODY });
    t.true(outcome.ok);
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.is(server.received.length, 10);
  t.is(server.connections, 1);
});

test('keep-alive: back-to-back sends reuse connections too', async (t) => {
  const server = await receiver();
  t.teardown(() => server.close());
  const s = sender(t);
  for (let i = 0; i < 10; i++) t.true((await s.send({ url: server.url, headers: HEADERS, body: BODY })).ok);
  t.is(server.received.length, 10);
  t.true(server.connections <= 2, `${server.connections} connections for 10 sends`);
});

test('a slow origin ties up only its own connections', async (t) => {
  const hole = await blackHole();
  t.teardown(() => hole.close());
  const healthy = await receiver();
  t.teardown(() => healthy.close());
  const s = sender(t, { connectionsPerOrigin: 1, attemptTimeoutMs: 10_000 });
  let slowSettled = false;
  const slow = [1, 2].map(() => s.send({ url: hole.url, headers: HEADERS, body: BODY }).finally(() => { slowSettled = true; }));
  const outcome = await s.send({ url: healthy.url, headers: HEADERS, body: BODY });
  t.true(outcome.ok);
  t.false(slowSettled);
  t.is(hole.connections, 1); // the second slow attempt waits for the origin's only connection
  await hole.close(); // end the slow attempts now rather than at their deadline
  for (const o of await Promise.all(slow)) t.false(o.ok);
});

test('an attempt that waits for its pool\'s connection is timed from when it is sent, not from when it began to wait', async (t) => {
  // Every answer takes 600 ms; the pool has one connection and the deadline is 1 s: the third POST waits
  // 1.2 s for the connection, then is answered in 600 ms.
  const slow = await receiver((_q, res) => setTimeout(() => res.end('ok'), 600));
  t.teardown(() => slow.close());
  const s = sender(t, { connectionsPerOrigin: 1, attemptTimeoutMs: 1000 });
  const outcomes = await Promise.all([1, 2, 3].map(() => s.send({ url: slow.url, headers: HEADERS, body: BODY })));
  t.deepEqual(outcomes.map((o) => o.ok), [true, true, true]);
  for (const o of outcomes) t.true(o.durationMs < 1000, `${o.durationMs} ms: the attempt, without its wait`);
  t.is(slow.received.length, 3);
});

test('stopWaiting ends the POSTs still waiting for a connection at once, unsent, and every later one; the one in flight goes on', async (t) => {
  const held: ServerResponse[] = [];
  const host = await receiver((_q, res) => { held.push(res); });
  t.teardown(async () => { for (const r of held) r.destroy(); await host.close(); });
  const s = sender(t, { connectionsPerOrigin: 1, attemptTimeoutMs: 10_000 });
  let inFlightSettled = false;
  const inFlight = s.send({ url: host.url, headers: HEADERS, body: BODY }).finally(() => { inFlightSettled = true; });
  const waiting = [1, 2].map(() => s.send({ url: host.url, headers: HEADERS, body: BODY }));
  while (held.length < 1) await new Promise((r) => setTimeout(r, 10));
  s.stopWaiting();
  for (const o of await Promise.all(waiting)) t.like(failure(o), { kind: 'not_sent', status: null });
  t.like(failure(await s.send({ url: host.url, headers: HEADERS, body: BODY })), { kind: 'not_sent' });
  t.false(inFlightSettled);
  held[0]!.end('ok');
  t.true((await inFlight).ok);
  // Give undici the moment it would take to send a released POST on the freed connection: none is sent.
  await new Promise((r) => setTimeout(r, 200));
  t.is(host.received.length, 1);
});

test("one tenant's slow endpoints on a receiver host hold only that tenant's connections to it", async (t) => {
  // One host: /slow never answers, everything else answers at once.
  const held: ServerResponse[] = [];
  let ending = false;
  const host = await receiver((req, res) => (req.url !== '/slow' ? res.end('ok') : ending ? res.destroy() : held.push(res)));
  t.teardown(async () => { for (const r of held) r.destroy(); await host.close(); });
  const s = sender(t, { connectionsPerOrigin: 2, attemptTimeoutMs: 10_000 });
  let slowSettled = false;
  const slow = [1, 2, 3].map(() => s.send({ url: `${host.url}/slow`, pool: 'tenant_attacker', headers: HEADERS, body: BODY }).finally(() => { slowSettled = true; }));
  while (held.length < 2) await new Promise((r) => setTimeout(r, 10));
  // The attacker's pool to the host is full (its third attempt waits); another tenant's attempt is not behind it.
  const outcome = await s.send({ url: `${host.url}/fast`, pool: 'tenant_victim', headers: HEADERS, body: BODY });
  t.true(outcome.ok);
  t.false(slowSettled);
  t.is(held.length, 2);
  ending = true;
  for (const r of held) r.destroy();
  for (const o of await Promise.all(slow)) t.false(o.ok);
});

test('invalid URLs are classified, not thrown', async (t) => {
  const s = sender(t);
  t.is(failure(await s.send({ url: 'not a url', headers: HEADERS, body: BODY })).kind, 'invalid_url');
  t.is(failure(await s.send({ url: 'ftp://127.0.0.1/x', headers: HEADERS, body: BODY })).kind, 'invalid_url');
  t.is(failure(await s.send({ url: 'http://user:pw@127.0.0.1/x', headers: HEADERS, body: BODY })).kind, 'invalid_url');
});

test('forbidden targets are refused before any connection when private targets are not allowed', async (t) => {
  const server = await receiver();
  t.teardown(() => server.close());
  const s = sender(t, { allowPrivateTargets: false });
  const urls = [
    `http://hooks.example.com:${server.port}/`, // https only
    `https://127.0.0.1:${server.port}/`,
    `https://localhost:${server.port}/`,
    `https://169.254.169.254/latest/meta-data/`,
    `https://[::1]:${server.port}/`,
    `https://[::ffff:127.0.0.1]:${server.port}/`,
    `https://0.0.0.0:${server.port}/`,
  ];
  for (const url of urls) {
    const outcome = failure(await s.send({ url, headers: HEADERS, body: BODY }));
    t.is(outcome.kind, 'forbidden_target', url);
    t.is(outcome.status, null);
  }
  t.is(server.connections, 0);
  // The same rule lets a public address literal through (not sent: the test has no internet).
  t.is(checkTargetUrl(new URL('https://93.184.215.14/hooks'), false), undefined);
  t.is(checkTargetUrl(new URL('https://[2606:4700:4700::1111]/hooks'), false), undefined);
});

test('a host name that resolves to a private address is refused at connect time', async (t) => {
  const server = await receiver();
  t.teardown(() => server.close());
  const resolved: string[] = [];
  const s = sender(t, {
    allowPrivateTargets: false,
    // Stands in for DNS: hooks.example.test "resolves" to the local server's address.
    resolve: (hostname, _options, callback) => {
      resolved.push(hostname);
      setImmediate(() => callback(null, [{ address: '127.0.0.1', family: 4 }]));
    },
  });
  const outcome = failure(await s.send({ url: `https://hooks.example.test:${server.port}/in`, headers: HEADERS, body: BODY }));
  t.is(outcome.kind, 'forbidden_target');
  t.regex(outcome.error, /hooks\.example\.test resolves to 127\.0\.0\.1/);
  t.deepEqual(resolved, ['hooks.example.test']);
  t.is(server.connections, 0);
});
