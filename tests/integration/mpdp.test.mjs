// Data parallelism across processes (issue 18): two `kiln worker` processes
// started directly as ranks 0 and 1 of one CPU job (KILN_RANK, KILN_WORLD_SIZE,
// as srun's SLURM_* would tell them), on a network smaller than LeNet (no
// batch norm or dropout, which make replicas differ from one process by more
// than rounding: tests/unit/test_engine_world.c has them across processes)
// and the demo MNIST digits, for one epoch of 62 steps of 128 images, against the same job run by one process
// (the whole batch on one net) and by one process with 2 in-process replicas
// (job.json "replicas"). The 2 ranks must give the replicas' losses and final
// weights bit for bit (the same split, the same rank-ordered sums); against the
// single process they differ by rounding only (another summation order), and
// the test prints the largest relative difference: the parity figure. Then: a
// 2-rank run stopped part-way resumes from rank 0's checkpoint to the same
// weights; a rank killed mid-run makes the other fail at once with a reason; a
// rank alone, and the local dispatcher, refuse a multi-rank job.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync, existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import {
  kilnBin, tempDir, runKiln, importDemo, startServer, api, parseSafetensors, waitFor,
} from './lib/kiln.mjs';
import { startCluster } from './lib/slurm.mjs';

let tmp;
let dataDir;
let datasetId;
let baseJob;          // job.json of the job every run below trains

before(async () => {
  tmp = tempDir('kiln-mpdp-');
  dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  // kiln train writes job.json as a job request makes it; one step is enough for that
  const out = path.join(tmp.dir, 'base');
  const spec = path.join(tmp.dir, 'small.json');
  writeFileSync(spec, JSON.stringify({ name: 'small', layers: [
    { type: 'conv2d', name: 'conv1', filters: 8, kernel: 5 },
    { type: 'relu' },
    { type: 'maxpool', kernel: 2 },
    { type: 'conv2d', name: 'conv2', filters: 16, kernel: 5 },
    { type: 'relu' },
    { type: 'maxpool', kernel: 2 },
    { type: 'flatten' },
    { type: 'dense', name: 'fc', units: 'classes' }] }));
  const r = await runKiln(['train', '--dataset', path.join(dataDir, 'datasets', String(datasetId)),
    '--network', spec, '--out', out, '--epochs', '1', '--batch', '128', '--devices', '0',
    '--lr', '0.05'], { env: { KILN_STOP_AFTER_STEP: '1' } });
  assert.equal(r.code, 0, r.stderr);
  baseJob = JSON.parse(readFileSync(path.join(out, 'job.json'), 'utf8'));
});

after(() => tmp?.cleanup());

/* A job folder holding baseJob with `fields` changed. */
function jobDir(name, fields) {
  const dir = path.join(tmp.dir, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'job.json'), JSON.stringify({ ...baseJob, ...fields }, null, 2));
  return dir;
}

/* Starts `kiln worker` with env; resolves {code, stdout, stderr, ms} at its exit. */
function worker(args, env = {}) {
  const t0 = Date.now();
  const child = spawn(kilnBin(), ['worker', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`worker ran past 180 s\n${stderr}`)); }, 180_000);
    child.on('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 }); });
  });
  return { child, done };
}

/* The 2 ranks of a job folder, rank 0 reporting to dir/reports.jsonl. */
function ranks(dir, runId, extraEnv = {}) {
  return [0, 1].map((r) => worker(['--job-dir', dir, ...(r === 0 ? ['--report-file', path.join(dir, 'reports.jsonl')] : [])],
    { KILN_RANK: String(r), KILN_WORLD_SIZE: '2', KILN_LOCAL_RANK: String(r), KILN_RUN_ID: runId, ...extraEnv }));
}

