// What the browser tests share: headless Chromium (playwright-core driving
// KILN_CHROMIUM, default /usr/bin/chromium) on one page of a kiln, every
// request off the kiln's origin aborted and each page error, outside request
// and console error (unless allowConsole says it is expected) pushed onto
// problems, which a test asserts empty.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

export const CHROMIUM = process.env.KILN_CHROMIUM || '/usr/bin/chromium';

export async function openPage(base, { viewport, problems, allowConsole = () => false }) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport });
  const origin = new URL(base).origin;
  await page.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(origin) || u.startsWith('data:')) return route.continue();
    problems.push(`external request: ${u}`);
    return route.abort();
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !allowConsole(m.text())) problems.push(`console error: ${m.text()}`);
  });
  return { browser, page };
}
