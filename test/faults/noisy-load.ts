// The noisy-neighbour scenario's clients, each in a process of its own (test/faults/noisy-neighbour.test.ts):
// a real attacker and a real victim are other machines, so neither the attacker's client work nor the
// receivers in the test process may delay the victim's PATCH timings. `node noisy-load.ts patches JSON`
// PATCHes and prints the timings; `node noisy-load.ts attacker JSON` floods until a line `stop` on stdin,
// then prints what it sent and the answers it got. Each prints one JSON line on stdout when done.
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { connectNats } from '../../src/nats/connect.ts';
import { apiClient } from '../helpers/api-client.ts';

export interface PatchesJob {
  apiUrl: string;
  key: string;
  endpointId: string;
  phase: string;
  count: number;
  everyMs: number;
}

export interface PatchesResult {
  /** Each PATCH's time, request sent to answer read, in milliseconds. */
  patchMs: number[];
  /** The same PATCHes as the service timed them (its Server-Timing): without the client's and the network's share. */
  serviceMs: number[];
  /** Those that did not answer 2xx: status and the start of the body. */
  failures: string[];
}

export interface AttackerJob {
  apiUrl: string;
  key: string;
  natsUrl: string;
  tenant: string;
  /** The endpoint whose restore is flooded (answered 409, 422 or 429). */
  endpointId: string;
  eventEveryMs: number;
  writeWorkers: number;
  badKeyWorkers: number;
}

export interface AttackerResult {
  events: number;
  writeStatuses: Record<string, number>;
  badKeyStatuses: Record<string, number>;
}

/** The victim's PATCH loop, and nothing else in this process. */
async function patches(job: PatchesJob): Promise<PatchesResult> {
  const api = apiClient(job.apiUrl, job.key);
  const patchMs: number[] = [];
  const serviceMs: number[] = [];
  const failures: string[] = [];
  for (let i = 0; i < job.count; i++) {
    const started = performance.now();
    const res = await api.patch(`/v1/webhooks/${job.endpointId}`, { description: `${job.phase} ${i}` }).catch((e: unknown) => ({ status: 0, text: String(e) }));
    patchMs.push(performance.now() - started);
    const dur = /dur=([\d.]+)/.exec(('headers' in res ? res.headers.get('server-timing') : null) ?? '')?.[1];
    if (dur !== undefined) serviceMs.push(Number(dur));
    if (res.status < 200 || res.status >= 300) failures.push(`${res.status} ${res.text.slice(0, 120)}`);
    await new Promise((r) => setTimeout(r, Math.max(0, job.everyMs - (performance.now() - started))));
  }
  return { patchMs, serviceMs, failures };
}

/** Runs `work` in `workers` loops until `stop()`; counts the answers by status. */
function flood(workers: number, work: () => Promise<number>): { stop(): Promise<Record<string, number>> } {
  let stopped = false;
  const statuses: Record<string, number> = {};
  const loops = Array.from({ length: workers }, async () => {
    while (!stopped) {
      const status = await work().catch(() => 0);
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
  });
  return { async stop() { stopped = true; await Promise.all(loops); return statuses; } };
}

/** The attacker's client: its fan-out events, its write flood and the bad-key flood, until `stop` on stdin. */
async function attacker(job: AttackerJob): Promise<AttackerResult> {
  const nc = await connectNats({ url: job.natsUrl, inboxPrefix: '_INBOX', name: 'fault-attacker' });
  const api = apiClient(job.apiUrl, job.key);
  let events = 0;
  const fanOut = flood(1, async () => {
    nc.publish(`events.${job.tenant}.user.updated`, JSON.stringify({ userId: `user_${events}`, n: events++, who: 'attacker' }));
    await new Promise((r) => setTimeout(r, job.eventEveryMs));
    return 200;
  });
  const writes = flood(job.writeWorkers, async () => (await api.post(`/v1/webhooks/${job.endpointId}/restore`, {})).status);
  const badKeys = flood(job.badKeyWorkers, async () => (await apiClient(job.apiUrl, `hs_live_${randomBytes(32).toString('base64url')}`).get('/v1/webhooks')).status);
  process.stdout.write('started\n');
  for await (const line of createInterface({ input: process.stdin })) if (line.trim() === 'stop') break;
  const [writeStatuses, badKeyStatuses] = [await writes.stop(), await badKeys.stop()];
  await fanOut.stop();
  await nc.drain().catch(() => {});
  return { events, writeStatuses, badKeyStatuses };
}

const [mode, arg] = process.argv.slice(2);
if (mode === 'patches' || mode === 'attacker') {
  const job = JSON.parse(arg ?? '{}') as PatchesJob & AttackerJob;
  const result = mode === 'patches' ? await patches(job) : await attacker(job);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
}
