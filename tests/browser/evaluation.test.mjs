// The job page's Classify box and Evaluate card in headless Chromium (Debian's
// /usr/bin/chromium driven by playwright-core): a LeNet trained one epoch on
// the demo digits classifies real MNIST digits picked through the box's file
// input (top-k bars, the top label the digit's own, the API's probabilities);
// it is then evaluated from the page on its val split; the confusion matrix appears as a
// heat map whose counts are the API's, a misclassified cell opens that pair's
// images (which load), and the per-class table lists every class.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { ROOT, api, loadDigits, startDemoServer, waitFor } from '../integration/lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');
const { PNG } = require('pngjs');

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

/* One real digit of each class (the npm package's last of each) as a PNG file for setInputFiles. */
function digitFiles() {
  return Array.from({ length: 10 }, (_, c) => {
    const all = loadDigits(c);
    const buffer = PNG.sync.write({ width: 28, height: 28, data: Buffer.from(all[all.length - 1]) },
      { colorType: 0, inputColorType: 0, bitDepth: 8 });
    return { name: `digit-${c}.png`, mimeType: 'image/png', buffer, label: String(c) };
  });
}

/* What #classify-results shows: per item its name and bars [{label, prob text, fill width %}]. */
function shownResults() {
  return page.$$eval('#classify-results > li', (lis) => lis.map((li) => ({
    name: li.querySelector('.classify-name').textContent,
    thumb: li.querySelector('img.classify-thumb') ? li.querySelector('img.classify-thumb').naturalWidth : null,
    bars: [...li.querySelectorAll('.classify-bars li')].map((b) => ({
      label: b.querySelector('.classify-label').textContent,
      prob: Number(b.querySelector('.classify-bar').getAttribute('aria-valuenow')),
      text: b.querySelector('.classify-prob').textContent,
      width: parseFloat(b.querySelector('.classify-fill').style.width),
      top: b.classList.contains('top'),
    })),
  })));
}

test('Classify from the job page: a picked digit gets top-k bars, its own label first', { timeout: 120_000 }, async () => {
  const files = digitFiles();
  // What the API says about each digit (the model is trained for real: one
  // epoch may get a digit wrong); the box must show the same.
  const form = new FormData();
  for (const f of files) form.append('image', new Blob([f.buffer]), f.name);
  const r = await api(base, 'POST', `/api/v1/jobs/${jobId}/infer`, form);
  assert.equal(r.status, 200, r.text);
  const right = files.filter((f, i) => r.body.items[i].predictions[0].label === f.label);
  assert.ok(right.length >= 8, `one epoch of LeNet gets most of 10 digits right: ${right.length}`);

  await page.goto(`${base}/#/jobs/${jobId}`);
  await page.waitForSelector('#classify-card:not([hidden])', { timeout: 30_000 });
  assert.equal(await page.$$eval('#classify-results > li', (l) => l.length), 0);

  // one digit the model gets right
  const one = right[0];
  await page.setInputFiles('#classify-input', { name: one.name, mimeType: one.mimeType, buffer: one.buffer });
  await page.waitForSelector('#classify-results .classify-bars li', { timeout: 30_000 });
  await page.waitForFunction(() => [...document.querySelectorAll('#classify-results img')].every((i) => i.complete && i.naturalWidth > 0));
  let shown = await shownResults();
  assert.equal(shown.length, 1);
  assert.equal(shown[0].name, one.name);
  assert.equal(shown[0].thumb, 28, 'the thumbnail is the picked image');
  assert.equal(shown[0].bars.length, 5, 'top 5 by default');
  assert.equal(shown[0].bars[0].label, one.label, 'the top label is the digit\'s');
  assert.ok(shown[0].bars[0].top && !shown[0].bars[1].top);
  // the API on that image alone (a batch of one, as the box sent it: a
  // batch's other rows may move the last bits of a probability)
  const f1 = new FormData();
  f1.append('image', new Blob([one.buffer]), one.name);
  const api1 = (await api(base, 'POST', `/api/v1/jobs/${jobId}/infer`, f1)).body.items[0].predictions;
  shown[0].bars.forEach((b, k) => {
    assert.equal(b.label, api1[k].label);
    assert.equal(b.prob, api1[k].probability, 'the API\'s probability, as sent');
    assert.ok(Math.abs(b.width - 100 * api1[k].probability) <= 0.05 + 1e-9, `bar ${k}: ${b.width}%`);
    assert.match(b.text, /^\d+(\.\d)?\s?%$/);
  });
  assert.match(await page.$eval('#classify-status', (e) => e.textContent), /^Epoch 1: 1 image in \d+ ms$/);
  assert.equal(await page.$eval('#classify-error', (e) => e.hidden), true);
  await page.$eval('#classify-card', (e) => e.scrollIntoView());
  await (await page.$('#classify-card')).screenshot({ path: path.join(OUT, 'classify-one.png') });

  // all ten at once, top 3: the same answers as the API's, in the order picked
  await page.fill('#classify-topk', '3');
  await page.setInputFiles('#classify-input', files.map(({ name, mimeType, buffer }) => ({ name, mimeType, buffer })));
  await page.waitForFunction(() => document.querySelectorAll('#classify-results > li').length === 10, null, { timeout: 30_000 });
  await page.waitForFunction(() => [...document.querySelectorAll('#classify-results img')].every((i) => i.complete && i.naturalWidth > 0));
  shown = await shownResults();
  shown.forEach((it, i) => {
    assert.equal(it.name, files[i].name);
    assert.deepEqual(it.bars.map((b) => [b.label, b.prob]),
      r.body.items[i].predictions.slice(0, 3).map((p) => [p.label, p.probability]));
  });
  assert.equal(shown.filter((it, i) => it.bars[0].label === files[i].label).length, right.length);
  assert.match(await page.$eval('#classify-status', (e) => e.textContent), /^Epoch 1: 10 images in \d+ ms$/);
  await (await page.$('#classify-card')).screenshot({ path: path.join(OUT, 'classify-ten.png') });

  // a file that is no image: its error in place of the bars, the others classified
  await page.fill('#classify-topk', '');
  await page.setInputFiles('#classify-input', [
    { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('not a picture') },
    { name: one.name, mimeType: one.mimeType, buffer: one.buffer }]);
  await page.waitForFunction(() => document.querySelectorAll('#classify-results > li').length === 2 &&
    document.querySelector('#classify-results > li .form-error'), null, { timeout: 30_000 });
  assert.match(await page.$eval('#classify-results > li .form-error', (e) => e.textContent), /not a PNG or JPEG/);
  shown = await shownResults();
  assert.equal(shown[1].bars[0].label, one.label);
  // no broken-image icon for the file the browser cannot show either: a placeholder
  await page.waitForSelector('#classify-results > li:first-child .classify-nothumb', { timeout: 10_000 });
  assert.equal(await page.$$eval('#classify-results > li:first-child img', (l) => l.length), 0);
  await (await page.$('#classify-card')).screenshot({ path: path.join(OUT, 'classify-error.png') });
  assert.deepEqual(problems, []);
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
