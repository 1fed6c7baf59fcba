// The OpenAPI 3.1 description of the whole HTTP API, served at GET /v1/openapi.json. The event lists
// come from the catalogue itself, and test/api-openapi.test.ts checks that every registered route is
// here (and nothing else) and that every response the tests see matches its schema.
import { EVENT_NAMES, WILDCARDS } from '../domain/catalogue.ts';
import { MAX_DESCRIPTION, MAX_PATTERNS, MAX_RATE_LIMIT, MAX_URL, MIN_RATE_LIMIT } from '../domain/endpoint.ts';
import { MAX_GRACE_MS } from '../endpoints/store.ts';
import { DEFAULT_LIMIT, MAX_LIMIT } from './query.ts';

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** An endpoint as every response shows it (src/api/wire.ts). */
const ENDPOINT_PROPERTIES = {
  id: { type: 'string', pattern: '^webhook_[0-9a-z]+$' },
  url: { type: 'string' },
  events: { type: 'array', items: ref('EventPattern') },
  description: { type: ['string', 'null'] },
  status: {
    type: 'string', enum: ['active', 'disabled', 'deleted'],
    description: '`disabled`: hookstream stopped sending (see `disabled_reason`) and keeps new deliveries queued until a restore.',
  },
  signature_scheme: { type: 'string', enum: ['v1', 'v1a'], description: '`v1`: HMAC-SHA256 with a `whsec_` secret; `v1a`: ed25519, verified with `signing_public_key`.' },
  rate_limit: { type: ['integer', 'null'], minimum: MIN_RATE_LIMIT, maximum: MAX_RATE_LIMIT, description: 'Deliveries per second at most; null for no limit.' },
  ordering: { type: 'string', enum: ['none', 'key'], description: '`key`: the events of each ordering key are delivered in order; `none`: unordered.' },
  disabled_reason: {
    type: ['string', 'null'], enum: ['gone', 'failing', 'operator', null],
    description: 'Set while disabled: `gone` (the endpoint answered 410 Gone), `failing` (every attempt failed for the deployment\'s HOOKSTREAM_DISABLE_AFTER, default 5 days) or `operator` (the service\'s operators disabled it).',
  },
  disabled_at: { type: ['string', 'null'], format: 'date-time' },
  created_at: { type: 'string', format: 'date-time' },
  updated_at: { type: 'string', format: 'date-time' },
};
const ENDPOINT_REQUIRED = Object.keys(ENDPOINT_PROPERTIES);
const SIGNING_PUBLIC_KEY = {
  type: 'string', pattern: '^whpk_[A-Za-z0-9+/]{43}=$',
  description: 'Standard Webhooks v1a public key: `whpk_` + base64 of the 32-byte ed25519 public key. Not secret.',
};
const scheme = (s: string) => ({ type: 'string', enum: [s] });
// The two shapes of an endpoint, spelled out rather than allOf: additionalProperties: false would reject
// the other schema's fields. `extra` adds the create answer's secret.
const endpointV1 = (extra: Record<string, Json> = {}) => ({
  type: 'object', additionalProperties: false,
  required: [...ENDPOINT_REQUIRED, ...Object.keys(extra)],
  properties: { ...ENDPOINT_PROPERTIES, signature_scheme: scheme('v1'), ...extra },
});
const endpointV1a = () => ({
  type: 'object', additionalProperties: false,
  required: [...ENDPOINT_REQUIRED, 'signing_public_key'],
  properties: { ...ENDPOINT_PROPERTIES, signature_scheme: scheme('v1a'), signing_public_key: SIGNING_PUBLIC_KEY },
});
const response = (name: string) => ({ $ref: `#/components/responses/${name}` });
const json = (schema: Json, description: string) => ({ description, content: { 'application/json': { schema } } });

