// The dashboard in headless Chromium (Debian's /usr/bin/chromium driven by
// playwright-core; no browser download): open the page, start a LeNet job from
// the form, watch the charts receive points and the job reach `done`.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { ROOT, importDemo, startServer, tempDir } from '../integration/lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const CHROMIUM = process.env.KILN_CHROMIUM || '/usr/bin/chromium';

let tmp;
let server;
let base;
let datasetId;
let browser;
let page;
let jobId;
const problems = [];     // page errors, console errors, requests that left the machine

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  const origin = new URL(base).origin;
  await page.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(origin) || u.startsWith('data:')) return route.continue();
    problems.push(`external request: ${u}`);
    return route.abort();
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // 4xx answers are expected here (the form-error case; /api/v1/networks may not
    // exist yet and the page falls back to its built-in list); anything else is not.
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text()))
      problems.push(`console error: ${m.text()}`);
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function shot(name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

test('the dashboard lists the service, the demo dataset and the job form', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('#info-version', { timeout: 15_000 });
  assert.match(await page.textContent('#info-version'), /^v\d+\.\d+\.\d+/);
  assert.match(await page.textContent('#info-backends'), /cpu/);
  const row = page.locator(`#datasets-table tr[data-dataset-id="${datasetId}"]`);
  await row.waitFor({ timeout: 15_000 });
  const text = await row.textContent();
  assert.match(text, /mnist/);
  assert.match(text, /ready/);
  assert.match(text, /8,000/);
  assert.match(text, /2,000/);
  assert.match(text, /1×28×28/);
  await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  // Every form control has a label.
  for (const id of ['job-dataset', 'job-network', 'job-epochs', 'job-batch', 'job-lr', 'job-momentum', 'upload-name', 'upload-file'])
    assert.equal(await page.locator(`label[for="${id}"]`).count(), 1, `#${id} has a label`);
  await shot('home');
});

test('an error from the API shows next to the form', async () => {
  await page.fill('#job-epochs', '0');
  await page.click('#job-submit');
  const err = page.locator('#job-error');
  await err.waitFor({ state: 'visible', timeout: 15_000 });
  assert.ok((await err.textContent()).length > 0, 'the API\'s message is shown');
  assert.equal(new URL(page.url()).hash, '', 'no navigation on an error');
  await shot('form-error');
});

test('the model summary of the chosen network shows under the form', async () => {
  await page.selectOption('#job-network', 'lenet');
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-params', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-summary-params'), '431,080');
  const text = await page.textContent('#job-summary');
  assert.match(text, /1×28×28, 10 classes/, 'summarised for the chosen dataset');
  assert.match(text, /20 filters is not a multiple of 8/);
  assert.match(text, /cpu 0 .*fits/);
});

test('a custom spec that is not JSON is refused in the page, nothing sent', async () => {
  await page.selectOption('#job-network', '__custom__');
  assert.ok(await page.isVisible('#job-spec'));
  await page.fill('#job-spec', '{"layers": [');
  await page.click('#job-submit');
  const err = page.locator('#job-spec-error');
  await err.waitFor({ state: 'visible', timeout: 5_000 });
  assert.match(await err.textContent(), /not valid JSON/);
  assert.equal(new URL(page.url()).hash, '', 'no navigation');
  // a valid spec summarises, and a bad layer comes back from the API naming it
  await page.fill('#job-spec', JSON.stringify({ layers: [
    { type: 'conv2d', name: 'c1', filters: 8, kernel: 3 }, { type: 'flatten' },
    { type: 'dense', name: 'out', units: 'classes' }] }));
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-params', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-summary-params'), String(8 * 9 + 8 + 8 * 26 * 26 * 10 + 10).replace(/\B(?=(\d{3})+$)/g, ','));
  await page.fill('#job-spec', JSON.stringify({ layers: [{ type: 'conv2d', name: 'big', filters: 8, kernel: 40 }] }));
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-error', { timeout: 15_000 });
  assert.match(await page.textContent('#job-summary-error'), /"big"/);
  await shot('form-custom');
  await page.selectOption('#job-network', 'lenet');
});

