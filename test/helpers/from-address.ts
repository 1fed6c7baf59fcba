// An HTTP request sent from a chosen loopback address (127.0.0.2, …: Linux answers the whole 127/8), so a
// test can be two clients at once: an attacker's source and everyone else's.
import { request } from 'node:http';

export interface FromAddressResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export function requestFrom(localAddress: string, url: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<FromAddressResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'GET', headers: opts.headers, localAddress, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}