/** The Idempotency-Key header of every POST (src/api/idempotency.ts); `retry`: what a retry is answered. */
const idempotencyKey = (retry: string) => ({
  name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', minLength: 1, maxLength: 255 },
  description: `Printable ASCII (a UUID, say); keys are per tenant. A request retried with the same key and body within 24 hours ${retry}, with \`Idempotent-Replayed: true\`. The same key with another request answers 409, as does a retry while the first is still running; a malformed key 400. A request that failed keeps nothing: its retry runs again.`,
});

const idParameter = {
  name: 'id', in: 'path', required: true,
  description: 'Webhook endpoint id (`webhook_…`). An id of another tenant answers 404, like one that does not exist.',
  schema: { type: 'string' },
};

/** Errors every authenticated operation may answer (400: a query parameter the operation does not take). */
const common = { '400': response('BadRequest'), '401': response('Unauthorized'), '429': response('RateLimited'), '500': response('Internal'), '503': response('Unavailable') };
const withBody = { '400': response('BadRequest'), '413': response('PayloadTooLarge'), '415': response('UnsupportedMediaType'), '422': response('ValidationFailed') };

const endpointFields = {
  url: { type: 'string', maxLength: MAX_URL, description: 'https URL that receives the deliveries; loopback, private, link-local and metadata addresses are refused unless the deployment sets HOOKSTREAM_ALLOW_PRIVATE_TARGETS=1.' },
  events: { type: 'array', minItems: 1, maxItems: MAX_PATTERNS, items: ref('EventPattern'), description: 'Event names and wildcards the endpoint subscribes to.' },
  description: { type: ['string', 'null'], maxLength: MAX_DESCRIPTION },
  rate_limit: {
    type: ['integer', 'null'], minimum: MIN_RATE_LIMIT, maximum: MAX_RATE_LIMIT,
    description: 'Deliveries per second at most, across every delivery process; null (the default) for no limit. A rate-limited backlog waits in the queue and is not counted as failed attempts.',
  },
  ordering: {
    type: 'string', enum: ['none', 'key'], default: 'none',
    description: '`key`: events with the same ordering key (the producer\'s `Hookstream-Ordering-Key` header, else `data.userId` of `user.*` events, `data.organizationId` of `organization.*`, `organizationMembership.*` and `organizationInvitation.*` events) are delivered in the order they were published: a later one is not attempted before the earlier one got a 2xx or became a dead letter. Different keys go on in parallel; events without a key are unordered. `none` (the default): every delivery goes on its own retry schedule.',
  },
};
const createFields = {
  ...endpointFields,
  signature_scheme: {
    type: 'string', enum: ['v1', 'v1a'], default: 'v1',
    description: 'How deliveries are signed, fixed for the life of the endpoint. `v1`: HMAC-SHA256 with a `whsec_` secret, returned once. `v1a`: ed25519 with a key pair hookstream generates; the private key never leaves it, and receivers verify with `signing_public_key`.',
  },
};

