import { loadConfig, ROLES } from '../../config.ts';
import { ConfigError, ErrorCode, HookstreamError, describe, isHookstreamError } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import { startLocalServers } from '../../local/index.ts';
import type { Command } from '../command.ts';

export const serve: Command = {
  name: 'serve',
  summary: 'Run the service (what `npm start` runs)',
  help: [
    'Options:',
    `  --roles LIST   comma-separated roles to run in this process (default: all): ${ROLES.join(', ')}`,
    '',
    'Configuration comes from environment variables; see the README. Stops gracefully on SIGTERM or SIGINT.',
  ].join('\n'),
  options: { roles: { type: 'string' } },
  async run({ values }) {
    const env = { ...process.env };
    if (typeof values['roles'] === 'string') env['HOOKSTREAM_ROLES'] = values['roles'];
    const given = loadConfig(env);
    if (given.roles.length === 0) throw new ConfigError('HOOKSTREAM_ROLES', 'no role to run');
    const log = createLogger({ level: given.logLevel });
    // Loaded here so that other commands do not pay for the whole service at start-up.
    const { startService, needsDatabase } = await import('../../service.ts');
    let service;
    let local;
    // Until the service runs, a signal ends start-up at once, as it would without handlers; the exit signals
    // the local servers started so far (src/local/child.ts), which shut down cleanly.
    const abort = (signal: NodeJS.Signals) => process.exit(signal === 'SIGINT' ? 130 : 143);
    process.once('SIGINT', abort).once('SIGTERM', abort);
    try {
      local = await startLocalServers(given, log, { database: needsDatabase(given.roles) });
      service = await startService(local.config, log);
    } catch (e) {
      await local?.stop();
      // Start-up failures are one line (main prints named errors without a stack), whatever threw them.
      throw isHookstreamError(e) ? e : new HookstreamError(ErrorCode.Internal, `start-up failed: ${describe(e)}`, { cause: e });
    } finally {
      process.removeListener('SIGINT', abort).removeListener('SIGTERM', abort);
    }
    await new Promise<void>((resolve) => {
      // Kept, not once: a repeat would otherwise kill the process mid-shutdown, and Ctrl-C under `npm start`
      // arrives twice (from the terminal and forwarded by npm), leaving the local servers running.
      let stopping = false;
      const shutdown = (signal: string) => {
        if (stopping) return;
        stopping = true;
        log.info('shutting down', { signal });
        resolve();
      };
      process.on('SIGTERM', () => shutdown('SIGTERM'));
      process.on('SIGINT', () => shutdown('SIGINT'));
    });
    await service.stop();
    await local.stop();
    log.info('stopped');
  },
};

