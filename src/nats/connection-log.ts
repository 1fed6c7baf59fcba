// One line when the service loses NATS and one when it is back (with how long it was away): the rest of
// the service rides out a restart by itself, but an operator reading the log should see that it happened.
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../log.ts';

export function logConnectionChanges(nc: NatsConnection, log: Logger): void {
  let lostAt: number | undefined;
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect' && lostAt === undefined) {
        lostAt = performance.now();
        log.warn('lost the connection to NATS; reconnecting', { server: s.server });
      } else if (s.type === 'reconnect') {
        const awayMs = lostAt === undefined ? 0 : Math.round(performance.now() - lostAt);
        lostAt = undefined;
        log.info('reconnected to NATS', { server: s.server, away_ms: awayMs });
      }
    }
  })().catch(() => {});
}
