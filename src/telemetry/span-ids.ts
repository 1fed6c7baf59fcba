// The SDK's span and trace ids (sdk.ts, `idGenerator`): the SDK's own random ones, except for a span
// started inside `withIds`, which gets the ids given. The router's span of an event takes ids derived from
// the event (event-trace.ts), so a process that never hears from the router (a direct consumer's attempt)
// can still name it as its parent. The OpenTelemetry API has no way to give a span its ids; the SDK asks
// its generator once per span, synchronously, inside startSpan.

let pinned: { traceId: string; spanId: string | undefined } | undefined;

/** Run `start` (one startSpan) with these ids: `traceId` for a span without a parent, `spanId` for the first span it starts. */
export function withIds<T>(ids: { traceId: string; spanId: string }, start: () => T): T {
  pinned = { traceId: ids.traceId, spanId: ids.spanId };
  try {
    return start();
  } finally {
    pinned = undefined;
  }
}

interface IdGenerator {
  generateTraceId(): string;
  generateSpanId(): string;
}

/** `random` (the SDK's RandomIdGenerator), but for the ids `withIds` pins. */
export function pinnedIds(random: IdGenerator): IdGenerator {
  return {
    generateTraceId: () => pinned?.traceId ?? random.generateTraceId(),
    generateSpanId() {
      const id = pinned?.spanId;
      if (id === undefined) return random.generateSpanId();
      // One span only: another started meanwhile (by the sampler or a processor) gets its own id.
      pinned!.spanId = undefined;
      return id;
    },
  };
}
