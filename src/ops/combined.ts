// The ops answers of a process whose roles run in two threads (src/supervisor/api-thread.ts): one listener,
// one answer covering both. /healthz is ok when every part is; /readyz is ready when every part is, each
// check once (ok when ok in every part, its details named by part); /metrics is one exposition, each
// family once and each series once, the parts' values added up (counters and histograms of the same
// series are counts of one process; gauges are set by the one part that owns them).
import type { CheckResult } from './readiness.ts';
import { exposition, json, type Ops, type OpsResponse } from './ops.ts';

export interface OpsPart {
  /** Prefixed to a check's detail from this part ("api thread"); none for the main one. */
  name?: string;
  ops: Ops;
}

interface ReadyBody {
  status: string;
  checks: CheckResult[];
}

function mergeReadiness(parts: { name: string | undefined; res: OpsResponse }[]): OpsResponse {
  const checks = new Map<string, CheckResult>();
  for (const { name, res } of parts) {
    const body = JSON.parse(res.body) as ReadyBody;
    for (const c of body.checks) {
      const detail = c.detail === undefined ? undefined : name ? `${name}: ${c.detail}` : c.detail;
      const seen = checks.get(c.name);
      if (!seen) { checks.set(c.name, { name: c.name, ok: c.ok, ...(detail === undefined ? {} : { detail }) }); continue; }
      const details = [seen.detail, detail].filter((d): d is string => d !== undefined);
      checks.set(c.name, { name: c.name, ok: seen.ok && c.ok, ...(details.length ? { detail: details.join('; ') } : {}) });
    }
  }
  const ready = parts.every((p) => p.res.status === 200) && [...checks.values()].every((c) => c.ok);
  return json(ready ? 200 : 503, { status: ready ? 'ready' : 'not_ready', checks: [...checks.values()] });
}

/** A sample line's series (name and labels) and value: `name{a="b"} 12`. */
function splitSample(line: string): [string, number] | undefined {
  const at = line.lastIndexOf(' ');
  if (at <= 0) return undefined;
  const value = Number(line.slice(at + 1));
  return Number.isNaN(value) ? undefined : [line.slice(0, at), value];
}

/** Prometheus text expositions of the parts as one: each family's HELP and TYPE once, equal series added up. */
export function mergeExpositions(texts: string[]): string {
  const families = new Map<string, { head: string[]; samples: Map<string, number> }>();
  for (const text of texts) {
    let current: { head: string[]; samples: Map<string, number> } | undefined;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const declared = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (declared) {
        const name = declared[2]!;
        let f = families.get(name);
        if (!f) families.set(name, (f = { head: [], samples: new Map() }));
        if (!f.head.some((h) => h.startsWith(`# ${declared[1]} `))) f.head.push(line);
        current = f;
        continue;
      }
      if (line.startsWith('#')) continue;
      const sample = splitSample(line);
      if (!sample) continue;
      // A family's samples follow its HELP and TYPE (src/metrics.ts renders them so).
      if (!current) families.set(sample[0], (current = { head: [], samples: new Map() }));
      current.samples.set(sample[0], (current.samples.get(sample[0]) ?? 0) + sample[1]);
    }
  }
  const out: string[] = [];
  for (const f of families.values()) {
    out.push(...f.head);
    for (const [series, value] of f.samples) out.push(`${series} ${value}`);
  }
  return out.join('\n') + '\n';
}

/** One Ops over `parts`; a part that fails to answer makes /healthz and /readyz fail, and is left out of /metrics. */
export function combineOps(parts: OpsPart[]): Ops {
  const ask = (path: string) => Promise.all(parts.map(async (p) => {
    try {
      return { name: p.name, res: await p.ops.handle(path) };
    } catch (e) {
      return { name: p.name, res: undefined, error: e instanceof Error ? e.message : String(e) };
    }
  }));
  return {
    async handle(path) {
      if (path !== '/healthz' && path !== '/readyz' && path !== '/metrics') return parts[0]?.ops.handle(path);
      const answers = await ask(path);
      if (path === '/metrics') {
        const texts = answers.flatMap((a) => (a.res?.status === 200 ? [a.res.body] : []));
        return exposition(mergeExpositions(texts));
      }
      const failed = answers.find((a) => !a.res);
      if (path === '/healthz') {
        const down = answers.find((a) => !a.res || a.res.status !== 200);
        return down ? json(503, { status: 'down', detail: `${down.name ?? 'main thread'}: ${'error' in down ? down.error : 'not healthy'}` }) : json(200, { status: 'ok' });
      }
      return mergeReadiness(answers.map((a) => ({
        name: a.name,
        res: a.res ?? json(503, { status: 'not_ready', checks: [{ name: 'roles', ok: false, detail: failed && 'error' in failed ? failed.error : 'no answer' }] }),
      })));
    },
  };
}
