// A request fuzzer against the real API: a few thousand malformed bodies, headers, ids, query strings,
// methods and raw HTTP, from a fixed seed so every run sends the same requests. No answer may be a 5xx,
// every failure must be the JSON envelope with a request id, and no endpoint may change.
import test from 'ava';
import { connect } from 'node:net';
import { startHarness, type Harness } from './helpers/service.ts';
import { apiClient } from './helpers/api-client.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { EVENT_NAMES } from '../src/domain/catalogue.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { createTenantLimitsStore, DEFAULTS_TENANT } from '../src/tenants/limits.ts';

const SEED = 0x5eed_2026;
const CASES = 3000;
const CONCURRENCY = 16;

let h: Harness;

test.before(async () => {
  h = await startHarness('api_fuzz', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '0', HOOKSTREAM_RATE_LIMIT: '1000000' });
  // Past the tenants' default quotas (endpoints, writes a second): this test is about something else.
  await createTenantLimitsStore(h.service.orm!).set(DEFAULTS_TENANT, { endpoints: 100_000, writesPerSecond: 100_000 }, 'test');
});
test.after.always(async () => {
  await h?.close();
});

/** mulberry32: small, fast, and the same sequence for the same seed everywhere. */
function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const ascii = (n: number, from = 0x20, to = 0x7e) => String.fromCharCode(...Array.from({ length: n }, () => from + int(to - from + 1)));
  return { next, int, pick, ascii, bytes: (n: number) => Uint8Array.from({ length: n }, () => int(256)) };
}
type Rng = ReturnType<typeof prng>;

interface Case {
  kind: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
}

interface RawCase {
  kind: string;
  raw: Uint8Array | string;
}

interface World {
  keyA: string;
  keyB: string;
  idsA: string[];
  idsB: string[];
}

// ---- malformed bodies: each is certain to be refused (unknown field, bad JSON, wrong shape, too big) ----

function validBody(rng: Rng): Record<string, unknown> {
  return { url: `https://hooks.example.com/${rng.int(1000)}`, events: [rng.pick(EVENT_NAMES)], description: 'fuzz' };
}

const WEIRD_VALUES: unknown[] = [
  null, true, false, 0, -1, 1e308, -1e-308, 2 ** 53 + 1, '', ' ', 'x'.repeat(3000), '\u0000', '\ud800', '\u202e', [], [[]], {}, { a: {} },
  ['user.created', null], [1, 2, 3], 'https://', 'https://[::1]:99999/', 'javascript:alert(1)', 'https://exa mple.com', '*', ['*', 7],
  Array.from({ length: 100 }, () => 'user.created'), 'https://169.254.169.254/', 'https://0x7f.1/', 'http://[::ffff:127.0.0.1]/',
];

