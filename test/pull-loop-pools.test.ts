// How the endpoints of one socket pool (a tenant's sockets to one host) share their pulls
// (src/delivery/pull-loop.ts), driven step by step: a stand-in for the server hands each lane what it asked
// for, and attempts end when the test says. The same behaviour against the real service, NATS and a
// receiver is in test/socket-pool-pulls.test.ts; this one reaches the shapes that would take hundreds of
// endpoints there.
import test from 'ava';
import { createPullLoops, type PullLoop } from '../src/delivery/pull-loop.ts';
import { HeldMessages } from '../src/delivery/in-flight.ts';
import type { RecentAcks } from '../src/delivery/recent-acks.ts';
import type { WaitingRetries } from '../src/delivery/waiting-retries.ts';
import type { EndpointId } from '../src/domain/ids.ts';
import { silentLogger } from '../src/log.ts';
import type { PullFeeds } from '../src/nats/pull-feed.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';

const SOCKETS = 128;
const LANES = 16;

interface Feed { capacity: () => number; onMessage: (m: PulledMsg) => void; requested: number; fill(): void }

/** Lanes of one pool, each with a feed the test serves, and attempts that end when the test ends them. */
function pool(endpoints: number, opts: { twoLanes?: boolean; now?: () => number } = {}) {
  const feeds: Feed[] = [];
  const feedsStub: PullFeeds = {
    open({ capacity, onMessage }) {
      const f: Feed = {
        capacity, onMessage, requested: 0,
        fill() { const gap = capacity() - f.requested; if (gap > 0) f.requested += gap; },
      };
      feeds.push(f);
      f.fill();
      return { fill: () => f.fill(), requested: () => f.requested, repull() { f.requested = 0; f.fill(); }, close() {} };
    },
    stop() {},
  };
  const running: { lane: number; end: () => void }[] = [];
  const ids = Array.from({ length: endpoints }, (_, i) => `ep_${i}` as EndpointId);
  const lanes = createPullLoops({
    feeds: feedsStub,
    attempt: (lane, _tracked, release) => new Promise<void>((resolve) => {
      running.push({ lane: ids.indexOf(lane.id), end: () => { release(); resolve(); } });
    }),
    inFlight: new HeldMessages(),
    retries: { arrived() {} } as unknown as WaitingRetries,
    recentAcks: { has: () => false } as unknown as RecentAcks,
    waitFor: () => 30_000,
    maxInFlight: LANES,
    poolOf: () => 'tenant https://one.example',
    socketsPerPool: SOCKETS,
    log: silentLogger,
    ...(opts.now ? { now: opts.now } : {}),
  });
  // Two lanes: each endpoint's queue (feeds[2i], opened first) beside its direct consumer (feeds[2i + 1]).
  const loops: PullLoop[] = ids.flatMap((id) => [
    ...(opts.twoLanes ? [lanes.run(id, { stream: 'Q', consumer: id })] : []),
    lanes.run(id, { stream: 'S', consumer: id }),
  ]);
  let seq = 0;
  const msg = (): PulledMsg => ({
    subject: 's', data: new Uint8Array(), headers: undefined, reply: '', seq: ++seq,
    info: { deliveryCount: 1, streamSequence: seq } as PulledMsg['info'],
    ack() {}, nak() {}, working() {}, term() {},
  });
  /** The server hands lane i one delivery it asked for. */
  const deliver = (i: number) => { const f = feeds[i]!; if (f.requested === 0) return false; f.requested--; f.onMessage(msg()); f.fill(); return true; };
  const heldBy = (i: number) => running.filter((r) => r.lane === i).length;
  return { feeds, loops, deliver, running, heldBy, held: () => lanes.held() };
}

const settle = () => new Promise((r) => setImmediate(r));

test('a busy endpoint among 200 idle ones of its tenant on the same host still gets all its lanes', async (t) => {
  const p = pool(200);
  // As after the long polls of the first lanes (opened while the pool was small) expired: one each.
  for (const l of p.loops) l.repull();
  t.true(p.feeds.every((f) => f.requested === 1), 'each idle lane asks for one');
  for (let i = 0; i < 40; i++) p.deliver(7);
  t.is(p.heldBy(7), LANES);
});

test('endpoints with a backlog share the sockets: about the pool in all, each a fair part once attempts turn over', async (t) => {
  const p = pool(20);
  for (const l of p.loops) l.repull();
  /** The server has a backlog for every lane: it hands out all that is asked for. */
  const serve = () => { let more = true; while (more) { more = false; for (let i = 0; i < 20; i++) while (p.deliver(i)) more = true; } };
  serve();
  let most = p.held();
  for (let step = 0; step < 3000; step++) {
    // The oldest attempt ends (sockets free up in turn), the next is handed out.
    p.running.shift()!.end();
    await settle();
    serve();
    most = Math.max(most, p.held());
  }
  const shares = Array.from({ length: 20 }, (_, i) => p.heldBy(i));
  t.log(`held at most ${most}; now ${p.held()}, by endpoint ${shares.join(' ')}`);
  t.true(most <= SOCKETS + 20, `held at most ${most}`);
  t.true(Math.min(...shares) >= Math.floor(SOCKETS / 20) - 1, `shares ${shares.join(' ')}`);
  t.true(Math.max(...shares) <= Math.ceil(SOCKETS / 20) + 1, `shares ${shares.join(' ')}`);
});

test('a pool its lanes cannot fill (8 endpoints × 16 lanes ≤ 128 sockets) pulls as it always did: all its lanes', (t) => {
  const p = pool(8);
  t.true(p.feeds.every((f) => f.requested === LANES));
});

test('an endpoint\'s idle second lane (its queue beside its direct consumer) holds back no busy lane, nor does the ask it made before the pool was crowded', async (t) => {
  let clock = 0;
  const p = pool(20, { twoLanes: true, now: () => clock });
  t.true(p.feeds.slice(0, 8).every((f) => f.requested === LANES), 'the first endpoints\' lanes asked for all their lanes, the pool not yet crowded');
  /** Each direct lane has a backlog: the server hands out all that is asked of it; the queues stay empty. */
  const serve = () => { let more = true; while (more) { more = false; for (let i = 1; i < 40; i += 2) while (p.deliver(i)) more = true; } };
  serve();
  let most = 0;
  let fewest = Infinity;
  for (let step = 0; step < 3000; step++) {
    p.running.shift()!.end();
    await settle();
    // Attempts turn over every 5 ms: the queues' asks go unfilled past a brief pull's time after a second.
    clock += 5;
    serve();
    most = Math.max(most, p.held());
    if (step > 2000) fewest = Math.min(fewest, p.held());
  }
  t.log(`held at most ${most}, at least ${fewest} once settled`);
  t.true(most <= SOCKETS + 40, `held at most ${most}`);
  t.true(fewest >= SOCKETS * 0.75, `the direct lanes used the sockets: at least ${fewest} held once settled`);
});
