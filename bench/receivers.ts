// Benchmark receivers: a child process holding many HTTP servers on loopback (one port stands for one
// endpoint host, so the sender keeps one connection pool per port). Each port answers as told: 'ok'
// (204), 'fail' (500) or 'hang' (accepts, reads the request, never answers); a body marked `"fail":true`
// is answered 500 on any port (the failing ordering key of issue 21). Every answered 2xx request
// is counted per phase (the `p` field of the body's data) with its publish-to-receipt latency (the `t`
// field, wall-clock milliseconds taken by the producer just before publishing).
// Driven over IPC by bench/processes.ts: messages are ReceiverCommand, answers are ReceiverReply.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type PortMode = 'ok' | 'fail' | 'hang';

export type ReceiverCommand =
  | { id: number; cmd: 'start'; ports: number }
  | { id: number; cmd: 'mode'; ports: number[]; mode: PortMode }
  | { id: number; cmd: 'count'; phase: string }
  | { id: number; cmd: 'stats'; phase: string; ports?: number[] }
  | { id: number; cmd: 'stop' };

export interface PhaseStats {
  count: number;
  p50: number;
  p99: number;
  max: number;
  first: number;
  last: number;
}

export type ReceiverReply =
  | { id: number; ok: true; ports?: number[]; count?: number; stats?: PhaseStats }
  | { id: number; ok: false; error: string };

interface Phase {
  count: number;
  /** Latencies by port index, so a scenario can ask for the healthy ports only. */
  latencies: Map<number, number[]>;
  first: number;
  last: number;
}

const now = () => performance.timeOrigin + performance.now();
const servers: Server[] = [];
const modes: PortMode[] = [];
const hanging = new Set<ServerResponse>();
const phases = new Map<string, Phase>();
/** Every 2xx answered, whatever its phase: `count` of the phase `*`. */
let answered = 0;

function phaseOf(name: string): Phase {
  let p = phases.get(name);
  if (!p) phases.set(name, (p = { count: 0, latencies: new Map(), first: 0, last: 0 }));
  return p;
}

/** Pulls `"p":"…"` and `"t":123.4` out of the body without a full parse (kept cheap: the receivers share the CPU). */
const PHASE = /"p":"([^"]*)"/;
const SENT = /"t":([0-9.]+)/;
export const FAILING = '"fail":true';

function listen(index: number): Promise<number> {
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = modes[index]!;
      if (mode === 'hang') { hanging.add(res); res.on('close', () => hanging.delete(res)); return; }
      const body = Buffer.concat(chunks).toString('latin1');
      // Issue 21: an event marked failing (its ordering key's head fails for ever) is answered 500 anywhere.
      if (mode === 'fail' || body.includes(FAILING)) { res.writeHead(500).end(); return; }
      res.writeHead(204).end();
      const at = now();
      const phase = phaseOf(PHASE.exec(body)?.[1] ?? '');
      phase.count++;
      answered++;
      if (phase.first === 0) phase.first = at;
      phase.last = at;
      const sent = SENT.exec(body)?.[1];
      if (sent !== undefined) {
        let list = phase.latencies.get(index);
        if (!list) phase.latencies.set(index, (list = []));
        list.push(at - Number(sent));
      }
    });
  });
  server.keepAliveTimeout = 60_000;
  servers.push(server);
  modes[index] = 'ok';
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function stats(name: string, ports?: number[]): PhaseStats {
  const p = phaseOf(name);
  const lists = ports ? ports.map((i) => p.latencies.get(i) ?? []) : [...p.latencies.values()];
  const all = lists.flat().sort((a, b) => a - b);
  return { count: p.count, p50: percentile(all, 0.5), p99: percentile(all, 0.99), max: all.at(-1) ?? 0, first: p.first, last: p.last };
}

async function handle(m: ReceiverCommand): Promise<ReceiverReply> {
  switch (m.cmd) {
    case 'start': {
      const ports: number[] = [];
      for (let i = 0; i < m.ports; i++) ports.push(await listen(i));
      return { id: m.id, ok: true, ports };
    }
    case 'mode':
      for (const i of m.ports) modes[i] = m.mode;
      if (m.mode !== 'hang') {
        // Black-holed requests on ports that recover are cut, as a restarted host would.
        for (const res of hanging) res.destroy();
        hanging.clear();
      }
      return { id: m.id, ok: true };
    case 'count':
      return { id: m.id, ok: true, count: m.phase === '*' ? answered : phaseOf(m.phase).count };
    case 'stats':
      return { id: m.id, ok: true, stats: stats(m.phase, m.ports) };
    case 'stop':
      for (const res of hanging) res.destroy();
      for (const s of servers) s.closeAllConnections();
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
      setImmediate(() => process.exit(0));
      return { id: m.id, ok: true };
  }
}

if (process.send) {
  process.on('message', (m: ReceiverCommand) => {
    handle(m).then(
      (reply) => process.send!(reply),
      (e: unknown) => process.send!({ id: m.id, ok: false, error: e instanceof Error ? e.message : String(e) } satisfies ReceiverReply),
    );
  });
  process.on('disconnect', () => process.exit(0));
}