function badBody(rng: Rng): { text: string | Uint8Array; type: string } {
  const json = 'application/json';
  switch (rng.int(12)) {
    case 0: return { text: 'x' + rng.ascii(rng.int(200)), type: json };
    case 1: {
      const full = JSON.stringify(validBody(rng));
      return { text: full.slice(0, 1 + rng.int(full.length - 2)), type: json };
    }
    case 2: {
      // Valid JSON with a wrong shape; the unknown field alone is enough for a 422.
      const body: Record<string, unknown> = validBody(rng);
      for (let i = rng.int(3); i >= 0; i--) body[rng.pick(['url', 'events', 'description', 'grace_period_seconds'])] = rng.pick(WEIRD_VALUES);
      body[`x_${rng.ascii(1 + rng.int(8), 0x61, 0x7a)}`] = rng.pick(WEIRD_VALUES);
      return { text: JSON.stringify(body), type: json };
    }
    case 3: return { text: rng.pick(['null', '1', '"a"', 'true', '[]', '[{}]', '[1,2]', '-0', '1e999', '"\\ud800"']), type: json };
    case 4: {
      const n = 100 + rng.int(5000);
      return { text: rng.next() < 0.5 ? '['.repeat(n) + ']'.repeat(n) : '{"a":'.repeat(n) + '1' + '}'.repeat(n), type: json };
    }
    case 5: return { text: rng.pick(['{"__proto__":{"admin":true}}', '{"constructor":{"prototype":{"x":1}}}', '{"a":1,"a":2,"b":3}', '{"url":"https://a.example.com","events":["*"],"__proto__":null}']), type: json };
    case 6: return { text: JSON.stringify({ ...validBody(rng), description: 'y'.repeat(64 * 1024 + rng.int(1000)) }), type: json };
    // A byte order mark is skipped (as RFC 8259 allows), so what follows it must be wrong on its own.
    case 7: return { text: '\ufeff' + rng.pick(['{', '\ufeff{}', JSON.stringify({ ...validBody(rng), extra: 1 })]), type: json };
    case 8: return { text: Uint8Array.from([0x7b, 0x22, 0xff, 0xfe, ...rng.bytes(rng.int(20)).map((b) => b | 0x80), 0x22, 0x3a, 0x31, 0x7d]), type: json };
    case 9: return { text: JSON.stringify(validBody(rng)), type: rng.pick(['text/plain', 'application/xml', 'application/x-www-form-urlencoded', 'multipart/form-data', 'application/jsonx', 'json', '*/*', 'application/*', 'application/vnd.api+json']) };
    case 10: return { text: rng.bytes(1 + rng.int(300)), type: rng.pick([json, 'application/octet-stream']) };
    default: return { text: `{"events": ["${rng.pick(EVENT_NAMES)}"], "url": ${rng.pick(['nul', 'NaN', 'Infinity', 'undefined', "'x'", '0x10'])}}`, type: json };
  }
}

// ---- ids, queries, headers ----

