// Floods refused before Koa (src/api/early.ts) over real HTTP: a key over its rate is answered 429 with the
// envelope without reaching the handler behind, public paths and the portal always reach it, and a
// connection that asks again without waiting its retry-after gets its next refusals held until that time
// (driven here by a clock and timer the test holds), while one that waits as told is answered at once.
import test, { type ExecutionContext } from 'ava';
import { createServer, request, Agent, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEarlyRefusal, createRefusalHolds, HOLD_MS, IGNORED_WITHIN_MS } from '../src/api/early.ts';
import { createRateLimiter, keyDigest } from '../src/api/rate-limit.ts';

const KEY = `hs_live_${'k'.repeat(43)}`;

interface Answer { status: number; body: string; headers: Record<string, string | string[] | undefined> }

function get(url: string, agent: Agent, path = '/v1/webhooks'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { agent, headers: { authorization: `Bearer ${KEY}` } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function setUp(t: ExecutionContext) {
  // The limiter's clock is frozen (a spent bucket stays spent); the holds have their own clock and timer.
  const limiter = createRateLimiter({ perSecond: 1, now: () => 1_000_000 });
  let clock = 0;
  const held: Array<{ send: () => void; ms: number }> = [];
  const refuse = createEarlyRefusal({
    limiter, throttle: undefined, publicPaths: new Set(['/healthz']), holds: createRefusalHolds({ now: () => clock, hold: (send, ms) => held.push({ send, ms }) }),
  });
  let passed = 0;
  const server: Server = createServer((req, res) => {
    if (refuse(req, res)) return;
    // What the middleware does for what passes: it takes the token.
    passed++;
    limiter.take(keyDigest(KEY));
    res.end('passed');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => { agent.destroy(); server.closeAllConnections(); server.close(); });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, agent, held, passed: () => passed, tick: (ms: number) => { clock += ms; } };
}

test('a key over its rate is refused before the handler, with the envelope; public paths and the portal reach it', async (t) => {
  const s = await setUp(t);
  t.is((await get(s.url, s.agent)).status, 200);
  const refused = await get(s.url, s.agent);
  t.is(refused.status, 429);
  t.deepEqual(JSON.parse(refused.body), { error: { code: 'rate_limited', message: 'too many requests for this API key; retry in 1 s', details: [] } });
  t.is(refused.headers['retry-after'], '1');
  t.regex(String(refused.headers['x-request-id']), /^req_/);
  t.is(s.passed(), 1);
  s.tick(IGNORED_WITHIN_MS);
  for (const path of ['/healthz', '/portal', '/portal/endpoints', '/healthz?x=1']) {
    t.is((await get(s.url, new Agent(), path)).status, 200, path);
  }
  t.is(s.passed(), 5);
});

test("a connection that asks again before its retry-after has passed gets its refusal then, not at once; one that waits is answered at once", async (t) => {
  const s = await setUp(t);
  t.is((await get(s.url, s.agent)).status, 200);
  t.is((await get(s.url, s.agent)).status, 429, 'the first refusal on the connection: at once');
  t.is(s.held.length, 0);

  // Asked again at once: held until its retry-after.
  let answered: Answer | undefined;
  const again = get(s.url, s.agent).then((a) => { answered = a; });
  for (let i = 0; i < 400 && s.held.length === 0 && !answered; i++) await new Promise((r) => setTimeout(r, 5));
  t.is(answered, undefined, 'not answered at once');
  t.is(s.held.length, 1, 'held');
  t.is(s.held[0]!.ms, HOLD_MS);
  await new Promise((r) => setTimeout(r, 50));
  t.is(answered, undefined, 'not answered while held');
  s.tick(HOLD_MS);
  s.held.shift()!.send();
  await again;
  t.is(answered!.status, 429);
  t.is(JSON.parse(answered!.body).error.code, 'rate_limited');

  // Waited as told (a second after that refusal): answered at once.
  s.tick(IGNORED_WITHIN_MS);
  t.is((await get(s.url, s.agent)).status, 429);
  t.is(s.held.length, 0);
  // Another connection's first refusal: at once.
  t.is((await get(s.url, new Agent())).status, 429);
  t.is(s.held.length, 0);
  t.is(s.passed(), 1);
});