export const OPENAPI_DOCUMENT = {
  openapi: '3.1.0',
  info: {
    title: 'hookstream management API',
    version: '1',
    description: [
      'Manage the webhook endpoints (subscriptions) of a tenant. Every /v1 route needs `Authorization: Bearer <API key>`;',
      'a key belongs to one tenant and sees only its endpoints. Every failure answers the same envelope',
      '`{"error": {"code", "message", "details"}}`; a method a path does not support answers 405 with `Allow`.',
      'Every response carries `x-request-id`. Writes answer with the state after the write.',
    ].join(' '),
  },
  servers: [{ url: '/' }],
  security: [{ apiKey: [] }],
  tags: [{ name: 'webhooks' }, { name: 'catalogue' }, { name: 'operations' }],
  paths: {
    '/v1/openapi.json': {
      get: {
        operationId: 'getOpenApi', tags: ['operations'], summary: 'This document.',
        responses: { '200': json({ type: 'object' }, 'The OpenAPI 3.1 document.'), ...common },
      },
    },
    '/v1/event-types': {
      get: {
        operationId: 'listEventTypes', tags: ['catalogue'], summary: 'The event names and the subscription wildcards.',
        responses: { '200': json(ref('EventTypes'), 'The catalogue.'), ...common },
      },
    },
    '/v1/webhooks': {
      get: {
        operationId: 'listWebhooks', tags: ['webhooks'], summary: "The tenant's endpoints, newest first, one page at a time.",
        description: 'Cursor pagination: pass `next_cursor` as `cursor` for the next page. Endpoints created while paging appear on the first page, never in later ones, so no item is missed or repeated.',
        parameters: [
          { name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT } },
          { name: 'cursor', in: 'query', required: false, schema: { type: 'string' }, description: '`next_cursor` of the previous page.' },
        ],
        responses: { '200': json(ref('EndpointList'), 'One page.'), ...common },
      },
      post: {
        operationId: 'createWebhook', tags: ['webhooks'], summary: 'Subscribe an endpoint to events.',
        parameters: [idempotencyKey('answers the first create\'s endpoint, signing secret included, instead of creating a second one')],
        requestBody: { required: true, content: { 'application/json': { schema: ref('EndpointIn') } } },
        responses: { '201': json(ref('EndpointCreated'), 'The endpoint; for v1 with its signing secret, shown this once (and again to a retry under the same Idempotency-Key); for v1a with its public key.'), '409': response('Conflict'), ...withBody, ...common },
      },
    },
    '/v1/webhooks/{id}': {
      parameters: [idParameter],
      get: {
        operationId: 'getWebhook', tags: ['webhooks'], summary: 'One endpoint.',
        responses: { '200': json(ref('Endpoint'), 'The endpoint.'), '404': response('NotFound'), ...common },
      },
      patch: {
        operationId: 'updateWebhook', tags: ['webhooks'], summary: "Change an active or disabled endpoint's url, events, description or rate limit.",
        description: 'A disabled endpoint stays disabled (fix its URL, then restore it). 409 when it is deleted.',
        requestBody: { required: false, content: { 'application/json': { schema: ref('EndpointPatch') } } },
        responses: { '200': json(ref('Endpoint'), 'The endpoint after the change.'), '404': response('NotFound'), '409': response('Conflict'), ...withBody, ...common },
      },
      delete: {
        operationId: 'deleteWebhook', tags: ['webhooks'], summary: 'Stop deliveries to an endpoint.',
        description: 'The endpoint moves to `deleted`, receives nothing more (pending deliveries are dropped, also those held while it was disabled) and stays visible so it can be restored. 409 when it is already deleted.',
        responses: { '200': json(ref('Endpoint'), 'The endpoint, now deleted.'), '404': response('NotFound'), '409': response('Conflict'), ...common },
      },
    },
    '/v1/webhooks/{id}/restore': {
      parameters: [idParameter],
      post: {
        operationId: 'restoreWebhook', tags: ['webhooks'], summary: 'Reactivate a deleted or disabled endpoint.',
        description: 'The endpoint is `active` again. A deleted one receives events published from now on; a disabled one also receives the deliveries held while it was disabled. 409 when it is active. No body (or `{}`).',
        parameters: [idempotencyKey('answers the first restore\'s answer (not a 409 for the endpoint it made active)')],
        responses: { '200': json(ref('Endpoint'), 'The endpoint, active again.'), '404': response('NotFound'), '409': response('Conflict'), ...withBody, ...common },
      },
    },
    '/v1/webhooks/{id}/rotate-secret': {
      parameters: [idParameter],
      post: {
        operationId: 'rotateWebhookSecret', tags: ['webhooks'], summary: 'Replace the signing secret (v1) or key pair (v1a).',
        description: 'During the grace period deliveries carry two space-separated signatures, new and old, so receivers can switch without losing a delivery; after it, only the new one. A v1a endpoint gets a new ed25519 key pair and the answer holds its public key.',
        parameters: [idempotencyKey('answers the first rotation\'s new secret or public key instead of rotating again')],
        requestBody: { required: false, content: { 'application/json': { schema: ref('RotateSecretIn') } } },
        responses: { '200': json(ref('RotateSecretOut'), 'The new signing secret, shown this once (v1; again to a retry under the same Idempotency-Key), or the new public key (v1a).'), '404': response('NotFound'), '409': response('Conflict'), ...withBody, ...common },
      },
    },
    '/v1/webhooks/{id}/test': {
      parameters: [idParameter],
      post: {
        operationId: 'sendTestEvent', tags: ['webhooks'], summary: 'Send a signed `webhook.test` event to one active endpoint.',
        description: 'Queued for that endpoint only and delivered like any event (signed, retried, logged): `{"type":"webhook.test","data":{"endpointId":…,"message":…}}`. It counts as an endpoint write against the tenant\'s `writes_per_second`. 409 when the endpoint is not active. No body (or `{}`).',
        requestBody: { required: false, content: { 'application/json': { schema: { type: 'object', additionalProperties: false } } } },
        responses: { '202': json(ref('TestEventSent'), 'Queued: the webhook-id the delivery carries.'), '404': response('NotFound'), '409': response('Conflict'), ...withBody, ...common },
      },
    },
    '/v1/portal/sessions': {
      post: {
        operationId: 'createPortalSession', tags: ['webhooks'], summary: 'A link to the tenant portal, for your dashboard to open or frame.',
        description: 'The link opens the endpoints portal for this key\'s tenant: once, within 5 minutes. The session it starts lasts an hour, acts as this API key (and ends when the key is revoked), and manages endpoints only: no delivery history. Origins that may frame it are set by the deployment (PORTAL_FRAME_ANCESTORS). No body (or `{}`).',
        parameters: [idempotencyKey('answers the same link instead of making another (still usable once, until it expires); under another API key of the tenant the key is another request')],
        requestBody: { required: false, content: { 'application/json': { schema: { type: 'object', additionalProperties: false } } } },
        responses: { '201': json(ref('PortalSession'), 'The single-use link and when it expires.'), '409': response('Conflict'), ...withBody, ...common },
      },
    },
  },
  components: {
    securitySchemes: {
      apiKey: { type: 'http', scheme: 'bearer', description: 'An API key (`hs_live_…`) from `hookstream api-keys create --tenant T`.' },
    },
    schemas: {
      EventName: { type: 'string', enum: [...EVENT_NAMES] },
      EventPattern: { type: 'string', enum: [...EVENT_NAMES, ...WILDCARDS], description: 'An event name or one of the wildcards.' },
      Endpoint: { oneOf: [endpointV1(), endpointV1a()] },
      // v1: with its signing secret (shown this once); v1a: no secret, only the public key every read shows.
      EndpointCreated: { oneOf: [endpointV1({ signing_secret: ref('SigningSecret') }), endpointV1a()] },
      TestEventSent: {
        type: 'object', additionalProperties: false, required: ['id', 'webhook_id'],
        properties: { id: { type: 'string' }, webhook_id: { type: 'string', pattern: '^msg_' } },
      },
      PortalSession: {
        type: 'object', additionalProperties: false, required: ['url', 'expires_at'],
        properties: { url: { type: 'string', format: 'uri' }, expires_at: { type: 'string', format: 'date-time' } },
      },
      EndpointList: {
        type: 'object', additionalProperties: false, required: ['data', 'has_more', 'next_cursor'],
        properties: {
          data: { type: 'array', items: ref('Endpoint') },
          has_more: { type: 'boolean' },
          next_cursor: { type: ['string', 'null'] },
        },
      },
      EndpointIn: { type: 'object', additionalProperties: false, required: ['url', 'events'], properties: createFields },
      EndpointPatch: { type: 'object', additionalProperties: false, properties: endpointFields },
      RotateSecretIn: {
        type: 'object', additionalProperties: false,
        properties: {
          grace_period_seconds: {
            type: 'integer', minimum: 0, maximum: MAX_GRACE_MS / 1000, default: 86400,
            description: 'How long deliveries stay signed with the old secret as well.',
          },
        },
      },
      RotateSecretOut: {
        oneOf: [
          {
            type: 'object', additionalProperties: false, required: ['id', 'signing_secret'],
            properties: { id: { type: 'string', pattern: '^webhook_[0-9a-z]+$' }, signing_secret: ref('SigningSecret') },
          },
          {
            type: 'object', additionalProperties: false, required: ['id', 'signing_public_key'],
            properties: { id: { type: 'string', pattern: '^webhook_[0-9a-z]+$' }, signing_public_key: SIGNING_PUBLIC_KEY },
          },
        ],
      },
      SigningSecret: {
        type: 'string', pattern: '^whsec_[A-Za-z0-9+/=]+$',
        description: 'Standard Webhooks secret: HMAC-SHA256 key is the base64 part after `whsec_`.',
      },
      EventTypes: {
        type: 'object', additionalProperties: false, required: ['events', 'wildcards'],
        properties: {
          events: { type: 'array', items: ref('EventName') },
          wildcards: {
            type: 'array',
            items: {
              type: 'object', additionalProperties: false, required: ['pattern', 'matches'],
              properties: { pattern: { type: 'string', enum: [...WILDCARDS] }, matches: { type: 'array', items: ref('EventName') } },
            },
          },
        },
      },
      Error: {
        type: 'object', additionalProperties: false, required: ['error'],
        properties: {
          error: {
            type: 'object', additionalProperties: false, required: ['code', 'message', 'details'],
            properties: {
              code: {
                type: 'string',
                enum: ['bad_request', 'unauthorized', 'not_found', 'method_not_allowed', 'conflict', 'payload_too_large',
                  'unsupported_media_type', 'validation_failed', 'rate_limited', 'quota_exceeded', 'internal_error', 'unavailable'],
              },
              message: { type: 'string' },
              limit: { type: 'string', enum: ['endpoints', 'writes_per_second'], description: 'With quota_exceeded: the tenant quota reached.' },
              details: {
                type: 'array',
                items: {
                  type: 'object', additionalProperties: false, required: ['field', 'message'],
                  properties: { field: { type: 'string' }, message: { type: 'string' } },
                },
              },
            },
          },
        },
      },
    },
    responses: {
      BadRequest: json(ref('Error'), 'Malformed JSON, or a query parameter that is unknown, repeated or out of range.'),
      Unauthorized: json(ref('Error'), 'Missing, malformed, unknown or revoked API key.'),
      NotFound: json(ref('Error'), 'No such endpoint for this tenant.'),
      Conflict: json(ref('Error'), 'The endpoint is not in a state that allows this (or changed concurrently), or the Idempotency-Key belongs to another request or to one still running.'),
      PayloadTooLarge: json(ref('Error'), 'The body is larger than 64 KB.'),
      UnsupportedMediaType: json(ref('Error'), 'The body is not application/json.'),
      ValidationFailed: json(ref('Error'), 'One or more fields are invalid or unknown; `details` names each. Or `quota_exceeded` with `limit: endpoints`: the tenant has as many endpoints as its quota allows.'),
      RateLimited: {
        ...json(ref('Error'), 'Too many requests for this API key or from this address, or `quota_exceeded` with `limit: writes_per_second`: the tenant\'s endpoint writes a second.'),
        headers: { 'retry-after': { schema: { type: 'integer' }, description: 'Seconds to wait.' } },
      },
      Internal: json(ref('Error'), 'An unexpected failure; quote the x-request-id header when reporting it.'),
      Unavailable: {
        ...json(ref('Error'), 'NATS or Postgres is unavailable, or the read model is catching up.'),
        headers: { 'retry-after': { schema: { type: 'integer' }, description: 'Seconds to wait.' } },
      },
    },
  },
};
