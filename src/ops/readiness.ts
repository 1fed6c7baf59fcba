// Readiness: can this process do its work right now? NATS answers, every stream the service needs exists,
// Postgres answers (when the process uses it), and the endpoint projection is caught up within a bound
// (when the process reads it): no endpoint event stored more than `projectionLagMs` ago is unapplied.
// Each check has its own deadline, so a hung dependency makes /readyz say so instead of hanging too.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { ADVISORIES_STREAM } from '../../streams/dead-letters.ts';
import { ATTEMPTS_STREAM } from '../../streams/attempts.ts';
import { deliveryStream } from '../../streams/deliveries.ts';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { EVENTS_STREAM, partitionStream } from '../../streams/events.ts';
import { REJECTED_STREAM } from '../../streams/rejected.ts';
import { OPS_STREAM } from '../../streams/ops.ts';
import { ENDPOINT_HEALTH_STREAM } from '../../streams/endpoint-health.ts';
import { ROUTED_STREAM } from '../../streams/routed.ts';
import { Projection, readCheckpoint } from '../../projections/checkpoint.ts';
import { describe } from '../errors.ts';

export interface CheckResult {
  name: 'nats' | 'streams' | 'postgres' | 'projection' | 'directory' | 'router' | 'startup' | 'roles';
  ok: boolean;
  detail?: string;
}

export interface Readiness {
  ready: boolean;
  checks: CheckResult[];
}

export interface ReadinessDeps {
  nc: NatsConnection;
  jsm: JetStreamManager;
  /** Absent when the process runs no role that uses Postgres. */
  orm: MikroORM | undefined;
  shards: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: the partition streams expected too. */
  partitions?: number;
  /** Whether this process serves reads from the endpoint projection (the api role). */
  checkProjection: boolean;
  /** Largest tolerated age of the oldest unapplied endpoint event (default 10 s). */
  projectionLagMs?: number;
  /** The process's endpoint directory (router and delivery roles), once started. */
  directory?: () => { lagSeconds(): number } | undefined;
  /** The process's router, once started: events waiting to be routed again are shown (they do not fail readiness). */
  router?: () => { waiting(): { events: number; longestMs: number } } | undefined;
  /** Roles of this process down at the moment, being started again (src/supervisor/roles.ts). */
  roles?: () => string[];
  /** Deadline of each check (default 2 s). */
  timeoutMs?: number;
}

export function requiredStreams(shards: number, partitions = 0): string[] {
  return [
    ENDPOINTS_STREAM, EVENTS_STREAM, ...Array.from({ length: partitions }, (_, p) => partitionStream(p)), ...Array.from({ length: shards }, (_, i) => deliveryStream(i)),
    ADVISORIES_STREAM, ATTEMPTS_STREAM, REJECTED_STREAM, OPS_STREAM, ENDPOINT_HEALTH_STREAM, ROUTED_STREAM,
  ];
}

function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms); });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

export function createReadiness(deps: ReadinessDeps): () => Promise<Readiness> {
  const timeoutMs = deps.timeoutMs ?? 2000;
  const lagMs = deps.projectionLagMs ?? 10_000;

  const run = async (name: CheckResult['name'], fn: () => Promise<string | undefined>): Promise<CheckResult> => {
    try {
      const problem = await withDeadline(fn(), timeoutMs, name);
      return problem === undefined ? { name, ok: true } : { name, ok: false, detail: problem };
    } catch (e) {
      return { name, ok: false, detail: describe(e) };
    }
  };

  const nats = () => run('nats', async () => {
    if (deps.nc.isClosed()) return 'connection closed';
    await deps.nc.rtt();
    return undefined;
  });

  const streams = () => run('streams', async () => {
    const present = new Set<string>();
    for await (const name of deps.jsm.streams.names()) present.add(name);
    const missing = requiredStreams(deps.shards, deps.partitions).filter((s) => !present.has(s));
    return missing.length ? `missing ${missing.join(', ')}` : undefined;
  });

  const postgres = (orm: MikroORM) => run('postgres', async () => {
    await orm.em.fork().execute('select 1');
    return undefined;
  });

  const projection = (orm: MikroORM) => run('projection', async () => {
    const applied = await readCheckpoint(orm, Projection.Endpoints);
    const last = (await deps.jsm.streams.info(ENDPOINTS_STREAM)).state.last_seq;
    if (applied >= last) return undefined;
    // Behind: how old is the oldest event not applied yet?
    const query = { seq: applied + 1, next_by_subj: 'endpoints.>' }; // a variable: the client types only seq/last_by_subj
    const oldest = await deps.jsm.streams.getMessage(ENDPOINTS_STREAM, query);
    const age = oldest ? Date.now() - oldest.time.getTime() : 0;
    return age > lagMs ? `${last - applied} endpoint event(s) unapplied, the oldest for ${Math.round(age / 1000)} s` : undefined;
  });

  // Behind by more than the projection's bound: its folds are being replaced, or NATS cannot answer.
  const directory = () => run('directory', async () => {
    const lag = deps.directory?.()?.lagSeconds() ?? 0;
    return lag * 1000 > lagMs ? `endpoint directory behind for ${Math.round(lag)} s` : undefined;
  });

  // Informational: NATS's trouble shows in the nats and streams checks; this says what it holds up.
  const router = (): CheckResult => {
    const w = deps.router?.()?.waiting();
    return w && w.events > 0
      ? { name: 'router', ok: true, detail: `${w.events} event(s) waiting to be routed again after NATS failures, the longest for ${Math.round(w.longestMs / 1000)} s` }
      : { name: 'router', ok: true };
  };

  const roles = (down: string[]): CheckResult =>
    (down.length ? { name: 'roles', ok: false, detail: `down, being started again: ${down.join(', ')}` } : { name: 'roles', ok: true });

  return async () => {
    const checks = await Promise.all([
      nats(),
      streams(),
      ...(deps.orm ? [postgres(deps.orm)] : []),
      ...(deps.orm && deps.checkProjection ? [projection(deps.orm)] : []),
      ...(deps.directory ? [directory()] : []),
      ...(deps.router ? [router()] : []),
      ...(deps.roles ? [roles(deps.roles())] : []),
    ]);
    return { ready: checks.every((c) => c.ok), checks };
  };
}
