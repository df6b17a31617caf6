// The API's shapes and its answers to bad input: every mistake gets a 4xx with
// {"error": {"code", "message"}}, and the server keeps serving. Also the CLI's
// help, static files, and cancelling a running job.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, importDemo, readSSE, runKiln, startServer, tempDir, waitDataset, waitFor,
} from './lib/kiln.mjs';

let tmp;
let server;
let base;
let datasetId;

before(async () => {
  tmp = tempDir('kiln-api-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

/* Asserts an error answer: the status (or any 4xx when status is null), and the
 * JSON error body; returns the body's error. */
function assertError(method, p, r, status, code) {
  const what = describeResponse(method, p, r);
  if (status === null) assert.ok(r.status >= 400 && r.status < 500, `expected a 4xx: ${what}`);
  else assert.equal(r.status, status, what);
  assert.match(r.headers.get('content-type') || '', /application\/json/, `error content type: ${what}`);
  assert.ok(r.body && r.body.error, `error body: ${what}`);
  assert.equal(typeof r.body.error.code, 'string', what);
  assert.match(r.body.error.code, /^[a-z][a-z0-9_]*$/, `snake_case code: ${what}`);
  assert.equal(typeof r.body.error.message, 'string', what);
  assert.ok(r.body.error.message.length > 0, what);
  if (code) assert.equal(r.body.error.code, code, what);
  return r.body.error;
}

async function stillServing() {
  const r = await api(base, 'GET', '/api/v1/info');
  assert.equal(r.status, 200, `the server still answers /api/v1/info: ${r.status}`);
}

test('GET /api/v1/info: version, backends, devices, queue', async () => {
  const r = await api(base, 'GET', '/api/v1/info');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') || '', /application\/json/);
  const i = r.body;
  assert.match(i.version, /^\d+\.\d+\.\d+/);
  assert.ok(Array.isArray(i.backends) && i.backends.includes('cpu'), `backends ${JSON.stringify(i.backends)}`);
  assert.ok(Array.isArray(i.devices) && i.devices.length >= 1, 'at least the CPU device');
  for (const d of i.devices) {
    assert.equal(typeof d.kind, 'string');
    assert.equal(typeof d.index, 'number');
    assert.equal(typeof d.name, 'string');
    assert.equal(typeof d.memory_bytes, 'number');
    assert.ok(d.memory_free_bytes === null || (d.memory_free_bytes > 0 && d.memory_free_bytes <= d.memory_bytes),
      `free memory of ${d.kind} ${d.index}: ${d.memory_free_bytes} of ${d.memory_bytes}`);
    if (d.kind === 'cuda') assert.match(d.compute_capability, /^\d+\.\d+$/);
  }
  assert.ok(i.devices.some((d) => d.kind === 'cpu'), 'a cpu device is listed');
  // Linux says what is available: the CPU's free memory is known here.
  assert.ok(i.devices[0].memory_free_bytes > 0, JSON.stringify(i.devices[0]));
  assert.equal(typeof i.queue.queued, 'number');
  assert.equal(typeof i.queue.running, 'number');
});

test('GET /api/v1/datasets and /api/v1/jobs: lists of items', async () => {
  const d = await api(base, 'GET', '/api/v1/datasets');
  assert.equal(d.status, 200);
  assert.ok(Array.isArray(d.body.items));
  const ds = d.body.items.find((x) => x.id === datasetId);
  assert.ok(ds, 'the imported dataset is listed');
  for (const k of ['id', 'name', 'status', 'progress', 'created_at', 'classes', 'shape', 'counts', 'error'])
    assert.ok(k in ds, `dataset has ${k}`);
  assert.match(ds.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/, 'RFC 3339 UTC');
  const one = await api(base, 'GET', `/api/v1/datasets/${datasetId}`);
  assert.equal(one.status, 200);
  assert.deepEqual(one.body, ds);
  const j = await api(base, 'GET', '/api/v1/jobs');
  assert.equal(j.status, 200);
  assert.ok(Array.isArray(j.body.items));
});

test('POST /api/v1/jobs with bad input: 4xx with an error body each time', async (t) => {
  const ok = { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 } };
  const cases = [
    ['malformed JSON', '{"dataset_id": 1, "network": ', 400, null],
    ['not an object', '[1, 2, 3]', 400, null],
    ['empty body', '', 400, null],
    ['unknown field', { ...ok, bogus: 1 }, 400, 'unknown_field'],
    ['unknown solver field', { ...ok, solver: { type: 'sgd', lr: 0.01, nesterovv: true } }, 400, 'unknown_field'],
    ['missing dataset_id', { network: 'lenet' }, 400, null],
    ['missing network', { dataset_id: datasetId }, 400, null],
    ['dataset that does not exist', { ...ok, dataset_id: 987654 }, null, null],
    ['network that does not exist', { ...ok, network: 'no-such-net' }, null, null],
    ['spec with an unknown layer type', { ...ok, network: { layers: [{ type: 'warp' }, { type: 'dense', units: 'classes' }] } }, null, null],
    ['epochs 0', { ...ok, epochs: 0 }, 400, null],
    ['epochs a string', { ...ok, epochs: 'two' }, 400, null],
    ['batch_size too large', { ...ok, batch_size: 5000 }, 400, null],
    ['negative lr', { ...ok, solver: { type: 'sgd', lr: -1 } }, 400, null],
    ['solver type not sgd', { ...ok, solver: { type: 'rmsprop' } }, null, null],
    ['loss scaling without mixed precision', { ...ok, loss_scaling: 'dynamic' }, 400, 'invalid_field'],
    ['precision unknown', { ...ok, precision: 'fp8' }, 400, 'invalid_field'],
  ];
  for (const [what, body, status, code] of cases) {
    const r = await api(base, 'POST', '/api/v1/jobs', body);
    t.diagnostic(`${what}: ${r.status} ${r.text}`);
    assertError('POST', `/api/v1/jobs (${what})`, r, status, code);
  }
  const jobs = await api(base, 'GET', '/api/v1/jobs');
  assert.equal(jobs.body.items.length, 0, 'no bad request created a job');
  await stillServing();
});

test('uploads that are not archives of images: 4xx with an error body', async () => {
  // A text file named like an archive.
  const notArchive = new FormData();
  notArchive.append('name', 'text');
  notArchive.append('archive', new Blob(['these are not the images you are looking for\n'], { type: 'text/plain' }), 'notes.tar.gz');
  const r1 = await api(base, 'POST', '/api/v1/datasets', notArchive);
  assertError('POST', '/api/v1/datasets (a text file)', r1, null, null);

  // A real tar.gz that holds no image.
  const tar = await import('tar');
  const tree = path.join(tmp.dir, 'noimages');
  mkdirSync(path.join(tree, 'cats'), { recursive: true });
  writeFileSync(path.join(tree, 'cats', 'readme.txt'), 'no pictures here\n');
  const file = path.join(tmp.dir, 'noimages.tar.gz');
  await tar.create({ gzip: true, file, cwd: tree, portable: true }, ['cats']);
  const { readFileSync } = await import('node:fs');
  const noImages = new FormData();
  noImages.append('name', 'empty');
  noImages.append('archive', new Blob([readFileSync(file)], { type: 'application/gzip' }), 'noimages.tar.gz');
  const r2 = await api(base, 'POST', '/api/v1/datasets', noImages);
  assertError('POST', '/api/v1/datasets (an archive with no images)', r2, null, null);

  // A form without the archive, and one without a name.
  const noFile = new FormData();
  noFile.append('name', 'nothing');
  assertError('POST', '/api/v1/datasets (no archive field)', await api(base, 'POST', '/api/v1/datasets', noFile), null, null);

  // A field sent twice is refused, not glued into one value ("onetwo"); a NUL
  // byte is refused, not the end of the name.
  const archive = () => new Blob([readFileSync(file)], { type: 'application/gzip' });
  for (const [what, fields, msg] of [
    ['name twice', [['name', 'one'], ['name', 'two']], /field "name" more than once/],
    ['val_percent twice', [['name', 'v'], ['val_percent', '5'], ['val_percent', '7']], /field "val_percent" more than once/],
    ['a NUL in the name', [['name', 'a\u0000b']], /field "name" holds a NUL byte/],
  ]) {
    const form = new FormData();
    for (const [k, v] of fields) form.append(k, v);
    form.append('archive', archive(), 'noimages.tar.gz');
    const e = assertError('POST', `/api/v1/datasets (${what})`, await api(base, 'POST', '/api/v1/datasets', form), 400,
      'invalid_field');
    assert.match(e.message, msg, what);
  }

  const list = await api(base, 'GET', '/api/v1/datasets');
  const bad = list.body.items.filter((d) => d.id !== datasetId && d.status === 'ready');
  assert.equal(bad.length, 0, `no bad upload became a ready dataset: ${JSON.stringify(bad)}`);
  await stillServing();
});

test('unknown routes and ids: 404 with an error body', async () => {
  assertError('GET', '/api/v1/nope', await api(base, 'GET', '/api/v1/nope'), 404, null);
  assertError('GET', '/api/v1/jobs/987654', await api(base, 'GET', '/api/v1/jobs/987654'), 404, null);
  assertError('GET', '/api/v1/datasets/987654', await api(base, 'GET', '/api/v1/datasets/987654'), 404, null);
  assertError('GET', '/api/v1/jobs/987654/events', await api(base, 'GET', '/api/v1/jobs/987654/events'), 404, null);
  assertError('GET', '/api/v1/jobs/987654/model', await api(base, 'GET', '/api/v1/jobs/987654/model?format=tar'), 404, null);
  await stillServing();
});

/* Sends a raw request line (fetch would normalise the path) and returns the status. */
function rawStatus(p) {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(u.port), u.hostname, () => {
      s.write(`GET ${p} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n\r\n`);
    });
    let data = '';
    s.setEncoding('latin1');
    s.on('data', (d) => { data += d; });
    s.on('end', () => resolve(Number((/^HTTP\/1\.[01] (\d{3})/.exec(data) || [])[1])));
    s.on('error', reject);
    s.setTimeout(10_000, () => { s.destroy(); reject(new Error(`no answer for ${p}`)); });
  });
}

