// The service under benchmark, in its own process so its memory and CPU are its own: the configuration
// comes from the environment exactly as `npm start` reads it. Tells the parent over IPC when startService
// has resolved (every endpoint's consumer is created and its pull loop running), and stops gracefully
// on SIGTERM.
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { initSodium } from '../src/crypto/sodium.ts';
import { startService } from '../src/service.ts';

export type ServiceChildMessage =
  | { type: 'ready'; endpoints: number }
  | { type: 'failed'; error: string }
  | { type: 'stopped' };

const send = (m: ServiceChildMessage) => process.send?.(m);

try {
  await initSodium();
  const config = loadConfig(process.env);
  const log = createLogger({ level: config.logLevel });
  const service = await startService(config, log);
  send({ type: 'ready', endpoints: [...(service.directory?.all() ?? [])].length });
  const stop = async () => {
    await service.stop();
    send({ type: 'stopped' });
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
  process.on('disconnect', () => void stop());
} catch (e) {
  send({ type: 'failed', error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
  process.exit(1);
}
