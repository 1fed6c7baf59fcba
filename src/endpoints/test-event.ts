// A test event for one endpoint (the portal's "Send test event"): a `webhook.test` delivery stored in the
// endpoint's queue as the router stores a routed event's, so the delivery role signs, retries and logs it
// like any other. It is in no EVENTS message: its webhook-id is random, and no other endpoint gets it.
import { randomBytes } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { deliveryAddress, DeliveryHeader } from '../../streams/deliveries.ts';
import { EndpointStatus } from '../domain/endpoint.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';
import { randomWebhookId } from '../domain/webhook-id.ts';
import { conflict } from '../errors.ts';
import type { EndpointStore } from './store.ts';

export const TEST_EVENT_TYPE = 'webhook.test';

export interface TestEvents {
  /** Queue a test delivery to the tenant's active endpoint `id`; its webhook-id. Counts as an endpoint write. */
  send(tenant: TenantId, id: EndpointId): Promise<{ webhookId: string }>;
}

export function createTestEvents(deps: {
  js: JetStreamClient;
  shards: number;
  store: Pick<EndpointStore, 'get'>;
  /** The tenant's endpoint-writes quota (src/tenants/quotas.ts): test events flood no receiver. */
  write(tenant: TenantId): Promise<void>;
}): TestEvents {
  return {
    async send(tenant, id) {
      await deps.write(tenant);
      const endpoint = await deps.store.get(tenant, id);
      if (endpoint.status !== EndpointStatus.Active) throw conflict(`endpoint ${id} is ${endpoint.status}: a test event is sent to an active endpoint only`);
      const webhookId = randomWebhookId(randomBytes(26));
      const h = natsHeaders();
      h.set(DeliveryHeader.WebhookId, webhookId);
      h.set(DeliveryHeader.Event, TEST_EVENT_TYPE);
      h.set(DeliveryHeader.Tenant, tenant);
      h.set(DeliveryHeader.Endpoint, id);
      h.set(DeliveryHeader.EndpointVersion, String(endpoint.version));
      const body = JSON.stringify({ type: TEST_EVENT_TYPE, data: { endpointId: id, message: 'A test event: your endpoint receives and verifies webhooks.' } });
      await deps.js.publish(deliveryAddress(id, deps.shards).subject, body, { msgID: `${webhookId}.${id}`, headers: h });
      return { webhookId };
    },
  };
}
