// What the API's middleware leaves on ctx.state for the handlers below it.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { TenantId } from '../domain/ids.ts';
import type { ApiKeyId } from '../apikeys/key.ts';

export interface ApiState {
  requestId: string;
  /** A fork of the ORM's EntityManager for this request only. */
  em: EntityManager;
  /** Set by authentication on every /v1 route. */
  tenant: TenantId;
  keyId: ApiKeyId;
}
