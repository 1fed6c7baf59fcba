// The endpoint room's one entry: the command store wired with its sealer, and the deployment's target
// policy for checking input. The service, the command line and the tests build endpoints only here, so
// the sealer and the URL check are made the same way everywhere.
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { SecretSealer } from '../crypto/sodium.ts';
import { checkTargetUrl } from '../delivery/target-policy.ts';
import {
  parseEndpointPatch, parseNewEndpoint, type CheckUrl, type EndpointInput, type EndpointPatch, type NewEndpoint,
} from '../domain/endpoint.ts';
import type { Logger } from '../log.ts';
import { createEndpointStore, type OwnedEndpointStore } from './store.ts';
import { widenDirectConsumer, type DirectEndpoint } from '../../streams/direct.ts';
import { EVENTS_STREAM } from '../../streams/events.ts';

export interface Endpoints {
  /** Flush it before its NATS connection closes: states are saved behind the commands. */
  store: OwnedEndpointStore;
  /** The target policy: https and public addresses only, unless HOOKSTREAM_ALLOW_PRIVATE_TARGETS. */
  checkUrl: CheckUrl;
  /** Check a create under that policy (one 422 listing every problem). */
  parseNew(input: EndpointInput): NewEndpoint;
  /** Check an update under that policy. */
  parsePatch(input: EndpointInput): EndpointPatch;
}

export function createEndpoints(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** Seals new signing secrets (base64, HOOKSTREAM_MASTER_KEY). */
  masterKey: string;
  allowPrivateTargets: boolean;
  /** Where reads report the endpoint events they skip. */
  log?: Logger;
  now?: () => Date;
  /** HOOKSTREAM_EVENT_PARTITIONS: with direct delivery's partitions, a PATCH of `events` widens the endpoint's direct consumer first. */
  partitions?: number;
}): Endpoints {
  const checkUrl: CheckUrl = (u) => checkTargetUrl(u, deps.allowPrivateTargets);
  const store = createEndpointStore({
    js: deps.js, jsm: deps.jsm, sealer: new SecretSealer(deps.masterKey), log: deps.log, now: deps.now,
    ...(deps.partitions ? {
      widenDirect: (e: DirectEndpoint) => widenDirectConsumer(deps.jsm, e, deps.partitions!),
      eventsSeq: async () => (await deps.jsm.streams.info(EVENTS_STREAM)).state.last_seq,
    } : {}),
  });
  return {
    store,
    checkUrl,
    parseNew: (input) => parseNewEndpoint(input, checkUrl),
    parsePatch: (input) => parseEndpointPatch(input, checkUrl),
  };
}
