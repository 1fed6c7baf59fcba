// Real Chromium for page tests: Debian's /usr/bin/chromium (bin/install-chromium) driven by playwright-core,
// which downloads no browser. One browser per test file; each test takes a fresh context (its own cookies).
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM_BIN = process.env['CHROMIUM_BIN'] ?? '/usr/bin/chromium';

// As root Chromium needs --no-sandbox; the rest keep it from reaching hosts this machine cannot reach.
const ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run', '--disable-default-apps', '--disable-extensions',
];

export interface TestBrowser {
  browser: Browser;
  /** A new context (cookies of its own) and a page in it; closed with the browser. */
  page(): Promise<{ context: BrowserContext; page: Page }>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  let browser: Browser;
  try {
    browser = await chromium.launch({ executablePath: CHROMIUM_BIN, args: ARGS, headless: true, timeout: 60_000 });
  } catch (e) {
    throw new Error(`cannot start Chromium at ${CHROMIUM_BIN} (bin/install-chromium installs it): ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  return {
    browser,
    async page() {
      const context = await browser.newContext();
      const page = await context.newPage();
      // Page tests fail rather than wait for ever on a missing element.
      page.setDefaultTimeout(15_000);
      return { context, page };
    },
    close: () => browser.close(),
  };
}
