// The API's thread (src/supervisor/api-thread.ts): its roles started like a process's, with start-up that
// waits for NATS and Postgres as long as they take, its own connections, logger, metrics and guards. The
// main thread asks it for its ops answers and tells it to stop; it says when it is up, stopped, or why it
// cannot start.
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../config.ts';
import { describe, ErrorCode, isHookstreamError } from '../errors.ts';
import { createLogger, onLogLineDropped } from '../log.ts';
import { createServiceMetrics } from '../metrics.ts';
import type { Ops } from '../ops/ops.ts';
import type { OpsServer } from '../ops/server.ts';
import { createStartingOps } from '../ops/starting.ts';
import { guardProcess } from './process-guards.ts';
import { startUntilUp, type Waiting } from './start-up.ts';
import type { FromApiThread, ToApiThread } from './api-thread.ts';

const port = parentPort!;
const post = (m: FromApiThread) => port.postMessage(m);
const { config } = workerData as { config: Config };

const log = createLogger({ level: config.logLevel });
const metrics = createServiceMetrics();
onLogLineDropped(() => metrics.logLinesDropped.inc());
guardProcess(log, metrics.unhandledErrors);

let waiting: Waiting | undefined;
const startingOps = createStartingOps(metrics, () => waiting);
let ops: Ops = startingOps;
// startService answers on the listener it is given: here, the main thread's questions.
const opsServer: OpsServer = { url: 'api thread', use: (next) => { ops = next; }, close: async () => {} };

let stopRequested: () => void = () => {};
const stopping = new Promise<void>((resolve) => { stopRequested = resolve; });
port.on('message', (m: ToApiThread) => {
  if (m.type === 'stop') stopRequested();
  else if (m.type === 'ops') {
    ops.handle(m.path).then(
      (res) => post({ type: 'ops', id: m.id, res }),
      (e: unknown) => post({ type: 'ops', id: m.id, error: describe(e) }),
    );
  }
});

try {
  // Only now: the thread's start-up pays for the service's modules, not the message handler above.
  const { startService } = await import('../service.ts');
  const service = await startUntilUp((step, signal) => startService(config, log, { metrics, opsServer, step, signal, half: 'api' }), {
    log, retries: metrics.startupRetries,
    onWaiting: (w) => {
      waiting = w;
      if (w) ops = startingOps;
    },
  });
  post({ type: 'up', ...(service.api ? { apiUrl: service.api.url } : {}) });
  await stopping;
  await service.stop();
  post({ type: 'stopped' });
} catch (e) {
  // What needs an operator (a port in use, credentials refused): the process ends with it, as it would in one thread.
  post({ type: 'fatal', message: describe(e), code: isHookstreamError(e) ? e.code : ErrorCode.Internal });
}
port.close();
