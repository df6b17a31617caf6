// ONNX export (issue 14): for every built-in network and for a spec with
// every layer type (tests/unit/data/every_layer.json), weights trained by
// `kiln train` for a few steps (so that batch norm's running statistics and
// the weights have moved), exported by `kiln export`, passed by Debian's
// python3-onnx checker (full_check), and run by ONNX Runtime (npm
// onnxruntime-node, CPU) on 100 images: real MNIST digits for LeNet,
// generated images for the others. Its probabilities must equal kiln's own
// for the same raw pixels within 1e-4: kiln's side is tests/tools/kiln_predict
// (the network built from its spec, net_load, (pixel - mean) * scale,
// net_predict). A LeNet trained in amp-bf16 exports FP32 and matches too.
// Then the service: GET /api/v1/jobs/{id}/model?format=onnx, the tarball's
// model.onnx, and the errors (no model yet, an unknown format).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import {
  ROOT, api, describeResponse, FINAL_STATUSES, importDemo, loadDigits, parseTar, rng, runKiln,
  startServer, tempDir, waitFor,
} from './lib/kiln.mjs';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const { PNG } = require('pngjs');

const PREDICT = process.env.KILN_PREDICT || path.join(ROOT, 'build', 'tests', 'kiln_predict');
const PYTHON = '/usr/bin/python3';       // Debian's, with python3-onnx (not pyenv's)
const CHECK = path.join(ROOT, 'tests', 'integration', 'lib', 'onnx_check.py');
const EVERY_LAYER = path.join(ROOT, 'tests', 'unit', 'data', 'every_layer.json');
const IMAGES = 100;
const ATOL = 1e-4;
const CLASSES = 5;                       // the generated datasets (every_layer.json's head has 5)

let tmp;
let dataDir;
const datasets = {};                     // name -> dataset folder

