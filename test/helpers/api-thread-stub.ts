// A stand-in for the API's thread (src/supervisor/api-thread-entry.ts) that fails as a test asks, chosen by
// its configuration's `host`: `exit-once` says it is up, then exits (code 3) once, the first time (a marker
// file in `dataDir`), and runs as asked after that; `fatal` reports what needs an operator, as a start-up
// on a port in use does.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../../src/config.ts';
import { ErrorCode } from '../../src/errors.ts';
import type { FromApiThread, ToApiThread } from '../../src/supervisor/api-thread.ts';

const port = parentPort!;
const post = (m: FromApiThread) => port.postMessage(m);
const { config } = workerData as { config: Config };

if (config.host === 'fatal') {
  post({ type: 'fatal', message: 'PORT: cannot listen on 127.0.0.1:1 (EACCES)', code: ErrorCode.InvalidConfig });
  port.close();
} else {
  const marker = join(config.dataDir, 'exited-once');
  const first = !existsSync(marker);
  port.on('message', (m: ToApiThread) => {
    if (m.type === 'stop') { post({ type: 'stopped' }); port.close(); return; }
    post({ type: 'ops', id: m.id, res: { status: 200, contentType: 'application/json', body: JSON.stringify({ status: 'ready', checks: [{ name: 'nats', ok: true }] }) } });
  });
  post({ type: 'up', apiUrl: 'http://stub' });
  if (first) {
    writeFileSync(marker, '');
    setTimeout(() => process.exit(3), 100);
  }
}
