// The hardware card's Slurm cluster table (issue 18) in headless Chromium,
// against a real one-machine cluster (tests/integration/lib/slurm.mjs, 2
// fake GPUs) and a real `kiln serve --dispatcher slurm` sampling it every second:
// the node idle with 0 of 2 GPUs; then, with a 1-GPU job running and the node
// drained with a reason, its state, CPU and GPU use and the reason; then, with
// slurmctld stopped, sinfo's error. Skips with the reason where the daemons
// cannot start. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, startServer, tempDir, waitFor } from '../integration/lib/kiln.mjs';
import { startCluster, slurm } from '../integration/lib/slurm.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');

let cluster;
let skip = null;
let tmp;
let server;
let browser;
let page;
let jobId = null;
const problems = [];

before(async () => {
  cluster = await startCluster({ gpus: 2 });
  if (cluster.skip) {
    skip = cluster.skip;
    console.log(`# skip: ${skip}`);
    return;
  }
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-cluster-');
  process.env.SLURM_CONF = cluster.conf;
  server = await startServer({
    dataDir: path.join(tmp.dir, 'data'),
    args: ['--dispatcher', 'slurm', '--limit', 'cluster-interval=1', '--limit', 'hardware-interval=1'],
  });
  ({ browser, page } = await openPage(server.url, { viewport: { width: 1360, height: 1100 }, problems }));
});

after(async () => {
  delete process.env.SLURM_CONF;
  if (browser) await browser.close();
  if (server) await server.stop();
  if (jobId) await noJobs().catch((e) => console.log(`# ${e.message}`));
  if (cluster && !cluster.skip) await cluster.stop();
  if (tmp) tmp.cleanup();
});

/* Cancels every job and waits until Slurm has none left, not even
 * completing: a job's slurmstepd that cannot report its end to a stopped
 * slurmctld lingers after the cluster is gone. */
async function noJobs() {
  try { slurm(cluster, 'scancel', ['--user', os.userInfo().username]); } catch { /* none, or no controller */ }
  await waitFor(() => slurm(cluster, 'squeue', ['-h']).trim() === '', { timeoutMs: 30_000, what: 'no Slurm jobs' });
}

const row = () => `#hw-cluster tr[data-node="${cluster.node}"]`;
const cell = (col) => page.textContent(`${row()} td[data-col="${col}"]`);

test('the cluster table lists the idle node with its 2 GPUs', async (t) => {
  if (skip) { t.skip(skip); return; }
  await page.goto(`${server.url}/`);
  await page.waitForSelector(`${row()} [data-state="idle"]`, { timeout: 20_000 });
  assert.equal(await cell('cpus'), `0 / ${os.cpus().length}`);
  assert.equal(await cell('gpus'), '0 / 2');
  assert.match(await cell('memory'), /^0 B \/ 3\.9 GiB$/);
  assert.match(await page.textContent(row()), new RegExp(`${cluster.node}\\s*${cluster.partition}`));
  assert.match(await page.textContent('#hw-cluster .hw-gpu-head'), /Slurm cluster.*Slurm \d+\.\d+\.\d+ · 1 node · sinfo every 1 s/);
  assert.equal(await page.$('#hw-cluster-error'), null);
  assert.equal(await page.$('.hw-node-reason'), null, 'no reason row for a healthy node');
  await page.locator('#hardware-card').screenshot({ path: path.join(OUT, 'cluster-idle.png') });
  assert.deepEqual(problems, []);
});

test('a running 1-GPU job and a drain show as the node\'s state, use and reason', async (t) => {
  if (skip) { t.skip(skip); return; }
  jobId = slurm(cluster, 'sbatch', ['--parsable', '--gres=gpu:1', '--output', path.join(cluster.dir, 'job-%j.out'),
    '--wrap', 'sleep 60']).trim().split(';')[0];
  // drained only once the job runs: a drained node starts nothing
  await waitFor(() => /^R$/m.test(slurm(cluster, 'squeue', ['-h', '-j', jobId, '-o', '%t'])),
    { timeoutMs: 20_000, what: `Slurm job ${jobId} running` });
  slurm(cluster, 'scontrol', ['update', `nodename=${cluster.node}`, 'state=drain', 'reason=disk check by the kiln test']);
  // one render is one sinfo: the first that saw the drain saw the job too
  await waitFor(async () => (await page.textContent(`${row()} .badge`).catch(() => '')) === 'mixed+drain',
    { timeoutMs: 20_000, what: 'the node mixed+drain' });
  assert.equal(await cell('gpus'), '1 / 2');
  assert.match(await page.getAttribute(`${row()} .badge`, 'class'), /node-warn/);
  assert.equal(await cell('cpus'), `1 / ${os.cpus().length}`);
  assert.equal((await page.textContent(`#hw-cluster tr[data-reason-of="${cluster.node}"]`)).trim(),
    'reason: disk check by the kiln test');
  await page.locator('#hardware-card').screenshot({ path: path.join(OUT, 'cluster-drain.png') });
  await page.screenshot({ path: path.join(OUT, 'cluster-home.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('sinfo\'s error is shown when the controller is down', async (t) => {
  if (skip) { t.skip(skip); return; }
  await noJobs();
  jobId = null;
  process.kill(cluster.pids.slurmctld, 'SIGTERM');
  await page.waitForSelector('#hw-cluster-error', { timeout: 40_000 });
  assert.match(await page.textContent('#hw-cluster-error'), /^sinfo --json reported: .*is slurmctld running and reachable\?\)$/);
  assert.equal(await page.$(row()), null, 'no nodes with the error');
  assert.match(await page.textContent('#hw-cluster .hw-gpu-head'), /0 nodes/);
  await page.locator('#hardware-card').screenshot({ path: path.join(OUT, 'cluster-error.png') });
  assert.deepEqual(problems, []);
});
