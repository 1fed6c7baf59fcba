import { generateKeyEnvLines } from '../../crypto/keys.ts';
import type { Command } from '../command.ts';

export const keysGenerate: Command = {
  name: 'keys generate',
  summary: 'Print a fresh master key and dead-letter key pair as environment lines',
  help: 'Put the lines in your environment (or a secrets manager). The dead-letter secret key belongs only to\nthe process that runs the admin role.',
  async run({ out }) {
    const lines = await generateKeyEnvLines();
    out.data(Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])), () => lines.join('\n'));
  },
};