test('an Adam job with a cosine policy and warm-up from the advanced settings', { timeout: 120_000 }, async () => {
  await page.selectOption('#job-dataset', String(datasetId));
  await page.fill('#job-epochs', '1');
  await page.selectOption('#job-solver', 'adam');
  assert.equal(await page.inputValue('#job-lr'), '0.001', 'Adam\'s usual rate replaces SGD\'s');
  assert.ok(!(await page.isVisible('#job-momentum')), 'no momentum for Adam');
  await page.fill('#job-weight-decay', '0.0001');
  await page.click('#job-advanced summary');
  await page.selectOption('#job-policy', 'cosine');
  await page.fill('#job-policy-min_lr', '0.00001');
  await page.fill('#job-warmup', '1');
  await page.fill('#job-label-smoothing', '0.1');
  await page.fill('#job-seed', '7');
  await page.fill('#job-name', 'adam from the form');
  await shot('form-advanced');
  await page.click('#job-submit');
  await page.waitForFunction(() => /^#\/jobs\/\d+$/.test(location.hash), null, { timeout: 15_000 });
  const id = Number(new URL(page.url()).hash.split('/').pop());
  try {
    const job = await (await fetch(`${base}/api/v1/jobs/${id}`)).json();
    const cfg = job.config;
    assert.equal(cfg.solver.type, 'adam', JSON.stringify(job));
    assert.equal(cfg.solver.lr, 0.001);
    assert.equal(cfg.solver.weight_decay, 0.0001);
    assert.equal(cfg.solver.label_smoothing, 0.1);
    assert.equal(cfg.lr_policy.type, 'cosine');
    assert.equal(cfg.lr_policy.min_lr, 0.00001);
    assert.ok(cfg.lr_policy.warmup_steps > 0, 'warm-up epochs became steps');
    assert.equal(cfg.seed, 7);
    assert.equal(cfg.name, 'adam from the form');
  } finally {
    // the home view again, and the job out of the way of the next test
    await fetch(`${base}/api/v1/jobs/${id}/cancel`, { method: 'POST' });
    await page.goto(`${base}/`);
    await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  }
});

test('start LeNet from the form; the job page draws curves live and reaches done', { timeout: 1_100_000 }, async () => {
  await page.selectOption('#job-dataset', String(datasetId));
  await page.selectOption('#job-network', 'lenet');
  await page.fill('#job-epochs', '1');
  await page.fill('#job-batch', '64');
  await page.fill('#job-lr', '0.01');
  await page.fill('#job-momentum', '0.9');
  await page.click('#job-submit');
  await page.waitForURL(/#\/jobs\/\d+$/, { timeout: 15_000 });
  jobId = Number(/#\/jobs\/(\d+)$/.exec(page.url())[1]);
  assert.ok(jobId > 0);

  // Points arrive while the job runs (train/loss about 20 times an epoch).
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) >= 2,
    null, { timeout: 600_000, polling: 250 });
  const midStatus = await page.getAttribute('main', 'data-status');
  await shot('job-running');

  await page.waitForSelector('main[data-status="done"]', { timeout: 900_000 });
  assert.equal((await page.textContent('#job-status')).trim(), 'done');
  // The final val/accuracy point reaches the accuracy chart.
  await page.waitForFunction(() => window.kilnCharts?.accuracy?.countOf('val/accuracy') >= 1,
    null, { timeout: 30_000 });
  const counts = await page.evaluate(() => ({
    trainLoss: window.kilnCharts.loss.countOf('train/loss'),
    valLoss: window.kilnCharts.loss.countOf('val/loss'),
    trainAcc: window.kilnCharts.accuracy.countOf('train/accuracy'),
    valAcc: window.kilnCharts.accuracy.countOf('val/accuracy'),
    drawn: window.kilnCharts.loss.data()[1].filter((v) => v !== null).length,
    canvases: document.querySelectorAll('#chart-loss canvas, #chart-accuracy canvas').length,
  }));
  assert.ok(counts.trainLoss >= 5, `train/loss points: ${counts.trainLoss}`);
  assert.equal(counts.drawn, counts.trainLoss, 'uPlot holds every train/loss point');
  assert.ok(counts.valLoss >= 1 && counts.trainAcc >= 5 && counts.valAcc >= 1, JSON.stringify(counts));
  assert.equal(counts.canvases, 2, 'two uPlot canvases');

  assert.equal(await page.getAttribute('#job-progress', 'aria-valuenow'), '100');
  assert.match(await page.textContent('#stat-epoch'), /1\s*\/\s*1/);
  assert.match(await page.textContent('#stat-valacc'), /\d+\.\d+%/);
  const dl = page.locator('#job-download');
  assert.ok(await dl.isVisible(), 'the download link shows once done');
  assert.equal(await dl.getAttribute('href'), `/api/v1/jobs/${jobId}/model?format=tar`);
  assert.ok(!(await page.locator('#job-cancel').isVisible()), 'no cancel button on a finished job');
  // The worker's log (GET /jobs/{id}/log) shows under the charts.
  await page.waitForFunction(() => (document.querySelector('#job-log')?.textContent || '').trim().length > 0,
    null, { timeout: 15_000 });
  await shot('job-done');

  // The download link serves the model tar.
  const res = await page.request.get(`${base}/api/v1/jobs/${jobId}/model?format=tar`);
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'] || '', /x-tar/);

  // Back on the list, the job shows done with its val accuracy.
  await page.click('nav.crumbs a');
  const jobRow = page.locator(`#jobs-table tr[data-job-id="${jobId}"]`);
  await jobRow.waitFor({ timeout: 15_000 });
  await page.waitForFunction((id) => /done/.test(document.querySelector(`#jobs-table tr[data-job-id="${id}"]`)?.textContent || ''),
    jobId, { timeout: 15_000 });
  assert.match(await jobRow.textContent(), /\d+\.\d+%/);
  await shot('home-after');
  assert.ok(['queued', 'running', 'done'].includes(midStatus), `status while drawing: ${midStatus}`);
});

test('a reloaded job page replays the finished job from the API', async () => {
  assert.ok(jobId, 'needs the finished job');
  await page.goto(`${base}/#/jobs/${jobId}`);
  await page.reload();
  await page.waitForSelector('main[data-status]', { timeout: 15_000 });
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) >= 2,
    null, { timeout: 30_000 });
  await page.goto(`${base}/#/jobs/987654`);
  await page.waitForSelector('#job-error:not([hidden])', { timeout: 15_000 });
  assert.match(await page.textContent('#job-error'), /no job 987654/i);
});

test('the page made no request off the machine and logged no error', () => {
  assert.deepEqual(problems, []);
});
