// Sweeps in headless Chromium (issue 16): from the dashboard's "New sweep" a
// small grid over two learning rates of a tiny network (the job form's
// settings as the base, the space editor), the sweep page then fills its
// trials table live, highlights the best trial with its job's link, and draws
// the scatter and the curves; the home page lists the sweep; Cancel stops a
// running one. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, importDemo, startServer, tempDir } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };

let tmp;
let server;
let base;
let browser;
let page;
let datasetId;
const problems = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-sweep-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
  ({ browser, page } = await openPage(base, { viewport: { width: 1400, height: 1000 }, problems }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('a sweep started from the dashboard fills its trials table, best first', async () => {
  await page.goto(`${base}/#/`);
  await page.waitForSelector('#sweeps-table td.empty');
  await page.click('#new-sweep');
  await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  await page.selectOption('#job-dataset', String(datasetId));
  await page.selectOption('#job-network', '__custom__');
  await page.fill('#job-spec', JSON.stringify(TINY));
  await page.fill('#job-epochs', '2');
  await page.fill('#sweep-name', 'browser grid');
  // the space: rates 0.002 and 0.05; the momentum row goes
  const rows = page.locator('#sweep-space .space-row');
  assert.equal(await rows.count(), 2);
  await rows.nth(0).locator('.space-values').fill('0.002, 0.05');
  await rows.nth(1).locator('button').click();
  assert.equal(await rows.count(), 1);
  await page.selectOption('#sweep-method', 'grid');
  assert.equal(await page.isHidden('#sweep-trials-field'), true);     // a grid's trials are its points
  await page.fill('#sweep-parallel', '1');
  await page.screenshot({ path: path.join(OUT, 'sweep-new.png'), fullPage: true });
  await page.click('#sweep-submit');

  await page.waitForURL(/#\/sweep\/\d+$/, { timeout: 15_000 });
  const id = Number(/#\/sweep\/(\d+)$/.exec(page.url())[1]);
  // live: the first trial shows while the sweep runs, then both, then done
  await page.waitForSelector('#trials-table tr[data-trial]', { timeout: 30_000 });
  const seenRunning = (await page.getAttribute('#main', 'data-status')) === 'running';
  await page.waitForFunction(() => document.querySelectorAll('#trials-table tr[data-trial]').length === 2, null,
    { timeout: 90_000 });
  await page.waitForFunction(() => document.querySelector('#main')?.dataset.status === 'done', null, { timeout: 90_000 });
  assert.ok(seenRunning, 'the page showed the sweep running before it ended');

  const s = (await api(base, 'GET', `/api/v1/sweeps/${id}`)).body;
  assert.equal(s.name, 'browser grid');
  assert.equal(s.counts.done, 2);
  // the table is in the API's order (best first) with the values and the metric
  const order = await page.$$eval('#trials-table tr[data-trial]', (trs) => trs.map((tr) => Number(tr.dataset.trial)));
  assert.deepEqual(order, s.trials.map((t) => t.trial));
  const firstRow = await page.textContent('#trials-table tbody tr:first-child');
  assert.ok(firstRow.includes(String(s.trials[0].params['solver.lr'])), firstRow);
  assert.equal(await page.getAttribute('#trials-table tr.row-best', 'data-trial'), String(s.best.trial));
  assert.equal(await page.getAttribute('#sweep-best-link', 'href'), `#/jobs/${s.best.job_id}`);
  assert.equal(await page.getAttribute('.sweep-scatter[data-path="solver.lr"]', 'data-points'), '2');
  await page.waitForFunction(() => document.querySelector('#sweep-curves')?.dataset.series === '2', null, { timeout: 10_000 });
  assert.equal(await page.getAttribute('#sweep-curves', 'data-points'), '4');            // 2 trials x 2 epochs
  assert.equal(await page.isHidden('#sweep-cancel'), true);
  await page.screenshot({ path: path.join(OUT, 'sweep-done.png'), fullPage: true });

  // the best trial's link opens its job, an ordinary one
  await page.click('#sweep-best-link');
  await page.waitForURL(new RegExp(`#/jobs/${s.best.job_id}$`));
  await page.waitForFunction(() => document.querySelector('#job-status')?.textContent === 'done', null, { timeout: 15_000 });

  // the home page lists it
  await page.goto(`${base}/#/`);
  await page.waitForSelector(`#sweeps-table tr[data-sweep-id="${id}"]`);
  assert.match(await page.textContent(`#sweeps-table tr[data-sweep-id="${id}"]`), /browser grid.*grid.*done.*2\/2/);
  await page.screenshot({ path: path.join(OUT, 'sweep-home.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('Cancel stops a running sweep and its trial', async () => {
  const r = await api(base, 'POST', '/api/v1/sweeps', {
    base: { dataset_id: datasetId, network: TINY, epochs: 40 }, method: 'random', trials: 3, parallel: 1,
    space: { 'solver.lr': { log_uniform: [0.001, 0.1] } },
  });
  assert.equal(r.status, 201, r.text);
  await page.goto(`${base}/#/sweep/${r.body.id}`);
  await page.waitForSelector('#sweep-cancel:not([hidden])', { timeout: 15_000 });
  await page.click('#sweep-cancel');
  await page.waitForFunction(() => document.querySelector('#main')?.dataset.status === 'cancelled', null, { timeout: 15_000 });
  assert.equal(await page.isHidden('#sweep-cancel'), true);
  assert.equal(await page.isVisible('#sweep-delete'), true);
  assert.equal(await page.getAttribute('#trials-table tr[data-trial="0"] .badge', 'data-state'), 'cancelled');
  await page.screenshot({ path: path.join(OUT, 'sweep-cancelled.png'), fullPage: true });
  assert.deepEqual(problems, []);
});
