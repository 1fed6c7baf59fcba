// The user documents (README.md, SECURITY.md, CHANGELOG.md, docs/*.md) against the project as it is:
// every link and anchor resolves, every `hookstream` command line names a command and its options, every
// npm script, bin/ script and environment variable named exists, and the README stays short. The README's
// walk-through itself runs for real in test/local-servers.test.ts.
import test from 'ava';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { COMMANDS } from '../src/cli/commands/index.ts';

const root = resolve(import.meta.dirname, '..');
const docs = ['README.md', 'SECURITY.md', 'CHANGELOG.md', 'bench/README.md',
  ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]
  .filter((f) => existsSync(join(root, f)));
const text = new Map(docs.map((f) => [f, readFileSync(join(root, f), 'utf8')]));

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
}

/** The anchors of a markdown file: its headings outside code fences, repeats numbered as GitHub does. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Text outside code fences, and the code inside them (shell blocks only). */
function split(markdown: string): { prose: string; shell: string } {
  const prose: string[] = [];
  const shell: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) { fence = fence === undefined ? line.slice(3).trim() : undefined; continue; }
    if (fence === undefined) prose.push(line);
    else if (fence === 'sh' || fence === 'bash') shell.push(line);
  }
  return { prose: prose.join('\n'), shell: shell.join('\n') };
}

/** Command lines: the shell blocks' lines (continuations joined) and the prose's inline code. */
function commandLines(markdown: string): string[] {
  const { prose, shell } = split(markdown);
  const lines = shell.replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.replace(/\s+#.*$/, ''));
  const inline = [...prose.replace(/\n/g, ' ').matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  return [...lines, ...inline];
}

test('the README stays a short user document', (t) => {
  const lines = text.get('README.md')!.split('\n').length;
  t.true(lines <= 420, `README.md has ${lines} lines`);
});

test('every relative link names a file that exists, and every anchor a heading in it', (t) => {
  const bad: string[] = [];
  for (const [file, markdown] of text) {
    const { prose } = split(markdown);
    for (const m of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^(https?|mailto):/.test(target)) continue;
      const [path, anchor] = target.split('#') as [string, string | undefined];
      const linked = path === '' ? file : relative(root, resolve(root, dirname(file), path));
      if (!existsSync(join(root, linked))) { bad.push(`${file}: ${target} (no such file)`); continue; }
      if (anchor === undefined || !linked.endsWith('.md')) continue;
      const headings = anchors(text.get(linked) ?? readFileSync(join(root, linked), 'utf8'));
      if (!headings.has(anchor)) bad.push(`${file}: ${target} (no such heading)`);
    }
  }
  t.deepEqual(bad, []);
});

test('every hookstream command line names a command and options it takes', (t) => {
  const common = new Set(['json', 'help', 'operator']);
  const bad: string[] = [];
  let checked = 0;
  for (const [file, markdown] of text) {
    for (const line of commandLines(markdown)) {
      for (const m of line.matchAll(/(?:npx hookstream|bin\/hookstream|docker run --rm hookstream|\bhookstream hookstream|^hookstream)((?: [a-z][a-z-]*)*)([^|;&]*)/g)) {
        const words = m[1]!.trim().split(' ').filter((w) => w !== '');
        if (words.length === 0) continue;
        checked++;
        let command;
        for (let n = Math.min(words.length, 3); n > 0 && !command; n--) command = COMMANDS.find((c) => c.name === words.slice(0, n).join(' '));
        if (!command) { bad.push(`${file}: hookstream ${words.join(' ')}`); continue; }
        for (const o of `${m[1]}${m[2]}`.matchAll(/(?:^|\s)--([a-z][a-z-]*)/g)) {
          if (!common.has(o[1]!) && !(o[1]! in (command.options ?? {}))) bad.push(`${file}: hookstream ${command.name} --${o[1]}`);
        }
      }
    }
  }
  t.true(checked > 20, `only ${checked} command lines found`);
  t.deepEqual(bad, []);
});

test('every npm script, bin/ script and file the commands name exists', (t) => {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const bad: string[] = [];
  for (const [file, markdown] of text) {
    for (const line of commandLines(markdown)) {
      for (const m of line.matchAll(/npm run ([a-z:]+)/g)) if (!(m[1]! in scripts)) bad.push(`${file}: npm run ${m[1]}`);
      for (const m of line.matchAll(/(?:^|[\s($])((?:bin|test|bench|src|\.ci)\/[\w./-]*\w)/g)) {
        if (!existsSync(join(root, m[1]!))) bad.push(`${file}: ${m[1]}`);
      }
    }
  }
  t.deepEqual(bad, []);
});

test('every HOOKSTREAM_ variable the documents name is one the project reads or sets', (t) => {
  const sources = ['src', 'test/helpers', 'test/faults', 'bench'].flatMap((d) => readdirSync(join(root, d), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts')).map((f) => readFileSync(join(root, d, f), 'utf8')));
  const known = new Set([...sources, readFileSync(join(root, 'nats.conf'), 'utf8')].join('\n').match(/HOOKSTREAM_[A-Z0-9_]+/g));
  const bad: string[] = [];
  for (const [file, markdown] of text) {
    for (const m of markdown.matchAll(/HOOKSTREAM_[A-Z0-9_]*[A-Z0-9]/g)) {
      // Prefix mentions (HOOKSTREAM_PREVIOUS_…) and the examples' own variables are not names to check.
      if (/[…_]/.test(markdown[m.index + m[0].length] ?? '') || m[0] === 'HOOKSTREAM_NATS_AUTH_EU_PASSWORD') continue;
      if (!known.has(m[0])) bad.push(`${file}: ${m[0]}`);
    }
  }
  t.deepEqual([...new Set(bad)], []);
});

test('user documents carry no issue numbers', (t) => {
  // SECURITY.md is the security policy, owned apart; the changelog may name what it closes.
  const bad = [...text].filter(([file]) => file !== 'CHANGELOG.md' && file !== 'SECURITY.md')
    .flatMap(([file, markdown]) => [...markdown.matchAll(/\b[Ii]ssues? \d+/g)].map((m) => `${file}: ${m[0]}`));
  t.deepEqual(bad, []);
});
