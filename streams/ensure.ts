// Idempotent creation of the streams and consumers hookstream needs: create when missing, update
// when the definition changed, leave alone otherwise. Safe to run from every instance at every start.
import { JetStreamApiCodes, JetStreamApiError, type ConsumerConfig, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';

export type StreamDefinition = Partial<StreamConfig> & Pick<StreamConfig, 'name' | 'subjects'>;

export const isApiError = (e: unknown, code: number): boolean => e instanceof JetStreamApiError && e.code === code;

export async function ensureStream(jsm: JetStreamManager, def: StreamDefinition): Promise<void> {
  try {
    const info = await jsm.streams.info(def.name);
    const drifted = (Object.keys(def) as (keyof StreamDefinition)[]).some(
      (k) => JSON.stringify(info.config[k]) !== JSON.stringify(def[k]),
    );
    if (drifted) await jsm.streams.update(def.name, { ...info.config, ...def });
  } catch (e) {
    if (!isApiError(e, JetStreamApiCodes.StreamNotFound)) throw e;
    await jsm.streams.add(def);
  }
}

export type DurableDefinition = Partial<ConsumerConfig> & { durable_name: string };

/** Create or update a durable consumer so its settings match `def`. */
export async function ensureConsumer(jsm: JetStreamManager, stream: string, def: DurableDefinition, known?: ConsumerConfig): Promise<void> {
  let current = known;
  if (!current) {
    try {
      current = (await jsm.consumers.info(stream, def.durable_name)).config;
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.ConsumerNotFound)) throw e;
    }
  }
  if (!current) {
    await jsm.consumers.add(stream, def);
    return;
  }
  const drifted = (Object.keys(def) as (keyof DurableDefinition)[]).some(
    (k) => JSON.stringify(current[k]) !== JSON.stringify(def[k]),
  );
  if (drifted) await jsm.consumers.update(stream, def.durable_name, def);
}
