// The job page's Evaluate card in headless Chromium (Debian's /usr/bin/chromium
// driven by playwright-core): a LeNet trained one epoch on the demo digits is
// evaluated from the page on its val split; the confusion matrix appears as a
// heat map whose counts are the API's, a misclassified cell opens that pair's
// images (which load), and the per-class table lists every class.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { ROOT, api, startDemoServer, waitFor } from '../integration/lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const CHROMIUM = process.env.KILN_CHROMIUM || '/usr/bin/chromium';

let demo;
let base;
let browser;
let page;
let jobId;
const problems = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  demo = await startDemoServer('kiln-browser-eval-');
  base = demo.server.url;
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: demo.datasetId, network: 'lenet', epochs: 1, batch_size: 64 });
  assert.equal(r.status, 201, r.text);
  jobId = r.body.id;
  await waitFor(async () => {
    const j = await api(base, 'GET', `/api/v1/jobs/${jobId}`);
    if (j.body.status === 'failed') throw new Error(j.text);
    return j.body.status === 'done';
  }, { timeoutMs: 900_000, intervalMs: 500, what: 'the LeNet job' });
  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  page = await browser.newPage({ viewport: { width: 1360, height: 1000 } });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text()))
      problems.push(`console error: ${m.text()}`);
  });
});

after(async () => {
  if (browser) await browser.close();
  if (demo) await demo.stop();
});

test('Evaluate from the job page: a heat map whose cells open the misclassified images', { timeout: 600_000 }, async () => {
  await page.goto(`${base}/#/jobs/${jobId}`);
  await page.waitForSelector('#eval-card:not([hidden])', { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelectorAll('#eval-split option').length > 0);
  assert.equal(await page.$eval('#eval-dataset', (s) => s.value), String(demo.datasetId), 'the job\'s dataset first');
  await page.selectOption('#eval-split', 'val');
  await page.click('#eval-start');
  await page.waitForSelector('#eval-matrix', { timeout: 300_000 });

  const list = await api(base, 'GET', `/api/v1/jobs/${jobId}/evaluations`);
  assert.equal(list.body.items.length, 1);
  const ev = (await api(base, 'GET', `/api/v1/evaluations/${list.body.items[0].id}`)).body;
  assert.equal(ev.status, 'done');
  assert.equal(ev.split, 'val');
  const res = ev.result;
  // the cells show the API's counts (blank for 0)
  const cells = await page.$$eval('#eval-matrix td', (tds) => tds.map((td) => [Number(td.dataset.true), Number(td.dataset.predicted), td.textContent]));
  assert.equal(cells.length, 100);
  for (const [t, p, text] of cells) assert.equal(text, res.confusion_matrix[t][p] ? String(res.confusion_matrix[t][p]) : '');
  const rows = await page.$$eval('#eval-classes tbody tr', (trs) => trs.length);
  assert.equal(rows, 10 + 2, 'ten classes and the two averages');

  // the most confused pair's cell opens its images
  let best = null;
  res.confusion_matrix.forEach((row, t) => row.forEach((v, p) => {
    if (t !== p && v > 0 && (!best || v > best.v)) best = { t, p, v };
  }));
  assert.ok(best, 'some digit is misclassified after one epoch');
  await page.click(`#eval-matrix td[data-true="${best.t}"][data-predicted="${best.p}"] button`);
  await page.waitForSelector('#eval-misses img');
  const n = await page.$$eval('#eval-misses img', (imgs) => imgs.length);
  assert.equal(n, Math.min(best.v, res.misclassified_limits.per_pair));
  await page.waitForFunction(() => [...document.querySelectorAll('#eval-misses img')].every((i) => i.complete && i.naturalWidth === 28),
    null, { timeout: 15_000 });
  assert.match(await page.$eval('#eval-misses h3', (e) => e.textContent), new RegExp(`True ${best.t}, predicted ${best.p}: ${best.v} image`));
  await page.$eval('#eval-card', (e) => e.scrollIntoView());
  await page.screenshot({ path: path.join(OUT, 'evaluation.png'), fullPage: true });
  assert.deepEqual(problems, []);
});
