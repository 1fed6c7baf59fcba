// The nats-server tests and the bench run: NATS_SERVER_BIN as given, else the machine's when it is recent
// enough for hookstream, else Debian stable's, downloaded once into the project's cache (the same choice
// as `npm start`'s, src/local/nats-server.ts).
import { existsSync } from 'node:fs';
import { belowFloor } from '../../src/nats/server-version.ts';
import { binaryVersion, findNatsServer } from '../../src/local/nats-server.ts';

export const NATS_BINARY = process.env['NATS_SERVER_BIN'] || findNatsServer({ PATH: process.env['PATH'] });
/** Its version (`2.10.27`). */
export const NATS_VERSION = binaryVersion(NATS_BINARY);
/** Debian bookworm's 2.9.10 where this machine has it (undefined elsewhere): a server below hookstream's floor. */
export const OLD_NATS_BINARY = ['/usr/sbin/nats-server'].find((b) => existsSync(b) && belowFloor(binaryVersion(b)));
