// The HTTP shapes of the API (XxxIn / XxxOut, snake_case) and the one conversion from endpoint state.
// Signing secrets appear only in the two Out types that carry `signing_secret`.
import type { EventPattern } from '../domain/catalogue.ts';
import type { EndpointState, EndpointStatus } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';

export interface EndpointOut {
  id: EndpointId;
  url: string;
  events: EventPattern[];
  description: string | null;
  status: EndpointStatus;
  created_at: string;
  updated_at: string;
}

export interface EndpointCreatedOut extends EndpointOut {
  signing_secret: string;
}

export interface EndpointListOut {
  data: EndpointOut[];
  has_more: boolean;
  next_cursor: string | null;
}

export interface RotateSecretOut {
  id: EndpointId;
  signing_secret: string;
}

/** Accepted fields of each request body; anything else is refused as unknown. */
export const ENDPOINT_IN_FIELDS = ['url', 'events', 'description'] as const;
export const ROTATE_SECRET_IN_FIELDS = ['grace_period_seconds'] as const;

/** Both the projection's rows and the command side's state carry these fields. */
type EndpointView = Pick<EndpointState, 'id' | 'url' | 'events' | 'description' | 'status' | 'createdAt' | 'updatedAt'>;

export const endpointOut = (e: EndpointView): EndpointOut => ({
  id: e.id,
  url: e.url,
  events: e.events,
  description: e.description,
  status: e.status,
  created_at: e.createdAt,
  updated_at: e.updatedAt,
});
