// Uploaded datasets of every layout on data made here (issue 13), through a
// real `kiln serve` and real multipart uploads:
//   - colour images of three classes (a colour or pattern each) written as
//     JPEG (jpeg-js) and PNG (pngjs) in three sizes (40x30 most common, 32x32,
//     48x36): class folders under one wrapping folder (.tar.gz), top-level
//     train/ val/ test/ folders (a .zip written here, and a .tar with
//     validation/), and train/ test/ only (.tar, val drawn by val_percent);
//     without a size (the most common one, said in the report) and with
//     width/height and resize crop or fill; every served image is checked to
//     carry its class's colour;
//   - the corrupt-JPEG sequences of issue 13: a truncated JPEG before good
//     ones, garbage named .jpg right after a good JPEG of another class, and
//     a JPEG cut off in its scan data; each corrupt file is counted and named
//     in the report, never imported, and never poisons the next;
//   - training for an epoch: cifar10-cnn on a JPEG-encoded 32x32 colour set
//     with pad + mirror augmentation, LeNet on grey digits of two sizes made
//     28x28 by resize fill; a crop larger than the images is a 400.
// The sources on the server (IDX, CIFAR, lists, folders) are in
// sources.test.mjs; the explorer's pixel-exact checks in explorer.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import zlib from 'node:zlib';
import {
  FINAL_STATUSES, api, describeResponse, loadDigits, parseTar, startServer, tempDir, waitDataset, waitFor,
  rng,
} from './lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');
const jpeg = require('jpeg-js');

// Three classes, sorted as kiln sorts them; the channel that dominates each.
const CLASSES = ['checker', 'red', 'stripes'];
const DOMINANT = { checker: 2, red: 0, stripes: 1 };
// Image i's size: half are 40x30, a quarter 32x32, a quarter 48x36.
const SIZES = [[40, 30], [40, 30], [32, 32], [48, 36]];
const PER_CLASS = 60;          // the wrapped archive: 180 images

let tmp;
let work;
let server;
let base;

// ---- images made here ---------------------------------------------------------------

/* RGBA pixels of class cls, w x h: checker is a blue 4-pixel checkerboard,
 * red a noisy red, stripes green stripes three rows wide; a little noise. */
function classPixels(cls, w, h, next) {
  const d = Buffer.alloc(w * h * 4);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const o = (y * w + x) * 4;
      const n = () => Math.floor(next() * 30);
      let rgb;
      if (cls === 'checker') rgb = [20 + n(), 20 + n(), ((x >> 2) + (y >> 2)) % 2 ? 230 - n() : 90 + n()];
      else if (cls === 'red') rgb = [200 + n(), 30 + n(), 30 + n()];
      else rgb = [30 + n(), Math.floor(y / 3) % 2 ? 230 - n() : 100 + n(), 30 + n()];
      d[o] = rgb[0]; d[o + 1] = rgb[1]; d[o + 2] = rgb[2]; d[o + 3] = 255;
    }
  }
  return d;
}

function encodePng(rgba, w, h) {
  return PNG.sync.write({ width: w, height: h, data: rgba }, { colorType: 2 });
}

function encodeJpeg(rgba, w, h, quality = 90) {
  return Buffer.from(jpeg.encode({ data: rgba, width: w, height: h }, quality).data);
}

/* n images of class cls as {name, data}: sizes by SIZES, JPEG and PNG in turn
 * (every size in both formats). */
function classFiles(cls, n, seed) {
  const next = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const [w, h] = SIZES[i % SIZES.length];
    const rgba = classPixels(cls, w, h, next);
    const asJpeg = Math.floor(i / SIZES.length) % 2 === 0;
    out.push({ name: `${String(i).padStart(3, '0')}.${asJpeg ? 'jpg' : 'png'}`, data: asJpeg ? encodeJpeg(rgba, w, h) : encodePng(rgba, w, h) });
  }
  return out;
}

