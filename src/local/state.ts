// What `serve` keeps in HOOKSTREAM_DATA_DIR about the local servers it runs, readable by this OS user only:
// their passwords (kept, since Postgres and the JetStream store outlive a run) and, while it runs, where
// they listen, so the CLI finds them with no configuration.
import { randomBytes } from 'node:crypto';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';

/** Passwords of the local servers: Postgres's `postgres` user and every `$HOOKSTREAM_NATS_…_PASSWORD` of nats.conf. */
export interface LocalCredentials {
  postgres: string;
  nats: Record<string, string>;
}

/** Written once the local servers answer, removed when `serve` stops them. URLs carry no password. */
export interface RunningServers {
  /** The `serve` process that started them. */
  pid: number;
  nats?: { url: string; pid: number };
  postgres?: { url: string; pid: number };
}

export const CREDENTIALS_FILE = 'local-credentials.json';
export const RUNNING_FILE = 'local-servers.json';

/** A password nats-server reads from its environment as a string: it must start with a letter. */
export const newPassword = (): string => `p${randomBytes(16).toString('hex')}`;

const pathOf = (dataDir: string, file: string) => join(resolve(dataDir), file);

async function readJson(path: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as unknown;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`cannot read ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** Written aside and renamed into place: a reader never sees half a file. */
async function writeJson(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(value, null, 2) + '\n', { mode: 0o600 });
  await rename(tmp, path);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export async function readCredentials(dataDir: string): Promise<LocalCredentials | undefined> {
  const v = await readJson(pathOf(dataDir, CREDENTIALS_FILE));
  if (!isObject(v) || typeof v['postgres'] !== 'string' || !isObject(v['nats'])) return undefined;
  const nats: Record<string, string> = {};
  for (const [k, p] of Object.entries(v['nats'])) if (typeof p === 'string') nats[k] = p;
  return { postgres: v['postgres'], nats };
}

/** The stored credentials, with a new password for each nats.conf variable not yet among them. */
export async function ensureCredentials(dataDir: string, natsVariables: readonly string[]): Promise<LocalCredentials> {
  const existing = await readCredentials(dataDir);
  const creds: LocalCredentials = existing ?? { postgres: newPassword(), nats: {} };
  const missing = natsVariables.filter((v) => creds.nats[v] === undefined);
  for (const v of missing) creds.nats[v] = newPassword();
  if (!existing || missing.length > 0) await writeJson(pathOf(dataDir, CREDENTIALS_FILE), creds);
  return creds;
}

const server = (v: unknown): { url: string; pid: number } | undefined =>
  isObject(v) && typeof v['url'] === 'string' && Number.isInteger(v['pid']) ? { url: v['url'], pid: v['pid'] as number } : undefined;

export async function readRunning(dataDir: string): Promise<RunningServers | undefined> {
  const v = await readJson(pathOf(dataDir, RUNNING_FILE));
  if (!isObject(v) || !Number.isInteger(v['pid'])) return undefined;
  const nats = server(v['nats']);
  const postgres = server(v['postgres']);
  return { pid: v['pid'] as number, ...(nats ? { nats } : {}), ...(postgres ? { postgres } : {}) };
}

export const writeRunning = (dataDir: string, running: RunningServers): Promise<void> => writeJson(pathOf(dataDir, RUNNING_FILE), running);

export const removeRunning = (dataDir: string): Promise<void> => rm(pathOf(dataDir, RUNNING_FILE), { force: true });

/** Whether a process with this id exists (signal 0 checks without sending anything). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, under another user (postgres, when we run as root).
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
