// Named errors with a code (as nats.js does): callers test the code, never the message text. This is
// the one vocabulary of failures; each surface maps it once: HTTP statuses in src/api/envelope.ts,
// admin reply codes in src/admin/protocol.ts, the CLI prints the message.

export const ErrorCode = {
  InvalidConfig: 'invalid_config',
  Unreachable: 'unreachable',
  NotFound: 'not_found',
  Conflict: 'conflict',
  ValidationFailed: 'validation_failed',
  BadRequest: 'bad_request',
  /** Working but not ready to answer yet (a read model catching up): retry shortly. */
  Unavailable: 'unavailable',
  Internal: 'internal_error',
  // Failures that only the HTTP edge meets.
  Unauthorized: 'unauthorized',
  MethodNotAllowed: 'method_not_allowed',
  PayloadTooLarge: 'payload_too_large',
  UnsupportedMediaType: 'unsupported_media_type',
  RateLimited: 'rate_limited',
  /** A tenant's quota (src/tenants/limits.ts): 429 with retry-after for a rate, 422 for a count. */
  QuotaExceeded: 'quota_exceeded',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export interface FieldError {
  field: string;
  message: string;
}

export class HookstreamError extends Error {
  readonly code: ErrorCode;
  readonly details: FieldError[];
  /** When a retry may succeed (rate limits, catching up); undefined when the caller should not retry as is. */
  readonly retryAfterSeconds: number | undefined;
  constructor(code: ErrorCode, message: string, opts: { cause?: unknown; details?: FieldError[]; retryAfterSeconds?: number } = {}) {
    super(message, { cause: opts.cause });
    this.name = 'HookstreamError';
    this.code = code;
    this.details = opts.details ?? [];
    this.retryAfterSeconds = opts.retryAfterSeconds;
  }
}

/** A configuration value is missing or wrong; the message names the variable. */
export class ConfigError extends HookstreamError {
  readonly variable: string;
  constructor(variable: string, message: string) {
    super(ErrorCode.InvalidConfig, `${variable}: ${message}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

/** A server the service needs (NATS, Postgres) cannot be reached; the message says how to start it. */
export class UnreachableError extends HookstreamError {
  constructor(message: string, cause?: unknown) {
    super(ErrorCode.Unreachable, message, { cause });
    this.name = 'UnreachableError';
  }
}

export const isHookstreamError = (e: unknown, code?: ErrorCode): e is HookstreamError =>
  e instanceof HookstreamError && (code === undefined || e.code === code);

export const badRequest = (message: string, details?: FieldError[]) => new HookstreamError(ErrorCode.BadRequest, message, details ? { details } : {});
export const notFound = (what: string) => new HookstreamError(ErrorCode.NotFound, `${what} not found`);
export const conflict = (message: string) => new HookstreamError(ErrorCode.Conflict, message);
export const invalid = (details: FieldError[]) =>
  new HookstreamError(ErrorCode.ValidationFailed, details.map((d) => `${d.field}: ${d.message}`).join('; '), { details });

/** The message of anything thrown, for logs; never includes a stack. */
export const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e));
