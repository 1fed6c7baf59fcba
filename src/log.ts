// Structured JSON logs, one line per event. Callers pass ids and reasons, never secrets, keys or payloads.
import { write } from 'node:fs';
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
/** A full non-blocking pipe is tried again this often. */
const FULL_PIPE_RETRY_MS = 10;
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
 * pool, in order, the lines waiting meanwhile in one write; past MAX_PENDING_BYTES waiting, lines are
 * dropped and the next line written says how many. Pending lines are written before the process exits on
 * its own (the service never calls process.exit). Node makes fd 2 non-blocking once anything touches
 * process.stderr (a warning, the CLI's own lines, OpenTelemetry's SDK at import), so a full pipe can
 * answer EAGAIN: the rest of that write is tried again shortly, never given up (issue 20).
 */
function stderrLines(): (line: string) => void {
  if (stderr) return stderr;
  let queued: string[] = [];
  let pendingBytes = 0;
  let writing = false;
  let failed = false;
  let dropped = 0;
  const flush = () => {
    if (writing || failed || queued.length === 0) return;
    writing = true;
    const buf = Buffer.from(queued.join(''));
    queued = [];
    const rest = (offset: number): void => write(2, buf, offset, buf.length - offset, null, (e, n) => {
      if (e?.code === 'EAGAIN') return void setTimeout(rest, FULL_PIPE_RETRY_MS, offset);
      if (e) { failed = true; return; } // stderr itself failing: nowhere left to say so
      if (offset + n < buf.length) return rest(offset + n);
      pendingBytes -= buf.length;
      writing = false;
      flush();
    });
    rest(0);
  };
  const enqueue = (line: string) => {
    queued.push(`${line}\n`);
    pendingBytes += Buffer.byteLength(line) + 1;
    flush();
  };
  stderr = (line) => {
    if (pendingBytes > MAX_PENDING_BYTES) {
      dropped++;
      onDrop?.();
      return;
    }
    if (dropped > 0) {
      enqueue(JSON.stringify({ time: new Date().toISOString(), level: 'warn', msg: 'log lines dropped: stderr was not keeping up', dropped }));
      dropped = 0;
    }
    enqueue(line);
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
