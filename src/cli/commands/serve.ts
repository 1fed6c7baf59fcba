import { loadConfig, ROLES } from '../../config.ts';
import { ConfigError, ErrorCode, HookstreamError, describe, isHookstreamError } from '../../errors.ts';
import { createLogger, onLogLineDropped } from '../../log.ts';
import { startLocalServers } from '../../local/index.ts';
import { createServiceMetrics } from '../../metrics.ts';
import { combineOps } from '../../ops/combined.ts';
import { startOpsServer, type OpsServer } from '../../ops/server.ts';
import { createStartingOps } from '../../ops/starting.ts';
import { startApiThread, type ApiThread } from '../../supervisor/api-thread.ts';
import { guardProcess } from '../../supervisor/process-guards.ts';
import { startUntilUp, type Waiting } from '../../supervisor/start-up.ts';
import { splitRoles } from '../../supervisor/threads.ts';
import type { Command } from '../command.ts';

/** A repeat of the first signal this soon is the same stop: under `npm start`, Ctrl-C arrives twice (terminal, npm). */
const REPEAT_MS = 1000;

export const serve: Command = {
  name: 'serve',
  summary: 'Run the service (what `npm start` runs)',
  help: [
    'Options:',
    `  --roles LIST   comma-separated roles to run in this process (default: all): ${ROLES.join(', ')}`,
    '',
    'Configuration comes from environment variables; see the README. Waits for NATS and Postgres at start-up',
    'as long as they take. SIGTERM or SIGINT stops it within HOOKSTREAM_SHUTDOWN_TIMEOUT; a second one at once.',
    'The api, console and endpoint projection run in a thread of their own when the delivery roles run too',
    '(HOOKSTREAM_API_THREAD=0: one thread).',
  ].join('\n'),
  options: { roles: { type: 'string' } },
  async run({ values }) {
    const env = { ...process.env };
    if (typeof values['roles'] === 'string') env['HOOKSTREAM_ROLES'] = values['roles'];
    const given = loadConfig(env);
    if (given.roles.length === 0) throw new ConfigError('HOOKSTREAM_ROLES', 'no role to run');
    const log = createLogger({ level: given.logLevel });
    const metrics = createServiceMetrics();
    onLogLineDropped(() => metrics.logLinesDropped.inc());
    guardProcess(log, metrics.unhandledErrors);

    // The first signal asks for a stop: during start-up at once (nothing is in flight worth waiting for),
    // afterwards within the shutdown deadline. A later one exits at once.
    let firstSignalAt: number | undefined;
    let stopRequested: (signal: string) => void = () => {};
    const stopping = new Promise<string>((resolve) => { stopRequested = resolve; });
    let running = false;
    const onSignal = (signal: NodeJS.Signals) => {
      const code = signal === 'SIGINT' ? 130 : 143;
      if (firstSignalAt === undefined) {
        firstSignalAt = Date.now();
        log.info('shutting down', { signal });
        // The exit signals the local servers started so far (src/local/child.ts), which shut down cleanly.
        if (!running) process.exit(0);
        stopRequested(signal);
      } else if (Date.now() - firstSignalAt > REPEAT_MS) {
        log.warn('second signal: exiting at once', { signal });
        process.exit(code);
      }
    };
    process.on('SIGINT', onSignal).on('SIGTERM', onSignal);

    // Only while nothing else is loaded: other commands do not pay for the whole service at start-up.
    const { startService, needsDatabase } = await import('../../service.ts');
    let waiting: Waiting | undefined;
    const startingOps = createStartingOps(metrics, () => waiting);
    // The API side in a thread of its own (src/supervisor/threads.ts), the delivery path in this one.
    const split = splitRoles(given.roles, given.apiThread);
    let local;
    let opsServer;
    let service;
    let thread: ApiThread | undefined;
    try {
      local = await startLocalServers(given, log, { database: needsDatabase(given.roles) });
      // Open before start-up, so that orchestrators hear "alive, not ready: waiting for …" meanwhile.
      const listener = await startOpsServer(startingOps, { host: given.opsHost, port: given.opsPort, log: log.child({ role: 'ops' }) });
      opsServer = listener;
      const config = local.config;
      let ops: OpsServer = listener;
      // Once the main thread's start-up has gone through, so that what start-up waits for is logged once.
      let startThread = () => {};
      if (split) {
        ops = { url: listener.url, use: (o) => listener.use(thread ? combineOps([{ ops: o }, { name: 'api thread', ops: thread.ops }]) : o), close: () => listener.close() };
        startThread = () => {
          thread = startApiThread({ config: { ...config, roles: split.api }, log, restarts: metrics.roleRestarts });
          // From now on the listener answers for both threads.
          ops.use(service!.ops);
        };
      }
      service = await startUntilUp((step, signal) => startService(split ? { ...config, roles: split.work } : config, log, {
        metrics, opsServer: ops, step, signal, ...(split ? { half: 'work' as const } : {}),
      }), {
        log, retries: metrics.startupRetries,
        onWaiting: (w) => {
          waiting = w;
          // A failed attempt may have switched the listener to its own answers before it failed.
          if (w) ops.use(startingOps);
        },
      });
      startThread();
      if (thread) {
        await thread.up;
        log.info('hookstream started', { roles: config.roles.join(','), api_thread: split!.api.join(',') });
      }
    } catch (e) {
      await service?.stop();
      await thread?.stop();
      await local?.stop();
      await opsServer?.close();
      // Start-up failures are one line (main prints named errors without a stack), whatever threw them.
      throw isHookstreamError(e) ? e : new HookstreamError(ErrorCode.Internal, `start-up failed: ${describe(e)}`, { cause: e });
    }
    running = true;
    if (firstSignalAt === undefined) await stopping;
    // Each half within the shutdown timeout, side by side: neither waits for the other's work.
    await Promise.all([service.stop(), thread?.stop()]);
    await local.stop();
    await opsServer.close();
    log.info('stopped');
    // Whatever a stop past its deadline left behind (a request to a NATS that is gone) must not hold the exit.
    setTimeout(() => process.exit(0), 1000).unref();
  },
};
