// A day of deliveries per minute as a server-rendered SVG (no script: the console's policy allows none):
// one bar per minute, ok attempts in green and failed ones stacked above in red, scaled to the busiest
// minute. Its title and description say the totals for people who cannot see it.
import type { PerMinuteOut } from '../admin/protocol.ts';
import { html, type Html } from './html.ts';

const WIDTH = 720;
const HEIGHT = 120;
const MINUTES = 24 * 60;
const OK = '#2e7d32';
const FAILED = '#c62828';

export function deliveriesChart(id: string, minutes: PerMinuteOut[], now = Date.now()): Html {
  const start = Math.floor(now / 60_000) * 60_000 - (MINUTES - 1) * 60_000;
  const busiest = Math.max(0, ...minutes.map((m) => m.ok + m.failed));
  const max = Math.max(1, busiest);
  const ok = minutes.reduce((n, m) => n + m.ok, 0);
  const failed = minutes.reduce((n, m) => n + m.failed, 0);
  const x = (m: PerMinuteOut) => ((Date.parse(m.minute) - start) / 60_000 + 0.5) * (WIDTH / MINUTES);
  const y = (n: number) => HEIGHT - (n / max) * HEIGHT;
  const bars = (pick: (m: PerMinuteOut) => [number, number]) => minutes
    .filter((m) => Date.parse(m.minute) >= start && pick(m)[1] > pick(m)[0])
    .map((m) => `M${x(m).toFixed(2)} ${y(pick(m)[0]).toFixed(2)}V${y(pick(m)[1]).toFixed(2)}`).join('');
  const summary = `${ok} ok and ${failed} failed attempts in the last 24 hours; the busiest minute had ${busiest}.`;
  return html`<figure>
<svg role="img" aria-labelledby="${id}-title ${id}-desc" viewBox="0 0 ${WIDTH} ${HEIGHT + 16}" width="100%" data-testid="${id}" data-ok="${ok}" data-failed="${failed}">
<title id="${id}-title">Deliveries per minute, last 24 hours</title>
<desc id="${id}-desc">${summary}</desc>
<line x1="0" y1="${HEIGHT}" x2="${WIDTH}" y2="${HEIGHT}" stroke="#999" stroke-width="1"/>
<path d="${bars((m) => [0, m.ok])}" stroke="${OK}" stroke-width="${WIDTH / MINUTES}" class="ok"/>
<path d="${bars((m) => [m.ok, m.ok + m.failed])}" stroke="${FAILED}" stroke-width="${WIDTH / MINUTES}" class="failed"/>
<text x="0" y="${HEIGHT + 14}" font-size="11" fill="currentColor">24 h ago</text>
<text x="${WIDTH / 2}" y="${HEIGHT + 14}" font-size="11" fill="currentColor" text-anchor="middle">12 h ago</text>
<text x="${WIDTH}" y="${HEIGHT + 14}" font-size="11" fill="currentColor" text-anchor="end">now</text>
<text x="2" y="11" font-size="11" fill="currentColor">${max}/min</text>
</svg>
<figcaption>${summary} <span class="legend-ok">■ ok</span> <span class="legend-failed">■ failed</span></figcaption>
</figure>`;
}
