// Opaque page cursors: base64url JSON holding the last dead-letter id seen (ids are time-ordered, so
// keyset paging on them is exact) and, for a bulk replay, the run's total for its progress bar.
import { isDeadLetterId, type DeadLetterId } from '../deadletter/store.ts';
import { badRequest } from '../errors.ts';

export interface Cursor {
  /** Last id returned; the next page starts after it. */
  after: DeadLetterId;
  total?: number;
}

export const encodeCursor = (c: Cursor): string => Buffer.from(JSON.stringify(c)).toString('base64url');

export function decodeCursor(text: string): Cursor {
  let x: unknown;
  try {
    x = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    x = undefined;
  }
  const c = x as Partial<Cursor> | undefined;
  if (typeof c !== 'object' || c === null || !isDeadLetterId(c.after)
    || (c.total !== undefined && (typeof c.total !== 'number' || !Number.isInteger(c.total) || c.total < 0))) {
    throw badRequest('cursor is not one this service handed out');
  }
  const after: DeadLetterId = c.after;
  return c.total === undefined ? { after } : { after, total: c.total };
}
