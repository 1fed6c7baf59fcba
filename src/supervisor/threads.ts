// Which roles of a `serve` process run in the API's thread. The API shares nothing with the delivery path
// but the process: in one isolate, a tenant's fan-out to slow receivers made the garbage collector pause
// every tenant's API requests (tens of milliseconds at a time) and queued them behind its deliveries'
// callbacks. A worker thread has its own V8 isolate: its own event loop and its own heap.
import type { Role } from '../config.ts';

/** The roles that answer people's requests; the endpoint projection (of `projector`) goes with them. */
export const API_SIDE: readonly Role[] = ['api', 'console'];
/** The roles of the delivery path; the other projections (of `projector`) go with them. */
export const WORK_SIDE: readonly Role[] = ['router', 'delivery', 'deadletter', 'admin'];

export interface RoleSplit {
  /** Run in the worker thread: api, console and projector (its endpoint projection) among the roles given. */
  api: Role[];
  /** Run in the main thread: router, delivery, deadletter, admin and projector (its other projections). */
  work: Role[];
}

/**
 * The roles of each thread, or undefined when the process keeps them in one: `apiThread` off, or the roles
 * given have no API-side role or no work-side role (an API-only process has nothing to be kept from).
 */
export function splitRoles(roles: readonly Role[], apiThread: boolean): RoleSplit | undefined {
  if (!apiThread) return undefined;
  const api = roles.filter((r) => API_SIDE.includes(r));
  const work = roles.filter((r) => WORK_SIDE.includes(r));
  if (api.length === 0 || work.length === 0) return undefined;
  if (roles.includes('projector')) {
    api.push('projector');
    work.push('projector');
  }
  return { api, work };
}
