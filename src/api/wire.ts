// The HTTP shapes of the API (XxxIn / XxxOut, snake_case) and the one conversion from endpoint state.
// Signing secrets appear only in the two Out types that carry `signing_secret`, and only for v1
// endpoints; a v1a endpoint's `signing_public_key` is not secret and every read shows it.
import type { EventPattern } from '../domain/catalogue.ts';
import type { DisabledReason, EndpointState, EndpointStatus, Ordering } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { SignatureScheme } from '../domain/signature.ts';

export interface EndpointOut {
  id: EndpointId;
  url: string;
  events: EventPattern[];
  description: string | null;
  status: EndpointStatus;
  signature_scheme: SignatureScheme;
  /** v1a only. */
  signing_public_key?: string;
  /** Deliveries per second at most, or null. */
  rate_limit: number | null;
  /** `key`: each ordering key's deliveries in order (issue 21); `none`: unordered. */
  ordering: Ordering;
  /** Why and when hookstream disabled it; both null unless `status` is disabled. */
  disabled_reason: DisabledReason | null;
  disabled_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface EndpointCreatedOut extends EndpointOut {
  /** v1 only: shown this once. */
  signing_secret?: string;
}

export interface EndpointListOut {
  data: EndpointOut[];
  has_more: boolean;
  next_cursor: string | null;
}

/** v1: the new `signing_secret`; v1a: the new pair's `signing_public_key`. */
export interface RotateSecretOut {
  id: EndpointId;
  signing_secret?: string;
  signing_public_key?: string;
}

/** Accepted fields of each request body; anything else is refused as unknown. */
export const ENDPOINT_IN_FIELDS = ['url', 'events', 'description', 'rate_limit', 'ordering'] as const;
/** The scheme is chosen at creation and never changed, so only create takes it. */
export const ENDPOINT_CREATE_IN_FIELDS = [...ENDPOINT_IN_FIELDS, 'signature_scheme'] as const;
export const ROTATE_SECRET_IN_FIELDS = ['grace_period_seconds'] as const;

/** Both the projection's rows and the command side's state carry these fields. */
type EndpointView = Pick<
  EndpointState,
  'id' | 'url' | 'events' | 'description' | 'status' | 'signatureScheme' | 'signingPublicKey' | 'rateLimit' | 'ordering' | 'disabledReason' | 'disabledAt' | 'createdAt' | 'updatedAt'
>;

export const endpointOut = (e: EndpointView): EndpointOut => ({
  id: e.id,
  url: e.url,
  events: e.events,
  description: e.description,
  status: e.status,
  signature_scheme: e.signatureScheme,
  ...(e.signatureScheme === SignatureScheme.V1a && e.signingPublicKey ? { signing_public_key: e.signingPublicKey } : {}),
  rate_limit: e.rateLimit,
  ordering: e.ordering,
  disabled_reason: e.disabledReason,
  disabled_at: e.disabledAt,
  created_at: e.createdAt,
  updated_at: e.updatedAt,
});
