// Classifying through the service (issue 14): a real LeNet trained for one
// epoch on the demo MNIST digits, then real digits sent as PNG files through
// POST /api/v1/jobs/{id}/infer, one by one, many at once, in an archive,
// mixed with files that are no image; the errors a user can cause; and
// `kiln infer` on the job's folder and on the downloaded model tarball, which
// must give the API's probabilities exactly.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import {
  api, describeResponse, FINAL_STATUSES, importDemo, kilnBin, loadDigits, startServer, tempDir, waitFor,
} from './lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');

let tmp;
let server;
let base;
let jobId;
const digits = [];          // {name, label, png}

function png28(px) {
  return PNG.sync.write({ width: 28, height: 28, data: Buffer.from(px) },
    { colorType: 0, inputColorType: 0, bitDepth: 8 });
}

/* Real digits, 20 of each class: the npm package's last ones of each class. */
function makeDigits() {
  for (let c = 0; c < 10; c++) {
    const all = loadDigits(c);
    for (let i = 0; i < 20; i++) {
      digits.push({ name: `d${c}_${i}.png`, label: String(c), png: png28(all[all.length - 1 - i]) });
    }
  }
}

function form(files, fields = {}) {
  const f = new FormData();
  for (const [name, data, field = 'image'] of files) f.append(field, new Blob([data]), name);
  for (const [k, v] of Object.entries(fields)) f.append(k, String(v));
  return f;
}

async function infer(files, fields = {}, id = jobId) {
  const p = `/api/v1/jobs/${id}/infer`;
  const r = await api(base, 'POST', p, form(files, fields));
  r.describe = describeResponse('POST', p, r);
  return r;
}