/* A tree of files below dir from [[relative path, bytes]]; returns the paths in order. */
function writeTree(dir, files) {
  for (const [rel, data] of files) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), data);
  }
  return files.map(([rel]) => rel);
}

/* A tar (gzipped when gzip) of the given paths below cwd, in that order. */
async function makeTar(file, cwd, paths, gzip) {
  const tar = await import('tar');
  await tar.create({ gzip, file, cwd, portable: true }, paths);
  return file;
}

// ---- a zip written by hand: local headers, deflated data, central directory --------

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

function crc32(buf) {
  if (typeof zlib.crc32 === 'function') return zlib.crc32(buf) >>> 0;
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/* A zip of [[name, bytes]]: every entry deflated (method 8), in that order. */
function makeZip(entries) {
  const parts = [];
  const central = [];
  let off = 0;
  const DOS_TIME = 0x6000;   // 12:00:00
  const DOS_DATE = 0x5a21;   // 2025-01-01
  for (const [name, data] of entries) {
    const nameBuf = Buffer.from(name, 'utf8');
    const packed = zlib.deflateRawSync(data);
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);            // version needed
    local.writeUInt16LE(0x0800, 6);        // UTF-8 names
    local.writeUInt16LE(8, 8);             // deflate
    local.writeUInt16LE(DOS_TIME, 10);
    local.writeUInt16LE(DOS_DATE, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(packed.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBuf.length, 26);
    local.writeUInt16LE(0, 28);
    const cd = Buffer.alloc(46);
    cd.writeUInt32LE(0x02014b50, 0);
    cd.writeUInt16LE(0x0314, 4);           // made by: unix, 2.0
    cd.writeUInt16LE(20, 6);
    cd.writeUInt16LE(0x0800, 8);
    cd.writeUInt16LE(8, 10);
    cd.writeUInt16LE(DOS_TIME, 12);
    cd.writeUInt16LE(DOS_DATE, 14);
    cd.writeUInt32LE(crc, 16);
    cd.writeUInt32LE(packed.length, 20);
    cd.writeUInt32LE(data.length, 24);
    cd.writeUInt16LE(nameBuf.length, 28);
    cd.writeUInt32LE((0o100644 << 16) >>> 0, 38);   // a regular file, rw-r--r--
    cd.writeUInt32LE(off, 42);
    parts.push(local, nameBuf, packed);
    central.push(cd, nameBuf);
    off += local.length + nameBuf.length + packed.length;
  }
  const cdBuf = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cdBuf.length, 12);
  end.writeUInt32LE(off, 16);
  return Buffer.concat([...parts, cdBuf, end]);
}

// ---- the API ---------------------------------------------------------------------------

function withLog(msg) {
  return `${msg}\n--- server output (tail) ---\n${server.output().slice(-3000)}`;
}

/* Uploads file as the form's archive with the option fields; asserts 202; resolves to the id. */
async function upload(name, file, fields = {}) {
  const form = new FormData();
  form.append('name', name);
  for (const [k, v] of Object.entries(fields)) form.append(k, String(v));
  form.append('archive', new Blob([readFileSync(file)]), path.basename(file));
  const r = await api(base, 'POST', '/api/v1/datasets', form);
  assert.equal(r.status, 202, withLog(describeResponse('POST', '/api/v1/datasets', r)));
  assert.equal(r.body.name, name);
  return r.body.id;
}

async function ready(id) {
  const ds = await waitDataset(base, id, 120_000);
  assert.equal(ds.status, 'ready', withLog(`dataset ${id} ended ${ds.status}: ${ds.error}`));
  return ds;
}

/* The mean of each channel of a served PNG: [r, g, b] (grey: [v, v, v]); also its size. */
function channelMeans(buf) {
  const png = PNG.sync.read(buf);
  const sum = [0, 0, 0];
  for (let i = 0; i < png.width * png.height; i++) for (let k = 0; k < 3; k++) sum[k] += png.data[i * 4 + k];
  const n = png.width * png.height;
  return { means: sum.map((s) => s / n), width: png.width, height: png.height, colorType: png.colorType, png };
}

