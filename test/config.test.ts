// Configuration: the defaults a new user gets, and a ConfigError naming the variable for every kind of
// bad value, without echoing credentials.
import test from 'ava';
import { loadConfig, redactUrl, ROLES, VARIABLES, type Config } from '../src/config.ts';
import { ConfigError, ErrorCode, isHookstreamError } from '../src/errors.ts';

test('defaults without any variable', (t) => {
  const expected: Config = {
    natsUrl: 'nats://127.0.0.1:4222',
    natsUser: undefined,
    natsPassword: undefined,
    databaseUrl: 'postgres://postgres@127.0.0.1:5432/hookstream',
    natsUrlSet: false,
    databaseUrlSet: false,
    host: '127.0.0.1',
    port: 8080,
    opsHost: '127.0.0.1',
    opsPort: 9090,
    consoleHost: '127.0.0.1',
    consolePort: 8090,
    consoleNatsUser: undefined,
    consoleNatsPassword: undefined,
    portalFrameAncestors: [], publicUrl: undefined,
    dataDir: '.hookstream',
    production: false,
    roles: ['api', 'router', 'delivery', 'deadletter', 'admin', 'projector', 'console'],
    // 5s,30s,2m,15m,1h,4h,10h,14h in milliseconds
    retrySchedule: [5_000, 30_000, 120_000, 900_000, 3_600_000, 14_400_000, 36_000_000, 50_400_000],
    attemptTimeoutMs: 15_000,
    shutdownTimeoutMs: 10_000,
    disableAfterMs: 5 * 86_400_000,
    deadLetterBackstopMs: 60_000,
    deadLetterRetentionMs: 30 * 86_400_000,
    attemptRetentionMs: 7 * 86_400_000,
    allowPrivateTargets: false,
    forwardTraceparent: false,
    sealDeliveries: true,
    apiThread: true,
    maxInFlightPerEndpoint: 16,
    maxQueuedPerEndpoint: 100_000,
    queueRetentionMs: 28 * 86_400_000,
    deliveryShards: 128,
    eventPartitions: 0,
    directDelivery: false,
    rateLimitPerSecond: 100,
    authFailureBurst: 20,
    maxEventBytes: 262_144,
    replicas: 1,
    masterKey: undefined,
    deadLetterPublicKey: undefined,
    deadLetterSecretKey: undefined,
    previousMasterKey: undefined,
    previousDeadLetterSecretKey: undefined,
    logLevel: 'info',
  };
  t.deepEqual(loadConfig({}), expected);
});

test('empty and blank variables mean the default', (t) => {
  t.deepEqual(loadConfig({ PORT: '', HOOKSTREAM_RETRY_SCHEDULE: '  ', HOOKSTREAM_ROLES: '', NATS_URL: '' }), loadConfig({}));
});

test('the documented defaults (VARIABLES) are the defaults loadConfig applies', (t) => {
  const env: Record<string, string> = {};
  for (const v of VARIABLES) if (v.default !== '' && !v.default.startsWith('(')) env[v.name] = v.default;
  t.true(Object.keys(env).length >= 12);
  // Except that a URL given, even the default one, is used as given: `serve` starts no local server for it.
  t.deepEqual(loadConfig(env), { ...loadConfig({}), natsUrlSet: true, databaseUrlSet: true });
});

