// --phase-prof: a V8 CPU profile of the service over one measured steady phase, nats-server's (Go pprof,
// from its profiling port, --nats-prof-port) over the same seconds, and what the phase delivered with the
// CPU each process spent, so bench/profile-table.ts can say how many µs a delivery took and where.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { Group } from './group.ts';
import { cpuTicksOf, TICKS } from './metering.ts';
import type { Receivers, ServiceProcess } from './processes.ts';

/** What `<phase>.json` beside the profiles holds. */
export interface PhaseFacts {
  phase: string;
  rate: number;
  seconds: number;
  deliveries: number;
  service_cpu_s: number;
  nats_cpu_s: number;
  /** Messages stored in the window, by stream (DELIVERIES_<n> summed as DELIVERIES_*). */
  stored: Record<string, number>;
}

/** Every stream's last sequence, the delivery shards summed as one. */
async function lastSeqs(jsm: JetStreamManager): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for await (const si of jsm.streams.list()) {
    const name = si.config.name.replace(/^DELIVERIES_\d+$/, 'DELIVERIES_*');
    out[name] = (out[name] ?? 0) + si.state.last_seq;
  }
  return out;
}

export async function phaseProfile(
  dir: string, natsPort: number | undefined, phase: string, seconds: number, service: ServiceProcess, natsPids: number[],
  /** Deliveries answered so far, in any phase. */
  answered: () => Promise<number>,
  jsm: JetStreamManager,
) {
  mkdirSync(dir, { recursive: true });
  await service.profileStart();
  const nats = natsPort === undefined ? undefined : fetch(`http://127.0.0.1:${natsPort}/debug/pprof/profile?seconds=${seconds}`).then(async (r) => {
    if (!r.ok) throw new Error(`nats-server profile: HTTP ${r.status}`);
    writeFileSync(join(dir, `${phase}.nats.pprof`), Buffer.from(await r.arrayBuffer()));
  });
  const stored0 = await lastSeqs(jsm);
  const answered0 = await answered();
  const t0 = performance.now();
  const service0 = cpuTicksOf(service.pids);
  const nats0 = cpuTicksOf(natsPids);
  return {
    async stop(rate: number): Promise<void> {
      const facts: PhaseFacts = {
        phase, rate, seconds: (performance.now() - t0) / 1000, deliveries: (await answered()) - answered0,
        service_cpu_s: (cpuTicksOf(service.pids) - service0) / TICKS, nats_cpu_s: (cpuTicksOf(natsPids) - nats0) / TICKS, stored: {},
      };
      const stored1 = await lastSeqs(jsm);
      facts.stored = Object.fromEntries(Object.entries(stored1).map(([k, v]) => [k, v - (stored0[k] ?? 0)]).filter(([, v]) => v !== 0));
      await service.profileStop(join(dir, phase));
      await nats;
      writeFileSync(join(dir, `${phase}.json`), JSON.stringify(facts));
    },
  };
}

/**
 * A throughput round (a burst, its length not known before it), profiled into `dir` as `phase` when `dir`
 * is set (--phase-prof); nats-server's profile is left out, as it is fetched for a length given in advance.
 */
export async function profiledRound<T extends { rate: number }>(dir: string | undefined, phase: string, group: Group, receivers: Receivers, run: () => Promise<T>): Promise<T> {
  const prof = dir && group.service ? await phaseProfile(dir, undefined, phase, 0, group.service, group.natsPids(), () => receivers.count('*'), await jetstreamManager(group.nc)) : undefined;
  const result = await run();
  await prof?.stop(result.rate);
  return result;
}
