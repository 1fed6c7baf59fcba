// hookstream: the command-line entry point. Selects a command by its words, parses its options, prints
// help, and turns every failure into one line on stderr and a non-zero exit code.
import { parseArgs } from 'node:util';
import { UsageError, type Command, type Output } from './command.ts';
import { isHookstreamError } from '../errors.ts';
import { COMMANDS } from './commands/index.ts';
import { PROJECT_DIR } from './context.ts';
import { join } from 'node:path';

function createOutput(json: boolean): Output {
  return {
    json,
    data(value, human) {
      process.stdout.write((json ? JSON.stringify(value, null, 2) : human()) + '\n');
    },
    progress(done, total, label) {
      if (json || !process.stderr.isTTY) return;
      const width = 30;
      const filled = total > 0 ? Math.round((done / total) * width) : width;
      process.stderr.write(`\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}`);
      if (done >= total) process.stderr.write('\n');
    },
    info(line) {
      if (!json) process.stderr.write(line + '\n');
    },
  };
}

function overview(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    'hookstream: webhook delivery on NATS JetStream',
    '',
    'Usage: hookstream <command> [options]   (every command takes --help; data commands take --json;',
    '       --operator NAME or HOOKSTREAM_OPERATOR names you in the audit log)',
    '',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
  ].join('\n');
}

function usage(c: Command): string {
  return `Usage: hookstream ${c.name}${c.positionals ? ` ${c.positionals.names}` : ''} [options]\n\n${c.summary}\n\n${c.help}`.trimEnd();
}

function select(argv: string[]): { command: Command | undefined; rest: string[] } {
  // The longest run of leading words that names a command.
  for (let n = Math.min(argv.length, 3); n > 0; n--) {
    const name = argv.slice(0, n).join(' ');
    const command = COMMANDS.find((c) => c.name === name);
    if (command) return { command, rest: argv.slice(n) };
  }
  return { command: undefined, rest: argv };
}

export async function main(argv: string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    process.stdout.write(overview() + '\n');
    return argv.length === 0 ? 2 : 0;
  }
  const { command, rest } = select(argv);
  if (!command) {
    process.stderr.write(`hookstream: unknown command "${argv.filter((a) => !a.startsWith('-')).slice(0, 2).join(' ')}"\n\n${overview()}\n`);
    return 2;
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: { ...command.options, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' }, operator: { type: 'string' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    process.stderr.write(`hookstream ${command.name}: ${e instanceof Error ? e.message : String(e)}\n\n${usage(command)}\n`);
    return 2;
  }
  // Who runs the command, for the audit log (src/cli/context.ts cliOperator); the option wins over the environment.
  if (typeof parsed.values.operator === 'string') process.env['HOOKSTREAM_OPERATOR'] = parsed.values.operator;
  if (parsed.values.help) {
    process.stdout.write(usage(command) + '\n');
    return 0;
  }
  const limits = command.positionals ?? { min: 0, max: 0, names: '' };
  if (parsed.positionals.length < limits.min || parsed.positionals.length > limits.max) {
    process.stderr.write(`hookstream ${command.name}: expected ${limits.names || 'no arguments'}\n\n${usage(command)}\n`);
    return 2;
  }
  try {
    await command.run({ values: parsed.values, positionals: parsed.positionals, out: createOutput(parsed.values.json === true) });
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`hookstream ${command.name}: ${e.message}\n\n${usage(command)}\n`);
      return 2;
    }
    // Named errors are expected failures: one line, no stack. Anything else is a bug worth its stack.
    const message = isHookstreamError(e) ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e);
    process.stderr.write(`hookstream ${command.name}: ${message}\n`);
    return 1;
  }
}

if (import.meta.main) {
  // Development keys and the local servers' credentials live in the project's folder, wherever the
  // command runs: a second `.hookstream` elsewhere would hold other keys, and no credentials.
  if (!process.env['HOOKSTREAM_DATA_DIR']) process.env['HOOKSTREAM_DATA_DIR'] = join(PROJECT_DIR, '.hookstream');
  // exitCode, not exit(): stdout to a pipe is written asynchronously and exit() would cut it short.
  process.exitCode = await main(process.argv.slice(2));
}