const argmax = (a) => a.indexOf(Math.max(...a));

/* Every image of the split, class by class through the samples API: checks
 * that class k lists report.per_class[split][k] images, each a PNG of the
 * dataset's shape; resolves to {class name: [{item, means, png}]}. */
async function servedImages(ds, split) {
  const [c, h, w] = ds.shape;
  const out = {};
  for (let k = 0; k < ds.classes.length; k++) {
    const p = `/api/v1/datasets/${ds.id}/samples?split=${split}&class=${k}&n=256`;
    const r = await api(base, 'GET', p);
    assert.equal(r.status, 200, describeResponse('GET', p, r));
    const cls = ds.classes[k];
    assert.equal(r.body.items.length, ds.report.per_class[split][cls], `${ds.name}: ${split} images of class ${cls}`);
    assert.equal(r.body.class_counts[k], ds.report.per_class[split][cls]);
    out[cls] = [];
    for (const item of r.body.items) {
      assert.equal(item.label, k);
      assert.match(item.url, new RegExp(`/image\\.png\\?split=${split}&index=\\d+`));
      const res = await fetch(base + item.url);
      assert.equal(res.status, 200, `${item.url}: ${res.status}`);
      assert.equal(res.headers.get('content-type'), 'image/png');
      const m = channelMeans(Buffer.from(await res.arrayBuffer()));
      assert.deepEqual([m.width, m.height, m.colorType === 0 ? 1 : 3], [w, h, c], `${item.url}: the dataset's shape`);
      out[cls].push({ item, ...m });
    }
  }
  return out;
}

/* Every served image of the colour classes carries its class's dominant channel. */
async function assertColoursRight(ds, splits) {
  for (const split of splits) {
    const byClass = await servedImages(ds, split);
    for (const [cls, imgs] of Object.entries(byClass)) {
      for (const im of imgs)
        assert.equal(argmax(im.means), DOMINANT[cls], `${ds.name} ${split} ${im.item.url} of class ${cls}: channel means ${im.means.map(Math.round)}`);
    }
  }
}

/* Trains network for one epoch; resolves to the finished job (asserted done). */
async function trainEpoch(body) {
  const r = await api(base, 'POST', '/api/v1/jobs', { epochs: 1, ...body });
  assert.equal(r.status, 201, withLog(describeResponse('POST', '/api/v1/jobs', r)));
  let job;
  await waitFor(async () => {
    job = (await api(base, 'GET', `/api/v1/jobs/${r.body.id}`)).body;
    return FINAL_STATUSES.has(job.status);
  }, { timeoutMs: 300_000, intervalMs: 300, what: `job ${r.body.id} to end` });
  assert.equal(job.status, 'done', withLog(`job ${job.id} ended ${job.status}: ${job.error}`));
  return job;
}

async function trainLosses(jobId) {
  const r = await api(base, 'GET', `/api/v1/jobs/${jobId}/metrics`);
  assert.equal(r.status, 200, describeResponse('GET', `/api/v1/jobs/${jobId}/metrics`, r));
  return r.body.items.filter((m) => m.tag === 'train/loss').map((m) => m.value);
}

// ---- archives ------------------------------------------------------------------------------

const archives = {};

