// The job page's Resume button in headless Chromium (issue 15, finding 9): a
// job stopped at a checkpoint (its worker stops during step STOP_AT as if
// cancelled: KILN_STOP_AFTER_STEP) shows Resume; a click continues it from the
// checkpoint to the end, the page following the new run, and the button goes.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, importDemo, startServer, tempDir, waitFor } from '../integration/lib/kiln.mjs';


const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const STOP_AT = 20;
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
  tmp = tempDir('kiln-browser-resume-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  process.env.KILN_STOP_AFTER_STEP = String(STOP_AT);     // the server's workers inherit it
  try {
    server = await startServer({ dataDir });
  } finally {
    delete process.env.KILN_STOP_AFTER_STEP;
  }
  base = server.url;
  ({ browser, page } = await openPage(base, { viewport: { width: 1280, height: 900 }, problems }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

const jobNow = async (id) => (await api(base, 'GET', `/api/v1/jobs/${id}`)).body;

test('a job stopped at a checkpoint shows Resume; a click runs it on to the end from there', async () => {
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 1, batch_size: 32 });
  assert.equal(r.status, 201, r.text);
  const id = r.body.id;
  let job;
  await waitFor(async () => ['cancelled', 'failed', 'done'].includes((job = await jobNow(id)).status),
    { timeoutMs: 120_000, intervalMs: 200, what: 'the job to stop at its checkpoint' });
  assert.equal(job.status, 'cancelled', JSON.stringify(job).slice(0, 500));
  assert.equal(job.resumable, true);

  await page.goto(`${base}/#/jobs/${id}`);
  await page.waitForSelector('#job-resume:not([hidden])', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-status'), 'cancelled');
  assert.equal(await page.isHidden('#job-cancel'), true);
  // stopped in its first epoch: the headline's train loss is the running one, and says so
  await page.waitForFunction(() => document.querySelector('#stat-loss')?.textContent !== '—', null, { timeout: 15_000 });
  assert.equal(await page.textContent('#stat-loss-label'), 'Train loss · running');
  await page.screenshot({ path: path.join(OUT, 'job-resume.png'), fullPage: true });

  await page.click('#job-resume');
  // the page follows the new run to its end, and the button is gone
  await page.waitForFunction(() => document.querySelector('#job-status')?.textContent === 'done', null,
    { timeout: 120_000 });
  assert.equal(await page.isHidden('#job-resume'), true);
  // the epoch ended: the headline is its mean (train/epoch_loss), and says so
  await page.waitForFunction(() => /epoch 1/.test(document.querySelector('#stat-loss-label')?.textContent), null,
    { timeout: 15_000 });
  await page.screenshot({ path: path.join(OUT, 'job-resumed.png'), fullPage: true });

  const done = await jobNow(id);
  assert.equal(done.status, 'done', JSON.stringify(done).slice(0, 500));
  assert.equal(done.resumable, false);
  const log = (await api(base, 'GET', `/api/v1/jobs/${id}/log`)).text;
  assert.match(log, new RegExp(`resuming from .*step ${STOP_AT}`), 'the run went on from the checkpoint');
  const metrics = (await api(base, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  assert.ok(metrics.some((m) => m.step > STOP_AT), 'metrics past the checkpoint');
  const epochLoss = metrics.find((m) => m.tag === 'train/epoch_loss');
  assert.ok(epochLoss, 'train/epoch_loss recorded at the epoch\'s end');
  const epochAcc = metrics.find((m) => m.tag === 'train/epoch_accuracy');
  assert.equal(await page.textContent('#stat-loss'),
    `${Number(epochLoss.value.toPrecision(4))} · acc ${(epochAcc.value * 100).toFixed(1)}%`);
  assert.deepEqual(problems, []);
});