function junkId(rng: Rng, w: World): string {
  switch (rng.int(10)) {
    case 0: return encodeURIComponent(rng.ascii(1 + rng.int(40)));
    case 1: return rng.pick(['%', '%zz', '%00', '%2F', '%ff%fe', '%c0%af', '%E0%A4%A', '%u0041', '%%', '%20']);
    case 2: return `webhook_${rng.ascii(26, 0x61, 0x7a)}`;
    case 3: return rng.pick(w.idsA).toUpperCase();
    case 4: return rng.pick(w.idsA) + rng.pick(['x', '0', '%00', '~', '_']);
    case 5: return 'webhook_' + 'a'.repeat(60 + rng.int(2000));
    case 6: return encodeURIComponent(rng.pick(['ß', '😀', 'webhook_é', '\u0000', 'ｗｅｂｈｏｏｋ＿ａ']));
    case 7: return rng.pick(['null', 'undefined', '0', '-1', 'true', '[]', '{}', "'", '"', '<script>', '$where']);
    case 8: return rng.pick(w.idsB);
    default: return rng.ascii(1 + rng.int(30), 0x30, 0x7a).replace(/[/?#%\\.]/g, '_');
  }
}

function junkQuery(rng: Rng, w: World): string {
  const parts: string[] = [];
  for (let i = 0; i <= rng.int(4); i++) {
    parts.push(rng.pick([
      `limit=${rng.pick(['0', '-1', '101', '1000000', '1e1', '0x10', ' 5', '5 ', '+5', '5.0', 'NaN', 'Infinity', '', '%', '%%35', '١٠', '99999999999999999999', 'null'])}`,
      `cursor=${rng.pick(['', 'x', '%00', 'webhook_', 'WEBHOOK_A', encodeURIComponent(rng.ascii(20)), rng.pick(w.idsA) + '_', 'webhook_' + 'z'.repeat(65)])}`,
      'limit[]=5', 'limit[a]=1', `${encodeURIComponent(rng.ascii(1 + rng.int(10)))}=1`, '=', '&', '%', 'limit=5&limit=6', 'cursor', `${rng.ascii(1 + rng.int(4), 0x61, 0x7a)}=${rng.ascii(3, 0x61, 0x7a)}`,
    ]));
  }
  return parts.join(rng.pick(['&', '&&', ';']));
}

function junkAuthorization(rng: Rng, w: World): string {
  const flip = (key: string) => {
    const i = 8 + rng.int(key.length - 8);
    return key.slice(0, i) + (key[i] === 'A' ? 'B' : 'A') + key.slice(i + 1);
  };
  return rng.pick([
    '', 'Bearer', 'Bearer ', `Bearer ${flip(w.keyA)}`, `Bearer ${w.keyA}x`, `Bearer ${w.keyA.slice(0, -1)}`, `Basic ${Buffer.from('a:b').toString('base64')}`,
    `Bearer ${'A'.repeat(8000)}`, `Token ${w.keyA}`, `Bearer ${w.keyA} ${w.keyA}`, `Bearer hs_live_${rng.ascii(43, 0x41, 0x5a)}`,
    `Bearer ${rng.ascii(1 + rng.int(100))}`, `${w.keyA}`, `Bearer\t${flip(w.keyA)}`, `Bearer ${w.keyA.toUpperCase()}`,
  ]);
}

// ---- the cases ----

function httpCase(rng: Rng, w: World): Case {
  const authA = { authorization: `Bearer ${w.keyA}` };
  const withBody = (method: string, path: string, extra: Record<string, string> = {}): Case => {
    const { text, type } = badBody(rng);
    return { kind: 'body', method, path, headers: { ...authA, 'content-type': type, ...extra }, body: text };
  };
  const roll = rng.int(100);
  if (roll < 35) {
    const id = rng.pick(w.idsA);
    const [method, path] = rng.pick([
      ['POST', '/v1/webhooks'], ['PATCH', `/v1/webhooks/${id}`], ['POST', `/v1/webhooks/${id}/rotate-secret`], ['POST', `/v1/webhooks/${id}/restore`],
    ] as const);
    const extra: Record<string, string> = rng.next() < 0.1 ? { 'content-encoding': rng.pick(['gzip', 'deflate', 'br', 'compress', 'identity, gzip', 'x-junk']) } : {};
    return withBody(method, path, extra);
  }
  if (roll < 50) {
    const c = rng.next() < 0.5 ? withBody('POST', '/v1/webhooks') : { kind: 'auth', method: rng.pick(['GET', 'DELETE']), path: rng.next() < 0.5 ? '/v1/webhooks' : `/v1/webhooks/${rng.pick(w.idsA)}`, headers: {} };
    const headers: Record<string, string> = { ...c.headers, authorization: junkAuthorization(rng, w) };
    if (rng.next() < 0.3) headers['x-request-id'] = rng.ascii(rng.int(300));
    if (rng.next() < 0.2) headers['accept'] = rng.pick(['text/html', 'application/xml', '*/*;q=0', 'application/json;q=0']);
    return { ...c, kind: 'auth', headers };
  }
  if (roll < 70) {
    const id = junkId(rng, w);
    // Dot segments are resolved by URL parsing and could land on a real route; such ids are only read.
    const dotty = /\.|%2e/i.test(id);
    const [method, suffix] = dotty ? ['GET', ''] : rng.pick([['GET', ''], ['PATCH', ''], ['DELETE', ''], ['POST', '/restore'], ['POST', '/rotate-secret']] as const);
    if (method === 'GET' || method === 'DELETE') return { kind: 'id', method, path: `/v1/webhooks/${id}${suffix}`, headers: authA };
    // Well-formed bodies too: on another tenant's (or no) endpoint they must still change nothing.
    const json = method === 'PATCH' ? JSON.stringify({ description: 'taken over' }) : suffix === '/rotate-secret' ? '{"grace_period_seconds":0}' : '{}';
    return { kind: 'id', method, path: `/v1/webhooks/${id}${suffix}`, headers: { ...authA, 'content-type': 'application/json' }, body: json };
  }
  if (roll < 85) {
    const path = rng.pick(['/v1/webhooks', '/v1/webhooks', '/v1/event-types', '/v1/openapi.json', `/v1/webhooks/${rng.pick(w.idsA)}`]);
    return { kind: 'query', method: 'GET', path: `${path}?${junkQuery(rng, w)}`, headers: authA };
  }
  if (roll < 92) {
    // Methods a path does not take (no bare id of A's here, and bodies stay malformed, so a request that
    // routes somewhere still changes nothing).
    const method = rng.pick(['PUT', 'OPTIONS', 'HEAD', 'DELETE', 'PATCH', 'POST']);
    const path = rng.pick(['/v1/webhooks', `/v1/webhooks/${rng.pick(w.idsB)}`, '/v1/event-types', '/v1/openapi.json', '/healthz', '/v1', '/', `/v1/webhooks/${rng.pick(w.idsA)}/restore`]);
    if (method === 'POST' || method === 'PATCH') return { ...withBody(method, path), kind: 'method' };
    return { kind: 'method', method, path, headers: authA };
  }
  // Another tenant's real endpoints with well-formed writes: must be 404, and change nothing.
  const id = rng.pick(w.idsB);
  const [method, suffix, body] = rng.pick([
    ['DELETE', '', undefined], ['PATCH', '', '{"url":"https://evil.example.com"}'], ['POST', '/restore', undefined], ['POST', '/rotate-secret', undefined], ['GET', '', undefined],
  ] as const);
  return { kind: 'cross-tenant', method, path: `/v1/webhooks/${id}${suffix}`, headers: body ? { ...authA, 'content-type': 'application/json' } : authA, body };
}

function rawCase(rng: Rng, w: World): RawCase {
  const auth = `authorization: Bearer ${w.keyA}\r\n`;
  const body = JSON.stringify({ nope: 1 });
  return {
    kind: 'raw',
    raw: rng.pick([
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}content-length: abc\r\nconnection: close\r\n\r\n`,
      `POST /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}content-type: application/json\r\ncontent-length: ${body.length}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n${body}`,
      `POST /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`,
      `POST /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}content-type: application/json\r\ncontent-length: 3\r\nconnection: close\r\n\r\n${body}`,
      `FROB /v1/webhooks HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\n${auth}connection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/9.9\r\nhost: x\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks\r\n\r\n`,
      `GET /v1/web hooks HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\nbad header: 1\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks?${'a=1&'.repeat(5000)} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}x-request-id: ${rng.ascii(20)}\r\nconnection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer \u00ff\u00fe${w.keyA}\r\nconnection: close\r\n\r\n`,
      `\x00\x01\x02${rng.ascii(50)}\r\n\r\n`,
      `GET /v1/webhooks/%ZZ%00 HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`,
      `GET /v1/webhooks?limit=%FF%FE HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`,
      `GET http://evil.example.com/v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`,
      `GET * HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`,
      `GET /v1/webhooks HTTP/1.1\r\nhost: x\r\n${auth}\r\nGET /v1/webhooks HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
    ]),
  };
}

/** Send raw bytes; the answers' status codes (a pipelined request may get two). */
function sendRaw(port: number, raw: Uint8Array | string): Promise<{ statuses: number[]; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => { socket.destroy(); reject(new Error('raw request got no answer in 10 s')); }, 10_000);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => {}); // a reset after the answer is fine; the answer is what is checked
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      resolve({ statuses: [...text.matchAll(/^HTTP\/1\.[01] (\d{3})/gm)].map((m) => Number(m[1])), text });
    });
    // Written, not ended: a half-closed socket would make the server drop the request unanswered.
    socket.write(typeof raw === 'string' ? Buffer.from(raw, 'latin1') : raw);
  });
}

async function snapshot(w: World) {
  const page = async (key: string) => {
    const res = await apiClient(h.service.api!.url, key).get('/v1/webhooks?limit=100');
    return res.body;
  };
  const info = await h.service.jsm.streams.info(ENDPOINTS_STREAM);
  return { a: await page(w.keyA), b: await page(w.keyB), lastSeq: info.state.last_seq };
}

test('a few thousand malformed requests: no 5xx, always the envelope, and no data changed', async (t) => {
  const em = h.service.orm!.em.fork();
  const w: World = {
    keyA: (await createApiKey(em, 'fuzz_a' as TenantId)).key,
    keyB: (await createApiKey(em, 'fuzz_b' as TenantId)).key,
    idsA: [],
    idsB: [],
  };
  const a = apiClient(h.service.api!.url, w.keyA, t);
  const b = apiClient(h.service.api!.url, w.keyB, t);
  for (let i = 0; i < 6; i++) w.idsA.push((await a.post('/v1/webhooks', { url: `https://a.example.com/${i}`, events: ['*'] })).body.id);
  await a.delete(`/v1/webhooks/${w.idsA[0]}`);
  for (let i = 0; i < 2; i++) w.idsB.push((await b.post('/v1/webhooks', { url: `https://b.example.com/${i}`, events: ['user.*'] })).body.id);
  const before = await snapshot(w);

  const rng = prng(SEED);
  const cases: (Case | RawCase)[] = Array.from({ length: CASES }, () => (rng.int(100) < 8 ? rawCase(rng, w) : httpCase(rng, w)));
  const statuses = new Map<string, number>();
  const failures: string[] = [];
  const port = Number(new URL(h.service.api!.url).port);
  let next = 0;

  const runOne = async (c: Case | RawCase) => {
    if ('raw' in c) {
      const { statuses: got, text } = await sendRaw(port, c.raw);
      if (got.length === 0) failures.push(`raw: no answer to ${JSON.stringify(String(c.raw).slice(0, 80))}`);
      for (const s of got) {
        statuses.set(`raw ${s}`, (statuses.get(`raw ${s}`) ?? 0) + 1);
        if (s >= 500) failures.push(`raw → ${s}: ${JSON.stringify(String(c.raw).slice(0, 80))}`);
      }
      if (!/x-request-id: /i.test(text)) failures.push(`raw: no x-request-id in answer to ${JSON.stringify(String(c.raw).slice(0, 80))}`);
      return;
    }
    const res = await fetch(h.service.api!.url + c.path, { method: c.method, headers: c.headers, body: c.body });
    const text = await res.text();
    const label = `${c.kind} ${res.status}`;
    statuses.set(label, (statuses.get(label) ?? 0) + 1);
    const where = `${c.kind}: ${c.method} ${c.path.slice(0, 120)}`;
    if (res.status >= 500) failures.push(`${where} → ${res.status} ${text.slice(0, 200)}`);
    if (!res.headers.get('x-request-id')) failures.push(`${where}: no x-request-id`);
    if (c.kind === 'cross-tenant' && res.status !== 404) failures.push(`${where}: another tenant's endpoint answered ${res.status}`);
    if (res.status >= 200 && res.status < 300 && c.method !== 'GET' && c.method !== 'HEAD' && c.method !== 'OPTIONS') {
      failures.push(`${where}: a write succeeded (${res.status}) with ${JSON.stringify(c.headers)} ${typeof c.body === 'string' ? c.body.slice(0, 300) : String(c.body)}`);
    }
    if (res.status >= 400 && c.method !== 'HEAD') {
      let ok = false;
      try {
        const e = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown; details?: unknown } }).error;
        ok = typeof e?.code === 'string' && typeof e.message === 'string' && Array.isArray(e.details);
      } catch { /* not JSON */ }
      if (!ok) failures.push(`${where} → ${res.status}: not the error envelope: ${text.slice(0, 120)}`);
    }
  };

  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      try {
        await runOne(c);
      } catch (e) {
        failures.push(`${c.kind}: request failed: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
  }));

  t.log([...statuses.entries()].sort().map(([k, v]) => `${k}: ${v}`).join(', '));
  t.deepEqual(failures.slice(0, 20), [], `${failures.length} failures`);
  const after = await snapshot(w);
  t.is(after.lastSeq, before.lastSeq, 'no endpoint command was written');
  t.deepEqual(after, before, 'both tenants\' endpoints are exactly as before');
  // And the API still works.
  t.is((await a.post('/v1/webhooks', { url: 'https://a.example.com/after', events: ['*'] })).status, 201);
});

test('events nested 10,000 deep (a body under 64 KB) is a 422 naming the field, not a stack overflow', async (t) => {
  const { key } = await createApiKey(h.service.orm!.em.fork(), 'fuzz_deep' as TenantId);
  const res = await fetch(`${h.service.api!.url}/v1/webhooks`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: `{"url":"https://deep.example.com/h","events":[${'['.repeat(10_000)}${']'.repeat(10_000)}]}`,
  });
  t.is(res.status, 422);
  const body = await res.json() as { error: { details: { field: string; message: string }[] } };
  t.deepEqual(body.error.details, [{ field: 'events[0]', message: 'must be a string (an event name or wildcard), not a list' }]);
});