test('values are read and parsed', (t) => {
  const c = loadConfig({
    NATS_URL: 'nats://a:4222,tls://b:4443', DATABASE_URL: 'postgresql://u:p@db:5433/x', HOST: '0.0.0.0', PORT: '9090',
    HOOKSTREAM_DATA_DIR: '/var/lib/hookstream', NODE_ENV: 'production', HOOKSTREAM_ROLES: ' delivery , router,delivery',
    HOOKSTREAM_RETRY_SCHEDULE: '500ms, 1.5s,2m,1d', HOOKSTREAM_ATTEMPT_TIMEOUT: '5m', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: 'TRUE',
    HOOKSTREAM_MAX_IN_FLIGHT: '1', HOOKSTREAM_DELIVERY_SHARDS: '256', HOOKSTREAM_RATE_LIMIT: '5', HOOKSTREAM_LOG_LEVEL: 'debug',
    HOOKSTREAM_MAX_EVENT_BYTES: '65536',
    NATS_USER: 'svc', NATS_PASSWORD: 'pw',
  });
  t.is(c.natsUrl, 'nats://a:4222,tls://b:4443');
  t.is(c.databaseUrl, 'postgresql://u:p@db:5433/x');
  t.is(c.host, '0.0.0.0');
  t.is(c.port, 9090);
  t.is(c.opsHost, '127.0.0.1');
  t.is(c.opsPort, 9090, 'no api role: PORT is not listened on, so OPS_PORT may equal it');
  t.like(loadConfig({ OPS_HOST: '0.0.0.0', OPS_PORT: '0' }), { opsHost: '0.0.0.0', opsPort: 0 });
  t.is(c.dataDir, '/var/lib/hookstream');
  t.true(c.production);
  t.deepEqual(c.roles, ['delivery', 'router']);
  t.deepEqual(c.retrySchedule, [500, 1500, 120_000, 86_400_000]);
  t.is(c.attemptTimeoutMs, 300_000);
  t.true(c.allowPrivateTargets);
  t.is(c.maxInFlightPerEndpoint, 1);
  t.is(c.deliveryShards, 256);
  t.is(c.rateLimitPerSecond, 5);
  t.is(c.maxEventBytes, 65_536);
  t.is(c.logLevel, 'debug');
  t.is(c.natsUser, 'svc');
  t.is(c.natsPassword, 'pw');
  t.false(loadConfig({ NODE_ENV: 'development' }).production);
  t.false(loadConfig({ HOOKSTREAM_ALLOW_PRIVATE_TARGETS: 'no' }).allowPrivateTargets);
  t.is(loadConfig({ HOOKSTREAM_DISABLE_AFTER: '0' }).disableAfterMs, 0, '0: never');
  t.is(loadConfig({ HOOKSTREAM_DISABLE_AFTER: '1s' }).disableAfterMs, 1000);
  t.is(loadConfig({}).deadLetterRetentionMs, 30 * 86_400_000, 'dead letters: 30 days by default');
  t.is(loadConfig({ HOOKSTREAM_DEAD_LETTER_RETENTION: '0' }).deadLetterRetentionMs, 0, '0: kept');
});

