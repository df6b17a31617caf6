// kiln serve --dispatcher slurm against a one-machine Slurm cluster
// (tests/integration/lib/slurm.mjs: munged, slurmctld, slurmd in a temporary
// folder, 2 fake GPUs). Issue 18's checks of the Slurm dispatcher:
// - a LeNet job (1 epoch of the demo digits) runs through sbatch/srun to done,
//   with its metrics, TensorBoard file, model and log as with the local
//   dispatcher, and its Slurm job, state and nodes in GET /jobs/{id};
// - a job on 2 GPUs gets two distinct (fake) devices from Slurm, named in its
//   log, and fails at start-up because they are not real GPUs, with that reason;
// - cancel through kiln reaches Slurm (scontrol: CANCELLED); scancel from
//   outside fails the job in kiln with the reason; a job past its time limit
//   fails with TIMEOUT (its own server with --slurm-time-limit 1, started
//   first; the limit, seen in scontrol, is then lowered to 0 so that Slurm's
//   30 s check ends it while the other checks run, not a minute later);
// - a server restarted while a job runs finds it again, goes on reading its
//   reports where it stopped, and the job ends done with its metrics once;
// - a job whose node is set DOWN under it fails with NODE_FAIL (not requeued).
// Where the daemons cannot start here, every check is skipped with the reason.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startCluster, slurm } from './lib/slurm.mjs';
import {
  FINAL_STATUSES, api, describeResponse, importDemo, parseTfEvents, readSSE, startServer, tempDir,
  waitFor,
} from './lib/kiln.mjs';

const POLL = ['--slurm-poll-ms', '300'];
// A job far longer than any check waits: LeNet, 100 epochs (about 15 min on one core).
const LONG_JOB = { network: 'lenet', epochs: 100, batch_size: 64, devices: 0 };

let cluster = null;
let skip = null;
let tmp;
let datasetId;
let server;      // --dispatcher slurm
let limited;     // --dispatcher slurm --slurm-time-limit 1
let limitedJob;  // its long job, submitted in before()

function slurmArgs(c) {
  return ['--dispatcher', 'slurm', '--slurm-bin', c.slurmBin, ...POLL];
}

