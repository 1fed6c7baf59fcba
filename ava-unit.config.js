// `npm run test:unit`: the tests that need no server (no nats-server, no Postgres, no HTTP listener):
// domain, codecs, parsers, configuration and pure functions. Seconds, not minutes; `npm test` runs them
// too, with everything else. A test file that starts a server belongs in `npm test` only, not here.
export default {
  extensions: ['ts'],
  files: [
    'test/ack-subject.test.ts',
    'test/api-openapi.test.ts',
    'test/api-thread-split.test.ts',
    'test/catalogue.test.ts',
    'test/config.test.ts',
    'test/console-html.test.ts',
    'test/crypto.test.ts',
    'test/direct-events.test.ts',
    'test/direct-metadata.test.ts',
    'test/direct-window.test.ts',
    'test/event-data.test.ts',
    'test/fair-publishes.test.ts',
    'test/pull-loop-pools.test.ts',
    'test/retry-after.test.ts',
    'test/router-verdict.test.ts',
    'test/server-version.test.ts',
    'test/signature.test.ts',
    'test/target-policy.test.ts',
    'test/telemetry-config.test.ts',
    'test/tenant-pace.test.ts',
    'test/webhook-id.test.ts',
    'test/wire-headers.test.ts',
  ],
  timeout: '60s',
  workerThreads: false,
};
