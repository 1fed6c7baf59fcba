// A local receiver for trying hookstream out: prints each delivery and, given the endpoint's secret (v1)
// or public key (v1a), verifies its signature and timestamp as a Standard Webhooks receiver would.
import { createServer } from 'node:http';
import type { KeyObject } from 'node:crypto';
import { ed25519VerifyKey, isPublicKey, verifySignature, verifySignatureV1a } from '../../domain/signature.ts';
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
    '  --public-key K  the whpk_ public key of a v1a endpoint: verify its ed25519 signatures instead',
    '  --status N      HTTP status to answer with (default 204), e.g. 500 to watch retries',
    '',
    'With --json each delivery is printed as one JSON line. Stop with Ctrl-C.',
  ].join('\n'),
  options: { port: { type: 'string' }, host: { type: 'string' }, secret: { type: 'string' }, 'public-key': { type: 'string' }, status: { type: 'string' } },
  async run({ values, out }) {
    const port = Number(values['port'] ?? 9000);
    const status = Number(values['status'] ?? 204);
    const host = typeof values['host'] === 'string' ? values['host'] : '127.0.0.1';
    const secret = typeof values['secret'] === 'string' ? values['secret'] : undefined;
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError('--port must be a whole number from 1 to 65535');
    if (!Number.isInteger(status) || status < 200 || status > 599) throw new UsageError('--status must be an HTTP status from 200 to 599');
    if (secret !== undefined && !secret.startsWith('whsec_')) throw new UsageError('--secret must be the whsec_ signing secret of the endpoint');
    const publicKeyText = typeof values['public-key'] === 'string' ? values['public-key'] : undefined;
    if (publicKeyText !== undefined && !isPublicKey(publicKeyText)) throw new UsageError('--public-key must be the whpk_ public key of a v1a endpoint');
    if (secret !== undefined && publicKeyText !== undefined) throw new UsageError('give --secret (v1) or --public-key (v1a), not both');
    // Imported once: the receiver verifies every delivery with it.
    const publicKey: KeyObject | undefined = publicKeyText === undefined ? undefined : ed25519VerifyKey(publicKeyText);
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const id = String(req.headers['webhook-id'] ?? '');
        const ts = Number(req.headers['webhook-timestamp']);
        const sig = String(req.headers['webhook-signature'] ?? '');
        let verdict = 'not verified (no --secret or --public-key)';
        let answer = status;
        if (secret || publicKey) {
          const fresh = Math.abs(Date.now() / 1000 - ts) <= TOLERANCE_S;
          const valid = fresh && (publicKey ? verifySignatureV1a(publicKey, sig, id, ts, body) : verifySignature(secret!, sig, id, ts, body));
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
