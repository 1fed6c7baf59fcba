// A local receiver for trying hookstream out: prints each delivery and, given the endpoint's secret,
// verifies its signature and timestamp as a Standard Webhooks receiver would.
import { createServer } from 'node:http';
import { verifySignature } from '../../domain/signature.ts';
import { UsageError, type Command } from '../command.ts';

const TOLERANCE_S = 5 * 60;

export const listen: Command = {
  name: 'listen',
  summary: 'Run a local webhook receiver that prints and verifies deliveries',
  help: [
    'Options:',
    '  --port N        port to listen on (default 9000)',
    '  --host H        address to listen on (default 127.0.0.1)',
    '  --secret S      the endpoint\'s whsec_ signing secret: verify every delivery (401 when it does not verify)',
    '  --status N      HTTP status to answer with (default 204), e.g. 500 to watch retries',
    '',
    'With --json each delivery is printed as one JSON line. Stop with Ctrl-C.',
  ].join('\n'),
  options: { port: { type: 'string' }, host: { type: 'string' }, secret: { type: 'string' }, status: { type: 'string' } },
  async run({ values, out }) {
    const port = Number(values['port'] ?? 9000);
    const status = Number(values['status'] ?? 204);
    const host = typeof values['host'] === 'string' ? values['host'] : '127.0.0.1';
    const secret = typeof values['secret'] === 'string' ? values['secret'] : undefined;
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError('--port must be a whole number from 1 to 65535');
    if (!Number.isInteger(status) || status < 200 || status > 599) throw new UsageError('--status must be an HTTP status from 200 to 599');
    if (secret !== undefined && !secret.startsWith('whsec_')) throw new UsageError('--secret must be the whsec_ signing secret of the endpoint');
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const id = String(req.headers['webhook-id'] ?? '');
        const ts = Number(req.headers['webhook-timestamp']);
        const sig = String(req.headers['webhook-signature'] ?? '');
        let verdict = 'not verified (no --secret)';
        let answer = status;
        if (secret) {
          const fresh = Math.abs(Date.now() / 1000 - ts) <= TOLERANCE_S;
          const valid = fresh && verifySignature(secret, sig, id, ts, body);
          verdict = valid ? 'signature valid' : fresh ? 'SIGNATURE INVALID' : 'TIMESTAMP TOO OLD';
          if (!valid) answer = 401;
        }
        const event = String(req.headers['service-webhook-event'] ?? '');
        out.data({ webhook_id: id, event, timestamp: ts, verified: verdict === 'signature valid', body: body.toString('utf8') },
          () => `${new Date().toISOString()}  ${event}  ${id}  ${verdict}  -> ${answer}\n  ${body.toString('utf8')}`);
        res.writeHead(answer).end();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) => reject(new UsageError(`cannot listen on ${host}:${port}: ${e.message}`)));
      server.listen(port, host, () => resolve());
    });
    out.info(`listening on http://${host}:${port}/ (Ctrl-C to stop)`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  },
};
