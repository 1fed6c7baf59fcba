// The console's static files, read once at start: Pico CSS from its npm package (@picocss/pico, no build
// step and no CDN: the service serves the copy npm installed) and the console's few own rules. No script:
// every page works with plain links and forms, and the Content-Security-Policy allows none inline.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';

export interface Asset {
  type: string;
  body: Buffer;
}

const OWN_CSS = `
.skip, .visually-hidden { position: absolute; left: -10000px; }
.skip:focus { left: 1rem; top: 1rem; z-index: 10; background: var(--pico-background-color); padding: .5rem; }
form.inline { display: inline; margin: 0; }
form.inline button { margin: 0; padding: .25rem .75rem; }
.flash.ok { border-left: .25rem solid var(--pico-ins-color); padding-left: .75rem; }
.flash.error { border-left: .25rem solid var(--pico-del-color); padding-left: .75rem; }
pre.payload { white-space: pre-wrap; word-break: break-all; max-height: 40rem; overflow: auto; }
td code, td { word-break: break-word; }
.filters { display: grid; grid-template-columns: repeat(auto-fit, minmax(12rem, 1fr)); gap: 0 1rem; align-items: end; }
ol.timeline li { margin-bottom: .5rem; }
.legend-ok { color: #2e7d32; }
.legend-failed { color: #c62828; }
`;

export async function loadAssets(): Promise<Map<string, Asset>> {
  const require = createRequire(import.meta.url);
  const pico = await readFile(require.resolve('@picocss/pico/css/pico.min.css'));
  return new Map([
    ['/assets/pico.min.css', { type: 'text/css; charset=utf-8', body: pico }],
    ['/assets/console.css', { type: 'text/css; charset=utf-8', body: Buffer.from(OWN_CSS) }],
  ]);
}