test('the dashboard and the vendored chart library are served; paths cannot escape', async () => {
  const index = await fetch(`${base}/`);
  assert.equal(index.status, 200);
  assert.match(index.headers.get('content-type') || '', /text\/html/);
  assert.match(await index.text(), /kiln/i);
  for (const [p, type] of [['/app.js', /javascript/], ['/style.css', /text\/css/],
    ['/static/vendor/uPlot.iife.min.js', /javascript/], ['/static/vendor/uPlot.min.css', /text\/css/]]) {
    const r = await fetch(base + p);
    assert.equal(r.status, 200, `GET ${p}`);
    assert.match(r.headers.get('content-type') || '', type, `content type of ${p}`);
    await r.arrayBuffer();
  }
  for (const p of ['/static/../kiln.db', '/static/%2e%2e/%2e%2e/etc/passwd', '/../../etc/passwd', '/static/vendor/../../CMakeLists.txt']) {
    const st = await rawStatus(p);
    assert.ok(st >= 400 && st < 500, `GET ${p} must not be served (got ${st})`);
  }
  await stillServing();
});

test('cancel a running job: the stream ends with status cancelled', { timeout: 300_000 }, async () => {
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 50 });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  const id = r.body.id;
  assert.equal(r.body.config.epochs, 50);
  assert.equal(r.body.config.batch_size, 64, 'batch_size defaults to 64');
  assert.equal(r.body.config.solver.lr, 0.01, 'lr defaults to 0.01');
  await waitFor(async () => {
    const j = await api(base, 'GET', `/api/v1/jobs/${id}`);
    return j.body.status === 'running' && j.body.step > 0;
  }, { timeoutMs: 120_000, what: `job ${id} to be running with a step done` });
  const streaming = readSSE(`${base}/api/v1/jobs/${id}/events`, { timeoutMs: 120_000 });
  const c = await api(base, 'POST', `/api/v1/jobs/${id}/cancel`);
  assert.ok(c.status >= 200 && c.status < 300, describeResponse('POST', `/api/v1/jobs/${id}/cancel`, c));
  const s = await streaming;
  assert.equal(s.finalStatus, 'cancelled');
  assert.ok(s.ended, 'the stream ends after cancelled');
  const j = await api(base, 'GET', `/api/v1/jobs/${id}`);
  assert.equal(j.body.status, 'cancelled');
  assert.ok(j.body.finished_at);
  const again = await api(base, 'POST', `/api/v1/jobs/${id}/cancel`);
  assert.ok(again.status === 409 || (again.status >= 200 && again.status < 300),
    `cancelling an ended job is harmless: ${describeResponse('POST', 'cancel', again)}`);
  await stillServing();
});

