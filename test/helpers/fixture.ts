// What most service test files set up around the harness: loopback receivers, a publisher of events,
// operator (admin) clients, and one `closeAll` for all of it in `test.after.always`.
//
//   let h: TestService;
//   test.before(async () => { h = await startTestService('label', { …env }); admin = (await h.operator()).admin; });
//   test.after.always(() => h?.closeAll());
import type { ExecutionContext } from 'ava';
import type { JetStreamPublishOptions, PubAck } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectAsOperator, createAdminClient, type AdminClient } from '../../src/admin/client.ts';
import { createApiKey } from '../../src/apikeys/store.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { startHarness, type Harness, type HarnessOptions } from './service.ts';
import { startReceiver, type Receiver, type Responder } from './receiver.ts';
import { apiClient, type ApiClient } from './api-client.ts';

/** An operator's NATS connection (the CLI's inbox prefix) and an admin client on it. */
export interface Operator {
  nc: NatsConnection;
  admin: AdminClient;
  /** Drains the connection. */
  close(): Promise<void>;
}

export interface OperatorOptions {
  /** The admin client's request timeout (the client's default when absent). */
  timeoutMs?: number;
  /** Credentials, for a server running nats.conf. */
  user?: string;
  password?: string;
}

/** Connect as the operator to the harness's nats-server (or a NATS URL) and make an admin client. */
export async function operatorClient(target: Harness | string, opts: OperatorOptions = {}): Promise<Operator> {
  const url = typeof target === 'string' ? target : target.nats.url;
  const nc = await connectAsOperator({ url, user: opts.user, password: opts.password });
  const admin = createAdminClient(nc, opts.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs });
  return { nc, admin, close: () => nc.drain() };
}

/**
 * A management API client for `tenant` with a new API key (named `keyName`) on the harness's API role;
 * with `t`, every response the OpenAPI document does not describe fails the test.
 */
export async function tenantClient(h: Harness, t: ExecutionContext | undefined, tenant: string, keyName: string | null = null): Promise<ApiClient> {
  const { key } = await createApiKey(h.service.orm!.em.fork(), tenant as TenantId, keyName);
  return apiClient(h.service.api!.url, key, t);
}

export interface TestService extends Harness {
  /** A loopback receiver (answering 200 unless told), closed by `closeAll` unless closed before. */
  receiver(respond?: Responder): Promise<Receiver>;
  /** Publish an event as a producer would: `data` as JSON on `events.<tenant>.<type>`. */
  publish(tenant: string, type: string, data: unknown, opts?: Partial<JetStreamPublishOptions>): Promise<PubAck>;
  /** Publish a body as it is (for malformed or non-JSON events). */
  publishRaw(tenant: string, type: string, body: string | Uint8Array): Promise<PubAck>;
  /** An operator client on this service's NATS, drained by `closeAll`. */
  operator(opts?: OperatorOptions): Promise<Operator>;
  /** Drain the operator clients, close the receivers, then stop the service and remove its servers. */
  closeAll(): Promise<void>;
}

/** The harness (see `startHarness`) with receivers, publishing and operator clients tracked for `closeAll`. */
export async function startTestService(label: string, env: Record<string, string> = {}, opts: HarnessOptions = {}): Promise<TestService> {
  const harness = await startHarness(label, env, opts);
  const receivers = new Set<Receiver>();
  const operators: Operator[] = [];
  const extra: Omit<TestService, keyof Harness> = {
    async receiver(respond) {
      const r = await startReceiver(respond);
      const close = r.close;
      r.close = async () => { receivers.delete(r); await close(); };
      receivers.add(r);
      return r;
    },
    publish: (tenant, type, data, publishOpts) =>
      harness.service.js.publish(`events.${tenant}.${type}`, JSON.stringify(data), publishOpts),
    publishRaw: (tenant, type, body) => harness.service.js.publish(`events.${tenant}.${type}`, body),
    async operator(operatorOpts) {
      const o = await operatorClient(harness, operatorOpts);
      operators.push(o);
      return o;
    },
    async closeAll() {
      for (const o of operators.splice(0)) await o.close();
      await Promise.all([...receivers].map((r) => r.close()));
      await harness.close();
    },
  };
  // The harness object itself, so that `restart` (which replaces its service) is seen through it.
  return Object.assign(harness, extra);
}