async function post(base, body) {
  const r = await api(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

async function job(base, id) {
  const r = await api(base, 'GET', `/api/v1/jobs/${id}`);
  assert.equal(r.status, 200, describeResponse('GET', `/api/v1/jobs/${id}`, r));
  return r.body;
}

async function ended(srv, id, timeoutMs = 120_000) {
  return waitFor(async () => {
    const j = await job(srv.url, id);
    return FINAL_STATUSES.has(j.status) ? j : null;
  }, { timeoutMs, intervalMs: 200, what: `job ${id} to end\n${srv.output().slice(-3000)}` });
}

async function stepping(srv, id) {
  return waitFor(async () => {
    const j = await job(srv.url, id);
    if (FINAL_STATUSES.has(j.status)) throw new Error(`job ${id} ended ${j.status}: ${j.error}`);
    return j.status === 'running' && j.step > 0 ? j : null;
  }, { timeoutMs: 60_000, intervalMs: 100, what: `job ${id} to train` });
}

function scontrolState(slurmId) {
  const out = slurm(cluster, 'scontrol', ['show', 'job', '-o', String(slurmId)]);
  return /JobState=(\S+)/.exec(out)?.[1];
}

before(async () => {
  cluster = await startCluster({ gpus: 2 });
  if (cluster.skip) {
    skip = cluster.skip;
    cluster = null;
    return;
  }
  process.env.SLURM_CONF = cluster.conf;          // the servers and their sbatch/squeue
  // Each job one OpenMP thread (sbatch passes the server's environment on):
  // two jobs run at once here, and spinning OpenMP threads on shared cores
  // slow both many times over.
  process.env.OMP_NUM_THREADS = '1';
  tmp = tempDir('kiln-slurm-test-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  const limitedDir = path.join(tmp.dir, 'limited');
  cpSync(dataDir, limitedDir, { recursive: true });
  // The time limit's server first: its minute runs while the others check.
  limited = await startServer({ dataDir: limitedDir, args: [...slurmArgs(cluster), '--slurm-time-limit', '1'] });
  limitedJob = await post(limited.url, { dataset_id: datasetId, ...LONG_JOB });
  server = await startServer({ dataDir, args: slurmArgs(cluster) });
  // The flag reached Slurm as the job's limit. slurmctld looks at time limits
  // every 30 s, so a one-minute limit ends the job 60 to 90 s after its
  // start; lowering the limit of the running job to 0 (as an administrator
  // may) ends it at the next look instead, by the same TIMEOUT.
  const running = await stepping(limited, limitedJob);
  const show = slurm(cluster, 'scontrol', ['show', 'job', '-o', String(running.slurm.job_id)]);
  assert.match(show, /TimeLimit=00:01:00/, '--slurm-time-limit 1 is the job\'s time limit in Slurm');
  slurm(cluster, 'scontrol', ['update', `JobId=${running.slurm.job_id}`, 'TimeLimit=0']);
});

after(async () => {
  for (const s of [server, limited]) if (s) await s.stop();
  if (cluster) {
    // No job left behind (a failed check's): a slurmstepd that cannot report
    // its end to a stopped slurmctld lingers after the cluster is gone.
    try { slurm(cluster, 'scancel', ['--user', os.userInfo().username]); } catch { /* none */ }
    await waitFor(() => slurm(cluster, 'squeue', ['-h']).trim() === '', { timeoutMs: 30_000, what: 'no Slurm jobs' })
      .catch((e) => console.log(`# ${e.message}`));
    await cluster.stop();
  }
  if (tmp) tmp.cleanup();
});

test('a LeNet job runs through Slurm to done: metrics, TensorBoard file, model, log, its Slurm job', { timeout: 180_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const id = await post(server.url, { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64, devices: 0 });
  const queued = await job(server.url, id);
  assert.ok(['queued', 'running'].includes(queued.status));
  const stream = readSSE(`${server.url}/api/v1/jobs/${id}/events`, { timeoutMs: 120_000 });
  const j = await ended(server, id);
  assert.equal(j.status, 'done', `job ${id} ended ${j.status}: ${j.error}\n${server.output().slice(-3000)}`);
  assert.equal(j.step, j.steps);
  assert.ok(j.started_at, 'it was running in kiln while Slurm ran it');
  assert.equal(j.slurm.state, 'COMPLETED');
  assert.equal(j.slurm.nodes, cluster.node);
  assert.ok(j.slurm.job_id > 0);
  assert.equal(scontrolState(j.slurm.job_id), 'COMPLETED');
  assert.ok(j.metrics['val/accuracy'] > 0.5, `val/accuracy ${j.metrics['val/accuracy']}`);

  const m = (await api(server.url, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  const tags = new Set(m.map((x) => x.tag));
  for (const tag of ['train/loss', 'train/accuracy', 'val/loss', 'val/accuracy', 'lr']) assert.ok(tags.has(tag), `metric ${tag}`);
  const losses = m.filter((x) => x.tag === 'train/loss').map((x) => x.step);
  assert.deepEqual(losses, [...new Set(losses)].sort((a, b) => a - b), 'each train/loss step once, in order');

  const dir = path.join(server.dataDir, 'jobs', String(id));
  const tb = readdirSync(dir).find((f) => f.startsWith('events.out.tfevents.'));
  assert.ok(tb, 'a TensorBoard file');
  const tbTags = new Set(parseTfEvents(readFileSync(path.join(dir, tb))).flatMap((r) => r.values.map((v) => v.tag)));
  for (const tag of tags) assert.ok(tbTags.has(tag), `TensorBoard has ${tag}`);
  const model = await fetch(`${server.url}/api/v1/jobs/${id}/model?format=tar`);
  assert.equal(model.status, 200);
  assert.ok((await model.arrayBuffer()).byteLength > 400_000, 'the model tarball holds LeNet\'s weights');
  const exit = JSON.parse(readFileSync(path.join(dir, 'slurm-exit.json'), 'utf8'));
  assert.deepEqual(exit, { slurm_job_id: j.slurm.job_id, exit_code: 0, signal: 0 });

  const s = await stream;
  assert.equal(s.finalStatus, 'done');
  const logLines = s.events.filter((e) => e.event === 'log').map((e) => e.data.line);
  assert.ok(logLines.some((l) => /^0: kiln: rank 0 of 1 on /.test(l)), `the log names rank 0:\n${logLines.join('\n')}`);
  assert.ok(logLines.some((l) => /^0: .*done: 1 epoch/.test(l)), 'the worker\'s log reaches the stream');
  assert.ok(s.events.some((e) => e.event === 'metric'), 'metrics reach the stream');
});

test('a 2-rank CPU job (2 tasks on the node) trains as the one-process job of the same global batch', { timeout: 240_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  // The same request twice: one process, then 2 ranks that each take half of
  // every batch of 128 and all-reduce (Gloo). Bit-for-bit parity with the
  // in-process replicas, and srun's ranks, are integration_mpdp's; here the
  // whole path: the request, sbatch's --ntasks-per-node, both ranks, rank
  // 0's reports through the server.
  const req = { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 128, devices: 0, seed: 7 };
  const one = await post(server.url, req);
  const two = await post(server.url, { ...req, tasks_per_node: 2 });
  const [a, b] = [await ended(server, one, 200_000), await ended(server, two, 200_000)];
  assert.equal(a.status, 'done', a.error);
  assert.equal(b.status, 'done', b.error);
  const log = readFileSync(path.join(server.dataDir, 'jobs', String(two), 'log'), 'utf8');
  assert.match(log, /^0: kiln: rank 0 of 2 on /m, log);
  assert.match(log, /^1: kiln: rank 1 of 2 on /m, log);
  const curve = async (id) => new Map((await api(server.url, 'GET', `/api/v1/jobs/${id}/metrics?tag=train/loss`)).body.items
    .filter((x) => x.tag === 'train/loss').map((x) => [x.step, x.value]));
  const [la, lb] = [await curve(one), await curve(two)];
  assert.deepEqual([...lb.keys()], [...la.keys()], 'the same report steps');
  const first = [...la.keys()][0];
  const d0 = Math.abs(lb.get(first) - la.get(first)) / la.get(first);
  let dmax = 0;
  for (const [step, v] of la) dmax = Math.max(dmax, Math.abs(lb.get(step) - v) / v);
  const dacc = Math.abs(b.metrics['val/accuracy'] - a.metrics['val/accuracy']);
  console.log(`# parity through Slurm, 2 ranks vs 1 process: loss at step ${first} ${d0.toExponential(2)}, `
    + `largest over the epoch ${dmax.toExponential(2)}; val/accuracy ${a.metrics['val/accuracy']} vs ${b.metrics['val/accuracy']}`);
  // rounding at the start (another summation order); an epoch of SGD carries it further
  assert.ok(d0 < 1e-5, `the first report's loss differs by ${d0}`);
  assert.ok(dacc < 0.01, `val/accuracy differs by ${dacc}`);
});

test('a job on 2 GPUs gets two distinct devices from Slurm and fails at start-up with the reason', { timeout: 120_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const listed = await api(server.url, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, devices: [0, 1] });
  assert.equal(listed.status, 400, 'GPU numbers are Slurm\'s to pick');
  assert.match(listed.body.error.message, /--dispatcher slurm/);
  const id = await post(server.url, { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64, devices: 2 });
  const j = await ended(server, id);
  assert.equal(j.status, 'failed');
  assert.match(j.error, /cuda|CUDA|GPU/, 'the reason names the missing GPU backend or devices');
  assert.equal(j.slurm.state, 'FAILED');
  const log = readFileSync(path.join(server.dataDir, 'jobs', String(id), 'log'), 'utf8');
  const cvd = /CUDA_VISIBLE_DEVICES=(\S*)/.exec(log)?.[1];
  assert.ok(cvd, `the log names CUDA_VISIBLE_DEVICES:\n${log}`);
  const devs = cvd.split(',');
  assert.equal(devs.length, 2, `two devices: ${cvd}`);
  assert.notEqual(devs[0], devs[1]);
  const show = slurm(cluster, 'scontrol', ['show', 'job', '-o', String(j.slurm.job_id)]);
  assert.match(show, /gres(\/|:)gpu(:|=)2/, 'Slurm gave it gpu:2');
});

test('the queue shows a job waiting in Slurm with Slurm\'s reason; cancel through kiln reaches Slurm', { timeout: 120_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  // A partition that is down keeps new jobs pending (running ones go on).
  const partition = (state) => slurm(cluster, 'scontrol', ['update', `PartitionName=${cluster.partition}`, `State=${state}`]);
  partition('DOWN');
  let id;
  try {
    id = await post(server.url, { dataset_id: datasetId, ...LONG_JOB });
    const item = await waitFor(async () => {
      const q = (await api(server.url, 'GET', '/api/v1/queue')).body;
      const it = q.queued.find((x) => x.id === id);
      return it && it.slurm && it.slurm.reason === 'PartitionDown' ? it : null;
    }, { timeoutMs: 30_000, intervalMs: 200, what: `job ${id} pending in Slurm in the queue` });
    assert.equal(item.status, 'queued');
    assert.equal(item.slurm.state, 'PENDING');
    assert.match(item.waiting_for, /Slurm job \d+ is PENDING \(PartitionDown\)/);
    assert.equal(item.can_change_priority, false, 'Slurm orders it now');
    const pending = await job(server.url, id);
    assert.equal(pending.status, 'queued');
    assert.deepEqual({ state: pending.slurm.state, reason: pending.slurm.reason }, { state: 'PENDING', reason: 'PartitionDown' });
  } finally {
    partition('UP');
  }
  await stepping(server, id);
  // The job's Slurm state is kiln's latest poll of Slurm, which can trail the
  // worker's first steps by one poll (a fresh-clone run read PENDING there).
  const running = await waitFor(async () => {
    const j = await job(server.url, id);
    return j.slurm && j.slurm.state !== 'PENDING' ? j : null;
  }, { timeoutMs: 30_000, intervalMs: 100, what: `job ${id}'s Slurm state after PENDING` });
  const q = (await api(server.url, 'GET', '/api/v1/queue')).body;
  assert.ok(q.running.some((x) => x.id === id && x.slurm && x.slurm.job_id === running.slurm.job_id), 'running in the queue, with its Slurm job');
  assert.equal(running.slurm.state, 'RUNNING');
  const c = await api(server.url, 'POST', `/api/v1/jobs/${id}/cancel`, {});
  assert.ok(c.status < 300, describeResponse('POST', `/api/v1/jobs/${id}/cancel`, c));
  const j = await ended(server, id, 60_000);
  assert.equal(j.status, 'cancelled', `${j.status}: ${j.error}`);
  assert.equal(j.slurm.state, 'CANCELLED');
  assert.equal(scontrolState(j.slurm.job_id), 'CANCELLED');
});

test('scancel from outside kiln fails the job with the reason', { timeout: 120_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const id = await post(server.url, { dataset_id: datasetId, ...LONG_JOB });
  const running = await stepping(server, id);
  slurm(cluster, 'scancel', [String(running.slurm.job_id)]);
  const j = await ended(server, id, 60_000);
  assert.equal(j.status, 'failed');
  assert.match(j.error, /cancelled outside kiln \(CANCELLED/);
  assert.equal(j.slurm.state, 'CANCELLED');
});

test('a server restarted while a job runs in Slurm finds it again; it ends done, its metrics once', { timeout: 180_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const id = await post(server.url, { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64, devices: 0 });
  const before1 = await stepping(server, id);
  const stopped = await server.stop();
  assert.equal(stopped.killed, false);
  assert.equal(scontrolState(before1.slurm.job_id), 'RUNNING', 'the job runs on without its server');
  server = await startServer({ dataDir: server.dataDir, args: slurmArgs(cluster) });
  const j = await ended(server, id);
  assert.equal(j.status, 'done', `job ${id} ended ${j.status}: ${j.error}\n${server.output().slice(-3000)}`);
  assert.equal(j.slurm.job_id, before1.slurm.job_id, 'not submitted again');
  assert.match(server.output(), new RegExp(`job ${id} runs in Slurm as job ${j.slurm.job_id}; following it again from byte [1-9]`));
  const m = (await api(server.url, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  for (const tag of ['train/loss', 'val/accuracy']) {
    const steps = m.filter((x) => x.tag === tag).map((x) => x.step);
    assert.deepEqual(steps, [...new Set(steps)].sort((a, b) => a - b), `each ${tag} step once`);
  }
  assert.equal(m.filter((x) => x.tag === 'val/accuracy').length, 1, 'its epoch validated once');
  assert.ok(j.metrics['val/accuracy'] > 0.5);
  assert.ok(existsSync(path.join(server.dataDir, 'jobs', String(id), 'model.safetensors')));
});

test('--slurm-time-limit: a job past its time limit fails with TIMEOUT', { timeout: 240_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const j = await ended(limited, limitedJob, 120_000);
  assert.equal(j.status, 'failed', `${j.status}: ${j.error}`);
  assert.match(j.error, /time limit \(TIMEOUT\)/);
  assert.equal(j.slurm.state, 'TIMEOUT');
  assert.equal(scontrolState(j.slurm.job_id), 'TIMEOUT');
  assert.match(readFileSync(path.join(limited.dataDir, 'jobs', String(limitedJob), 'slurm.sh'), 'utf8'), /srun/);
});

test('a job whose node fails (the node set DOWN under it) fails with NODE_FAIL', { timeout: 120_000 }, async (t) => {
  if (skip) { t.skip(skip); return; }
  const id = await post(server.url, { dataset_id: datasetId, ...LONG_JOB });
  await stepping(server, id);
  const node = (state, ...more) => slurm(cluster, 'scontrol', ['update', `NodeName=${cluster.node}`, `State=${state}`, ...more]);
  node('DOWN', 'Reason=kiln-test');
  try {
    const j = await ended(server, id, 60_000);
    assert.equal(j.status, 'failed', `${j.status}: ${j.error}`);
    assert.match(j.error, /lost its node .* \(NODE_FAIL\)/);
    assert.equal(j.slurm.state, 'NODE_FAIL', 'not requeued by Slurm (sbatch --no-requeue)');
    assert.equal(j.slurm.nodes, cluster.node);
  } finally {
    // slurmd is alive, so the node comes back by itself (ReturnToService=2).
    await waitFor(() => /^idle/m.test(slurm(cluster, 'sinfo', ['-h', '-N', '-o', '%T'])),
      { timeoutMs: 30_000, what: 'the node to return' });
  }
});
