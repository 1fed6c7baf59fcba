// The console under the project's nats.conf (issue 19): it asks the admin subjects as the operator user
// (CONSOLE_NATS_USER), through the OPERATORS account's import, like the CLI; the service user, which may
// not request on admin.>, gets a page that says so. Plain HTTP here (sign-in form, cookies by hand).
// Not under TEST_DIRECT_DELIVERY: only the projector and admin roles run here, and nothing is delivered.
import test from 'ava';
import { loadConfig } from '../src/config.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createLogger } from '../src/log.ts';
import { createOperator } from '../src/operators/store.ts';
import { startService, type RunningService } from '../src/service.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { NATS_CONF, useNatsConfPasswords } from './helpers/nats-conf.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let db: TestDatabase;
const services: RunningService[] = [];
let env: Record<string, string> = {};
let passwords: ReturnType<typeof useNatsConfPasswords>;

test.before(async () => {
  await initSodium();
  passwords = useNatsConfPasswords();
  nats = await startNatsServer({ config: NATS_CONF });
  db = await createTestDatabase('console_accounts');
  const keys = generateKeys();
  env = {
    NATS_URL: nats.url, DATABASE_URL: db.url, PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_DELIVERY_SHARDS: '2',
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey, HOOKSTREAM_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'error',
  };
  // The service user creates the streams (the admin user may not), then the admin role runs apart.
  const projector = loadConfig({ ...env, NATS_USER: 'service', NATS_PASSWORD: passwords.user('service'), HOOKSTREAM_ROLES: 'projector' });
  services.push(await startService(projector, createLogger({ level: projector.logLevel })));
  const admin = loadConfig({ ...env, NATS_USER: 'admin', NATS_PASSWORD: passwords.user('admin'), HOOKSTREAM_ROLES: 'admin' });
  services.push(await startService(admin, createLogger({ level: admin.logLevel })));
});

test.after.always(async () => {
  for (const s of services.splice(0).reverse()) await s.stop();
  await nats?.dispose();
  await db?.drop();
});

async function startConsole(extra: Record<string, string>): Promise<string> {
  const config = loadConfig({ ...env, NATS_USER: 'service', NATS_PASSWORD: passwords.user('service'), HOOKSTREAM_ROLES: 'console', ...extra });
  const s = await startService(config, createLogger({ level: config.logLevel }));
  services.push(s);
  return s.console!.url;
}

const cookieOf = (res: Response, name: string): string | undefined =>
  res.headers.getSetCookie().map((c) => c.split(';')[0]!).find((c) => c.startsWith(`${name}=`));

/** Sign in as a browser would (pre-session cookie, the form's CSRF token, same origin); the session cookie. */
async function signIn(url: string, key: string): Promise<string> {
  const form = await fetch(`${url}/sign-in`);
  const pre = cookieOf(form, 'hs_console_pre')!;
  const csrf = /name="csrf" value="([^"]+)"/.exec(await form.text())![1]!;
  const res = await fetch(`${url}/sign-in`, {
    method: 'POST', redirect: 'manual', body: new URLSearchParams({ key, csrf }),
    headers: { cookie: pre, origin: url, 'content-type': 'application/x-www-form-urlencoded' },
  });
  if (res.status !== 303) throw new Error(`sign-in answered ${res.status}: ${await res.text()}`);
  return cookieOf(res, 'hs_console_session')!;
}

test.serial('as the operator user, the console reaches the admin role through the OPERATORS account', async (t) => {
  const url = await startConsole({ CONSOLE_NATS_USER: 'operator', CONSOLE_NATS_PASSWORD: passwords.user('operator') });
  const { key } = await createOperator(services[0]!.orm!.em.fork(), 'oliver');
  const session = await signIn(url, key);
  const page = await fetch(`${url}/audit`, { headers: { cookie: session } });
  t.is(page.status, 200);
  const html = await page.text();
  t.regex(html, /<h1>Audit log<\/h1>/);
  t.regex(html, /oliver<\/td><td>console\.sign_in/, 'the admin role answered admin.audit.list');
});

test.serial('as the service user (no CONSOLE_NATS_USER), a page says the user may not use the admin subjects', async (t) => {
  const url = await startConsole({});
  const { key } = await createOperator(services[0]!.orm!.em.fork(), 'sam');
  const session = await signIn(url, key);
  const page = await fetch(`${url}/audit`, { headers: { cookie: session } });
  t.is(page.status, 503);
  t.regex(await page.text(), /may not use admin\.audit\.list/);
});