test('GET /api/v1/schema: the rules a minimal job gets; the job\'s typed devices', { timeout: 120_000 }, async () => {
  const r = await api(base, 'GET', '/api/v1/schema');
  assert.equal(r.status, 200, describeResponse('GET', '/api/v1/schema', r));
  assert.match(r.headers.get('content-type') || '', /application\/json/);
  const S = r.body.job;
  for (const p of ['epochs', 'batch_size', 'seed', 'snapshot_interval', 'precision', 'loss_scaling', 'solver.type',
    'solver.lr', 'solver.momentum', 'solver.beta1', 'solver.eps', 'solver.larc.eta', 'lr_policy.type',
    'lr_policy.gamma', 'lr_policy.warmup_epochs', 'name', 'devices'])
    assert.ok(S[p], `the schema describes ${p}`);
  // Every default lies within its own field's rule.
  for (const [p, f] of Object.entries(S)) {
    if (f.default === undefined || f.default === null) continue;
    if (f.enum) { assert.ok(f.enum.includes(f.default), `${p}: default ${f.default} is a choice`); continue; }
    if (f.type === 'boolean') { assert.equal(typeof f.default, 'boolean', p); continue; }
    const v = f.default;
    assert.equal(typeof v, 'number', p);
    if (f.type === 'integer') assert.ok(Number.isInteger(v), `${p}: integer default`);
    assert.ok(f.minimum === undefined || v >= f.minimum, `${p}: ${v} >= ${f.minimum}`);
    assert.ok(f.exclusiveMinimum === undefined || v > f.exclusiveMinimum, `${p}: ${v} > ${f.exclusiveMinimum}`);
    assert.ok(f.maximum === undefined || v <= f.maximum, `${p}: ${v} <= ${f.maximum}`);
    assert.ok(f.exclusiveMaximum === undefined || v < f.exclusiveMaximum, `${p}: ${v} < ${f.exclusiveMaximum}`);
  }
  // A job that gives nothing optional gets exactly the published defaults (sgd's fields; no LARC, fixed lr).
  const c = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', devices: 0 });
  assert.equal(c.status, 201, describeResponse('POST', '/api/v1/jobs', c));
  const id = c.body.id;
  try {
    const cfg = c.body.config;
    for (const [p, f] of Object.entries(S)) {
      // (the defaults of lr_policy, solver.larc and early_stopping apply inside those objects, absent by default)
      if (f.default === undefined || f.default === null || p.startsWith('lr_policy.') || p.startsWith('solver.larc.')
        || p.startsWith('early_stopping.')) continue;
      if (f.solvers && !f.solvers.includes(S['solver.type'].default)) continue;
      const got = p.split('.').reduce((o, k) => (o == null ? undefined : o[k]), cfg);
      assert.equal(got, f.default, `${p}: the job got ${got}, the schema says ${f.default}`);
    }
    // devices: typed, from the config the job stored (backend cpu, no GPU list).
    const cpu = { kind: 'cpu', count: 1, gpus: null };
    assert.deepEqual(c.body.devices, cpu, JSON.stringify(c.body));
    assert.equal(cfg.backend, 'cpu');
    const one = await api(base, 'GET', `/api/v1/jobs/${id}`);
    assert.deepEqual(one.body.devices, cpu);
    const list = await api(base, 'GET', '/api/v1/jobs');
    assert.deepEqual(list.body.items.find((j) => j.id === id).devices, cpu);
  } finally {
    await api(base, 'POST', `/api/v1/jobs/${id}/cancel`);
    await waitFor(async () => ['cancelled', 'done', 'failed'].includes((await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status),
      { timeoutMs: 60_000, what: `job ${id} to end` });
  }
});

test('kiln --help, --version and CMD --help describe every flag', async () => {
  const top = await runKiln(['--help']);
  assert.equal(top.code, 0);
  const topText = top.stdout + top.stderr;
  for (const w of ['serve', 'worker', 'import']) assert.match(topText, new RegExp(`\\b${w}\\b`), `kiln --help mentions ${w}`);

  const ver = await runKiln(['--version']);
  assert.equal(ver.code, 0);
  assert.match(ver.stdout, /\d+\.\d+\.\d+/);

  const serve = await runKiln(['serve', '--help']);
  assert.equal(serve.code, 0);
  for (const f of ['--host', '--port', '--data', '--web-dir', '--static-dir', '--max-jobs', 'KILN_DATA'])
    assert.ok((serve.stdout + serve.stderr).includes(f), `kiln serve --help mentions ${f}`);

  const imp = await runKiln(['import', '--help']);
  assert.equal(imp.code, 0);
  for (const f of ['mnist-json', 'archive', '--data', '--name', '--if-missing', '--val-percent', '--width', '--height', '--channels'])
    assert.ok((imp.stdout + imp.stderr).includes(f), `kiln import --help mentions ${f}`);

  const worker = await runKiln(['worker', '--help']);
  assert.equal(worker.code, 0);
  assert.ok((worker.stdout + worker.stderr).includes('--job-dir'), 'kiln worker --help mentions --job-dir');

  const bad = await runKiln(['serve', '--no-such-flag']);
  assert.notEqual(bad.code, 0, 'an unknown flag is an error');
  const badCmd = await runKiln(['no-such-command']);
  assert.notEqual(badCmd.code, 0, 'an unknown command is an error');
});
