// Stopping within a deadline: the stops run one after another (roles first, connections last) until all are
// done or the deadline passes; then the caller closes what is left, whatever the stops still wait for (a
// drain of a NATS connection whose server is gone never ends).
export async function runStops(stops: (() => Promise<void>)[], deadlineMs: number, onError: (e: unknown) => void): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), deadlineMs); });
  const all = (async () => {
    for (const stop of stops) await stop().catch(onError);
    return true as const;
  })();
  try {
    return await Promise.race([all, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** `p`, or nothing once `ms` passed: for closes that may hang on a dependency that is gone. */
export async function atMost(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p.catch(() => {}), new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); })]);
  clearTimeout(timer);
}
