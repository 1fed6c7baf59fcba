// The SDK's span and trace ids (sdk.ts, `idGenerator`): random, as the SDK's own generator makes them,
// except for a span started inside `withIds`, which gets the ids given. The router's span of an event
// takes ids derived from the event (event-trace.ts), so a process that never hears from the router (a
// direct consumer's attempt) can still name it as its parent. The OpenTelemetry API has no way to give a
// span its ids; the SDK asks its generator once per span, synchronously, inside startSpan.

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

// Written into one shared buffer and read out as hex, as the SDK's RandomIdGenerator does: no allocation
// but the string.
const shared = Buffer.alloc(16);
function randomId(bytes: 8 | 16): string {
  for (let i = 0; i < bytes; i += 4) shared.writeUInt32BE((Math.random() * 2 ** 32) >>> 0, i);
  // All zeros is invalid (W3C): then the last byte is made non-zero, as the SDK does.
  let zero = true;
  for (let i = 0; i < bytes && zero; i++) zero = shared[i] === 0;
  if (zero) shared[bytes - 1] = 1;
  return shared.toString('hex', 0, bytes);
}

export const idGenerator = {
  generateTraceId: (): string => pinned?.traceId ?? randomId(16),
  generateSpanId(): string {
    const id = pinned?.spanId;
    if (id === undefined) return randomId(8);
    // One span only: another started meanwhile (by the sampler or a processor) gets its own id.
    pinned!.spanId = undefined;
    return id;
  },
};