before(async () => {
  tmp = tempDir('kiln-datasets-');
  work = path.join(tmp.dir, 'work');
  mkdirSync(work, { recursive: true });

  // (a) photos/<class>/NNN.{jpg,png}: one wrapping folder, mixed sizes and formats
  const wrapped = [];
  CLASSES.forEach((cls, k) => {
    for (const f of classFiles(cls, PER_CLASS, 100 + k)) wrapped.push([`photos/${cls}/${f.name}`, f.data]);
  });
  const wdir = path.join(work, 'wrapped');
  writeTree(wdir, wrapped);
  archives.wrapped = await makeTar(path.join(work, 'photos.tar.gz'), wdir, ['photos'], true);

  // (b) train/ val/ test/ with class folders: a zip; the same with validation/ as a tar
  const splitFiles = (counts, valName) => {
    const files = [];
    CLASSES.forEach((cls, k) => {
      const all = classFiles(cls, counts.train + counts.val + counts.test, 200 + k);
      let i = 0;
      for (const [split, n] of [['train', counts.train], [valName, counts.val], ['test', counts.test]]) {
        for (let j = 0; j < n; j++, i++) files.push([`${split}/${cls}/${all[i].name}`, all[i].data]);
      }
    });
    return files;
  };
  archives.splitCounts = { train: 24, val: 8, test: 6 };
  const zipped = splitFiles(archives.splitCounts, 'val');
  archives.zip = path.join(work, 'splits.zip');
  writeFileSync(archives.zip, makeZip(zipped));
  const vdir = path.join(work, 'validation');
  writeTree(vdir, splitFiles(archives.splitCounts, 'validation'));
  archives.validationTar = await makeTar(path.join(work, 'validation.tar'), vdir, ['train', 'validation', 'test'], false);

  // (c) train/ and test/ only
  archives.trainTestCounts = { train: 40, val: 0, test: 10 };
  const tdir = path.join(work, 'train-test');
  writeTree(tdir, splitFiles(archives.trainTestCounts, 'val'));
  archives.trainTest = await makeTar(path.join(work, 'train-test.tar'), tdir, ['train', 'test'], false);

  server = await startServer({ dataDir: path.join(tmp.dir, 'data') });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

// ---- (1) layouts and sizes -------------------------------------------------------------------

test('class folders under one wrapping folder (.tar.gz), mixed sizes: the most common size, said in the report', async () => {
  const ds = await ready(await upload('photos', archives.wrapped));
  assert.deepEqual(ds.classes, CLASSES, 'the wrapping folder is not a class');
  assert.deepEqual(ds.shape, [3, 30, 40], 'half the images are 40x30');
  assert.equal(ds.counts.train + ds.counts.val, 3 * PER_CLASS);
  assert.equal(ds.counts.val, 3 * PER_CLASS * 0.2, 'the default val_percent, 20, of each class');
  assert.equal(ds.counts.test, undefined, 'no test split');
  assert.equal(ds.report.images, 3 * PER_CLASS);
  assert.equal(ds.report.unreadable, 0);
  assert.equal(ds.report.skipped, 0);
  assert.deepEqual(ds.report.problems, []);
  assert.match(ds.report.shape_chosen, /most common size, 90 of 180 images/, ds.report.shape_chosen);
  assert.match(ds.report.shape_chosen, /width and height/, 'the note tells the user about width and height');
  for (const cls of CLASSES) {
    assert.equal(ds.report.per_class.train[cls] + ds.report.per_class.val[cls], PER_CLASS, cls);
    assert.equal(ds.report.per_class.val[cls], PER_CLASS * 0.2, cls);
  }
  await assertColoursRight(ds, ['train', 'val']);
});

test('the same archive with width and height 32 and resize crop, then fill: [3, 32, 32], the size asked for', async () => {
  for (const resize of ['crop', 'fill']) {
    const ds = await ready(await upload(`photos-${resize}`, archives.wrapped, { width: 32, height: 32, resize }));
    assert.deepEqual(ds.shape, [3, 32, 32], resize);
    assert.equal(ds.resize, resize);
    assert.equal(ds.report.shape_chosen, 'the size asked for');
    assert.deepEqual(ds.classes, CLASSES);
    assert.equal(ds.counts.train + ds.counts.val, 3 * PER_CLASS);
    await assertColoursRight(ds, ['val']);
  }
});

/* Checks a dataset imported from split folders holding counts per class. */
async function assertSplits(ds, counts, valDrawn) {
  assert.deepEqual(ds.classes, CLASSES, 'the classes are the folders inside the splits, not the splits');
  const drawn = valDrawn === undefined ? counts : { train: counts.train - valDrawn, val: valDrawn, test: counts.test };
  for (const s of ['train', 'val', 'test']) assert.equal(ds.counts[s], 3 * drawn[s], `counts.${s}`);
  assert.equal(ds.report.images, 3 * (counts.train + counts.val + counts.test));
  assert.equal(ds.report.unreadable, 0);
  assert.equal(ds.report.outside_classes, 0);
  for (const cls of CLASSES) {
    if (valDrawn === undefined) {
      assert.equal(ds.report.per_class.train[cls], counts.train, `train ${cls}`);
      assert.equal(ds.report.per_class.val[cls], counts.val, `val ${cls}`);
    } else {
      assert.equal(ds.report.per_class.train[cls], counts.train - valDrawn, `train ${cls}`);
      assert.equal(ds.report.per_class.val[cls], valDrawn, `val ${cls}, drawn from train`);
    }
    assert.equal(ds.report.per_class.test[cls], counts.test, `test ${cls}`);
  }
}

test('top-level train/ val/ test/ folders (.zip): the splits as given, val not drawn', async () => {
  const c = archives.splitCounts;
  // val_percent is for sources without val/: asked for here, it draws nothing
  const ds = await ready(await upload('splits-zip', archives.zip, { val_percent: 50 }));
  assert.deepEqual(ds.shape, [3, 30, 40]);
  await assertSplits(ds, c);
  await assertColoursRight(ds, ['train', 'val', 'test']);
});

test('train/ validation/ test/ (.tar): validation/ is the val split', async () => {
  const ds = await ready(await upload('splits-validation', archives.validationTar, { width: 32, height: 32, resize: 'crop' }));
  assert.deepEqual(ds.shape, [3, 32, 32]);
  await assertSplits(ds, archives.splitCounts);
});

test('train/ and test/ only (.tar): val drawn from train by val_percent, test kept', async () => {
  const c = archives.trainTestCounts;
  const ds = await ready(await upload('train-test', archives.trainTest, { val_percent: 25 }));
  await assertSplits(ds, c, c.train * 0.25);
  await assertColoursRight(ds, ['val', 'test']);
});

// ---- (2) corrupt JPEGs ------------------------------------------------------------------------

/* One JPEG of class cls with a white 8x8 square at its top left: a mark to find it by. */
function markedJpeg(cls, seed) {
  const rgba = classPixels(cls, 40, 30, rng(seed));
  for (let y = 0; y < 8; y++) for (let x = 0; x < 8; x++) rgba.fill(255, (y * 40 + x) * 4, (y * 40 + x) * 4 + 3);
  return encodeJpeg(rgba, 40, 30);
}

const hasMark = (png) => {
  let sum = 0;
  for (let y = 1; y < 6; y++) for (let x = 1; x < 6; x++) for (let k = 0; k < 3; k++) sum += png.data[(y * png.width + x) * 4 + k];
  return sum / 75 > 200;
};

test('a truncated JPEG, then a good one, then another class: both classes, the good one imported, the bad one named', async (t) => {
  // a/truncated.jpg: the first 600 bytes of a larger JPEG of another size; then
  // a/ok.jpg (marked), then b/001.jpg, then more of each class
  const big = encodeJpeg(classPixels('red', 320, 240, rng(9)), 320, 240);
  assert.ok(big.length > 4000);
  const files = [
    ['a/truncated.jpg', big.subarray(0, 600)],
    ['a/ok.jpg', markedJpeg('red', 10)],
    ['b/001.jpg', encodeJpeg(classPixels('checker', 40, 30, rng(11)), 40, 30)],
  ];
  const next = rng(12);
  for (let i = 2; i <= 20; i++) {
    files.push([`a/${String(i).padStart(3, '0')}.jpg`, encodeJpeg(classPixels('red', 40, 30, next), 40, 30)]);
    files.push([`b/${String(i).padStart(3, '0')}.jpg`, encodeJpeg(classPixels('checker', 40, 30, next), 40, 30)]);
  }
  const dir = path.join(work, 'truncated');
  const order = writeTree(dir, files);
  const file = await makeTar(path.join(work, 'truncated.tar'), dir, order, false);
  assert.deepEqual(parseTar(readFileSync(file)).slice(0, 3).map((e) => e.name), ['a/truncated.jpg', 'a/ok.jpg', 'b/001.jpg'],
    'the archive holds the files in this order');

  const ds = await ready(await upload('truncated', file, { val_percent: 0 }));
  assert.deepEqual(ds.classes, ['a', 'b']);
  assert.deepEqual(ds.shape, [3, 30, 40]);
  assert.equal(ds.report.unreadable, 1, JSON.stringify(ds.report));
  assert.equal(ds.report.images, 40, 'every file but the truncated one read');
  assert.deepEqual(ds.report.per_class.train, { a: 20, b: 20 }, 'ok.jpg and 19 more in a');
  assert.equal(ds.report.problems.length, 1, JSON.stringify(ds.report.problems));
  const p = ds.report.problems[0];
  assert.equal(p.what, 'unreadable');
  assert.match(p.path, /a\/truncated\.jpg$/);
  assert.ok(p.why.length > 0);
  t.diagnostic(`the first 600 bytes of a JPEG: ${p.why}`);
  assert.doesNotMatch(JSON.stringify(ds.report), /ok\.jpg|too large/, 'the good JPEG after it is not refused');

  const served = await servedImages(ds, 'train');
  assert.equal(served.a.filter((im) => hasMark(im.png)).length, 1, 'ok.jpg is among class a\'s images, once');
  assert.equal(served.b.filter((im) => hasMark(im.png)).length, 0);
  for (const im of served.a) assert.equal(argmax(im.means), 0, `${im.item.url}: a is red`);
  for (const im of served.b) assert.equal(argmax(im.means), 2, `${im.item.url}: b is blue`);
});

test('garbage named .jpg right after a good JPEG of another class: unreadable 1, never a training image', async (t) => {
  // b/ first (good JPEGs: the last thing decoded before the garbage), then
  // a/000.jpg, garbage behind a JPEG's start marker, then good ones in a/
  const next = rng(21);
  const files = [];
  for (let i = 1; i <= 15; i++) files.push([`b/${String(i).padStart(3, '0')}.jpg`, encodeJpeg(classPixels('checker', 32, 32, next), 32, 32)]);
  const garbage = Buffer.alloc(3000);
  for (let i = 0; i < garbage.length; i++) garbage[i] = Math.floor(next() * 256);
  files.push(['a/000.jpg', Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), garbage])]);
  for (let i = 1; i <= 15; i++) files.push([`a/${String(i).padStart(3, '0')}.jpg`, encodeJpeg(classPixels('red', 32, 32, next), 32, 32)]);
  const dir = path.join(work, 'garbage');
  const order = writeTree(dir, files);
  const file = await makeTar(path.join(work, 'garbage.tar.gz'), dir, order, true);
  assert.deepEqual(parseTar(zlib.gunzipSync(readFileSync(file))).slice(14, 17).map((e) => e.name),
    ['b/015.jpg', 'a/000.jpg', 'a/001.jpg'], 'the garbage comes right after a good JPEG');

  const ds = await ready(await upload('garbage', file, { val_percent: 20 }));
  assert.deepEqual(ds.classes, ['a', 'b']);
  assert.equal(ds.report.unreadable, 1, JSON.stringify(ds.report));
  assert.equal(ds.report.images, 30);
  assert.equal(ds.counts.train + ds.counts.val, 30);
  assert.equal(ds.report.per_class.train.a + ds.report.per_class.val.a, 15, 'only the good images of a');
  assert.equal(ds.report.per_class.train.b + ds.report.per_class.val.b, 15);
  assert.equal(ds.report.problems.length, 1);
  assert.match(ds.report.problems[0].path, /a\/000\.jpg$/);
  assert.equal(ds.report.problems[0].what, 'unreadable');
  t.diagnostic(`garbage behind a JPEG start marker: ${ds.report.problems[0].why}; shape_chosen: ${ds.report.shape_chosen}; shape ${ds.shape}`);
  // the reason is the decoder's, not a size read from memory it never wrote; the census counts no size for it
  assert.doesNotMatch(ds.report.problems[0].why, /too large/, ds.report.problems[0].why);
  assert.match(ds.report.problems[0].why, /^bad JPEG/);
  assert.equal(ds.report.shape_chosen, "every image's size");
  // a garbage file "decoded" with the previous file's state would be a blue image labelled a
  for (const split of ['train', 'val']) {
    const served = await servedImages(ds, split);
    for (const im of served.a) assert.equal(argmax(im.means), 0, `${split} ${im.item.url}: every image of a is red`);
    for (const im of served.b) assert.equal(argmax(im.means), 2, `${split} ${im.item.url}: every image of b is blue`);
  }
});

