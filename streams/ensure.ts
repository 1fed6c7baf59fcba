// Idempotent creation of the streams and consumers hookstream needs: create when missing, update
// when the definition changed, leave alone otherwise. Safe to run from every instance at every start,
// and from any number of processes at the same moment: losing a creation race to another process is
// success when what the winner made is what this process wanted.
import { JetStreamApiCodes, JetStreamApiError, type ConsumerConfig, type ConsumerInfo, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { ConfigError } from '../src/errors.ts';

/** A stream's settings; one filled by sources alone has no subjects. */
export type StreamDefinition = Partial<StreamConfig> & Pick<StreamConfig, 'name'>;

/** What every stream and durable consumer hookstream creates has in common. */
export interface EnsureOptions {
  /** HOOKSTREAM_REPLICAS: copies of each stream and durable consumer on a NATS cluster. */
  replicas: number;
}

export const isApiError = (e: unknown, code: number): boolean => e instanceof JetStreamApiError && e.code === code;

/** JetStream API error codes of nats-server 2.9 (server/errors.json) that ensure… handles. */
export const ApiCode = {
  ClusterNoPeers: 10005,
  ConsumerNameExist: 10013,
  InsufficientResources: 10023,
  StreamNameExist: 10058,
  StreamSubjectOverlap: 10065,
  StreamReplicasNotUpdatable: 10061,
  StreamReplicasNotSupported: 10074,
  ConsumerReplicasExceedsStream: 10126,
  /** 2.10 and later, when a create meets an existing consumer with another configuration. */
  ConsumerAlreadyExists: 10148,
  /** An invalid stream update, such as 2.10's and 2.11's refusal to change max_consumers. */
  StreamInvalidConfig: 10052,
} as const;

/**
 * The cluster has fewer JetStream servers available than the replicas asked for: a configuration error,
 * or a cluster still forming (seen on nats-server 2.15.1 just after its meta leader was agreed), which
 * start-up waits out for a while (streams/index.ts).
 */
export class TooFewServersError extends ConfigError {}

/** A replica count the servers cannot give, as one line saying what to do. */
function replicasError(e: unknown, opts: EnsureOptions | undefined, what: string): ConfigError | undefined {
  const n = opts?.replicas ?? 1;
  if (isApiError(e, ApiCode.StreamReplicasNotSupported) || isApiError(e, ApiCode.StreamReplicasNotUpdatable)) {
    return new ConfigError('HOOKSTREAM_REPLICAS', `is ${n} but NATS is a single server, not a cluster (${what}); set it to 1, or run a NATS cluster of at least ${n} JetStream servers`);
  }
  if (isApiError(e, ApiCode.InsufficientResources) || isApiError(e, ApiCode.ClusterNoPeers)) {
    return new TooFewServersError('HOOKSTREAM_REPLICAS', `is ${n} but the NATS cluster has fewer JetStream servers available (${what}); start the missing servers or lower it to the number of servers`);
  }
  return undefined;
}

const differs = <T extends object>(current: T, wanted: Partial<T>): boolean =>
  (Object.keys(wanted) as (keyof T)[]).some((k) => JSON.stringify(current[k]) !== JSON.stringify(wanted[k]));

/**
 * `def` with the options applied. Without options the replica count is left as the server has it, so a
 * caller that does not know HOOKSTREAM_REPLICAS never scales a stream down by accident.
 */
const withReplicas = <T extends object>(def: T, opts: EnsureOptions | undefined): T =>
  opts ? { ...def, num_replicas: opts.replicas } : def;

export async function ensureStream(jsm: JetStreamManager, definition: StreamDefinition, opts?: EnsureOptions): Promise<void> {
  const def = withReplicas(definition, opts);
  try {
    // Two rounds: a create that loses a race to another process becomes an update (or nothing).
    for (let round = 0; ; round++) {
      let current: StreamConfig | undefined;
      try {
        current = (await jsm.streams.info(def.name)).config;
      } catch (e) {
        if (!isApiError(e, JetStreamApiCodes.StreamNotFound)) throw e;
      }
      if (current) {
        // On a cluster, a change of num_replicas is applied in place: nats-server 2.9 adds or removes
        // peers and moves the stream's durable consumers along (jsClusteredStreamUpdateRequest).
        if (differs(current, def)) {
          await jsm.streams.update(def.name, { ...current, ...def });
          if (current.num_replicas !== def.num_replicas) await waitForStreamLeader(jsm, def.name);
        }
        return;
      }
      try {
        await jsm.streams.add(def);
        return;
      } catch (e) {
        // Another process created it between our read and our create: read it again and compare. A
        // concurrent create of the same stream can also be answered "subjects overlap" (seen on CI); a
        // real overlap with another stream fails the second round.
        if (round === 0 && (isApiError(e, ApiCode.StreamNameExist) || isApiError(e, ApiCode.StreamSubjectOverlap))) continue;
        throw e;
      }
    }
  } catch (e) {
    throw replicasError(e, opts, `stream ${def.name}`) ?? e;
  }
}

/**
 * ensureStream for a stream that caps its consumers (`max_consumers`): one made before the cap, on a server
 * that cannot change it (2.10, 2.11), stays without it (such a server has no default cap either). Any
 * other refusal comes back.
 */
export async function ensureCappedStream(jsm: JetStreamManager, def: StreamDefinition, opts?: EnsureOptions): Promise<void> {
  try {
    await ensureStream(jsm, def, opts);
  } catch (e) {
    if (!isApiError(e, ApiCode.StreamInvalidConfig) || def.max_consumers === undefined) throw e;
    const { max_consumers: _unchanged, ...rest } = def;
    await ensureStream(jsm, rest, opts);
  }
}

/**
 * After a change of replicas the stream has no leader for a second or two while its new group elects
 * one, and requests about it (its consumers' updates) time out: wait for the leader.
 */
async function waitForStreamLeader(jsm: JetStreamManager, name: string, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      const info = await jsm.streams.info(name);
      const replicas = info.cluster?.replicas ?? [];
      if (!info.cluster || (info.cluster.leader && replicas.length === (info.config.num_replicas ?? 1) - 1 && replicas.every((r) => r.current))) return;
    } catch (e) {
      if (Date.now() > until) throw e;
    }
    if (Date.now() > until) throw new Error(`stream ${name} has no leader with all its replicas ${timeoutMs / 1000} s after a change of replicas`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * The consumers of a stream. A consumer deleted while the server builds a page of the listing is in that
 * page as `null` (nats-server lists a closed consumer's info, which is nil): skipped, so a listing that
 * races a delete yields the consumers that still exist.
 */
export async function* listConsumers(jsm: JetStreamManager, stream: string): AsyncGenerator<ConsumerInfo> {
  for await (const ci of jsm.consumers.list(stream)) if (ci) yield ci;
}

export type DurableDefinition = Partial<ConsumerConfig> & { durable_name: string };

/** Create or update a durable consumer so its settings match `def`. */
export async function ensureConsumer(
  jsm: JetStreamManager, stream: string, definition: DurableDefinition, known?: ConsumerConfig, opts?: EnsureOptions,
): Promise<void> {
  const def = withReplicas(definition, opts);
  try {
    let current = known;
    for (let round = 0; ; round++) {
      if (!current) {
        try {
          current = (await jsm.consumers.info(stream, def.durable_name)).config;
        } catch (e) {
          if (!isApiError(e, JetStreamApiCodes.ConsumerNotFound)) throw e;
        }
      }
      if (current) {
        if (differs(current, def)) await jsm.consumers.update(stream, def.durable_name, def);
        return;
      }
      try {
        // nats-server 2.9 answers a create of an existing durable with the same settings as success.
        await jsm.consumers.add(stream, def);
        return;
      } catch (e) {
        if (round === 0 && (isApiError(e, ApiCode.ConsumerNameExist) || isApiError(e, ApiCode.ConsumerAlreadyExists))) continue;
        throw e;
      }
    }
  } catch (e) {
    if (isApiError(e, ApiCode.ConsumerReplicasExceedsStream)) {
      throw new ConfigError('HOOKSTREAM_REPLICAS', `is ${opts?.replicas ?? 1} but stream ${stream} has fewer replicas; start hookstream with the same HOOKSTREAM_REPLICAS everywhere`);
    }
    throw replicasError(e, opts, `consumer ${def.durable_name} of ${stream}`) ?? e;
  }
}