test('HOOKSTREAM_QUEUE_RETENTION lies between the retry schedule with its attempts and the erasure index\'s 30 days (issue 22)', (t) => {
  const short = { HOOKSTREAM_RETRY_SCHEDULE: '1s,2s', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s' };
  t.is(loadConfig({ ...short, HOOKSTREAM_QUEUE_RETENTION: '6001ms' }).queueRetentionMs, 6001, '1s + 2s + 3 attempts of 1s, and a millisecond');
  const schedule = t.throws(() => loadConfig({ ...short, HOOKSTREAM_QUEUE_RETENTION: '6s' }), { instanceOf: ConfigError });
  t.is(schedule.message, 'HOOKSTREAM_QUEUE_RETENTION: is 6s but must be longer than HOOKSTREAM_RETRY_SCHEDULE with every attempt\'s HOOKSTREAM_ATTEMPT_TIMEOUT (6s), so a failing delivery becomes a dead letter instead of expiring');
  t.is(loadConfig({ HOOKSTREAM_QUEUE_RETENTION: '29d' }).queueRetentionMs, 29 * 86_400_000);
  const index = t.throws(() => loadConfig({ HOOKSTREAM_QUEUE_RETENTION: '720h' }), { instanceOf: ConfigError });
  t.is(index.message, 'HOOKSTREAM_QUEUE_RETENTION: is 30d but must be shorter than the erasure index\'s 30d, so erasure finds every queued delivery (default 28d)');
});

// [variable, bad value] for every kind of variable.
const BAD: [string, string][] = [
  // durations
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '15'],
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '15 seconds'],
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '0s'],
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '-5s'],
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '6m'],
  ['HOOKSTREAM_ATTEMPT_TIMEOUT', '1w'],
  ['HOOKSTREAM_DISABLE_AFTER', '5 days'],
  ['HOOKSTREAM_DISABLE_AFTER', '0s'],
  ['HOOKSTREAM_DISABLE_AFTER', 'never'],
  ['HOOKSTREAM_DEAD_LETTER_RETENTION', 'forever'],
  ['HOOKSTREAM_DEAD_LETTER_RETENTION', '30 days'],
  ['HOOKSTREAM_QUEUE_RETENTION', '0'],
  ['HOOKSTREAM_QUEUE_RETENTION', 'forever'],
  // not shorter than the erasure index's 30 days
  ['HOOKSTREAM_QUEUE_RETENTION', '30d'],
  ['HOOKSTREAM_QUEUE_RETENTION', '90d'],
  // not longer than the default retry schedule (29 h 17 m 35 s, plus 15 s per attempt)
  ['HOOKSTREAM_QUEUE_RETENTION', '1d'],
  // retry schedule
  ['HOOKSTREAM_RETRY_SCHEDULE', '5s,,30s'],
  ['HOOKSTREAM_RETRY_SCHEDULE', '5s;30s'],
  ['HOOKSTREAM_RETRY_SCHEDULE', '5s,soon'],
  ['HOOKSTREAM_RETRY_SCHEDULE', '5s,0ms'],
  ['HOOKSTREAM_RETRY_SCHEDULE', Array(51).fill('1s').join(',')],
  // whole numbers
  ['PORT', 'http'],
  ['PORT', '80.5'],
  ['PORT', '-1'],
  ['PORT', '65536'],
  ['PORT', '1e3'],
  ['OPS_PORT', 'metrics'],
  ['OPS_PORT', '65536'],
  // the API's default PORT on the same address
  ['OPS_PORT', '8080'],
  ['HOOKSTREAM_MAX_IN_FLIGHT', '0'],
  ['HOOKSTREAM_MAX_IN_FLIGHT', '1001'],
  ['HOOKSTREAM_DELIVERY_SHARDS', '0'],
  ['HOOKSTREAM_DELIVERY_SHARDS', '257'],
  ['HOOKSTREAM_RATE_LIMIT', 'lots'],
  ['HOOKSTREAM_RATE_LIMIT', '0'],
  ['HOOKSTREAM_MAX_EVENT_BYTES', '1023'],
  // above the EVENTS stream's max_msg_size: such events could never be stored
  ['HOOKSTREAM_MAX_EVENT_BYTES', '262145'],
  ['HOOKSTREAM_MAX_EVENT_BYTES', '256k'],
  // flags
  ['HOOKSTREAM_ALLOW_PRIVATE_TARGETS', 'maybe'],
  ['HOOKSTREAM_ALLOW_PRIVATE_TARGETS', '2'],
  ['HOOKSTREAM_ALLOW_PRIVATE_TARGETS', 'on'],
  // URLs
  ['NATS_URL', 'not a url'],
  ['NATS_URL', 'http://127.0.0.1:4222'],
  ['NATS_URL', 'nats://127.0.0.1:4222,http://b:4222'],
  ['NATS_URL', 'nats://127.0.0.1:4222,garbage'],
  ['DATABASE_URL', 'mysql://root@127.0.0.1/hookstream'],
  ['DATABASE_URL', 'hookstream'],
  ['DATABASE_URL', 'postgres://postgres@127.0.0.1:notaport/hookstream'],
  // roles
  ['HOOKSTREAM_ROLES', 'api,web'],
  ['HOOKSTREAM_ROLES', 'API'],
  ['HOOKSTREAM_ROLES', 'api router'],
  ['HOOKSTREAM_ROLES', ' , '],
  // log level
  ['HOOKSTREAM_LOG_LEVEL', 'verbose'],
];