test('a JPEG cut off in its scan data is unreadable, and the JPEG after it of another size is not', async (t) => {
  const next = rng(31);
  const whole = encodeJpeg(classPixels('red', 160, 120, next), 160, 120);
  const files = [['a/cut.jpg', whole.subarray(0, Math.floor(whole.length / 2))]];
  for (let i = 1; i <= 10; i++) {
    files.push([`a/${String(i).padStart(3, '0')}.jpg`, encodeJpeg(classPixels('red', 40, 30, next), 40, 30)]);
    files.push([`b/${String(i).padStart(3, '0')}.png`, encodePng(classPixels('stripes', 40, 30, next), 40, 30)]);
  }
  const dir = path.join(work, 'cut');
  const file = await makeTar(path.join(work, 'cut.tar'), dir, writeTree(dir, files), false);
  const ds = await ready(await upload('cut', file, { val_percent: 0 }));
  assert.deepEqual(ds.classes, ['a', 'b']);
  assert.deepEqual(ds.shape, [3, 30, 40], 'the cut 160x120 JPEG is not counted as a size either');
  assert.equal(ds.report.unreadable, 1, JSON.stringify(ds.report));
  assert.deepEqual(ds.report.per_class.train, { a: 10, b: 10 });
  assert.match(ds.report.problems[0].path, /a\/cut\.jpg$/);
  t.diagnostic(`a JPEG cut in half: ${ds.report.problems[0].why}`);
  const served = await servedImages(ds, 'train');
  for (const im of served.a) assert.equal(argmax(im.means), 0, `${im.item.url}: a is red`);
});

