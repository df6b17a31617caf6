// The home page's hardware card and the header's backend chip (issue 17) in
// headless Chromium against a real `kiln serve` whose GPUs come from the fake
// NVML (tests/tools/fake_nvml.c through KILN_NVML_LIBRARY), sampling every
// second: the card shows CPU, memory and load with sparklines that gain points,
// and both fake GPUs with their figures; the chip says what can run here.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, startServer, tempDir } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');

let tmp;
let server;
let base;
let browser;
let page;
const problems = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-hw-');
  process.env.KILN_NVML_LIBRARY = process.env.KILN_FAKE_NVML || '';
  assert.ok(process.env.KILN_NVML_LIBRARY, 'KILN_FAKE_NVML names the fake NVML (tests/node.cmake sets it)');
  server = await startServer({ dataDir: path.join(tmp.dir, 'data'), args: ['--limit', 'hardware-interval=1'] });
  base = server.url;
  ({ browser, page } = await openPage(base, { viewport: { width: 1360, height: 1000 }, problems }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

const points = async (sel) => (await page.getAttribute(`${sel} polyline`, 'points')).trim().split(/\s+/).filter(Boolean).length;

test('the hardware card shows the host and the GPUs, its sparklines growing', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('#hardware-card .hw-gpu[data-gpu="1"]', { timeout: 15_000 });
  assert.match(await page.textContent('#hw-cpu'), /CPU.*\d+ %/);
  assert.match(await page.textContent('#hw-memory'), /\/ /);
  assert.match(await page.textContent('#hw-load'), /\d+\.\d\d · \d+\.\d\d · \d+\.\d\d/);
  const gpu0 = await page.textContent('#hardware-card .hw-gpu[data-gpu="0"]');
  assert.match(gpu0, /Fake GPU "A" \\ 0/);
  assert.match(gpu0, /37 %/);
  assert.match(gpu0, /3(\.0)? GiB \/ 16(\.0)? GiB/);
  assert.match(gpu0, /61 °C · 123 W/);
  assert.match(gpu0, /idle/);
  const gpu1 = await page.textContent('#hardware-card .hw-gpu[data-gpu="1"]');
  assert.match(gpu1, /50 W/);
  assert.doesNotMatch(gpu1, /°C/, 'an unknown temperature is not shown');
  const before = await points('#hw-cpu');
  await page.waitForFunction((n) => {
    const p = document.querySelector('#hw-cpu polyline');
    return p && p.getAttribute('points').trim().split(/\s+/).length > n;
  }, before, { timeout: 15_000 });
  assert.ok(await points('#hw-cpu') > before);
  await page.locator('#hardware-card').screenshot({ path: path.join(OUT, 'hardware-card.png') });
  await page.screenshot({ path: path.join(OUT, 'hardware-home.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('the backend chip says what can run here', async () => {
  const info = await (await fetch(`${base}/api/v1/info`)).json();
  // this build: the backends compiled in, of which those with a device can run
  const text = await page.textContent('#info-backends');
  assert.equal(text, `backend: ${info.backends_available.join(', ')}${
    info.backends.length > info.backends_available.length ? ' (CUDA built, no GPU found)' : ''}`);
  assert.deepEqual(info.backends_available, ['cpu'], 'no CUDA device on this machine');
  // a CUDA build on a machine without a GPU (not buildable here): the same page, that server's answer
  await page.route('**/api/v1/info', (route) => route.fulfill({
    contentType: 'application/json',
    body: JSON.stringify({ ...info, backends: ['cpu', 'cuda'], backends_available: ['cpu'] }),
  }));
  await page.reload();
  await page.waitForSelector('#info-backends');
  assert.equal(await page.textContent('#info-backends'), 'backend: cpu (CUDA built, no GPU found)');
  await page.route('**/api/v1/info', (route) => route.fulfill({
    contentType: 'application/json',
    body: JSON.stringify({ ...info, backends: ['cpu', 'cuda'], backends_available: ['cpu', 'cuda'] }),
  }));
  await page.reload();
  await page.waitForSelector('#info-backends');
  assert.equal(await page.textContent('#info-backends'), 'backend: cpu, cuda');
  await page.locator('header').screenshot({ path: path.join(OUT, 'hardware-chip.png') });
  assert.deepEqual(problems, []);
});
