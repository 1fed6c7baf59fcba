// Tenant-scoped reads of the endpoint projection: the only way to load endpoint rows (like Svix's
// secure_find), so no read can forget the tenant. Another tenant's id looks exactly like a missing one.
import type { EntityManager } from '@mikro-orm/postgresql';
import { EndpointRecord } from '../db/entities.ts';
import { columnsToRow, ENDPOINT_COLUMNS, recordToRow, type EndpointColumns, type EndpointRow } from '../db/endpoint-rows.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';

export type { EndpointRow } from '../db/endpoint-rows.ts';

export interface EndpointPage {
  /** Newest first. */
  rows: EndpointRow[];
  hasMore: boolean;
  /** Pass as `cursor` for the next page; undefined on the last page. */
  nextCursor: string | undefined;
}

const SELECT_ONE = `select ${ENDPOINT_COLUMNS.join(', ')} from endpoints where id = ? and tenant = ?`;

export async function getEndpoint(em: EntityManager, tenant: TenantId, id: EndpointId): Promise<EndpointRow | undefined> {
  const [row] = await em.execute<EndpointColumns[]>(SELECT_ONE, [id, tenant]);
  return row ? columnsToRow(row) : undefined;
}

/**
 * One page of the tenant's endpoints, newest first. The cursor is the last id of the previous page and
 * ids are time-ordered, so endpoints created while paging never shift or repeat an older page's items.
 */
export async function listEndpoints(
  em: EntityManager,
  tenant: TenantId,
  opts: { limit: number; cursor?: string | undefined },
): Promise<EndpointPage> {
  const limit = Math.max(1, Math.floor(opts.limit));
  const records = await em.find(
    EndpointRecord,
    opts.cursor === undefined ? { tenant } : { tenant, id: { $lt: opts.cursor } },
    { orderBy: { id: 'desc' }, limit: limit + 1, disableIdentityMap: true },
  );
  const hasMore = records.length > limit;
  const rows = records.slice(0, limit).map(recordToRow);
  return { rows, hasMore, nextCursor: hasMore ? rows[rows.length - 1]?.id : undefined };
}