function lines(text) {
  return text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

/* {loss: Map step -> train/loss, val: [val/loss, val/accuracy], last} of a run's reports. */
function metrics(reports) {
  const loss = new Map();
  const val = [];
  for (const m of reports) {
    if (m.t === 'metric' && m.tag === 'train/loss') loss.set(m.step, m.value);
    if (m.t === 'metric' && (m.tag === 'val/loss' || m.tag === 'val/accuracy')) val.push(m.value);
  }
  return { loss, val, last: reports[reports.length - 1] };
}

/* The F32 tensors of a safetensors file: Map name -> Float32Array. */
function tensors(file) {
  const buf = readFileSync(file);
  const { header } = parseSafetensors(buf);
  const start = 8 + Number(buf.readBigUInt64LE(0));
  const out = new Map();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    assert.equal(t.dtype, 'F32');
    const bytes = buf.subarray(start + t.data_offsets[0], start + t.data_offsets[1]);
    out.set(name, new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
  }
  return out;
}

/* The largest relative difference: of the losses (|a - b| / |b|), and of each
 * weight tensor (max |a - b| / max |b|). */
function relDiff(a, b, wa, wb) {
  let loss = 0;
  assert.deepEqual([...a.loss.keys()], [...b.loss.keys()]);
  for (const [s, v] of b.loss) loss = Math.max(loss, Math.abs(a.loss.get(s) - v) / Math.abs(v));
  for (let i = 0; i < b.val.length; i++) loss = Math.max(loss, Math.abs(a.val[i] - b.val[i]) / Math.abs(b.val[i]));
  let weights = 0;
  assert.deepEqual([...wa.keys()].sort(), [...wb.keys()].sort());
  for (const [name, x] of wb) {
    const y = wa.get(name);
    let d = 0;
    let m = 0;
    for (let i = 0; i < x.length; i++) { d = Math.max(d, Math.abs(y[i] - x[i])); m = Math.max(m, Math.abs(x[i])); }
    weights = Math.max(weights, d / m);
  }
  return { loss, weights };
}

const runs = {};

test('two ranks train as two in-process replicas, bit for bit, and as one process within rounding', async () => {
  const single = jobDir('single', {});
  const s = await worker(['--job-dir', single]).done;
  assert.equal(s.code, 0, s.stderr);
  const replicas = jobDir('replicas', { replicas: 2 });
  const p = await worker(['--job-dir', replicas]).done;
  assert.equal(p.code, 0, p.stderr);
  const dir = jobDir('ranks', { tasks_per_node: 2 });
  const [r0, r1] = await Promise.all(ranks(dir, 'a').map((w) => w.done));
  assert.equal(r0.code, 0, r0.stderr);
  assert.equal(r1.code, 0, r1.stderr);
  // rank 0 reports to the file only; rank 1 reports and logs nothing
  assert.equal(r0.stdout, '');
  assert.equal(r1.stdout, '');
  assert.equal(r1.stderr, '');
  assert.match(r0.stderr, /data parallel across 2 processes \(ranks from KILN_RANK, run a, on 1 node\)/);
  const reports = lines(readFileSync(path.join(dir, 'reports.jsonl'), 'utf8'));
  assert.deepEqual(reports[0], { t: 'status', status: 'running' });
  assert.equal(reports[reports.length - 1].t, 'done');
  // one event file, written by rank 0; the rendezvous of run "a"
  assert.equal(readdirSync(dir).filter((f) => f.startsWith('events.out.tfevents.')).length, 1);
  assert.ok(existsSync(path.join(dir, 'rendezvous', 'a')));

  const ms = metrics(lines(s.stdout));
  const mp = metrics(lines(p.stdout));
  const mr = metrics(reports);
  assert.equal(ms.loss.size, 20);                 // 62 steps, a report every 3
  const ws = tensors(path.join(single, 'model.safetensors'));
  const wp = tensors(path.join(replicas, 'model.safetensors'));
  const wr = tensors(path.join(dir, 'model.safetensors'));
  const vsReplicas = relDiff(mr, mp, wr, wp);
  const vsSingle = relDiff(mr, ms, wr, ws);
  const replicasVsSingle = relDiff(mp, ms, wp, ws);
  console.log(`parity, 2 ranks vs 2 in-process replicas: max relative difference of losses ${vsReplicas.loss}, `
    + `of weights ${vsReplicas.weights}`);
  console.log(`parity, 2 ranks vs 1 process: losses ${vsSingle.loss.toExponential(2)}, weights ${vsSingle.weights.toExponential(2)}; `
    + `2 in-process replicas vs 1 process: losses ${replicasVsSingle.loss.toExponential(2)}, weights ${replicasVsSingle.weights.toExponential(2)}`);
  console.log(`wall time: 1 process ${s.ms} ms, 2 replicas ${p.ms} ms, 2 ranks ${Math.max(r0.ms, r1.ms)} ms`);
  assert.deepEqual(mr.loss, mp.loss);
  assert.deepEqual(mr.val, mp.val);
  assert.ok(readFileSync(path.join(dir, 'model.safetensors')).equals(readFileSync(path.join(replicas, 'model.safetensors'))),
    'the 2 ranks\' model is not the 2 replicas\' bytes');
  // as tight as the replicas are: the ranks are the replicas' bits, so their
  // difference from one process is the replicas' own
  assert.deepEqual(vsSingle, replicasVsSingle);
  // and the difference is rounding: the first report (steps 1-3) agrees to
  // float precision; 62 steps of SGD with momentum then carry it further
  const first = [...ms.loss.keys()][0];
  const d0 = Math.abs(mr.loss.get(first) - ms.loss.get(first)) / ms.loss.get(first);
  console.log(`parity at the first report (step ${first}): ${d0.toExponential(2)}`);
  assert.ok(d0 < 1e-5, `the first steps' loss differs by ${d0} from one process's`);
  runs.model = readFileSync(path.join(dir, 'model.safetensors'));
});

test('2 ranks stopped part-way resume from rank 0\'s checkpoint to the same weights', async () => {
  assert.ok(runs.model, 'needs the first test');
  const dir = jobDir('resume', { tasks_per_node: 2 });
  const first = await Promise.all(ranks(dir, 'r1', { KILN_STOP_AFTER_STEP: '25' }).map((w) => w.done));
  for (const r of first) assert.equal(r.code, 0, r.stderr);
  const reports = lines(readFileSync(path.join(dir, 'reports.jsonl'), 'utf8'));
  assert.deepEqual(reports[reports.length - 1], { t: 'status', status: 'cancelled' });
  assert.ok(existsSync(path.join(dir, 'checkpoints', 'step-25.safetensors')));
  const second = await Promise.all(ranks(dir, 'r2').map((w) => w.done));
  for (const r of second) assert.equal(r.code, 0, r.stderr);
  assert.match(second[0].stderr, /resuming from .*step-25\.safetensors: step 25/);
  const all = lines(readFileSync(path.join(dir, 'reports.jsonl'), 'utf8'));
  assert.equal(all[all.length - 1].t, 'done');
  assert.ok(readFileSync(path.join(dir, 'model.safetensors')).equals(runs.model),
    'the resumed ranks\' model differs from the uninterrupted ranks\'');
});

test('srun starts the 2 ranks (SLURM_PROCID, SLURM_NTASKS): the same model as the ranks above', async (t) => {
  assert.ok(runs.model, 'needs the first test');
  const c = await startCluster({ gpus: 0 });
  if (c.skip) { t.skip(`the Slurm daemons cannot start here: ${c.skip}`); return; }
  try {
    const dir = jobDir('srun', { tasks_per_node: 2 });
    const env = { ...c.env };
    for (const k of ['KILN_RANK', 'KILN_WORLD_SIZE', 'KILN_LOCAL_RANK', 'KILN_RUN_ID']) delete env[k];
    const r = spawnSync(path.join(c.slurmBin, 'srun'), ['-p', c.partition, '-N', '1', '-n', '2', '--label',
      kilnBin(), 'worker', '--job-dir', dir, '--report-file', path.join(dir, 'reports.jsonl')],
    { env, encoding: 'utf8', timeout: 240_000 });
    assert.equal(r.status, 0, `srun: ${r.stdout}\n${r.stderr}`);
    assert.equal(r.stdout, '');                 // rank 0 reports to the file, rank 1 not at all
    assert.match(r.stderr, /^0: .*data parallel across 2 processes \(ranks from SLURM_PROCID, run slurm-\d+\.0,/m);
    assert.doesNotMatch(r.stderr, /^1: /m);
    const reports = lines(readFileSync(path.join(dir, 'reports.jsonl'), 'utf8'));
    assert.equal(reports[reports.length - 1].t, 'done');
    assert.ok(readFileSync(path.join(dir, 'model.safetensors')).equals(runs.model),
      'the ranks srun started trained another model than the ranks started by hand');
  } finally {
    await c.stop();
  }
});

test('a rank killed mid-run makes the other fail at once, with the reason', async () => {
  const dir = jobDir('dead', { tasks_per_node: 2, batch_size: 16, epochs: 5 });   // 2500 steps: time to kill one
  const [w0, w1] = ranks(dir, 'd');
  const file = path.join(dir, 'reports.jsonl');
  await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').includes('"train/loss"'),
    { timeoutMs: 60_000, what: 'rank 0\'s first train/loss' });
  const t0 = Date.now();
  w1.child.kill('SIGKILL');
  const r0 = await w0.done;
  const r1 = await w1.done;
  const waited = Date.now() - t0;
  assert.equal(r1.signal, 'SIGKILL');
  assert.equal(r0.code, 1, r0.stderr);
  const last = lines(readFileSync(file, 'utf8')).pop();
  assert.equal(last.t, 'error');
  assert.match(last.message, /another rank failed or is gone/);
  console.log(`rank 0 failed ${waited} ms after rank 1 was killed: ${last.message}`);
  assert.ok(waited < 20_000, `rank 0 took ${waited} ms to notice`);
});

test('a multi-rank job refuses a lone worker, and the local dispatcher refuses it', async () => {
  const dir = jobDir('alone', { tasks_per_node: 2 });
  const r = await worker(['--job-dir', dir]).done;
  assert.equal(r.code, 1);
  const last = lines(r.stdout).pop();
  assert.equal(last.t, 'error');
  assert.match(last.message, /runs as 2 ranks .* started alone/);
  // a launch of another size than the job's
  const w = await worker(['--job-dir', dir], { KILN_RANK: '0', KILN_WORLD_SIZE: '3', KILN_RUN_ID: 'x' }).done;
  assert.equal(w.code, 1);
  assert.match(lines(w.stdout).pop().message, /rank 0 of 3 \(KILN_RANK\), but the job runs as 2 ranks/);

  const server = await startServer({ dataDir });
  try {
    for (const fields of [{ tasks_per_node: 2 }, { nodes: 2 }]) {
      const res = await api(server.url, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, ...fields });
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.error.code, 'invalid_field');
      assert.match(res.body.error.message, /--dispatcher slurm/);
    }
    for (const fields of [{ nodes: 0 }, { nodes: 65 }, { tasks_per_node: 1.5 }]) {
      const res = await api(server.url, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', ...fields });
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.match(res.body.error.message, new RegExp(Object.keys(fields)[0]));
    }
    const schema = await api(server.url, 'GET', '/api/v1/schema');
    assert.equal(schema.body.job.nodes.maximum, 64);
    assert.equal(schema.body.job.tasks_per_node.default, 1);
  } finally {
    await server.stop();
  }
});
