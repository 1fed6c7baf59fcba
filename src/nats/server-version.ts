// Which nats-server versions hookstream is tested on (issue 18), and what start-up says about the one it
// connected to. Tested: 2.9.10 (Debian bookworm) and 2.15.1 (Debian unstable, `bin/fetch-nats-server`);
// the floor is the oldest tested release, whose JetStream behaviour (backoff, nak delays, advisories) the
// delivery role is written against.
export const SUPPORTED_FLOOR = '2.9.10';
export const TESTED_VERSIONS = ['2.9.10', '2.15.1'] as const;

/** Numeric parts of `v2.15.1` or `2.9.10-beta`; undefined for anything else. */
export function parseVersion(v: string | undefined): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(v ?? '');
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** Whether `v` is below the supported floor; unknown versions are not judged. */
export function belowFloor(v: string | undefined): boolean {
  const have = parseVersion(v);
  const floor = parseVersion(SUPPORTED_FLOOR)!;
  if (!have) return false;
  for (let i = 0; i < 3; i++) if (have[i] !== floor[i]) return have[i]! < floor[i]!;
  return false;
}
