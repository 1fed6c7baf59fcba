// Which failures no wait can heal, so that start-up ends at once with their one line instead of retrying:
// an invalid configuration, credentials refused (NATS's Authorization Violation, Postgres's SQLSTATE class
// 28), a nats-server without JetStream, a stored schema this version cannot migrate. Everything else (NATS
// or Postgres down, restarting, timing out, electing leaders, "no responders", a cluster still forming) is
// waited out.
import { ConfigError } from '../errors.ts';
import { TooFewServersError } from '../../streams/ensure.ts';
import { JetStreamDisabledError } from '../../streams/index.ts';
import { SchemaError } from '../db/orm.ts';

/** `e` and its causes, outermost first. */
function* causes(e: unknown): Generator<unknown> {
  for (let c = e, depth = 0; c !== undefined && c !== null && depth < 8; c = (c as { cause?: unknown }).cause, depth++) yield c;
}

export function needsOperator(e: unknown): boolean {
  for (const c of causes(e)) {
    // A cluster with fewer servers than HOOKSTREAM_REPLICAS may be one still forming.
    if (c instanceof TooFewServersError) return false;
    if (c instanceof ConfigError || c instanceof JetStreamDisabledError || c instanceof SchemaError) return true;
    if (!(c instanceof Error)) continue;
    if (c.name === 'AuthorizationError' || /authorization violation/i.test(c.message)) return true;
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string' && /^28[0-9A-Z]{3}$/.test(code)) return true; // invalid_authorization_specification, invalid_password
  }
  return false;
}