function runIn(cwd, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(kilnBin(), args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function createJob(fields) {
  const r = await api(base, 'POST', '/api/v1/jobs', fields);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

before(async () => {
  tmp = tempDir('kiln-infer-');
  makeDigits();
  const dataDir = path.join(tmp.dir, 'data');
  const { id: datasetId } = await importDemo(dataDir);
  server = await startServer({ dataDir });
  base = server.url;
  jobId = await createJob({ dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64, seed: 1,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 } });
  // A second job, cancelled while it waits behind the first (one CPU job at a
  // time): it never has weights.
  const idle = await createJob({ dataset_id: datasetId, network: 'lenet', epochs: 1 });
  const c = await api(base, 'POST', `/api/v1/jobs/${idle}/cancel`);
  assert.ok(c.status < 300, describeResponse('POST', 'cancel', c));
  process.env.KILN_TEST_IDLE_JOB = String(idle);
  const job = await waitFor(async () => {
    const j = await api(base, 'GET', `/api/v1/jobs/${jobId}`);
    return FINAL_STATUSES.has(j.body.status) ? j.body : null;
  }, { timeoutMs: 300_000, intervalMs: 500, what: `job ${jobId} to finish` });
  assert.equal(job.status, 'done', `job ended ${job.status}: ${job.error}`);
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('one digit: the first request loads the model, the second finds it loaded', async () => {
  const d = digits[0];
  const r1 = await infer([[d.name, d.png]]);
  assert.equal(r1.status, 200, r1.describe);
  assert.equal(r1.headers.get('x-kiln-model-cache'), 'miss');
  const r2 = await infer([[d.name, d.png]]);
  assert.equal(r2.status, 200, r2.describe);
  assert.equal(r2.headers.get('x-kiln-model-cache'), 'hit');
  assert.deepEqual(r2.body, r1.body, 'the same image, the same answer');
  assert.equal(r1.body.epoch, 1);
  assert.equal(r1.body.items.length, 1);
  const item = r1.body.items[0];
  assert.equal(item.name, d.name);
  assert.equal(item.predictions.length, 5, 'top_k defaults to 5');
  assert.equal(item.predictions[0].label, d.label);
  const loads = server.output().split('\n').filter((l) => /infer-server: loaded .*model\.safetensors/.test(l));
  assert.equal(loads.length, 1, `the model was loaded once: ${loads.join(' | ')}`);
});

test('200 real digits in one request: high accuracy, probabilities summing to 1, top_k respected', async (t) => {
  const r = await infer(digits.map((d) => [d.name, d.png]), { top_k: 10 });
  assert.equal(r.status, 200, r.describe);
  assert.equal(r.body.items.length, digits.length);
  let right = 0;
  r.body.items.forEach((it, i) => {
    assert.equal(it.name, digits[i].name, 'items in the order sent');
    assert.equal(it.predictions.length, 10);
    const sum = it.predictions.reduce((a, p) => a + p.probability, 0);
    assert.ok(Math.abs(sum - 1) < 1e-5, `${it.name}: probabilities sum to ${sum}`);
    assert.deepEqual([...it.predictions.map((p) => p.index)].sort((a, b) => a - b), [...Array(10).keys()]);
    for (let k = 1; k < 10; k++) assert.ok(it.predictions[k - 1].probability >= it.predictions[k].probability);
    for (const p of it.predictions) assert.equal(p.label, String(p.index));
    if (it.predictions[0].label === digits[i].label) right++;
  });
  const acc = right / digits.length;
  t.diagnostic(`top-1 accuracy on ${digits.length} digits after one epoch: ${acc}`);
  assert.ok(acc >= 0.9, `accuracy ${acc}`);

  const r3 = await infer(digits.slice(0, 3).map((d) => [d.name, d.png]), { top_k: 3 });
  assert.equal(r3.status, 200, r3.describe);
  for (const [i, it] of r3.body.items.entries()) {
    assert.equal(it.predictions.length, 3);
    assert.deepEqual(it.predictions.map((p) => p.index), r.body.items[i].predictions.slice(0, 3).map((p) => p.index));
  }
});

test('epoch=1 and epoch=best classify with that snapshot; an epoch with none is 404', async () => {
  const d = digits[5];
  const r = await infer([[d.name, d.png]], { epoch: 1, top_k: 1 });
  assert.equal(r.status, 200, r.describe);
  assert.equal(r.body.epoch, 1);
  assert.equal(r.body.items[0].predictions.length, 1);
  const best = await infer([[d.name, d.png]], { epoch: 'best', top_k: 1 });
  assert.equal(best.status, 200, best.describe);
  assert.equal(best.body.epoch, 1, 'a one-epoch job: its best snapshot is epoch 1');
  assert.deepEqual(best.body.items, r.body.items);
  const missing = await infer([[d.name, d.png]], { epoch: 7 });
  assert.equal(missing.status, 404, missing.describe);
  assert.equal(missing.body.error.code, 'snapshot_not_found');
});

test('an archive of images, entry paths as names', async () => {
  const tar = await import('tar');
  const dir = path.join(tmp.dir, 'arch');
  mkdirSync(path.join(dir, 'some'), { recursive: true });
  const chosen = digits.filter((_, i) => i % 10 === 0);
  for (const d of chosen) writeFileSync(path.join(dir, 'some', d.name), d.png);
  const file = path.join(tmp.dir, 'digits.tar.gz');
  await tar.create({ gzip: true, file, cwd: dir, portable: true }, ['some']);
  const r = await infer([['digits.tar.gz', readFileSync(file), 'archive']], { top_k: 1 });
  assert.equal(r.status, 200, r.describe);
  assert.equal(r.body.items.length, chosen.length);
  const names = r.body.items.map((it) => it.name).sort();
  assert.deepEqual(names, chosen.map((d) => `some/${d.name}`).sort());
  const right = r.body.items.filter((it) => it.predictions[0].label === it.name.slice(6, 7)).length;
  assert.ok(right >= chosen.length - 2, `${right} of ${chosen.length} right`);
});

test('a file that is no image gets its own error; the others are classified', async () => {
  const d = digits[1];
  const r = await infer([['notes.txt', 'hello, not a picture'], [d.name, d.png],
    ['broken.png', d.png.subarray(0, 60)]]);
  assert.equal(r.status, 200, r.describe);
  assert.equal(r.body.items.length, 3);
  assert.equal(r.body.items[0].error.code, 'invalid_image');
  assert.match(r.body.items[0].error.message, /not a PNG or JPEG/);
  assert.equal(r.body.items[1].predictions[0].label, d.label);
  assert.equal(r.body.items[2].error.code, 'invalid_image');
  assert.equal(r.body.items[1].error, undefined);
});

test('only bad items: 422 no_valid_images naming each, with the items', async () => {
  const r = await infer([['a.txt', 'text'], ['b.gif', 'GIF89a....']]);
  assert.equal(r.status, 422, r.describe);
  assert.equal(r.body.error.code, 'no_valid_images');
  assert.match(r.body.error.message, /a\.txt: .*b\.gif: /);
  assert.equal(r.body.items.length, 2);
  assert.ok(r.body.items.every((it) => it.error.code === 'invalid_image'));
});

test('bad requests: top_k, epoch, fields, content type, unknown job, a job without weights', async () => {
  const d = digits[2];
  const one = [[d.name, d.png]];
  for (const top_k of ['0', '11', 'x', '2.5', '-1']) {
    const r = await infer(one, { top_k });
    assert.equal(r.status, 400, `top_k=${top_k}: ${r.describe}`);
    assert.equal(r.body.error.code, 'invalid_field');
    assert.match(r.body.error.message, /top_k/);
  }
  for (const epoch of ['0', 'latest', '-3', '1.5']) {
    const r = await infer(one, { epoch });
    assert.equal(r.status, 400, `epoch=${epoch}: ${r.describe}`);
    assert.match(r.body.error.message, /epoch/);
  }
  const unknown = await infer(one, { colour: 'red' });
  assert.equal(unknown.status, 400, unknown.describe);
  assert.equal(unknown.body.error.code, 'unknown_field');
  const empty = await infer([], { top_k: 1 });
  assert.equal(empty.status, 400, empty.describe);
  assert.equal(empty.body.error.code, 'missing_field');
  const json = await api(base, 'POST', `/api/v1/jobs/${jobId}/infer`, { image: 'x' });
  assert.equal(json.status, 415, describeResponse('POST', 'infer', json));
  const nojob = await infer(one, {}, 999);
  assert.equal(nojob.status, 404, nojob.describe);
  assert.equal(nojob.body.error.code, 'job_not_found');
  const idle = await infer(one, {}, Number(process.env.KILN_TEST_IDLE_JOB));
  assert.equal(idle.status, 409, idle.describe);
  assert.equal(idle.body.error.code, 'no_weights');
});

/* The pid of the server's inference process (its one child running infer-server). */
async function inferPid() {
  const { execFileSync } = await import('node:child_process');
  const pids = execFileSync('pgrep', ['-P', String(server.child.pid), '-f', 'infer-server']).toString().trim().split('\n');
  assert.equal(pids.length, 1, 'one inference process');
  return Number(pids[0]);
}

/* utime + stime of a process, in clock ticks; null once it is gone or a zombie. */
function cpuTicks(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[0] === 'Z' ? null : Number(f[11]) + Number(f[12]);
  } catch { return null; }
}

/* True once pid has died entirely: gone, or a zombie whose every thread has
 * exited (a killed process's main thread shows "Z" while its OpenMP threads
 * are still being torn down, and until then its parent cannot reap it). */
function dead(pid) {
  if (cpuTicks(pid) !== null) return false;
  try { return readdirSync(`/proc/${pid}/task`).length <= 1; } catch { return true; }
}

test('the inference process dies: between requests a new one starts; during one, that request fails', async () => {
  const d = digits[3];
  const warm = await infer([[d.name, d.png]]);
  assert.equal(warm.status, 200, warm.describe);
  let pid = await inferPid();
  process.kill(pid, 'SIGKILL');
  await waitFor(() => dead(pid), { intervalMs: 20, what: 'the inference process to die' });
  const r = await infer([[d.name, d.png]]);
  assert.equal(r.status, 200, r.describe);
  assert.equal(r.headers.get('x-kiln-model-cache'), 'miss', 'a new process loads the model again');
  assert.deepEqual(r.body, warm.body);

  // killed while it classifies 10,000 images: that request gets a 500 naming the signal
  pid = await inferPid();
  const before = cpuTicks(pid);
  const many = Array.from({ length: 10000 }, (_, i) => [`m${i}.png`, digits[i % digits.length].png]);
  const pending = infer(many, { top_k: 1 });
  await waitFor(() => cpuTicks(pid) > before + 2, { intervalMs: 5, what: 'the inference process to be busy' });
  process.kill(pid, 'SIGKILL');
  const crashed = await pending;
  assert.equal(crashed.status, 500, crashed.describe);
  assert.equal(crashed.body.error.code, 'inference_crashed');
  assert.match(crashed.body.error.message, /signal 9/);
  const after = await infer([[d.name, d.png]]);
  assert.equal(after.status, 200, after.describe);
  assert.deepEqual(after.body, warm.body);
});

test('kiln infer on the job folder and on the model tarball: the API\'s probabilities', async () => {
  const some = digits.filter((_, i) => i % 25 === 0);
  const dir = path.join(tmp.dir, 'cli');
  mkdirSync(dir, { recursive: true });
  for (const d of some) writeFileSync(path.join(dir, d.name), d.png);
  writeFileSync(path.join(dir, 'notes.txt'), 'not an image');
  const names = [...some.map((d) => d.name), 'notes.txt'];
  const files = [...some.map((d) => [d.name, d.png]), ['notes.txt', 'not an image']];
  const viaApi = await infer(files, { top_k: 3 });
  assert.equal(viaApi.status, 200, viaApi.describe);

  const jobDir = path.join(server.dataDir, 'jobs', String(jobId));
  const cli = await runIn(dir, ['infer', jobDir, ...names, '--top-k', '3', '--json']);
  assert.equal(cli.code, 0, cli.stderr);
  assert.deepEqual(JSON.parse(cli.stdout), viaApi.body, 'kiln infer JOB_DIR --json is the API body');

  const res = await fetch(`${base}/api/v1/jobs/${jobId}/model?format=tar`);
  assert.equal(res.status, 200);
  const tarPath = path.join(tmp.dir, 'model.tar');
  writeFileSync(tarPath, Buffer.from(await res.arrayBuffer()));
  const fromTar = await runIn(dir, ['infer', tarPath, ...names, '--top-k', '3', '--json']);
  assert.equal(fromTar.code, 0, fromTar.stderr);
  assert.deepEqual(JSON.parse(fromTar.stdout), viaApi.body, 'kiln infer MODEL.tar --json is the API body');

  const table = await runIn(dir, ['infer', tarPath, some[0].name, 'notes.txt']);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, new RegExp(`${some[0].name}\\n\\s+0\\.\\d+\\s+${some[0].label} \\(${some[0].label}\\)`));
  assert.match(table.stdout, /notes\.txt: error: not a PNG or JPEG image/);
  const none = await runIn(dir, ['infer', tarPath, 'notes.txt']);
  assert.equal(none.code, 1, 'no image classified: exit status 1');
  const bad = await runIn(dir, ['infer', tarPath, some[0].name, '--epoch', '1']);
  assert.notEqual(bad.code, 0, 'a tarball takes no epoch');
});