function run(file, args, { timeoutMs = 600_000 } = {}) {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

// ---- data -----------------------------------------------------------------------

/* An RGB image of size s x s for class cls: a class-coloured gradient with a
 * bright square whose place depends on the class, and noise. 0..255 integers. */
function drawImage(r, cls, s) {
  const px = new Uint8Array(s * s * 3);
  const base = [[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40], [40, 200, 200]][cls % 5];
  const q = Math.floor(s / 3), qx = (cls % 3) * q, qy = Math.floor(cls / 3) * q;
  for (let y = 0; y < s; y++) {
    for (let x = 0; x < s; x++) {
      const inSq = x >= qx && x < qx + q && y >= qy && y < qy + q;
      for (let c = 0; c < 3; c++) {
        const v = inSq ? 250 : base[c] * (0.4 + 0.6 * (x + y) / (2 * s)) + (r() - 0.5) * 90;
        px[(y * s + x) * 3 + c] = Math.max(0, Math.min(255, Math.round(v)));
      }
    }
  }
  return px;
}

/* Imports a folder of perClass generated s x s PNGs per class, resized by
 * kiln to size x size; resolves to the dataset's folder. */
async function generatedDataset(name, s, size, perClass) {
  const tree = path.join(tmp.dir, `tree-${name}`);
  const r = rng(1000 + s);
  for (let c = 0; c < CLASSES; c++) {
    mkdirSync(path.join(tree, `class${c}`), { recursive: true });
    for (let i = 0; i < perClass; i++) {
      const png = PNG.sync.write({ width: s, height: s, data: Buffer.from(rgba(drawImage(r, c, s))) });
      writeFileSync(path.join(tree, `class${c}`, `${i}.png`), png);
    }
  }
  const res = await runKiln(['import', 'folder', '--data', dataDir, '--name', name, '--width', String(size),
    '--height', String(size), '--val-percent', '25', tree], { timeoutMs: 300_000 });
  assert.equal(res.code, 0, `kiln import folder ${name}: ${res.stderr}`);
  const m = /dataset\s+(\d+)/.exec(res.stdout);
  assert.ok(m, res.stdout);
  return path.join(dataDir, 'datasets', m[1]);
}

function rgba(rgb) {
  const out = new Uint8Array((rgb.length / 3) * 4);
  for (let i = 0, j = 0; i < rgb.length; i += 3, j += 4) {
    out[j] = rgb[i]; out[j + 1] = rgb[i + 1]; out[j + 2] = rgb[i + 2]; out[j + 3] = 255;
  }
  return out;
}

/* IMAGES images of c x s x s raw pixels (NCHW float32), generated or the
 * first MNIST digits of each class in turn. */
function pixelsFor(kind, c, s) {
  const x = new Float32Array(IMAGES * c * s * s);
  if (kind === 'mnist') {
    const digits = Array.from({ length: 10 }, (_, d) => loadDigits(d));
    for (let i = 0; i < IMAGES; i++) x.set(digits[i % 10][Math.floor(i / 10)], i * 784);
    return x;
  }
  const r = rng(77 + s);
  for (let i = 0; i < IMAGES; i++) {
    const img = drawImage(r, i % CLASSES, s);
    for (let p = 0; p < s * s; p++)
      for (let ch = 0; ch < c; ch++) x[i * c * s * s + ch * s * s + p] = img[p * 3 + ch];
  }
  return x;
}

// ---- the two runtimes -----------------------------------------------------------

async function kilnProbs(network, shape, classes, weights, prep, pixels, name) {
  const inFile = path.join(tmp.dir, `${name}.pixels.f32`);
  const outFile = path.join(tmp.dir, `${name}.kiln.f32`);
  writeFileSync(inFile, Buffer.from(pixels.buffer, pixels.byteOffset, pixels.byteLength));
  const r = await run(PREDICT, [network, shape.join(','), String(classes), weights, prep.mean.join(','),
    String(prep.scale), inFile, outFile]);
  assert.equal(r.code, 0, `kiln_predict ${name}: ${r.stderr}`);
  const b = readFileSync(outFile);
  return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
}

async function ortProbs(file, pixels, shape) {
  const session = await ort.InferenceSession.create(file, { intraOpNumThreads: 2, interOpNumThreads: 1 });
  assert.deepEqual(session.inputNames, ['pixels']);
  assert.deepEqual(session.outputNames, ['probabilities']);
  const out = await session.run({ pixels: new ort.Tensor('float32', pixels, [IMAGES, ...shape]) });
  const p = out.probabilities;
  assert.deepEqual(p.dims, [IMAGES, p.dims[1]]);
  return p.data;
}

async function checkOnnx(file) {
  const r = await run(PYTHON, [CHECK, file]);
  assert.equal(r.code, 0, `python3-onnx refuses ${file}:\n${r.stderr}`);
  return JSON.parse(r.stdout);
}

// ---- one network ------------------------------------------------------------------

/* Trains network on the dataset for one short epoch, exports it, checks the
 * file and compares the two runtimes' probabilities. */
async function exportAndCompare(t, { name, network, dataset, batch, pixels, epochs = 1, lr = 0.02, extra = [] }) {
  const job = path.join(tmp.dir, `job-${name}`);
  const tr = await runKiln(['train', '--dataset', datasets[dataset], '--network', network, '--epochs', String(epochs),
    '--batch', String(batch), '--lr', String(lr), '--devices', '0', '--out', job, ...extra], { timeoutMs: 900_000 });
  assert.equal(tr.code, 0, `kiln train ${name}: ${tr.stderr}\n${tr.stdout}`);
  const file = path.join(tmp.dir, `${name}.onnx`);
  const ex = await runKiln(['export', job, '-o', file]);
  assert.equal(ex.code, 0, `kiln export ${name}: ${ex.stderr}`);

  const cfg = JSON.parse(readFileSync(path.join(job, 'job.json'), 'utf8'));
  const prep = JSON.parse(readFileSync(path.join(job, 'preprocess.json'), 'utf8'));
  const shape = [prep.channels, ...(prep.center_crop || [prep.height, prep.width])];
  const classes = cfg.classes.length;
  const info = await checkOnnx(file);
  assert.ok(info.ir_version <= 8 && info.ir_version >= 7, `IR ${info.ir_version}`);
  assert.equal(info.opsets[''], 13);
  assert.deepEqual(info.inputs, [['pixels', ['batch', ...shape]]]);
  assert.deepEqual(info.outputs, [['probabilities', ['batch', classes]]]);
  assert.deepEqual(info.initializer_types, ['FLOAT'], 'FP32 weights only');
  assert.deepEqual(JSON.parse(info.metadata.labels), cfg.classes);
  assert.deepEqual(JSON.parse(info.metadata.preprocess), prep);
  assert.equal(info.metadata.network, JSON.parse(readFileSync(network.endsWith('.json') ? network :
    path.join(ROOT, 'engine', 'networks', `${network}.json`), 'utf8')).name);
  assert.ok(info.metadata.kiln_version, 'kiln_version');
  assert.ok(!info.ops.includes('Dropout'));

  // the weights are trained, not as initialised: batch norm's running statistics moved
  const st = readFileSync(path.join(job, 'model.safetensors'));
  const n = Number(st.readBigUInt64LE(0));
  const header = JSON.parse(st.subarray(8, 8 + n).toString('utf8'));
  for (const [k, v] of Object.entries(header)) {
    if (k === '__metadata__') continue;
    assert.equal(v.dtype, 'F32', `${k} is stored FP32`);
    if (!k.endsWith('.running_var')) continue;
    const [a, b] = v.data_offsets;
    const vals = new Float32Array(st.buffer.slice(st.byteOffset + 8 + n + a, st.byteOffset + 8 + n + b));
    assert.ok(vals.some((x) => Math.abs(x - 1) > 1e-3), `${k} has moved from its initial 1`);
  }

  const kp = await kilnProbs(network, shape, classes, path.join(job, 'model.safetensors'), prep, pixels, name);
  const op = await ortProbs(file, pixels, shape);
  assert.equal(op.length, kp.length);
  let maxDiff = 0, agree = 0, top = 0, unsure = 0;
  for (let i = 0; i < IMAGES; i++) {
    let ka = 0, oa = 0;
    for (let k = 0; k < classes; k++) {
      const j = i * classes + k;
      assert.ok(Number.isFinite(kp[j]) && Number.isFinite(op[j]), `${name}: image ${i} class ${k} finite`);
      maxDiff = Math.max(maxDiff, Math.abs(kp[j] - op[j]));
      if (kp[j] > kp[i * classes + ka]) ka = k;
      if (op[j] > op[i * classes + oa]) oa = k;
    }
    agree += ka === oa;
    top = Math.max(top, kp[i * classes + ka]);
    unsure += kp[i * classes + ka] < 0.999;
  }
  t.diagnostic(`${name}: ${IMAGES} images, max |kiln - onnxruntime| = ${maxDiff.toExponential(2)}, ` +
    `top-1 agreement ${agree}/${IMAGES}, highest probability ${top.toFixed(3)}, ${unsure} images with none ` +
    `above 0.999, ${info.ops.length} nodes`);
  assert.ok(maxDiff <= ATOL, `${name}: probabilities differ by ${maxDiff} (> ${ATOL})`);
  // the comparison means something: not saturated one-hot outputs, where any
  // graph that picks the same class would agree to the last bit
  assert.ok(unsure >= 20, `${name}: only ${unsure} images have a top probability below 0.999`);
  return { file, info, kp };
}

before(async () => {
  for (const [what, p] of [['kiln_predict', PREDICT], ['python3', PYTHON]])
    assert.ok(existsSync(p), `${what} not found at ${p}`);
  tmp = tempDir('kiln-onnx-');
  dataDir = path.join(tmp.dir, 'data');
  datasets.mnist = path.join(dataDir, 'datasets', String((await importDemo(dataDir)).id));
  datasets.rgb16 = await generatedDataset('rgb16', 16, 16, 8);
  datasets.rgb32 = await generatedDataset('rgb32', 32, 32, 8);
  datasets.rgb224 = await generatedDataset('rgb224', 32, 224, 4);
});

after(() => { if (tmp) tmp.cleanup(); });

test('the ONNX checker of Debian and onnxruntime-node are the ones the issue names', async () => {
  const r = await run(PYTHON, ['-c', 'import onnx; print(onnx.__version__)']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout.trim(), /^1\.\d+/);
  assert.ok(ort.InferenceSession, 'onnxruntime-node loads its CPU binding');
});

test('lenet on real MNIST digits', { timeout: 300_000 }, async (t) => {
  const pixels = pixelsFor('mnist', 1, 28);
  const { kp } = await exportAndCompare(t, { name: 'lenet', network: 'lenet', dataset: 'mnist', batch: 64, pixels });
  // trained: the digits are recognised (the comparison is not between two near-uniform outputs)
  let right = 0;
  for (let i = 0; i < IMAGES; i++) {
    const row = Array.from(kp.subarray(i * 10, i * 10 + 10));
    right += row.indexOf(Math.max(...row)) === i % 10;
  }
  assert.ok(right >= 80, `lenet classifies ${right}/100 digits`);
});

test('lenet trained in amp-bf16 exports FP32 weights that match', { timeout: 300_000 }, async (t) => {
  const pixels = pixelsFor('mnist', 1, 28);
  await exportAndCompare(t, { name: 'lenet-bf16', network: 'lenet', dataset: 'mnist', batch: 64, pixels,
    extra: ['--precision', 'amp-bf16'] });
});

test('every layer type', { timeout: 300_000 }, async (t) => {
  const { info } = await exportAndCompare(t, { name: 'every-layer', network: EVERY_LAYER, dataset: 'rgb16', batch: 8,
    pixels: pixelsFor('rgb', 3, 16) });
  for (const op of ['Conv', 'BatchNormalization', 'LeakyRelu', 'Sigmoid', 'Tanh', 'Add', 'Sum', 'MaxPool',
    'AveragePool', 'Concat', 'Relu', 'GlobalAveragePool', 'Flatten', 'Gemm', 'Softmax'])
    assert.ok(info.ops.includes(op), `${op} in the graph`);
});

// The ImageNet-sized ResNets train 4 epochs of 5 steps at a small learning
// rate: 15 images at lr 0.02 drive their logits so far that every output is
// a one-hot 1.0 (nothing to compare), while 20 steps bring the batch-norm
// running statistics near the batches' own.
for (const [network, dataset, batch, size, epochs, lr] of [
  ['cifar10-cnn', 'rgb32', 8, 32, 1, 0.02], ['alexnet', 'rgb32', 8, 32, 1, 0.02], ['resnet20', 'rgb32', 8, 32, 1, 0.02],
  ['resnet18', 'rgb224', 3, 224, 4, 1e-4], ['resnet50', 'rgb224', 3, 224, 4, 1e-4],
]) {
  test(`${network} (${size}x${size})`, { timeout: 900_000 }, async (t) => {
    await exportAndCompare(t, { name: network, network, dataset, batch, epochs, lr, pixels: pixelsFor('rgb', 3, size) });
  });
}

// ---- the service --------------------------------------------------------------------

test('GET .../model?format=onnx, model.onnx in the tarball, and its errors', { timeout: 600_000 }, async (t) => {
  const server = await startServer({ dataDir });
  try {
    const base = server.url;
    const mnistId = Number(path.basename(datasets.mnist));
    const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: mnistId, network: 'lenet', epochs: 2, batch_size: 64 });
    assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
    const id = r.body.id;
    const job = await waitFor(async () => {
      const j = await api(base, 'GET', `/api/v1/jobs/${id}`);
      return FINAL_STATUSES.has(j.body.status) ? j.body : null;
    }, { timeoutMs: 300_000, what: `job ${id} to end` });
    assert.equal(job.status, 'done', job.error);

    const res = await fetch(`${base}/api/v1/jobs/${id}/model?format=onnx`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/octet-stream');
    assert.match(res.headers.get('content-disposition'), new RegExp(`filename="kiln-job-${id}\\.onnx"`));
    const onnx = Buffer.from(await res.arrayBuffer());
    const file = path.join(tmp.dir, 'served.onnx');
    writeFileSync(file, onnx);
    const info = await checkOnnx(file);
    assert.deepEqual(JSON.parse(info.metadata.labels), job.config.classes);

    // the same file as `kiln export` of the job's folder, and as the tarball's model.onnx
    const exported = path.join(tmp.dir, 'cli.onnx');
    const ex = await runKiln(['export', path.join(dataDir, 'jobs', String(id)), '-o', exported]);
    assert.equal(ex.code, 0, ex.stderr);
    assert.ok(readFileSync(exported).equals(onnx), 'kiln export gives the bytes the API serves');
    const tar = await fetch(`${base}/api/v1/jobs/${id}/model?format=tar`);
    assert.equal(tar.status, 200);
    const tarBytes = Buffer.from(await tar.arrayBuffer());
    const member = parseTar(tarBytes).find((e) => e.name === 'model.onnx');
    assert.ok(member, 'the tarball holds model.onnx');
    assert.ok(Buffer.from(member.data).equals(onnx), 'the tarball\'s model.onnx is the served file');
    // and `kiln export MODEL.tar` makes it again from the tarball's own parts
    const tarFile = path.join(tmp.dir, 'model.tar');
    writeFileSync(tarFile, tarBytes);
    const fromTar = path.join(tmp.dir, 'from-tar.onnx');
    const tx = await runKiln(['export', tarFile, '-o', fromTar]);
    assert.equal(tx.code, 0, tx.stderr);
    assert.ok(readFileSync(fromTar).equals(onnx), 'kiln export of the tarball gives the same file');

    // a snapshot: its own weights, named by its epoch, and it runs
    const e1 = await fetch(`${base}/api/v1/jobs/${id}/model?format=onnx&epoch=1`);
    assert.equal(e1.status, 200);
    assert.match(e1.headers.get('content-disposition'), new RegExp(`kiln-job-${id}-epoch-1\\.onnx`));
    const e1file = path.join(tmp.dir, 'epoch1.onnx');
    writeFileSync(e1file, Buffer.from(await e1.arrayBuffer()));
    assert.ok(!readFileSync(e1file).equals(onnx), 'epoch 1 has other weights than the final model');
    const pixels = pixelsFor('mnist', 1, 28);
    const prep = JSON.parse(info.metadata.preprocess);
    const kp = await kilnProbs('lenet', [1, 28, 28], 10, path.join(dataDir, 'jobs', String(id), 'checkpoints',
      'epoch-1.safetensors'), prep, pixels, 'epoch1');
    const op = await ortProbs(e1file, pixels, [1, 28, 28]);
    let maxDiff = 0;
    for (let i = 0; i < kp.length; i++) maxDiff = Math.max(maxDiff, Math.abs(kp[i] - op[i]));
    t.diagnostic(`epoch 1 snapshot: max |kiln - onnxruntime| = ${maxDiff.toExponential(2)}`);
    assert.ok(maxDiff <= ATOL, `epoch 1: ${maxDiff}`);

    // epoch=best: the best snapshot's file, the same bytes as `kiln export --epoch best`
    const snaps = await api(base, 'GET', `/api/v1/jobs/${id}/snapshots`);
    assert.equal(snaps.status, 200);
    const best = snaps.body.best;
    assert.ok(best >= 1, `a best epoch: ${JSON.stringify(snaps.body)}`);
    const b = await fetch(`${base}/api/v1/jobs/${id}/model?format=onnx&epoch=best`);
    assert.equal(b.status, 200);
    assert.match(b.headers.get('content-disposition'), new RegExp(`kiln-job-${id}-epoch-${best}\\.onnx`));
    const bestFile = path.join(tmp.dir, 'best-cli.onnx');
    const bx = await runKiln(['export', path.join(dataDir, 'jobs', String(id)), '--epoch', 'best', '-o', bestFile]);
    assert.equal(bx.code, 0, bx.stderr);
    assert.match(bx.stdout, new RegExp(`epoch ${best}`));
    assert.ok(readFileSync(bestFile).equals(Buffer.from(await b.arrayBuffer())), 'epoch=best: API and CLI agree');

    // the command line's errors: exit 1 naming the missing snapshot, 2 for usage
    const nx = await runKiln(['export', path.join(dataDir, 'jobs', String(id)), '--epoch', '9', '-o', bestFile]);
    assert.equal(nx.code, 1);
    assert.match(nx.stderr, /snapshot_not_found/);
    assert.equal((await runKiln(['export'])).code, 2);
    assert.equal((await runKiln(['export', bestFile, '--epoch', 'soon'])).code, 2);

    // errors
    const bad = await api(base, 'GET', `/api/v1/jobs/${id}/model?format=pb`);
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'unsupported_format');
    assert.match(bad.body.error.message, /onnx/);
    const none = await api(base, 'GET', `/api/v1/jobs/${id}/model?format=onnx&epoch=7`);
    assert.equal(none.status, 404, describeResponse('GET', 'epoch=7', none));
    const missing = await api(base, 'GET', '/api/v1/jobs/987654/model?format=onnx');
    assert.equal(missing.status, 404);
    // a job with no weights yet: batch 1 makes its first epoch 8,000 steps long
    const slow = await api(base, 'POST', '/api/v1/jobs', { dataset_id: mnistId, network: 'lenet', epochs: 1, batch_size: 1 });
    assert.equal(slow.status, 201, describeResponse('POST', '/api/v1/jobs', slow));
    const early = await api(base, 'GET', `/api/v1/jobs/${slow.body.id}/model?format=onnx`);
    assert.equal(early.status, 409, describeResponse('GET', 'model?format=onnx', early));
    assert.equal(early.body.error.code, 'no_weights');
    await api(base, 'POST', `/api/v1/jobs/${slow.body.id}/cancel`);
  } finally {
    await server.stop();
  }
});