// ---- (3) training ------------------------------------------------------------------------------

test('cifar10-cnn trains an epoch on a JPEG-encoded 32x32 colour set with pad 4 and mirror', { timeout: 300_000 }, async (t) => {
  const ds = await ready(await upload('photos-jpeg', archives.wrapped, { width: 32, height: 32, resize: 'fill', encoding: 'jpeg' }));
  assert.equal(ds.encoding, 'jpeg');
  assert.deepEqual(ds.shape, [3, 32, 32]);
  const kds = readFileSync(path.join(server.dataDir, 'datasets', String(ds.id), 'train.kds'));
  assert.equal(kds.subarray(0, 6).toString('latin1'), 'KILNDS');
  assert.equal(kds[7], 2, 'stored encoded (.kds version 2)');
  assert.ok(kds.length < ds.counts.train * 3 * 32 * 32, `JPEGs take less than the raw pixels (${kds.length} bytes)`);
  await assertColoursRight(ds, ['val']);       // decoded from the stored JPEGs

  const augmentation = { pad: 4, mirror: true };
  const job = await trainEpoch({ dataset_id: ds.id, network: 'cifar10-cnn', batch_size: 16, augmentation,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 } });
  assert.equal(job.network, 'cifar10-cnn');
  assert.equal(job.config.augmentation.pad, 4, JSON.stringify(job.config.augmentation));
  assert.equal(job.config.augmentation.mirror, true);
  assert.ok(!job.config.augmentation.crop, 'no crop asked for: the stored size');
  const losses = await trainLosses(job.id);
  assert.ok(losses.length > 0, 'train/loss was reported');
  for (const l of losses) assert.ok(Number.isFinite(l) && l > 0, `train/loss ${l}`);
  assert.ok(Number.isFinite(job.metrics['train/loss']));
  assert.ok(Number.isFinite(job.metrics['val/accuracy']));
  t.diagnostic(`cifar10-cnn, one epoch of ${ds.counts.train} JPEG-encoded images: train/loss ${losses.map((l) => l.toFixed(3)).join(' ')}, val/accuracy ${job.metrics['val/accuracy']}`);
});

