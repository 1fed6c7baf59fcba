// Why hookstream's floor is nats-server 2.10, and that start-up holds it. The ordering gate
// (src/delivery/ordered-gate.ts) finds a key's stored deliveries with `next_by_subj`, through the stream's
// subject index. 2.9 keeps a subject's first sequence but not its last once the last message is removed:
// with three messages on a subject, the last removed and then the first, the one left is no longer found.
// A key's deliveries are removed so when one of an earlier event was stored after a later one (a late
// store, after a router restart). The suite's server must find it; Debian bookworm's 2.9.10, where the
// machine has it, shows what the floor keeps out, and `hookstream serve` refuses it in one line.
import test from 'ava';
import { jetstreamManager, RetentionPolicy } from '@nats-io/jetstream';
import { connectNats, SERVICE_INBOX_PREFIX } from '../src/nats/connect.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { generateKeys, initSodium, instanceEnv, startServe } from './faults/harness.ts';
import { OLD_NATS_BINARY } from './helpers/nats-binary.ts';
import { startNatsServer } from './helpers/nats-server.ts';
import { eventually } from './helpers/service.ts';

/** Three messages on `keys.k`, the last removed, then the first: what `next_by_subj` finds from the start. */
async function nextAfterRemovals(binary?: string): Promise<{ version: string | undefined; found: number | undefined; left: number }> {
  const nats = await startNatsServer(binary === undefined ? {} : { binary });
  const nc = await connectNats({ url: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'KEYS', subjects: ['keys.>'], retention: RetentionPolicy.Workqueue });
    const js = jsm.jetstream();
    const seqs: number[] = [];
    for (let i = 0; i < 3; i++) {
      await js.publish('keys.other', 'another subject between them');
      seqs.push((await js.publish('keys.k', String(i))).seq);
    }
    await jsm.streams.deleteMessage('KEYS', seqs[2]!, false);
    await jsm.streams.deleteMessage('KEYS', seqs[0]!, false);
    const heads = createNextBySubject(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
    try {
      // By sequence it is there on every version.
      if ((await heads.at('KEYS', seqs[1]!))?.seq !== seqs[1]) throw new Error('the message left is not stored');
      return { version: nc.info?.version, found: (await heads.next('KEYS', 'keys.k', 0))?.seq, left: seqs[1]! };
    } finally {
      heads.close();
    }
  } finally {
    await nc.close();
    await nats.dispose();
  }
}

test('a key\'s last delivery removed, then its first: next_by_subj finds the one left', async (t) => {
  const { version, found, left } = await nextAfterRemovals();
  t.is(found, left, `nats-server ${version} finds it`);
});

const oldTest = OLD_NATS_BINARY === undefined ? test.skip : test;

oldTest('below the floor (Debian bookworm\'s 2.9.10) next_by_subj hides it', async (t) => {
  const { version, found } = await nextAfterRemovals(OLD_NATS_BINARY);
  t.is(found, undefined, `nats-server ${version} hides it (if it no longer does, say so in docs/nats-servers.md)`);
});

oldTest('hookstream serve refuses a nats-server below 2.10 at once, in one line that says how to get a newer one', async (t) => {
  t.timeout(90_000);
  await initSodium();
  const nats = await startNatsServer({ binary: OLD_NATS_BINARY! });
  t.teardown(() => nats.dispose());
  const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: 'postgres://postgres@127.0.0.1:1/unused', keys: generateKeys() }));
  t.teardown(() => s.kill('SIGKILL'));
  await eventually(() => (s.exited ? true : undefined), 60_000, 'the process to exit');
  t.is(s.exitCode, 1, s.output);
  const said = s.output.split('\n').filter((l) => l.includes('hookstream serve:'));
  t.is(said.length, 1, s.output);
  t.regex(said[0]!, new RegExp(`NATS_URL: the nats-server at 127\\.0\\.0\\.1:${nats.port} runs 2\\.9\\.10; hookstream needs 2\\.10 or newer .*\`bin/fetch-nats-server\` downloads one.*set NATS_URL to a newer server`));
  t.false(s.output.includes('start-up is waiting'), 'not retried');
});
