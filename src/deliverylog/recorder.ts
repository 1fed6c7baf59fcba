// The delivery role's half of the delivery log: each attempt's entry is kept in memory and the entries of
// BATCH_MS go out as one ATTEMPT_LOG message (streams/attempt-log.ts). On the hot path an attempt costs an
// object and an array push; the JSON and the publish are shared by the batch (a few µs per entry at most),
// and nothing waits for JetStream's answer. Entries of a process killed within BATCH_MS of their attempt
// are lost to the log (the deliveries themselves are not): the log is for operators, not for delivery.
import { ATTEMPT_LOG_SUBJECT, type AttemptLogBatch, type AttemptLogEntry } from '../../streams/attempt-log.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';

export interface AttemptLogRecorder {
  record(entry: AttemptLogEntry): void;
  /** Write what is waiting now (the delivery role is stopping). */
  flush(): void;
}

const BATCH_MS = 50;
/** Entries in one message at most (each under ~1.5 KB with its body prefix: far below the 1 MB limit). */
const MAX_ENTRIES = 500;
const WARN_EVERY_MS = 60_000;

export function createAttemptLogRecorder(deps: { publisher: AckedPublisher; log: Logger; batchMs?: number }): AttemptLogRecorder {
  let entries: AttemptLogEntry[] = [];
  let timer: NodeJS.Timeout | undefined;
  let lastWarned = -Infinity;
  const warn = (e: unknown) => {
    if (performance.now() - lastWarned < WARN_EVERY_MS) return;
    lastWarned = performance.now();
    deps.log.warn('could not write attempts to the delivery log', { reason: describe(e) });
  };

  function flush(): void {
    clearTimeout(timer);
    timer = undefined;
    if (entries.length === 0) return;
    const batch: AttemptLogBatch = { v: 1, entries };
    entries = [];
    deps.publisher.publish(ATTEMPT_LOG_SUBJECT, JSON.stringify(batch)).catch(warn);
  }

  return {
    record(entry) {
      if (entries.push(entry) >= MAX_ENTRIES) return flush();
      timer ??= setTimeout(flush, deps.batchMs ?? BATCH_MS);
    },
    flush,
  };
}
