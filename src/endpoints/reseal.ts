// Master-key rotation, endpoint side: every endpoint whose signing secrets are not yet sealed the current
// way (v2 under the current master key, bound to the endpoint) gets an endpoint.secrets_resealed event with
// the same secrets sealed again. Run by `hookstream keys reseal-secrets` while the service keeps running;
// appends race commands through the expected last subject sequence, like every command (src/endpoints/store.ts).
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM, endpointSubject } from '../../streams/endpoints.ts';
import { isApiError } from '../../streams/ensure.ts';
import { liveSecrets, type EndpointEvent, type EndpointState, type SealedSecret } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { foldEndpointMessage } from './fold.ts';
import { readEndpoint } from './read.ts';

const WRONG_LAST_SEQUENCE = 10071;
/** Commands racing one endpoint this often in a row are rare; the next run picks the endpoint up. */
const MAX_ATTEMPTS = 5;

export interface ResealSealer {
  seal(plaintext: string, endpointId: EndpointId): string;
  openWithOrigin(sealed: string, endpointId: EndpointId): { plaintext: string; current: boolean };
}

export interface ResealResult {
  /** Endpoints that got an endpoint.secrets_resealed event. */
  resealed: number;
  /** Endpoints whose live secrets were already v2 under the current key. */
  current: number;
  /** Endpoints left as they were: a secret that opens under no key given, or the append kept failing. Never a secret. */
  failed: { id: string; reason: string }[];
}

/** The state of every endpoint, folded once from the start of ENDPOINTS (a point-in-time view). */
export async function foldAllEndpoints(js: JetStreamClient, jsm: JetStreamManager, log?: Logger): Promise<Map<string, EndpointState>> {
  const states = new Map<string, EndpointState>();
  const info = await jsm.streams.info(ENDPOINTS_STREAM);
  if (info.state.messages === 0) return states;
  const consumer = await js.consumers.get(ENDPOINTS_STREAM, { deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume({ max_messages: 256 });
  try {
    for await (const m of messages) {
      // The fold every reader uses: a stray message on another endpoint's subject is not that endpoint's.
      const step = foldEndpointMessage(m, (id) => states.get(id));
      if (step.ok) states.set(step.state.id, step.state);
      else log?.warn('skipping endpoint event', { stream: ENDPOINTS_STREAM, seq: m.seq, endpoint: step.endpoint, reason: step.reason });
      // `pending` counts what is still stored after this message, so a removed last message cannot keep us waiting.
      if (m.info.pending === 0 || m.seq >= info.state.last_seq) break;
    }
  } finally {
    await messages.close();
  }
  return states;
}

type Plan =
  | { kind: 'current' }
  | { kind: 'reseal'; secrets: SealedSecret[] }
  | { kind: 'failed'; reason: string };

/**
 * What to do with one endpoint. Secrets whose grace period is over sign nothing again and are dropped
 * rather than resealed (so a stale one that no longer opens cannot hold up the rotation).
 */
function plan(state: EndpointState, sealer: ResealSealer, now: number): Plan {
  const live = liveSecrets(state, now);
  if (live.length === 0) return { kind: 'failed', reason: 'the endpoint has no live secret' };
  const opened: { plaintext: string; current: boolean; expires_at: string | null }[] = [];
  for (const s of live) {
    try {
      opened.push({ ...sealer.openWithOrigin(s.sealed, state.id), expires_at: s.expires_at });
    } catch (e) {
      // DecryptionError messages name variables, never values.
      return { kind: 'failed', reason: describe(e) };
    }
  }
  if (opened.every((o) => o.current)) return { kind: 'current' };
  return { kind: 'reseal', secrets: opened.map((o) => ({ sealed: sealer.seal(o.plaintext, state.id), expires_at: o.expires_at })) };
}

export async function resealEndpointSecrets(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  sealer: ResealSealer;
  log: Logger;
  now?: () => Date;
  onProgress?: (done: number, total: number) => void;
}): Promise<ResealResult> {
  const now = () => deps.now?.() ?? new Date();
  const result: ResealResult = { resealed: 0, current: 0, failed: [] };
  const states = await foldAllEndpoints(deps.js, deps.jsm, deps.log);
  let done = 0;
  for (const first of states.values()) {
    let state: EndpointState | undefined = first;
    for (let attempt = 1; ; attempt++) {
      const p = plan(state, deps.sealer, now().getTime());
      if (p.kind === 'current') { result.current++; break; }
      if (p.kind === 'failed') {
        result.failed.push({ id: state.id, reason: p.reason });
        deps.log.warn('endpoint secrets not resealed', { endpoint: state.id, reason: p.reason });
        break;
      }
      const event: EndpointEvent = { v: 1, type: 'endpoint.secrets_resealed', id: state.id, secrets: p.secrets, at: now().toISOString() };
      try {
        await deps.js.publish(endpointSubject(state.id), JSON.stringify(event), { expect: { lastSubjectSequence: state.version } });
        result.resealed++;
        break;
      } catch (e) {
        if (!isApiError(e, WRONG_LAST_SEQUENCE) || attempt >= MAX_ATTEMPTS) {
          const reason = isApiError(e, WRONG_LAST_SEQUENCE) ? `changed concurrently ${MAX_ATTEMPTS} times; run the command again` : describe(e);
          result.failed.push({ id: state.id, reason });
          deps.log.warn('endpoint secrets not resealed', { endpoint: state.id, reason });
          break;
        }
        // A command landed in between (a rotation, an update): decide again on the endpoint as it is now.
        state = await readEndpoint(deps.js, deps.jsm, state.id, { log: deps.log });
        if (!state) {
          result.failed.push({ id: first.id, reason: 'the endpoint is no longer in the stream' });
          break;
        }
      }
    }
    deps.onProgress?.(++done, states.size);
  }
  return result;
}
