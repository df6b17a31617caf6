// The new-job form's Nodes and Tasks per node (issue 18) in headless
// Chromium: absent under the local dispatcher (GET /api/v1/info "dispatcher":
// "local"); under `kiln serve --dispatcher slurm` against a real one-machine
// cluster (tests/integration/lib/slurm.mjs) they show, Tasks per node = 2
// makes a job whose config says tasks_per_node 2 (and nodes, left at 1, is not
// sent), the job page shows it, and Clone fills it in again. The job is
// cancelled, not waited for. The slurm part skips with the reason where the
// daemons cannot start. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openPage } from './lib.mjs';
import {
  ROOT, api, describeResponse, makeDigitArchive, startServer, tempDir, waitDataset, waitFor,
} from '../integration/lib/kiln.mjs';
import { startCluster, slurm } from '../integration/lib/slurm.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');

let tmp;
let dataDir;
let cluster;
let server;
let browser;
let page;
let jobId = null;
const problems = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-slurm-form-');
  dataDir = path.join(tmp.dir, 'data');
  // the cluster starts while the local server imports the dataset
  const clusterUp = startCluster();
  const archive = await makeDigitArchive(path.join(tmp.dir, 'work'), 10);
  server = await startServer({ dataDir });
  const form = new FormData();
  form.append('name', 'digits');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const up = await api(server.url, 'POST', '/api/v1/datasets', form);
  assert.equal(up.status, 202, describeResponse('POST', '/api/v1/datasets', up));
  assert.equal((await waitDataset(server.url, up.body.id, 60_000)).status, 'ready');
  cluster = await clusterUp;
  if (cluster.skip) console.log(`# skip: ${cluster.skip}`);
});

/* A browser on this server's origin (lib.mjs aborts requests to any other). */
async function browse(base) {
  if (browser) await browser.close();
  ({ browser, page } = await openPage(base, { viewport: { width: 1280, height: 1000 }, problems }));
}

after(async () => {
  delete process.env.SLURM_CONF;
  if (browser) await browser.close();
  if (server) await server.stop();
  if (jobId) await noJobs().catch((e) => console.log(`# ${e.message}`));
  if (cluster && !cluster.skip) await cluster.stop();
  if (tmp) tmp.cleanup();
});

/* Cancels every job and waits until Slurm has none left (as cluster.test.mjs). */
async function noJobs() {
  try { slurm(cluster, 'scancel', ['--user', os.userInfo().username]); } catch { /* none, or no controller */ }
  await waitFor(() => slurm(cluster, 'squeue', ['-h']).trim() === '', { timeoutMs: 30_000, what: 'no Slurm jobs' });
}

/* The home page with the job form loaded (schema, datasets and GET /info applied). */
async function openForm(base) {
  await page.goto(`${base}/`);
  await page.waitForSelector('#job-form-body:not([hidden])');
  await page.waitForFunction(() => document.querySelector('#job-dataset').value !== '');
}

test('the local dispatcher: GET /info says so and the form has no Nodes or Tasks per node', async () => {
  const info = await api(server.url, 'GET', '/api/v1/info');
  assert.equal(info.body.dispatcher, 'local');
  await browse(server.url);
  await openForm(server.url);
  await page.waitForSelector('#job-form[data-dispatcher="local"]');   // GET /info applied
  assert.equal(await page.isVisible('#job-nodes'), false);
  assert.equal(await page.isVisible('#job-tasks-per-node'), false);
  assert.equal(await page.isHidden('#job-ranks-row'), true);
  assert.deepEqual(problems, []);
});

test('--dispatcher slurm: Tasks per node = 2 makes a 2-task job; Nodes at 1 is not sent', async (t) => {
  if (cluster.skip) { t.skip(cluster.skip); return; }
  await server.stop();
  process.env.SLURM_CONF = cluster.conf;
  server = await startServer({ dataDir, args: ['--dispatcher', 'slurm'] });
  const base = server.url;
  assert.equal((await api(base, 'GET', '/api/v1/info')).body.dispatcher, 'slurm');
  await browse(base);
  await openForm(base);
  await page.waitForSelector('#job-form[data-dispatcher="slurm"]');
  assert.equal(await page.isHidden('#job-ranks-row'), false);
  assert.equal(await page.isVisible('#job-nodes'), true);
  assert.equal(await page.isVisible('#job-tasks-per-node'), true, 'no GPU here: the job runs on the CPU');
  // the schema's defaults
  assert.equal(await page.inputValue('#job-nodes'), '1');
  assert.equal(await page.inputValue('#job-tasks-per-node'), '1');
  await page.fill('#job-tasks-per-node', '2');
  await page.locator('#job-form').screenshot({ path: path.join(OUT, 'slurm-form.png') });

  const posted = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/v1/jobs'));
  await page.click('#job-submit');
  const body = JSON.parse((await posted).postData());
  assert.equal(body.tasks_per_node, 2);
  assert.equal('nodes' in body, false, 'nodes at its default is not sent');
  await page.waitForFunction(() => /^#\/jobs\/\d+$/.test(location.hash));
  jobId = Number((await page.evaluate(() => location.hash)).split('/').pop());

  const job = await api(base, 'GET', `/api/v1/jobs/${jobId}`);
  assert.equal(job.status, 200, describeResponse('GET', `/api/v1/jobs/${jobId}`, job));
  assert.equal(job.body.config.tasks_per_node, 2);
  assert.equal(job.body.config.nodes, 1);

  // the job page's configuration names the tasks, and not the one node
  await page.waitForSelector('#job-config dt:text-is("Tasks per node")');
  assert.equal((await page.textContent('#job-config dt:text-is("Tasks per node") + dd')).trim(), '2');
  assert.equal(await page.$('#job-config dt:text-is("Nodes")'), null);
  await page.locator('#job-config').screenshot({ path: path.join(OUT, 'slurm-job-config.png') });

  // Clone fills them in again
  await page.goto(`${base}/#/jobs/${jobId}/clone`);
  await page.waitForSelector('.clone-card:not([hidden]) #job-tasks-per-node');
  assert.equal(await page.inputValue('#job-tasks-per-node'), '2');
  assert.equal(await page.inputValue('#job-nodes'), '1');
  assert.equal(await page.isVisible('#job-tasks-per-node'), true);

  const c = await api(base, 'POST', `/api/v1/jobs/${jobId}/cancel`);
  assert.ok(c.status < 300, describeResponse('POST', `/api/v1/jobs/${jobId}/cancel`, c));
  await noJobs();
  jobId = null;
  assert.deepEqual(problems, []);
});
