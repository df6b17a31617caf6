// The job page's log follows the event stream (issue 17): while a job runs,
// its log card fills from the stream's `log` events, without polling
// GET /jobs/{id}/log, and ends showing the log's last lines as GET /log has
// them. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, importDemo, startServer, tempDir, waitFor } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
const LOG_LINES = 200;                 // web/job.js shows this many

let tmp;
let server;
let base;
let browser;
let page;
let datasetId;
const problems = [];
const logRequests = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-joblog-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
  ({ browser, page } = await openPage(base, { viewport: { width: 1280, height: 900 }, problems }));
  page.on('request', (r) => { if (/\/api\/v1\/jobs\/\d+\/log/.test(r.url())) logRequests.push(r.url()); });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('the log card fills from the stream while the job runs, and ends as GET /log', async () => {
  // Batch 2: the tiny network's epochs take a few seconds, so the page sees it run.
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 2, batch_size: 2 });
  assert.equal(r.status, 201, r.text);
  const id = r.body.id;
  await page.goto(`${base}/#/jobs/${id}`);
  await page.waitForFunction(() => (document.querySelector('#job-log')?.textContent || '').trim().length > 0,
    null, { timeout: 60_000 });
  const running = (await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status;
  await page.screenshot({ path: path.join(OUT, 'job-log-running.png'), fullPage: true });

  await waitFor(async () => ['done', 'failed', 'cancelled'].includes((await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status),
    { timeoutMs: 180_000, intervalMs: 250, what: 'the job to end' });
  await page.waitForFunction(() => document.querySelector('#job-status')?.textContent === 'done', null, { timeout: 30_000 });
  const file = await fetch(`${base}/api/v1/jobs/${id}/log`).then((x) => x.text());
  const want = file.replace(/\n+$/, '').split('\n').slice(-LOG_LINES).join('\n');
  await page.waitForFunction((w) => document.querySelector('#job-log')?.textContent === w, want, { timeout: 15_000 });
  await page.screenshot({ path: path.join(OUT, 'job-log-done.png'), fullPage: true });
  assert.equal(running, 'running', 'the log showed while the job ran');
  assert.deepEqual(logRequests, [], 'the page never asked GET /log: the stream carried the log');
  assert.deepEqual(problems, []);
});
