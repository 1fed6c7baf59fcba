// A scan run every interval, never two at once (a slow one skips the ticks it overlaps), whose failure is
// reported and tried again at the next tick; stop() waits for the one running. The backstops' loop.
export function everyInterval(intervalMs: number, scan: () => Promise<void>, failed: (e: unknown) => void): { stop(): Promise<void> } {
  let running: Promise<void> | undefined;
  const timer = setInterval(() => {
    running ??= scan().catch(failed).finally(() => { running = undefined; });
  }, intervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
