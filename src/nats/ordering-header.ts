// The producer's ordering-key header of a stored event (src/domain/ordering-key.ts), read in any case as
// every reader of an event reads it: the router, the event index, direct delivery, erasure, dead letters.
import { Match, type MsgHdrs } from '@nats-io/nats-core';
import { ORDERING_KEY_HEADER } from '../domain/ordering-key.ts';

/** The header's value; undefined without one. */
export const orderingHeader = (h: Pick<MsgHdrs, 'has' | 'get'> | undefined): string | undefined =>
  h?.has(ORDERING_KEY_HEADER, Match.IgnoreCase) ? h.get(ORDERING_KEY_HEADER, Match.IgnoreCase) : undefined;
