// The load: the producer (bursts and steady rates of events), the ceiling loop (signed POSTs to the same
// receivers from one process, no queue) and the throughput rounds that compare the service with it.
import { Agent } from 'undici';
import type { JetStreamClient } from '@nats-io/jetstream';
import { signatureHeader, signingKeyObject } from '../src/domain/signature.ts';
import type { EndpointPlan, Group } from './group.ts';
import { cpuMeter } from './metering.ts';
import type { Options } from './options.ts';
import { profiledRound } from './phase-profile.ts';
import { waitForCount, type Receivers } from './processes.ts';
import { fmt, median, progress } from './report.ts';
import { sleep, wallNow } from './time.ts';

export const eventBody = (phase: string, i: number) => JSON.stringify({ userId: `user_bench${i}`, p: phase, i, t: wallNow() });

/** Publish as fast as JetStream takes them, `window` publishes awaiting their ack at once. */
export async function publishBurst(js: JetStreamClient, subjects: (i: number) => string, count: number, phase: string, window = 256, body = eventBody): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: window }, async () => {
    for (let i = next++; i < count; i = next++) await js.publish(subjects(i), body(phase, i));
  }));
}

/** Publish at a steady rate; returns each publish's latency (call to stored ack) in ms. */
export async function publishSteady(js: JetStreamClient, subjects: (i: number) => string, rate: number, seconds: number, phase: string): Promise<number[]> {
  const latencies: number[] = [];
  const pending = new Set<Promise<void>>();
  const start = performance.now();
  const total = Math.round(rate * seconds);
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate));
    for (; sent < due; sent++) {
      const t0 = performance.now();
      const p = js.publish(subjects(sent), eventBody(phase, sent)).then(() => { latencies.push(performance.now() - t0); });
      pending.add(p);
      void p.finally(() => pending.delete(p));
    }
    await sleep(1);
  }
  await Promise.all(pending);
  return latencies;
}

// ---------------------------------------------------------------------------------------------------
// Ceiling: sign and POST the same bodies to the same receivers from one loop, no queue.

export async function ceiling(receivers: Receivers, endpoints: EndpointPlan[], deliveries: number, concurrency: number, phase = 'ceiling'): Promise<number> {
  const agent = new Agent({ connections: 128, pipelining: 1, allowH2: false });
  const keys = endpoints.map(() => signingKeyObject(`whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`));
  const urls = endpoints.map((e) => new URL(e.url));
  let next = 0;
  let failed = 0;
  const started = wallNow();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < deliveries; i = next++) {
      const e = i % endpoints.length;
      const body = Buffer.from(JSON.stringify({ type: 'user.updated', data: JSON.parse(eventBody(phase, i)) as unknown }));
      const now = Date.now();
      const ts = Math.floor(now / 1000);
      const id = `msg_ceiling${i}`;
      const res = await agent.request({
        origin: urls[e]!.origin, path: urls[e]!.pathname, method: 'POST', body,
        headers: {
          'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(ts),
          'webhook-signature': signatureHeader([keys[e]!], id, ts, body), 'service-webhook-event': 'user.updated',
          'user-agent': 'hookstream-bench',
        },
      });
      await res.body.dump();
      if (res.statusCode >= 300) failed++;
    }
  }));
  const elapsed = (wallNow() - started) / 1000;
  await agent.close();
  if (failed) throw new Error(`ceiling: ${failed} POSTs failed`);
  await waitForCount(receivers, phase, deliveries, 10_000, phase);
  return deliveries / elapsed;
}

// ---------------------------------------------------------------------------------------------------
// The service's throughput, alone and beside the ceiling

/**
 * A burst of events, each reaching `perTenant` endpoints: by default `user.updated` to every endpoint of a
 * tenant; `subject` picks another shape (e.g. one endpoint per event), `perTenant` then being its fan-out.
 */
export async function throughputRun(group: Group, receivers: Receivers, deliveries: number, label: string, tenants: number, perTenant: number, prefix = 't',
  subject: (i: number) => string = (i) => `events.${prefix}${i % tenants}.user.updated`,
  /** Issue 21: the bodies, and how many of the events are never answered 2xx (a failing key's). */
  keyed?: { body: (phase: string, i: number) => string; failing: (events: number) => number }): Promise<{ rate: number; cpu: string }> {
  const events = Math.ceil(deliveries / perTenant);
  const total = (events - (keyed?.failing(events) ?? 0)) * perTenant;
  const meter = cpuMeter(group, receivers);
  const started = wallNow();
  // A failed publish (a timed-out ack, on a cluster) ends the run with its error, not as an unhandled rejection.
  await Promise.all([publishBurst(group.js, subject, events, label, 256, keyed?.body), waitForCount(receivers, label, total, 300_000, label)]);
  const cpu = meter(total);
  const stats = await receivers.stats(label);
  return { rate: total / ((stats.last - started) / 1000), cpu };
}

/**
 * Ceiling and service throughput in alternating rounds (ceiling, service, ceiling, service, …): the
 * machine is shared, so a ratio is only meaningful between runs made at nearly the same moment. Reports
 * the medians and the median of the per-round ratios.
 */
export async function interleaved(group: Group, receivers: Receivers, endpoints: EndpointPlan[], opts: Options, total: number, rounds: number,
  label: string, tenants: number, perTenant: number, subject?: (i: number) => string): Promise<{ ceiling: number; throughput: number; ratio: number; cpuCeiling: string; cpu: string; detail: string }> {
  const per = Math.ceil(total / rounds);
  const ceilings: number[] = [];
  const rates: number[] = [];
  const ratios: number[] = [];
  let cpuCeiling = '';
  const cpu: string[] = [];
  for (let r = 0; r < rounds; r++) {
    progress(`${label}: round ${r + 1}/${rounds}: ceiling`);
    const meter = cpuMeter(group, receivers);
    const c = await ceiling(receivers, endpoints, per, opts.ceilingConcurrency, `c${label}-${r}`);
    if (r === rounds - 1) cpuCeiling = meter();
    progress(`${label}: round ${r + 1}/${rounds}: service`);
    const t = await profiledRound(opts.phaseProf, `${label}-${r}`, group, receivers, () => throughputRun(group, receivers, per, `${label}-${r}`, tenants, perTenant, 't', subject));
    cpu.push(t.cpu);
    ceilings.push(c);
    rates.push(t.rate);
    ratios.push(t.rate / c);
  }
  return {
    ceiling: median(ceilings), throughput: median(rates), ratio: median(ratios), cpuCeiling, cpu: cpu.join(' | '),
    detail: ratios.map((x) => fmt(x, 2)).join(' '),
  };
}
