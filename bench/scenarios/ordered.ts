// Issue 21: ordered delivery per key. 100 endpoints with `ordering: key` (tenants o0..o9, the shape of the
// throughput_100 endpoints) take the same bursts as those, in alternating rounds so that the ratio
// compares runs made at nearly the same moment: each event carries one of 1,000 keys (data.userId). Then
// the same rounds with one key failing for ever (every event of it answered 500): its head waits for its
// retries and the rest of the key behind it; the figure is what that costs every other key.
import { throughputRun } from '../load.ts';
import type { Group } from '../group.ts';
import type { Size } from '../options.ts';
import { profiledRound } from '../phase-profile.ts';
import type { Receivers } from '../processes.ts';
import { FAILING } from '../receivers.ts';
import { fmt, median, progress, round, row, type Figures } from '../report.ts';

const KEYS = 1000;
const keyOf = (i: number) => i % KEYS;
/**
 * The events of the run, each keyed by its user; with `failing`, key 0's are a key of their own that
 * fails for ever (a key of the other rounds would hold their events behind its dead-set head).
 */
const keyedBody = (failing: boolean) => (phase: string, i: number) => {
  const fails = failing && keyOf(i) === 0;
  return JSON.stringify({ userId: fails ? 'user_failing' : `user_key${keyOf(i)}`, p: phase, i, t: performance.timeOrigin + performance.now(), ...(fails ? { fail: true } : {}) });
};
/** `service / nats` µs from a run's CPU line (`… per delivery service 163 µs, nats 46 µs`). */
const perDelivery = (cpu: string) => /service (\d+) µs, nats (\d+) µs/.exec(cpu)?.slice(1).join(' / ') ?? '?';
/** Events 0, 1000, 2000, … carry key 0. */
const failingEvents = (events: number) => Math.ceil(events / KEYS);

export async function orderedScenarios(group: Group, receivers: Receivers, size: Size, figures: Figures,
  /** --phase-prof: the service's CPU profile of each unordered and ordered round (`unordered<r>`, `ordered<r>`). */
  phaseProf?: string): Promise<void> {
  if (!keyedBody(true)('x', 0).includes(FAILING)) throw new Error('the failing marker is not the receivers\'');
  const per = Math.ceil(size.deliveries100 / size.rounds);
  const keyed = { body: keyedBody(false), failing: () => 0 };
  // Both kinds warmed: a first unordered round run cold (alone, `--only ordered`) was about a third
  // slower than the next, which made round 1's ratio read high.
  progress('ordered: warming up');
  await throughputRun(group, receivers, 5000, 'warmu', 10, 10, 't');
  await throughputRun(group, receivers, 5000, 'warmo', 10, 10, 'o', undefined, keyed);
  const plain: number[] = [];
  const ordered: number[] = [];
  const failing: number[] = [];
  const cpu = { plain: [] as string[], ordered: [] as string[] };
  for (let r = 0; r < size.rounds; r++) {
    progress(`ordered: round ${r + 1}/${size.rounds}: unordered, ordered, ordered with a failing key`);
    const u = await profiledRound(phaseProf, `unordered${r}`, group, receivers, () => throughputRun(group, receivers, per, `tpu-${r}`, 10, 10, 't'));
    const o = await profiledRound(phaseProf, `ordered${r}`, group, receivers, () => throughputRun(group, receivers, per, `tpo-${r}`, 10, 10, 'o', undefined, keyed));
    plain.push(u.rate);
    ordered.push(o.rate);
    cpu.plain.push(u.cpu);
    cpu.ordered.push(o.cpu);
    failing.push((await throughputRun(group, receivers, per, `tpf-${r}`, 10, 10, 'o', undefined, { body: keyedBody(true), failing: failingEvents })).rate);
  }
  figures['cpu_throughput_unordered_100'] = cpu.plain.join(' | ');
  figures['cpu_throughput_ordered_100'] = cpu.ordered.join(' | ');
  const ratios = ordered.map((o, i) => o / plain[i]!);
  const failRatios = failing.map((f, i) => f / ordered[i]!);
  figures['throughput_ordered_100'] = round(median(ordered), 0);
  figures['ratio_ordered_100'] = round(median(ratios), 3);
  figures['ratio_ordered_failing_key'] = round(median(failRatios), 3);
  row('throughput_ordered_100', `${fmt(median(ordered), 0)}/s`, `${KEYS} keys; unordered in the same rounds ${fmt(median(plain), 0)}/s`);
  row('ratio_ordered_100', fmt(median(ratios), 2), `ordered / unordered, median of rounds ${ratios.map((x) => fmt(x, 2)).join(' ')} (target ≥ 0.8)`);
  row('cpu_throughput_ordered_100', '', `µs per delivery, service / nats-server, unordered → ordered by round: ${cpu.plain.map((c, i) => `${perDelivery(c)} → ${perDelivery(cpu.ordered[i]!)}`).join(', ')}`);
  row('ratio_ordered_failing_key', fmt(median(failRatios), 2), `one key failing / none, the other keys' deliveries; rounds ${failRatios.map((x) => fmt(x, 2)).join(' ')} (target ≈ 1)`);
}
