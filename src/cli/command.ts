// What a CLI command is: a name, help text, typed options parsed by node:util's parseArgs, and a run
// function. Commands print through Output, so every command has --json for free.
import type { ParseArgsOptionsConfig } from 'node:util';
import { isTenantId, TENANT_ID_RULE, type TenantId } from '../domain/ids.ts';

export interface Output {
  readonly json: boolean;
  /** Print data: as one JSON document with --json, otherwise as the human text. */
  data(value: unknown, human: () => string): void;
  /** A progress line on stderr (never with --json). */
  progress(done: number, total: number, label: string): void;
  info(line: string): void;
}

export type OptionValues = Record<string, string | boolean | string[] | boolean[] | undefined>;

export interface Command {
  /** Words that select it, e.g. "endpoints create". */
  name: string;
  summary: string;
  /** Usage line and details shown by --help. */
  help: string;
  options?: ParseArgsOptionsConfig;
  /** How many positional arguments it takes (default 0). */
  positionals?: { min: number; max: number; names: string };
  run(args: { values: OptionValues; positionals: string[]; out: Output }): Promise<void>;
}

/** A wrong invocation: printed with the command's usage, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export function requireString(values: OptionValues, name: string): string {
  const v = values[name];
  if (typeof v !== 'string' || v.length === 0) throw new UsageError(`--${name} is required`);
  return v;
}

/** --tenant, checked as every tenant id is (it becomes a NATS subject token). */
export function requireTenant(values: OptionValues): TenantId {
  const tenant = requireString(values, 'tenant');
  if (!isTenantId(tenant)) throw new UsageError(`--tenant must be ${TENANT_ID_RULE}`);
  return tenant;
}

/** A table of rows for people: columns padded to the widest cell. */
export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n');
}
