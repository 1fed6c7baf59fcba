// Structured JSON logs, one line per event. Callers pass ids and reasons, never secrets, keys or payloads.
import { createWriteStream } from 'node:fs';
export type Level = 'debug' | 'info' | 'warn' | 'error';
const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type Fields = Record<string, string | number | boolean | null | undefined>;

export interface Logger {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  child(fields: Fields): Logger;
}

/** Log output waiting for a slow stderr, beyond which new lines are dropped (and counted) instead. */
const MAX_PENDING_BYTES = 4 * 1024 * 1024;
let stderr: ((line: string) => void) | undefined;
let onDrop: (() => void) | undefined;

/** The active span's ids, set when tracing starts (src/telemetry/sdk.ts): with tracing off, one test per line. */
let traceFields: (() => Fields | undefined) | undefined;
export function logTraceFields(source: () => Fields | undefined): void {
  traceFields = source;
}

/** Count dropped log lines (`hookstream_log_lines_dropped_total`). */
export function onLogLineDropped(hook: () => void): void {
  onDrop = hook;
}

/**
 * Lines to stderr without blocking the event loop (issue 23): process.stderr writes to a pipe
 * synchronously, so a log collector that stops reading stopped deliveries. Writes go through the thread
 * pool, in order; past MAX_PENDING_BYTES waiting, lines are dropped and the next line written says how many.
 * Pending lines are written before the process exits on its own (the service never calls process.exit).
 */
function stderrLines(): (line: string) => void {
  if (stderr) return stderr;
  const out = createWriteStream('', { fd: 2, autoClose: false });
  out.on('error', () => {}); // stderr itself failing: nowhere left to say so
  let dropped = 0;
  stderr = (line) => {
    if (out.writableLength > MAX_PENDING_BYTES) {
      dropped++;
      onDrop?.();
      return;
    }
    if (dropped > 0) {
      out.write(`${JSON.stringify({ time: new Date().toISOString(), level: 'warn', msg: 'log lines dropped: stderr was not keeping up', dropped })}\n`);
      dropped = 0;
    }
    out.write(`${line}\n`);
  };
  return stderr;
}

export function createLogger(opts: { level?: Level; base?: Fields; write?: (line: string) => void } = {}): Logger {
  const min = ORDER[opts.level ?? 'info'];
  const write = opts.write ?? stderrLines();
  const base = opts.base ?? {};
  const emit = (level: Level, msg: string, fields?: Fields) => {
    if (ORDER[level] < min) return;
    // A line logged within a span names it (trace_id, span_id), so it leads to its trace.
    write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...base, ...fields, ...traceFields?.() }));
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => createLogger({ ...opts, base: { ...base, ...fields } }),
  };
}

export const silentLogger: Logger = createLogger({ write: () => {} });
