// The job page's Clone in headless Chromium (issue 16): a finished job's
// Clone opens the new-job form (#/jobs/ID/clone) filled with its settings
// (network, epochs, lr, momentum, the policy, the name + " (copy)"); the user
// changes the lr and starts it, and the new job's page opens with a config
// that differs from the source's only there. A job with a custom spec fills
// the spec box. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import {
  ROOT, api, describeResponse, makeDigitArchive, startServer, tempDir, waitDataset, waitFor,
} from '../integration/lib/kiln.mjs';

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
  tmp = tempDir('kiln-browser-clone-');
  const archive = await makeDigitArchive(path.join(tmp.dir, 'work'), 20);
  server = await startServer({ dataDir: path.join(tmp.dir, 'data') });
  base = server.url;
  const form = new FormData();
  form.append('name', 'digits');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const up = await api(base, 'POST', '/api/v1/datasets', form);
  assert.equal(up.status, 202, describeResponse('POST', '/api/v1/datasets', up));
  datasetId = up.body.id;
  assert.equal((await waitDataset(base, datasetId, 120_000)).status, 'ready');
  ({ browser, page } = await openPage(base, { viewport: { width: 1280, height: 900 }, problems }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

const jobNow = async (id) => (await api(base, 'GET', `/api/v1/jobs/${id}`)).body;

async function createJob(body) {
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, ...body });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body;
}

/* The leaf paths where two JSON values differ. */
function diffPaths(a, b, at = '') {
  const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  if (isObj(a) && isObj(b)) {
    return [...new Set([...Object.keys(a), ...Object.keys(b)])]
      .flatMap((k) => diffPaths(a[k], b[k], at ? `${at}.${k}` : k));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [at];
}

async function openClone(id) {
  await page.goto(`${base}/#/jobs/${id}`);
  await page.waitForSelector('#job-clone', { timeout: 15_000 });
  await page.click('#job-clone');
  await page.waitForFunction((jid) => location.hash === `#/jobs/${jid}/clone`, id);
  await page.waitForSelector('#job-form-body:not([hidden])', { timeout: 15_000 });
  await page.waitForSelector('#clone-loading[hidden]', { state: 'attached', timeout: 15_000 });
}

test('Clone on a finished job opens the form filled with its settings; a changed lr makes the new job', async () => {
  const src = await createJob({
    network: 'lenet', name: 'digits base', epochs: 1, batch_size: 16,
    solver: { type: 'sgd', lr: 0.02, momentum: 0.8 }, lr_policy: { type: 'cosine', warmup_epochs: 1 },
    augmentation: { mirror: true }, seed: 5,
  });
  let job;
  await waitFor(async () => ['done', 'failed', 'cancelled'].includes((job = await jobNow(src.id)).status),
    { timeoutMs: 120_000, intervalMs: 200, what: 'the source job to finish' });
  assert.equal(job.status, 'done', JSON.stringify(job).slice(0, 500));

  await openClone(src.id);
  const value = (sel) => page.inputValue(sel);
  assert.equal(await value('#job-network'), 'lenet');
  assert.equal(await value('#job-dataset'), String(datasetId));
  assert.equal(await value('#job-epochs'), '1');
  assert.equal(await value('#job-batch'), '16');
  assert.equal(await value('#job-solver'), 'sgd');
  assert.equal(await value('#job-lr'), '0.02');
  assert.equal(await value('#job-momentum'), '0.8');
  assert.equal(await value('#job-policy'), 'cosine');
  assert.equal(await value('#job-warmup'), '1', 'the warm-up back in epochs');
  assert.equal(await value('#job-seed'), '5');
  assert.equal(await page.isChecked('#job-mirror'), true);
  assert.equal(await value('#job-name'), 'digits base (copy)');
  assert.equal(await page.isHidden('#clone-notes'), true, 'nothing the form could not show');
  // the seed is under Advanced, which opens to show it
  assert.match(await page.textContent('#job-advanced-count'), /1 changed/);
  assert.equal(await page.getAttribute('#job-advanced', 'open'), '');
  await page.screenshot({ path: path.join(OUT, 'job-clone-form.png'), fullPage: true });

  await page.fill('#job-lr', '0.05');
  await page.click('#job-submit');
  await page.waitForFunction((jid) => /^#\/jobs\/\d+$/.test(location.hash) && location.hash !== `#/jobs/${jid}`,
    src.id, { timeout: 15_000 });
  const newId = Number(/(\d+)$/.exec(await page.evaluate(() => location.hash))[1]);
  await page.waitForFunction(() => /lr 0\.05/.test(document.querySelector('#job-config')?.textContent || ''), null,
    { timeout: 15_000 });
  assert.equal(await page.textContent('h1.page-title'), 'digits base (copy)');
  const clone = await jobNow(newId);
  assert.equal(clone.config.solver.lr, 0.05);
  assert.deepEqual(diffPaths(src.config, clone.config).sort(), ['id', 'name', 'solver.lr']);
  await page.screenshot({ path: path.join(OUT, 'job-clone-created.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('a job with a custom spec fills the spec box with it', async () => {
  const src = await createJob({ network: TINY, epochs: 2, solver: { type: 'adam', lr: 0.003 } });
  await openClone(src.id);
  assert.equal(await page.inputValue('#job-network'), '__custom__');
  assert.equal(await page.isVisible('#job-spec'), true);
  assert.deepEqual(JSON.parse(await page.inputValue('#job-spec')), TINY);
  assert.equal(await page.inputValue('#job-solver'), 'adam');
  assert.equal(await page.inputValue('#job-lr'), '0.003');
  assert.equal(await page.isHidden('#job-momentum-field'), true, 'SGD\'s momentum hidden for adam');
  assert.equal(await page.inputValue('#job-name'), `job ${src.id} (copy)`);
  await page.screenshot({ path: path.join(OUT, 'job-clone-custom.png'), fullPage: true });
  // started unchanged, it is the same job but for its id and name
  await page.click('#job-submit');
  await page.waitForFunction((jid) => /^#\/jobs\/\d+$/.test(location.hash) && location.hash !== `#/jobs/${jid}`,
    src.id, { timeout: 15_000 });
  const newId = Number(/(\d+)$/.exec(await page.evaluate(() => location.hash))[1]);
  assert.deepEqual(diffPaths(src.config, (await jobNow(newId)).config).sort(), ['id', 'name']);
  assert.deepEqual(problems, []);
});
