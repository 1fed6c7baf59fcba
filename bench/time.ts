// Clocks and waiting shared by the bench's modules.

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** Wall-clock milliseconds with sub-millisecond precision: comparable across processes (the receivers'). */
export const wallNow = () => performance.timeOrigin + performance.now();