test('an augmentation crop larger than the images is a 400 naming augmentation.crop', async (t) => {
  const items = (await api(base, 'GET', '/api/v1/datasets')).body.items;
  const ds = items.find((d) => d.name === 'photos-crop');
  assert.ok(ds, 'needs the 32x32 dataset');
  const before = (await api(base, 'GET', '/api/v1/jobs')).body.items.length;
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: ds.id, network: 'cifar10-cnn', epochs: 1, augmentation: { crop: 40 } });
  assert.equal(r.status, 400, describeResponse('POST', '/api/v1/jobs', r));
  assert.match(r.body.error.message, /augmentation\.crop/, r.body.error.message);
  t.diagnostic(`crop 40 on 32x32: ${r.status} ${r.body.error.code}: ${r.body.error.message}`);
  assert.equal((await api(base, 'GET', '/api/v1/jobs')).body.items.length, before, 'no job was made');
});

test('LeNet trains an epoch on grey digits of two sizes made 28x28 by resize fill', { timeout: 300_000 }, async (t) => {
  // 50 digits a class: 28x28, and 42x28 (the digit in a wider black frame), grey PNGs
  const PER = 50;
  const files = [];
  for (let c = 0; c < 10; c++) {
    const digits = loadDigits(c).slice(0, PER);
    digits.forEach((px, i) => {
      let w = 28;
      let data = Buffer.from(px);
      if (i % 2) {
        w = 42;
        data = Buffer.alloc(42 * 28);
        for (let y = 0; y < 28; y++) Buffer.from(px.subarray(y * 28, y * 28 + 28)).copy(data, y * 42 + 7);
      }
      files.push([`digits/${c}/${String(i).padStart(3, '0')}.png`,
        PNG.sync.write({ width: w, height: 28, data }, { colorType: 0, inputColorType: 0, bitDepth: 8 })]);
    });
  }
  const dir = path.join(work, 'digits');
  writeTree(dir, files);
  const file = await makeTar(path.join(work, 'digits.tar.gz'), dir, ['digits'], true);
  const ds = await ready(await upload('digits-fill', file, { width: 28, height: 28, resize: 'fill', channels: 1 }));
  assert.deepEqual(ds.shape, [1, 28, 28]);
  assert.equal(ds.resize, 'fill');
  assert.deepEqual(ds.classes, ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  assert.equal(ds.counts.train + ds.counts.val, 10 * PER);
  assert.equal(ds.report.unreadable, 0);
  const served = await servedImages(ds, 'val');
  assert.equal(Object.values(served).flat().length, ds.counts.val);

  const job = await trainEpoch({ dataset_id: ds.id, network: 'lenet', batch_size: 16,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 } });
  const losses = await trainLosses(job.id);
  assert.ok(losses.length > 0);
  for (const l of losses) assert.ok(Number.isFinite(l), `train/loss ${l}`);
  const acc = job.metrics['val/accuracy'];
  t.diagnostic(`LeNet, one epoch of ${ds.counts.train} filled digits: val/accuracy ${acc}`);
  assert.ok(acc > 0.2, `val/accuracy after an epoch (chance 0.1): ${acc}`);
});
