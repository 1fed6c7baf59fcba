// The bench's command line: scenarios, sizes and options, checked once into an Options value.
import { parseArgs } from 'node:util';

// 'one' and 'maxrate' measure the common case of issue 13: events that reach one or two endpoints.
export const SCENARIOS = ['throughput', 'ordered', 'one', 'maxrate', 'latency', 'isolation', 'fanout', 'scale'] as const;
export type Scenario = (typeof SCENARIOS)[number];

export interface Size {
  /** Deliveries per throughput run (and per ceiling run). */
  deliveries100: number;
  deliveries5000: number;
  /** Alternating ceiling/service rounds the deliveries are split into. */
  rounds: number;
  /** Seconds of each steady-rate phase (latency, isolation), after a warm-up second. */
  steadySeconds: number;
  /** Longer than the pull loops' expiry, so every loop's re-pull and heartbeats fall inside the window. */
  idleSeconds: number;
  fanouts: number;
  /** Latency phases are repeated this often and the median reported, so one stall does not decide a figure. */
  latencyReps: number;
  /** Seconds of each step of the max_rate_1to1 sweep, after a warm-up second. */
  sweepSeconds: number;
}

export const SIZES: Record<'short' | 'long', Size> = {
  short: { deliveries100: 30_000, deliveries5000: 30_000, rounds: 3, steadySeconds: 6, idleSeconds: 35, fanouts: 3, latencyReps: 3, sweepSeconds: 4 },
  long: { deliveries100: 150_000, deliveries5000: 100_000, rounds: 5, steadySeconds: 30, idleSeconds: 130, fanouts: 7, latencyReps: 3, sweepSeconds: 10 },
};

export const USAGE = `usage: npm run bench -- [options]

  --size short|long      short fits in about two minutes, long in about ten (default: short)
  --json                 write one JSON object with every figure to stdout (the table still goes to stderr)
  --only LIST            comma-separated scenarios to run: ${SCENARIOS.join(', ')} (default: all);
                         one: throughput_1to1, ratio_1to1, throughput_2; maxrate: the max_rate_1to1 sweep;
                         ordered: throughput_ordered_100 beside throughput_100, and with one key failing
  --roles LIST           service roles to run (default: router,delivery,deadletter)
  --ports N              receiver ports, i.e. endpoint hosts (default: 100)
  --ceiling-concurrency N  POSTs in flight in the ceiling loop (default: 256)
  --rate N               events per second of the latency and isolation phases (default: 1000)
  --sweep LIST           event rates of the max_rate_1to1 sweep (default: 1000,2000,3000,4000,5000,6000,8000)
  --split                run the service as two processes: the delivery role, and the other roles
  --cluster              also run the throughput_100 rounds on a three-node nats-server cluster on loopback
                         with HOOKSTREAM_REPLICAS=3: throughput_100_r3, ratio_100_r3
  --cpu-prof DIR         write V8 CPU profiles of the service process into DIR
  --phase-prof DIR       write a V8 CPU profile of the service for each measured phase (latency
                         repetitions, sweep steps, the service's throughput rounds: tp100-<r>, tp1-<r>,
                         tp5000-<r>, unordered<r>, ordered<r>) into DIR as <phase>.cpuprofile, with <phase>.json: its
                         deliveries and the CPU of the service and nats-server (read with bench/profile-table.ts)
  --nats-prof-port PORT  with --phase-prof, also fetch nats-server's CPU profile of each phase as
                         <phase>.nats.pprof from this profiling port (a NATS_SERVER_BIN that adds --profile PORT)
  --keep                 keep the service logs, NATS stores and databases (printed at the end)
  -h, --help             this text

The service's configuration comes from the environment as for \`npm start\` (e.g.
HOOKSTREAM_DELIVERY_SHARDS, HOOKSTREAM_MAX_IN_FLIGHT); NATS_URL and DATABASE_URL are set by the bench.
Postgres: TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres). nats-server: NATS_SERVER_BIN.`;

export class UsageError extends Error {}

export interface Options {
  size: 'short' | 'long';
  json: boolean;
  only: Set<Scenario>;
  roles: string;
  ports: number;
  ceilingConcurrency: number;
  rate: number;
  sweep: number[];
  cpuProf: string | undefined;
  phaseProf: string | undefined;
  natsProfPort: number | undefined;
  keep: boolean;
  split: boolean;
  cluster: boolean;
}

function positiveInt(name: string, raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > max) throw new UsageError(`--${name} expects a whole number from 1 to ${max}, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

export function parseOptions(argv: string[]): Options | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        size: { type: 'string' },
        json: { type: 'boolean' },
        only: { type: 'string' },
        roles: { type: 'string' },
        ports: { type: 'string' },
        'ceiling-concurrency': { type: 'string' },
        rate: { type: 'string' },
        sweep: { type: 'string' },
        'cpu-prof': { type: 'string' },
        'phase-prof': { type: 'string' },
        'nats-prof-port': { type: 'string' },
        keep: { type: 'boolean' },
        split: { type: 'boolean' },
        cluster: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message.replace(/\. To specify.*$/s, '') : String(e));
  }
  const v = parsed.values;
  if (v.help) return 'help';
  const size = v.size ?? 'short';
  if (size !== 'short' && size !== 'long') throw new UsageError(`--size expects short or long, got ${JSON.stringify(size)}`);
  const only = new Set<Scenario>();
  for (const s of (v.only ?? SCENARIOS.join(',')).split(',').map((x) => x.trim()).filter(Boolean)) {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new UsageError(`--only: unknown scenario ${JSON.stringify(s)}; scenarios are ${SCENARIOS.join(', ')}`);
    only.add(s as Scenario);
  }
  if (only.size === 0) throw new UsageError('--only names no scenario');
  if (v['nats-prof-port'] !== undefined && v['phase-prof'] === undefined) throw new UsageError('--nats-prof-port needs --phase-prof DIR');
  const roles = v.roles ?? 'router,delivery,deadletter';
  for (const r of ['router', 'delivery']) if (!roles.split(',').includes(r)) throw new UsageError(`--roles must include ${r}: the bench measures delivery`);
  return {
    size, json: v.json ?? false, only, roles,
    ports: positiveInt('ports', v.ports, 100, 1000),
    ceilingConcurrency: positiveInt('ceiling-concurrency', v['ceiling-concurrency'], 256, 10_000),
    rate: positiveInt('rate', v.rate, 1000, 100_000),
    sweep: (v.sweep ?? '1000,2000,3000,4000,5000,6000,8000').split(',').map((x) => positiveInt('sweep', x.trim(), 1000, 100_000)),
    cpuProf: v['cpu-prof'],
    phaseProf: v['phase-prof'],
    natsProfPort: v['nats-prof-port'] === undefined ? undefined : positiveInt('nats-prof-port', v['nats-prof-port'], 0, 65_535),
    keep: v.keep ?? false,
    split: v.split ?? false,
    cluster: v.cluster ?? false,
  };
}
