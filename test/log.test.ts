// Logging never blocks the event loop (issue 23): a log collector that stops reading stderr (a full pipe)
// must not stop the process. Run as a child whose stderr pipe this test leaves unread.
import test from 'ava';
import { spawn } from 'node:child_process';
import { once } from 'node:events';

const LOG_URL = new URL('../src/log.ts', import.meta.url).href;
const childSource = (prelude: string) => `
${prelude}
import { createLogger, onLogLineDropped } from ${JSON.stringify(LOG_URL)};
let dropped = 0;
onLogLineDropped(() => dropped++);
const log = createLogger();
for (let i = 0; i < 50000; i++) {
  log.info('a line nobody reads '.repeat(10), { i });
  if (i % 1000 === 0) await new Promise((r) => setImmediate(r));
}
process.stdout.write(JSON.stringify({ dropped }) + '\\n');
// Once the collector reads again: a line every 20 ms (the first ones may still meet a full buffer) until stdin ends.
process.stdin.once('data', () => {
  const timer = setInterval(() => log.info('after the collector came back'), 20);
  process.stdin.once('end', () => clearInterval(timer));
  process.stdin.resume();
});
`;

const stalledStderr = test.macro(async (t, prelude: string) => {
  const child = spawn(process.execPath, ['--input-type=module', '-e', childSource(prelude)], { stdio: ['pipe', 'pipe', 'pipe'] });
  t.teardown(() => { child.kill('SIGKILL'); });
  child.stderr.pause(); // the collector stops reading: the pipe fills after 64 KiB
  let out = '';
  child.stdout.setEncoding('utf8');
  const reported = new Promise<{ dropped: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the child never finished logging: its writes blocked')), 30_000);
    child.stdout.on('data', (d: string) => {
      out += d;
      if (out.includes('\n')) { clearTimeout(timer); resolve(JSON.parse(out.split('\n')[0]!) as { dropped: number }); }
    });
  });
  const { dropped } = await reported;
  t.true(dropped > 0, 'some lines were dropped');
  let err = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d: string) => { err += d; });
  child.stderr.resume();
  child.stdin.write('go\n');
  const until = Date.now() + 20_000;
  while (!err.includes('after the collector came back') && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  child.stdin.end();
  await once(child, 'close'); // after its stdio is read to the end
  const lines = err.trim().split('\n').map((l) => JSON.parse(l) as { msg: string; dropped?: number; i?: number });
  const notice = lines.find((l) => l.msg.startsWith('log lines dropped'));
  // The lines dropped before the collector came back, and any of the first 'after' lines that met a full buffer.
  t.true((notice?.dropped ?? 0) >= dropped, 'the next line written says how many');
  t.is(lines.at(-1)?.msg, 'after the collector came back');
  t.is(lines.filter((l) => l.i !== undefined).length + dropped, 50000, 'every line is either written or counted');
});

test('a stalled stderr does not stop the process: lines beyond the bound are dropped, counted, and said so', stalledStderr, '');
// Node makes fd 2 non-blocking once anything touches process.stderr (a warning, the CLI's own lines, an
// OpenTelemetry package at import): the writer must still lose no line it did not count.
test('the same after process.stderr was opened, which makes the pipe non-blocking', stalledStderr, 'void process.stderr;');
