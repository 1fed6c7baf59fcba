// The audit log (issue 19): one row per operator action (who, when, what, on what, how it ended), written
// where the action is served: the admin role for what goes over the admin subjects (so the CLI and the
// console are audited alike), the CLI for what it does in Postgres itself (revokes), the console for
// sign-ins. Rows are only ever added.
import type { EntityManager } from '@mikro-orm/postgresql';
import { newIdBody } from '../domain/ids.ts';

export const AuditAction = {
  DeadLetterShow: 'dead_letter.show',
  DeadLetterReplay: 'dead_letter.replay',
  DeadLettersReplayMany: 'dead_letters.replay_many',
  RejectedEventShow: 'rejected_event.show',
  EndpointRetryNow: 'endpoint.retry_now',
  EndpointDisable: 'endpoint.disable',
  EndpointEnable: 'endpoint.enable',
  EndpointDelete: 'endpoint.delete',
  OperatorCreate: 'operator.create',
  OperatorRevoke: 'operator.revoke',
  ApiKeyRevoke: 'api_key.revoke',
  ConsoleSignIn: 'console.sign_in',
  EraseSubject: 'erasure.subject',
  EraseTenant: 'erasure.tenant',
  TenantLimitsSet: 'tenant.limits_set',
} as const;
export type AuditAction = (typeof AuditAction)[keyof typeof AuditAction];
export const AUDIT_ACTIONS: readonly AuditAction[] = Object.values(AuditAction);
export const isAuditAction = (s: unknown): s is AuditAction => AUDIT_ACTIONS.includes(s as AuditAction);

/** The operator recorded for an admin request that names none (a script using `nats req`, say). */
export const UNNAMED_OPERATOR = 'unnamed';
/** `outcome` of an action that was carried out; otherwise the error code it was refused with. */
export const AUDIT_OK = 'ok';

export interface AuditDraft {
  operator: string;
  action: AuditAction;
  target: string;
  outcome: string;
  detail?: string | null;
}

export interface AuditEntryRow {
  id: string;
  at: Date | string;
  operator: string;
  action: AuditAction;
  target: string;
  outcome: string;
  detail: string | null;
}

type Sql = Pick<EntityManager, 'execute'>;

export async function recordAudit(sql: Sql, d: AuditDraft): Promise<void> {
  await sql.execute('insert into audit_log (id, at, operator, action, target, outcome, detail) values (?, now(), ?, ?, ?, ?, ?)', [
    `aud_${newIdBody()}`, d.operator, d.action, d.target, d.outcome, d.detail ?? null,
  ]);
}

export interface AuditFilter {
  operator?: string;
  action?: AuditAction;
  target?: string;
}

/** Newest first, `limit` rows below `before` (a keyset page on the time-ordered id). */
export async function listAudit(sql: Sql, filter: AuditFilter, page: { before?: string; limit: number }): Promise<AuditEntryRow[]> {
  const conds: string[] = [];
  const params: unknown[] = [];
  if (filter.operator) { conds.push('operator = ?'); params.push(filter.operator); }
  if (filter.action) { conds.push('action = ?'); params.push(filter.action); }
  if (filter.target) { conds.push('target = ?'); params.push(filter.target); }
  if (page.before) { conds.push('id < ?'); params.push(page.before); }
  return sql.execute<AuditEntryRow[]>(
    `select id, at, operator, action, target, outcome, detail from audit_log${conds.length ? ` where ${conds.join(' and ')}` : ''} order by id desc limit ?`,
    [...params, page.limit],
  );
}