for (const [variable, value] of BAD) {
  test(`${variable}=${JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)} is a ConfigError naming ${variable}`, (t) => {
    const err = t.throws(() => loadConfig({ [variable]: value }), { instanceOf: ConfigError });
    t.is(err.variable, variable);
    t.true(err.message.startsWith(`${variable}: `), err.message);
    t.true(isHookstreamError(err, ErrorCode.InvalidConfig));
  });
}

// Passwords users really type: with characters that break URL parsing, so the message cannot rely on
// the URL parser to find the password.
const PASSWORDS = ['hunter2secret', 'pa/ss:w0rd', 'p@ssw0rd!', 'sec#ret?x', 'a%zzsecret', 'white space pw', 'comma,separated'];

for (const password of PASSWORDS) {
  test(`a DATABASE_URL password (${JSON.stringify(password)}) never appears in the error`, (t) => {
    const urls = [
      `postgres://app:${password}@db.internal:notaport/hookstream`,
      `mysql://app:${password}@db.internal:5432/hookstream`,
      `postgres://app:${password}@db internal:5432/hookstream`,
      `postgres://app:${password}@[::1:5432/hookstream`,
    ];
    for (const url of urls) {
      let err: unknown;
      try {
        loadConfig({ DATABASE_URL: url });
      } catch (e) {
        err = e;
      }
      // Some of these may parse (the password then sits in a valid URL); only errors are checked.
      if (err === undefined) continue;
      t.true(err instanceof ConfigError, url);
      const message = (err as ConfigError).message;
      t.is((err as ConfigError).variable, 'DATABASE_URL');
      for (const part of password.split(/[/:@#?%, ]/).filter((p) => p.length >= 3)) {
        t.false(message.includes(part), `${JSON.stringify(part)} of the password shows in: ${message}`);
      }
    }
  });
}

test('at least the unparseable DATABASE_URLs above do fail (so the password check runs)', (t) => {
  t.throws(() => loadConfig({ DATABASE_URL: 'postgres://app:pa/ss@db:notaport/x' }), { instanceOf: ConfigError });
  t.throws(() => loadConfig({ DATABASE_URL: 'postgres://app:hunter2@db:notaport/x' }), { instanceOf: ConfigError });
});

test('a NATS_URL password never appears in the error either', (t) => {
  const err = t.throws(() => loadConfig({ NATS_URL: 'nats://127.0.0.1:4222,nats://svc:s3cr/et@nats-2:bad' }), { instanceOf: ConfigError });
  t.is(err.variable, 'NATS_URL');
  t.false(err.message.includes('s3cr'));
  t.false(err.message.includes('et@'));
});

test('redactUrl hides the password of a valid URL and keeps the rest', (t) => {
  t.is(redactUrl('postgres://app:hunter2@db:5432/x'), 'postgres://app:***@db:5432/x');
  t.is(redactUrl('postgres://app@db:5432/x'), 'postgres://app@db:5432/x');
  t.false(redactUrl('postgres://app:pa/ss@db:bad/x').includes('ss'));
});

test('CONSOLE_PORT may not take the API port or OPS_PORT on the same address (issue 19)', (t) => {
  t.throws(() => loadConfig({ PORT: '9000', CONSOLE_PORT: '9000' }), { instanceOf: ConfigError, message: /^CONSOLE_PORT: 9000 is also the API's PORT/ });
  t.throws(() => loadConfig({ OPS_PORT: '9001', CONSOLE_PORT: '9001' }), { instanceOf: ConfigError, message: /^CONSOLE_PORT: 9001 is also OPS_PORT/ });
  t.like(loadConfig({ PORT: '9000', CONSOLE_PORT: '9000', HOOKSTREAM_ROLES: 'console' }), { consolePort: 9000 }, 'no api role: PORT is not listened on');
  t.like(loadConfig({ CONSOLE_HOST: '0.0.0.0', CONSOLE_PORT: '0' }), { consoleHost: '0.0.0.0', consolePort: 0 });
});

test('PORTAL_FRAME_ANCESTORS takes origins only (issue 19)', (t) => {
  t.deepEqual(loadConfig({ PORTAL_FRAME_ANCESTORS: 'https://dash.example.com, http://127.0.0.1:3000/' }).portalFrameAncestors, ['https://dash.example.com', 'http://127.0.0.1:3000']);
  for (const bad of ['dash.example.com', 'https://dash.example.com/path', "https://a.example 'unsafe-inline'", 'javascript:alert(1)', '*']) {
    t.throws(() => loadConfig({ PORTAL_FRAME_ANCESTORS: bad }), { instanceOf: ConfigError, message: /^PORTAL_FRAME_ANCESTORS: expected origins/ }, bad);
  }
});

test('OPS_PORT may not take the API port on an address the API listens on', (t) => {
  for (const env of [{ PORT: '9000', OPS_PORT: '9000' }, { HOST: '0.0.0.0', PORT: '9000', OPS_PORT: '9000' }, { PORT: '9000', OPS_HOST: '::', OPS_PORT: '9000' }]) {
    const err = t.throws(() => loadConfig(env), { instanceOf: ConfigError });
    t.is(err.variable, 'OPS_PORT');
  }
  // Other addresses, free ports, or no api role in this process: no conflict.
  t.is(loadConfig({ HOST: '10.0.0.5', PORT: '9000', OPS_PORT: '9000' }).opsPort, 9000);
  t.is(loadConfig({ PORT: '0', OPS_PORT: '0' }).opsPort, 0);
  t.is(loadConfig({ PORT: '9000', OPS_PORT: '9000', HOOKSTREAM_ROLES: 'delivery' }).opsPort, 9000);
});

test('every role name is accepted on its own', (t) => {
  for (const role of ROLES) t.deepEqual(loadConfig({ HOOKSTREAM_ROLES: role }).roles, [role]);
});

test('PUBLIC_URL is one origin: portal links point there', (t) => {
  t.is(loadConfig({ PUBLIC_URL: 'https://hooks.example.com/' }).publicUrl, 'https://hooks.example.com');
  t.is(loadConfig({}).publicUrl, undefined);
  for (const bad of ['hooks.example.com', 'https://hooks.example.com/prefix', 'https://a.example.com,https://b.example.com', 'ftp://x.example.com']) {
    t.throws(() => loadConfig({ PUBLIC_URL: bad }), { instanceOf: ConfigError, message: /^PUBLIC_URL: expected/ }, bad);
  }
});

test('HOOKSTREAM_DIRECT_DELIVERY needs the partition streams it reads', (t) => {
  t.throws(() => loadConfig({ HOOKSTREAM_DIRECT_DELIVERY: '1' }), {
    instanceOf: ConfigError, message: /^HOOKSTREAM_DIRECT_DELIVERY: is 1 but HOOKSTREAM_EVENT_PARTITIONS is 0: .* set HOOKSTREAM_EVENT_PARTITIONS/,
  });
  t.like(loadConfig({ HOOKSTREAM_DIRECT_DELIVERY: '1', HOOKSTREAM_EVENT_PARTITIONS: '16' }), { directDelivery: true, eventPartitions: 16 });
  t.throws(() => loadConfig({ HOOKSTREAM_DIRECT_DELIVERY: 'on' }), { instanceOf: ConfigError, message: /^HOOKSTREAM_DIRECT_DELIVERY: expected 1 or 0/ });
});
