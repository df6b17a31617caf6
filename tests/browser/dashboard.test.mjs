// The dashboard in headless Chromium (Debian's /usr/bin/chromium driven by
// playwright-core; no browser download): open the page; drive the new-job form
// (model summary, custom specs, solvers, policies, errors from the API) and
// check the requests it sends and the configs the server stores, and that its
// defaults, bounds and choices are GET /api/v1/schema's; start a LeNet
// job from the form, watch the charts receive points and the job reach `done`.
// Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, importDemo, makeDigitArchive, startServer, tempDir, waitDataset } from '../integration/lib/kiln.mjs';


const OUT = path.join(ROOT, 'tests', 'browser', 'out');

let tmp;
let server;
let base;
let datasetId;
let browser;
let page;
let jobId;
const problems = [];     // page errors, console errors, requests that left the machine
const jobPosts = [];     // the bodies of the page's POST /api/v1/jobs requests

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
  ({ browser, page } = await openPage(base, {
    viewport: { width: 1360, height: 900 }, problems,
    // 4xx answers are expected here (the form-error case; /api/v1/networks may not
    // exist yet and the page falls back to its built-in list); anything else is not.
    allowConsole: (t) => /Failed to load resource: the server responded with a status of 4\d\d/.test(t),
  }));
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/v1/jobs') jobPosts.push(r.postDataJSON());
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function shot(name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

test('the dashboard lists the service, the demo dataset and the job form', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('#info-version', { timeout: 15_000 });
  assert.match(await page.textContent('#info-version'), /^v\d+\.\d+\.\d+/);
  assert.match(await page.textContent('#info-backends'), /cpu/);
  const row = page.locator(`#datasets-table tr[data-dataset-id="${datasetId}"]`);
  await row.waitFor({ timeout: 15_000 });
  const text = await row.textContent();
  assert.match(text, /mnist/);
  assert.match(text, /ready/);
  assert.match(text, /8,000/);
  assert.match(text, /2,000/);
  assert.match(text, /1×28×28/);
  await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  // Every form control has a label, the Advanced ones and the upload form's too.
  const ids = await page.$$eval('#job-form :is(input, select, textarea), #upload-form :is(input, select)',
    (els) => els.map((e) => e.id));
  assert.ok(ids.length >= 25, `form controls: ${ids.join(' ')}`);
  for (const id of ids) assert.equal(await page.locator(`label[for="${id}"]`).count(), 1, `#${id} has a label`);
  // The default form is short: SGD's fields on view, Adam's and the rarely changed ones not.
  for (const id of ['job-dataset', 'job-network', 'job-summary-button', 'job-epochs', 'job-batch', 'job-solver',
    'job-lr', 'job-momentum', 'job-weight-decay', 'job-policy', 'job-warmup', 'job-precision', 'job-name'])
    assert.ok(await page.isVisible(`#${id}`), `#${id} is on view`);
  for (const id of ['job-beta1', 'job-label-smoothing', 'job-seed', 'job-larc', 'job-spec', 'job-loss-scaling'])
    assert.ok(!(await page.isVisible(`#${id}`)), `#${id} is not on view`);
  // A device to choose only where /info lists a GPU.
  const info = await (await fetch(`${base}/api/v1/info`)).json();
  const gpus = info.devices.filter((d) => d.kind !== 'cpu').length;
  await page.waitForFunction(() => document.querySelectorAll('#job-device option').length >= 2, null, { timeout: 15_000 });
  assert.equal(await page.isVisible('#job-device'), gpus > 0, `device choice with ${gpus} GPUs`);
  assert.equal(await page.getAttribute('#job-advanced', 'open'), null, 'Advanced starts closed');
  // Every precision is offered; loss scaling only shows for mixed precision.
  assert.deepEqual(await page.$$eval('#job-precision option:not([disabled])', (os) => os.map((o) => o.value)),
    ['fp32', 'amp-bf16', 'amp-fp16']);
  // The schedule's caption counts the steps of the chosen dataset and batch: 8,000 / 64 = 125 an epoch.
  assert.match(await page.textContent('#job-lr-caption'), /125 per epoch/);
  await shot('home');
});

test('the form\'s defaults, bounds and choices are the ones GET /api/v1/schema publishes', async () => {
  const r = await fetch(`${base}/api/v1/schema`);
  assert.equal(r.status, 200);
  const S = (await r.json()).job;
  await page.goto(`${base}/`);
  await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  /* A number input shows the field's default (or `value`) and its bounds: min
   * and max carry the inclusive bound, or the exclusive one where that is
   * what the schema has; integers step by 1. */
  async function expectNumber(id, path, value = S[path].default) {
    const rule = S[path];
    assert.ok(rule, `the schema describes ${path}`);
    assert.ok(await page.isVisible(`#${id}`), `#${id} is on view`);
    const got = await page.$eval(`#${id}`, (e) => ({ value: e.value, type: e.type, min: e.getAttribute('min'),
      max: e.getAttribute('max'), step: e.getAttribute('step') }));
    assert.equal(Number(got.value), value, `#${id} starts at ${value} (${path})`);
    if (got.type !== 'number') return;
    const num = (a) => (a === null ? undefined : Number(a));
    assert.equal(num(got.min), rule.minimum ?? rule.exclusiveMinimum, `#${id} min (${path})`);
    assert.equal(num(got.max), rule.maximum ?? rule.exclusiveMaximum, `#${id} max (${path})`);
    if (rule.type === 'integer') assert.equal(got.step, '1', `#${id} takes whole numbers (${path})`);
  }
  const options = (id) => page.$$eval(`#${id} option`, (os) => os.map((o) => o.value));
  await expectNumber('job-epochs', 'epochs');
  await expectNumber('job-batch', 'batch_size');
  await expectNumber('job-lr', 'solver.lr');
  await expectNumber('job-momentum', 'solver.momentum');
  await expectNumber('job-weight-decay', 'solver.weight_decay');
  await expectNumber('job-warmup', 'lr_policy.warmup_epochs');
  assert.deepEqual(await options('job-precision'), S.precision.enum);
  assert.equal(await page.inputValue('#job-precision'), S.precision.default);
  assert.deepEqual(await options('job-solver'), S['solver.type'].enum);
  assert.equal(await page.inputValue('#job-solver'), S['solver.type'].default);
  assert.deepEqual(await options('job-policy'), S['lr_policy.type'].enum);
  assert.equal(await page.inputValue('#job-policy'), S['lr_policy.type'].default);
  assert.equal(Number(await page.getAttribute('#job-name', 'maxlength')), S.name.maxLength);
  await openAdvanced();
  await expectNumber('job-seed', 'seed');
  await expectNumber('job-snapshot', 'snapshot_interval');
  await expectNumber('job-clip-norm', 'solver.clip_norm');
  await expectNumber('job-label-smoothing', 'solver.label_smoothing');
  assert.equal(await page.isChecked('#job-nesterov'), S['solver.nesterov'].default);
  assert.equal(await page.isChecked('#job-decay-bias'), S['solver.decay_bias'].default);
  // LARC: none (no "larc" object, the API's default), or one of the schema's policies with its eta.
  assert.deepEqual(await options('job-larc'), ['', ...S['solver.larc.policy'].enum]);
  await page.selectOption('#job-larc', S['solver.larc.policy'].default);
  await expectNumber('job-larc-eta', 'solver.larc.eta');
  await page.selectOption('#job-larc', '');
  await page.selectOption('#job-precision', 'amp-fp16');
  assert.deepEqual(await options('job-loss-scaling'), ['', ...S.loss_scaling.enum]);
  assert.equal(await page.inputValue('#job-loss-scaling'), '', 'loss scaling left to the API (its default is null)');
  await page.selectOption('#job-precision', S.precision.default);
  // Adam's fields; the ones that go with SGD only (the schema's "solvers") leave.
  await page.selectOption('#job-solver', 'adam');
  await expectNumber('job-beta1', 'solver.beta1');
  await expectNumber('job-beta2', 'solver.beta2');
  await expectNumber('job-eps', 'solver.eps');
  for (const [id, path] of [['job-momentum', 'solver.momentum'], ['job-nesterov', 'solver.nesterov'],
    ['job-larc', 'solver.larc.policy']]) {
    assert.ok(!S[path].solvers.includes('adam'));
    assert.ok(!(await page.isVisible(`#${id}`)), `#${id} is not on view for adam`);
  }
  await page.selectOption('#job-solver', 'sgd');
  await expectNumber('job-lr', 'solver.lr');
  // Each policy's fields are the schema's for that policy, at their defaults where the API has one.
  await page.selectOption('#job-policy', 'step');
  await expectNumber('job-policy-gamma', 'lr_policy.gamma');
  assert.equal(await page.getAttribute('#job-policy-step_size', 'min'), String(S['lr_policy.step_size'].minimum));
  await page.selectOption('#job-policy', 'polynomial');
  await expectNumber('job-policy-power', 'lr_policy.power');
  await page.selectOption('#job-policy', 'cosine');
  await expectNumber('job-policy-min_lr', 'lr_policy.min_lr');
  for (const type of S['lr_policy.type'].enum) {
    await page.selectOption('#job-policy', type);
    const want = Object.entries(S).filter(([p, f]) => p.startsWith('lr_policy.') && f.policies?.includes(type))
      .map(([p]) => `job-policy-${p.slice('lr_policy.'.length)}`).sort();
    const shown = (await page.$$eval('#job-policy-fields input', (es) => es.map((e) => e.id))).sort();
    assert.deepEqual(shown, want, `the fields of the ${type} policy`);
  }
  await page.selectOption('#job-policy', S['lr_policy.type'].default);
  assert.match(await page.textContent('#job-lr-caption'), /125 per epoch/);
  await shot('form-schema');

  // Without the schema the form says so, and offers nothing to send.
  const missing = (route) => route.fulfill({ status: 404,
    json: { error: { code: 'not_found', message: 'no route for GET /api/v1/schema' } } });
  await page.route('**/api/v1/schema', missing);
  try {
    await page.reload();
    await page.waitForSelector('#job-form-schema-error:not([hidden])', { timeout: 15_000 });
    assert.match(await page.textContent('#job-form-schema-error'), /no route for GET \/api\/v1\/schema/);
    assert.ok(!(await page.isVisible('#job-form-body')), 'no form without the rules');
    assert.ok(!(await page.isVisible('#job-submit')));
    await shot('form-no-schema');
  } finally {
    await page.unroute('**/api/v1/schema', missing);
  }
  await page.click('#job-form-retry');
  await page.waitForSelector('#job-form-body:not([hidden])', { timeout: 15_000 });
  await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  assert.ok(!(await page.isVisible('#job-form-schema-error')));
  assert.equal(Number(await page.inputValue('#job-epochs')), S.epochs.default);
});

test('an error from the API shows next to the form and marks the field', async () => {
  await page.fill('#job-name', 'kept');
  await page.fill('#job-epochs', '0');
  const posts = jobPosts.length;
  await page.click('#job-submit');
  const err = page.locator('#job-error');
  await err.waitFor({ state: 'visible', timeout: 15_000 });
  assert.equal(jobPosts.length, posts + 1, 'the form sent the request');
  assert.match(await err.textContent(), /^epochs must be/, 'the API\'s message is shown');
  assert.equal(await page.getAttribute('#job-epochs', 'aria-invalid'), 'true', 'the field it names is marked');
  assert.equal(new URL(page.url()).hash, '', 'no navigation on an error');
  assert.equal(await page.inputValue('#job-epochs'), '0', 'nothing lost from the form');
  assert.equal(await page.inputValue('#job-name'), 'kept', 'nothing lost from the form');
  await shot('form-error');
  // A field in the Advanced section, closed again before sending: it opens on the error.
  await page.fill('#job-epochs', '1');
  assert.equal(await page.getAttribute('#job-epochs', 'aria-invalid'), null, 'typing clears the mark');
  await openAdvanced();
  await page.fill('#job-snapshot', '0');
  await page.click('#job-advanced summary');
  assert.ok(!(await page.isVisible('#job-snapshot')));
  await page.click('#job-submit');
  await page.waitForSelector('#job-snapshot[aria-invalid="true"]', { timeout: 15_000 });
  assert.match(await err.textContent(), /^snapshot_interval/);
  assert.ok(await page.isVisible('#job-snapshot'), 'Advanced opened to show the field');
  // A value that is not a number is refused in the page, nothing sent.
  await page.fill('#job-snapshot', '1');
  await page.fill('#job-weight-decay', '');
  await page.fill('#job-lr', '');
  const before = jobPosts.length;
  await page.click('#job-submit');
  await page.waitForSelector('#job-lr[aria-invalid="true"]', { timeout: 5_000 });
  assert.match(await err.textContent(), /Learning rate/);
  assert.equal(jobPosts.length, before, 'nothing sent');
  await page.fill('#job-lr', '0.01');
  await page.fill('#job-weight-decay', '0');
  await page.fill('#job-name', '');
});

test('the model summary of the chosen network shows under the form', async () => {
  await page.selectOption('#job-network', 'lenet');
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-params', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-summary-params'), '431,080');
  const text = await page.textContent('#job-summary');
  assert.match(text, /1×28×28, 10 classes/, 'summarised for the chosen dataset');
  assert.match(await page.textContent('#job-summary-flops'), /^4\.62 M per image$/);
  assert.match(await page.textContent('#job-summary-memory'), /MiB at batch 64, fp32, sgd/);
  assert.match(text, /20 filters is not a multiple of 8/);
  assert.match(text, /cpu 0 .*fits/);
  // The per-layer table is collapsed until asked for.
  assert.ok(!(await page.isVisible('#job-summary .summary-layers tbody')), 'layers collapsed');
  await page.click('#job-summary .summary-layers summary');
  assert.equal(await page.locator('#job-summary .summary-layers tbody tr').count(), 8);
  assert.match(await page.textContent('#job-summary .summary-layers tbody tr:first-child'), /conv1.*20×24×24.*520/);
  await shot('form-summary');
  // The summary follows the batch size and the solver: Adam keeps two states a parameter.
  const memory = await page.textContent('#job-summary-memory');
  await page.fill('#job-batch', '128');
  await page.waitForFunction(() => /at batch 128/.test(document.querySelector('#job-summary-memory')?.textContent || ''),
    null, { timeout: 15_000 });
  assert.notEqual(await page.textContent('#job-summary-memory'), memory);
  await page.selectOption('#job-solver', 'adam');
  await page.waitForFunction(() => /, adam/.test(document.querySelector('#job-summary-memory')?.textContent || ''),
    null, { timeout: 15_000 });
  await page.selectOption('#job-solver', 'sgd');
  await page.fill('#job-batch', '64');
});

test('a custom spec that is not JSON is refused in the page, nothing sent', async () => {
  await page.selectOption('#job-network', '__custom__');
  assert.ok(await page.isVisible('#job-spec'));
  await page.fill('#job-spec', '{"layers": [');
  await page.click('#job-submit');
  const err = page.locator('#job-spec-error');
  await err.waitFor({ state: 'visible', timeout: 5_000 });
  assert.match(await err.textContent(), /not valid JSON/);
  assert.equal(new URL(page.url()).hash, '', 'no navigation');
  // a valid spec summarises, and a bad layer comes back from the API naming it
  await page.fill('#job-spec', JSON.stringify({ layers: [
    { type: 'conv2d', name: 'c1', filters: 8, kernel: 3 }, { type: 'flatten' },
    { type: 'dense', name: 'out', units: 'classes' }] }));
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-params', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-summary-params'), String(8 * 9 + 8 + 8 * 26 * 26 * 10 + 10).replace(/\B(?=(\d{3})+$)/g, ','));
  await page.fill('#job-spec', JSON.stringify({ layers: [{ type: 'conv2d', name: 'big', filters: 8, kernel: 40 }] }));
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-error', { timeout: 15_000 });
  assert.match(await page.textContent('#job-summary-error'), /"big"/);
  await shot('form-custom');
  // A built-in's spec copied for editing summarises as the built-in does.
  await page.selectOption('#job-network', 'lenet');
  assert.ok(!(await page.isVisible('#job-spec')), 'no spec box for a built-in');
  await page.click('#job-network-copy');
  assert.equal(await page.inputValue('#job-network'), '__custom__');
  const copy = JSON.parse(await page.inputValue('#job-spec'));
  assert.equal(copy.layers.length, 8);
  assert.equal(copy.input, undefined, 'the copy takes the dataset\'s input shape');
  await page.click('#job-summary-button');
  await page.waitForSelector('#job-summary-params', { timeout: 15_000 });
  assert.equal(await page.textContent('#job-summary-params'), '431,080');
  await page.selectOption('#job-network', 'lenet');
});

async function openAdvanced() {
  if ((await page.getAttribute('#job-advanced', 'open')) === null) await page.click('#job-advanced summary');
}

/* Submits the form; resolves to {body: what the page sent, job: GET /jobs/{id}},
 * then cancels the job and reloads the home view for the next test. */
async function submitAndFetch() {
  const posts = jobPosts.length;
  await page.click('#job-submit');
  await page.waitForFunction(() => /^#\/jobs\/\d+$/.test(location.hash), null, { timeout: 15_000 });
  const id = Number(new URL(page.url()).hash.split('/').pop());
  try {
    assert.equal(jobPosts.length, posts + 1, 'one request');
    const job = await (await fetch(`${base}/api/v1/jobs/${id}`)).json();
    return { body: jobPosts[posts], job };
  } finally {
    // the job out of the way of the next test, and the home view again
    await fetch(`${base}/api/v1/jobs/${id}/cancel`, { method: 'POST' });
    await page.goto(`${base}/`);
    await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  }
}

test('an Adam job with a cosine policy and warm-up: a minimal request, the config stored', { timeout: 120_000 }, async () => {
  await page.selectOption('#job-dataset', String(datasetId));
  await page.selectOption('#job-network', 'lenet');
  await page.fill('#job-epochs', '1');
  await page.fill('#job-batch', '64');
  await page.selectOption('#job-solver', 'adam');
  assert.equal(await page.inputValue('#job-lr'), '0.001', 'Adam\'s usual rate replaces SGD\'s');
  assert.ok(!(await page.isVisible('#job-momentum')), 'no momentum for Adam');
  await page.fill('#job-weight-decay', '0.0001');
  await page.selectOption('#job-policy', 'cosine');
  await page.fill('#job-policy-min_lr', '0.00001');
  await page.fill('#job-warmup', '1');
  // the plot of the schedule: warm-up over the first epoch's 125 steps, then the cosine down to min_lr
  await page.waitForFunction(() => /warm-up 125 steps/.test(document.querySelector('#job-lr-caption')?.textContent || ''),
    null, { timeout: 5_000 });
  assert.equal(await page.locator('#job-lr-plot polyline').count(), 1);
  await openAdvanced();
  assert.ok(await page.isVisible('#job-beta1'), 'Adam\'s betas under Advanced');
  assert.ok(!(await page.isVisible('#job-larc')), 'no LARC for Adam');
  assert.ok(!(await page.isVisible('#job-loss-scaling')), 'no loss scaling in FP32');
  await page.fill('#job-label-smoothing', '0.1');
  await page.fill('#job-seed', '7');
  await page.fill('#job-name', 'adam from the form');
  assert.match(await page.textContent('#job-advanced-count'), /2 changed/);
  await shot('form-advanced');
  const { body, job } = await submitAndFetch();
  // Only what the user set: no momentum, no betas or eps left at their defaults.
  assert.deepEqual(body, {
    dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64,
    solver: { type: 'adam', lr: 0.001, weight_decay: 0.0001, label_smoothing: 0.1 },
    lr_policy: { type: 'cosine', min_lr: 0.00001, warmup_epochs: 1 },
    seed: 7, name: 'adam from the form',
  });
  const cfg = job.config;
  assert.equal(cfg.solver.type, 'adam', JSON.stringify(job));
  assert.equal(cfg.solver.lr, 0.001);
  assert.equal(cfg.solver.weight_decay, 0.0001);
  assert.equal(cfg.solver.label_smoothing, 0.1);
  assert.equal(cfg.solver.momentum, undefined);
  assert.equal(cfg.lr_policy.type, 'cosine');
  assert.equal(cfg.lr_policy.min_lr, 0.00001);
  assert.equal(cfg.lr_policy.warmup_steps, 125, 'one warm-up epoch of 8,000 / 64 steps');
  assert.equal(cfg.epochs, 1);
  assert.equal(cfg.seed, 7);
  assert.equal(cfg.name, 'adam from the form');
});

test('an SGD job with Nesterov, LARC, clipping, a step policy and FP16', { timeout: 120_000 }, async () => {
  await page.selectOption('#job-dataset', String(datasetId));
  await page.selectOption('#job-network', 'lenet');
  await page.fill('#job-epochs', '1');
  await page.fill('#job-lr', '0.05');
  await page.fill('#job-momentum', '0.95');
  await page.selectOption('#job-policy', 'step');
  await page.fill('#job-policy-step_size', '50');
  await page.fill('#job-policy-gamma', '0.5');
  await page.selectOption('#job-precision', 'amp-fp16');
  await openAdvanced();
  await page.check('#job-nesterov');
  await page.check('#job-decay-bias');
  await page.fill('#job-clip-norm', '5');
  assert.ok(!(await page.isVisible('#job-larc-eta')), 'no eta without LARC');
  await page.selectOption('#job-larc', 'scale');
  await page.fill('#job-larc-eta', '0.002');
  assert.ok(await page.isVisible('#job-loss-scaling'), 'loss scaling for mixed precision');
  await page.selectOption('#job-loss-scaling', 'off');
  await shot('form-sgd');
  const { body, job } = await submitAndFetch();
  assert.deepEqual(body, {
    dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64,
    precision: 'amp-fp16', loss_scaling: 'off',
    solver: { type: 'sgd', lr: 0.05, momentum: 0.95, nesterov: true, decay_bias: true, clip_norm: 5,
      larc: { policy: 'scale', eta: 0.002 } },
    lr_policy: { type: 'step', step_size: 50, gamma: 0.5 },
  });
  const cfg = job.config;
  assert.deepEqual(cfg.solver, { type: 'sgd', lr: 0.05, momentum: 0.95, nesterov: true, weight_decay: 0,
    decay_bias: true, clip_norm: 5, label_smoothing: 0, larc: { policy: 'scale', eta: 0.002 } }, JSON.stringify(job));
  assert.deepEqual(cfg.lr_policy, { type: 'step', step_size: 50, gamma: 0.5, warmup_steps: 0 });
  assert.equal(cfg.precision, 'amp-fp16');
  assert.equal(cfg.loss_scaling, 'off');
});

test('a GPU listed by /info can be chosen; the API\'s refusal shows at the device', { timeout: 60_000 }, async () => {
  // /info as on a machine with GPUs 6 and 7, which no machine here has: the server answers 422.
  const info = await (await fetch(`${base}/api/v1/info`)).json();
  const fake = { ...info, devices: [...info.devices,
    { kind: 'cuda', index: 6, name: 'Test GPU', memory_bytes: 80e9, memory_free_bytes: 60e9, compute_capability: '9.0' },
    { kind: 'cuda', index: 7, name: 'Test GPU', memory_bytes: 80e9, memory_free_bytes: null, compute_capability: '9.0' }] };
  const handler = (route) => route.fulfill({ json: fake });
  await page.route('**/api/v1/info', handler);
  try {
    await page.goto(`${base}/`);
    await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
    await page.waitForSelector('#job-device option[value="7"]', { state: 'attached', timeout: 15_000 });
    assert.ok(await page.isVisible('#job-device'));
    assert.equal(await page.textContent('#job-device option[value="7"]'), 'GPU 7: Test GPU · 75 GiB');
    assert.equal(await page.textContent('#job-device option[value="6"]'), 'GPU 6: Test GPU · 75 GiB, 56 GiB free');
    await page.fill('#job-epochs', '1');
    await page.selectOption('#job-device', '7');
    await page.click('#job-submit');
    await page.waitForSelector('#job-device[aria-invalid="true"]', { timeout: 15_000 });
    assert.deepEqual(jobPosts.at(-1).devices, [7]);
    assert.match(await page.textContent('#job-error'), /GPU/);
    await shot('form-device');
    // Choosing again clears the mark.
    await page.selectOption('#job-device', 'cpu');
    assert.equal(await page.getAttribute('#job-device', 'aria-invalid'), null);
    // Both GPUs, data parallel: "devices": 2.
    assert.equal(await page.textContent('#job-device option[value="n2"]'), 'all 2 GPUs (data parallel)');
    await page.selectOption('#job-device', 'n2');
    await page.click('#job-submit');
    await page.waitForSelector('#job-device[aria-invalid="true"]', { timeout: 15_000 });
    assert.equal(jobPosts.at(-1).devices, 2);
    assert.match(await page.textContent('#job-error'), /GPU/);
    await shot('form-device-2');
    await page.selectOption('#job-device', 'cpu');
  } finally {
    await page.unroute('**/api/v1/info', handler);
    await page.goto(`${base}/`);
    await page.waitForSelector(`#job-dataset option[value="${datasetId}"]`, { state: 'attached', timeout: 15_000 });
  }
});

test('start LeNet from the form; the job page draws curves live and reaches done', { timeout: 1_100_000 }, async () => {
  await page.selectOption('#job-dataset', String(datasetId));
  await page.selectOption('#job-network', 'lenet');
  await page.fill('#job-epochs', '1');
  await page.fill('#job-batch', '64');
  await page.fill('#job-lr', '0.01');
  await page.fill('#job-momentum', '0.9');
  await page.click('#job-submit');
  await page.waitForURL(/#\/jobs\/\d+$/, { timeout: 15_000 });
  jobId = Number(/#\/jobs\/(\d+)$/.exec(page.url())[1]);
  assert.ok(jobId > 0);

  // Points arrive while the job runs (train/loss about 20 times an epoch).
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) >= 2,
    null, { timeout: 600_000, polling: 250 });
  const midStatus = await page.getAttribute('main', 'data-status');
  await shot('job-running');

  await page.waitForSelector('main[data-status="done"]', { timeout: 900_000 });
  assert.equal((await page.textContent('#job-status')).trim(), 'done');
  // The job's settings, devices included (this machine: the CPU).
  assert.match(await page.textContent('#job-config'), /Devices(CPU|any free GPU)/);
  // The final val/accuracy point reaches the accuracy chart.
  await page.waitForFunction(() => window.kilnCharts?.accuracy?.countOf('val/accuracy') >= 1,
    null, { timeout: 30_000 });
  const counts = await page.evaluate(() => ({
    trainLoss: window.kilnCharts.loss.countOf('train/loss'),
    valLoss: window.kilnCharts.loss.countOf('val/loss'),
    trainAcc: window.kilnCharts.accuracy.countOf('train/accuracy'),
    valAcc: window.kilnCharts.accuracy.countOf('val/accuracy'),
    drawn: window.kilnCharts.loss.data()[1].filter((v) => v !== null).length,
    canvases: document.querySelectorAll('#chart-loss canvas, #chart-accuracy canvas').length,
  }));
  assert.ok(counts.trainLoss >= 5, `train/loss points: ${counts.trainLoss}`);
  assert.equal(counts.drawn, counts.trainLoss, 'uPlot holds every train/loss point');
  assert.ok(counts.valLoss >= 1 && counts.trainAcc >= 5 && counts.valAcc >= 1, JSON.stringify(counts));
  assert.equal(counts.canvases, 2, 'two uPlot canvases');

  assert.equal(await page.getAttribute('#job-progress', 'aria-valuenow'), '100');
  assert.match(await page.textContent('#stat-epoch'), /1\s*\/\s*1/);
  assert.match(await page.textContent('#stat-valacc'), /\d+\.\d+%/);
  const dl = page.locator('#job-download');
  assert.ok(await dl.isVisible(), 'the download link shows once done');
  assert.equal(await dl.evaluate((a) => a.href), `${base}/api/v1/jobs/${jobId}/model?format=tar`);
  assert.ok(!(await page.locator('#job-cancel').isVisible()), 'no cancel button on a finished job');
  // The worker's log (GET /jobs/{id}/log) shows under the charts.
  await page.waitForFunction(() => (document.querySelector('#job-log')?.textContent || '').trim().length > 0,
    null, { timeout: 15_000 });
  await shot('job-done');

  // The download link serves the model tar.
  const res = await page.request.get(`${base}/api/v1/jobs/${jobId}/model?format=tar`);
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'] || '', /x-tar/);

  // Back on the list, the job shows done with its val accuracy.
  await page.click('nav.crumbs a');
  const jobRow = page.locator(`#jobs-table tr[data-job-id="${jobId}"]`);
  await jobRow.waitFor({ timeout: 15_000 });
  await page.waitForFunction((id) => /done/.test(document.querySelector(`#jobs-table tr[data-job-id="${id}"]`)?.textContent || ''),
    jobId, { timeout: 15_000 });
  assert.match(await jobRow.textContent(), /\d+\.\d+%/);
  await shot('home-after');
  assert.ok(['queued', 'running', 'done'].includes(midStatus), `status while drawing: ${midStatus}`);
});

test('a reloaded job page replays the finished job from the API', async () => {
  assert.ok(jobId, 'needs the finished job');
  await page.goto(`${base}/#/jobs/${jobId}`);
  await page.reload();
  await page.waitForSelector('main[data-status]', { timeout: 15_000 });
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points) >= 2,
    null, { timeout: 30_000 });
  await page.goto(`${base}/#/jobs/987654`);
  await page.waitForSelector('#job-error:not([hidden])', { timeout: 15_000 });
  assert.match(await page.textContent('#job-error'), /no job 987654/i);
});

test('upload a dataset with options from the form: size, channels and split as asked', { timeout: 300_000 }, async () => {
  const schema = (await (await fetch(`${base}/api/v1/schema`)).json()).dataset;
  const work = path.join(tmp.dir, 'upload-form');
  mkdirSync(work, { recursive: true });
  const archive = await makeDigitArchive(work, 10);
  await page.goto(`${base}/#/`);
  await page.waitForSelector('#upload-form');
  await page.click('#upload-options > summary');
  // the options' defaults and bounds are the server's (GET /api/v1/schema "dataset")
  await page.waitForFunction(() => document.querySelectorAll('#upload-channels option').length > 1);
  assert.equal(await page.inputValue('#upload-val-percent'), String(schema.val_percent.default));
  assert.equal(await page.getAttribute('#upload-width', 'max'), String(schema.width.maximum));
  assert.equal(await page.getAttribute('#upload-val-percent', 'max'), String(schema.val_percent.maximum));
  assert.deepEqual(await page.$$eval('#upload-channels option', (os) => os.map((o) => o.value)),
    ['', ...schema.channels.enum.map(String)]);
  await page.fill('#upload-name', 'digits-14');
  await page.setInputFiles('#upload-file', archive);
  await page.fill('#upload-width', '14');
  await page.fill('#upload-height', '14');
  await page.selectOption('#upload-channels', '3');
  await page.fill('#upload-val-percent', '10');
  await page.screenshot({ path: path.join(OUT, 'upload-options.png'), fullPage: true });
  await page.click('#upload-form button[type=submit]');
  await page.waitForFunction(() => /Uploaded/.test(document.querySelector('#upload-form .form-note')?.textContent || ''),
    null, { timeout: 60_000 });
  const list = await (await fetch(`${base}/api/v1/datasets`)).json();
  const made = list.items.find((d) => d.name === 'digits-14');
  assert.ok(made, 'the dataset is listed');
  const ds = await waitDataset(base, made.id);
  assert.equal(ds.status, 'ready', ds.error);
  assert.deepEqual(ds.shape, [3, 14, 14]);
  assert.equal(ds.counts.val, 10, '10% of each class of 10');
  assert.equal(ds.counts.train, 90);

  // its page, from the home page's link: the facts, the import report and the images per class
  await page.goto(`${base}/#/`);
  await page.click(`a.dataset-link[href="#/datasets/${made.id}"]`);
  await page.waitForSelector('#class-histogram');
  assert.match(await page.textContent('#dataset-facts'), /3 × 14 × 14|3×14×14/);
  assert.match(await page.textContent('#dataset-subtitle'), /^Dataset #\d+ · created \w{3} \d+, \d\d:\d\d$/);
  assert.match(await page.textContent('#report-counts'), /images read\s*100/);
  assert.match(await page.textContent('#report-problems'), /every file was read/);
  const rows = await page.$$eval('#class-histogram tbody tr', (trs) => trs.map((tr) =>
    [...tr.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent)));
  assert.equal(rows.length, 10);
  for (const [cls, train, val] of rows) assert.deepEqual([train, val], ['9', '1'], `class ${cls}`);
  await page.screenshot({ path: path.join(OUT, 'dataset-page.png'), fullPage: true });
});

/* Sets the upload form's option `name` (an input or a select, found by its
 * name attribute as the form builds them from GET /api/v1/schema). */
async function setUploadOption(name, value) {
  const sel = `#upload-form :is([name="${name}"], #upload-${name.replace(/_/g, '-')})`;
  const el = page.locator(sel).first();
  await el.waitFor({ state: 'attached', timeout: 15_000 });
  if (await el.evaluate((e) => e.tagName === 'SELECT')) await el.selectOption(String(value));
  else await el.fill(String(value));
}

/* Waits until every image matched by sel has finished loading; resolves to
 * [{w, h, ok}] (naturalWidth, naturalHeight, and whether it loaded). */
async function loadedImages(sel, atLeast = 1) {
  await page.waitForFunction(({ s, n }) => {
    const imgs = [...document.querySelectorAll(s)];
    return imgs.length >= n && imgs.every((i) => i.complete);
  }, { s: sel, n: atLeast }, { timeout: 30_000 });
  return page.$$eval(sel, (imgs) => imgs.map((i) => ({ w: i.naturalWidth, h: i.naturalHeight, ok: i.complete && i.naturalWidth > 0,
    src: i.getAttribute('src') })));
}

test('a dataset made from the form with other options: its page shows samples, the histogram, the mean and the report', { timeout: 300_000 }, async () => {
  const work = path.join(tmp.dir, 'explorer-form');
  mkdirSync(work, { recursive: true });
  const archive = await makeDigitArchive(work, 10);
  await page.goto(`${base}/#/`);
  await page.waitForSelector('#upload-form');
  // the option fields come from GET /api/v1/schema: once they are there, unfold them
  await page.locator('#upload-form :is([name="width"], #upload-width)').first().waitFor({ state: 'attached', timeout: 15_000 });
  await page.$$eval('#upload-form details', (ds) => ds.forEach((d) => { d.open = true; }));
  await page.fill('#upload-name', 'digits-grey-20');
  await page.setInputFiles('#upload-file', archive);
  await setUploadOption('width', 20);
  await setUploadOption('height', 20);
  await setUploadOption('channels', 1);
  await setUploadOption('val_percent', 30);
  await page.click('#upload-form button[type=submit]');
  await page.waitForFunction(() => /Uploaded/.test(document.querySelector('#upload-form .form-note')?.textContent || ''),
    null, { timeout: 60_000 });
  const list = await (await fetch(`${base}/api/v1/datasets`)).json();
  const made = list.items.find((d) => d.name === 'digits-grey-20');
  assert.ok(made, 'the dataset is listed');
  const ds = await waitDataset(base, made.id);
  assert.equal(ds.status, 'ready', ds.error);
  assert.deepEqual(ds.shape, [1, 20, 20], 'the size and channels asked for');
  assert.equal(ds.counts.val, 30, '30% of each class of 10');
  assert.equal(ds.counts.train, 70);

  // its page, from the home page's link
  await page.goto(`${base}/#/`);
  await page.click(`a.dataset-link[href="#/datasets/${made.id}"]`);
  await page.waitForSelector('main[data-explored="true"]', { timeout: 30_000 });
  assert.match(await page.textContent('#dataset-facts'), /1×20×20/);

  // the samples: per class a row, captioned with its name, of training images that loaded at 20x20
  const classes = await page.$$eval('#samples-grid .sample-class', (rows) => rows.map((r) => ({
    name: r.dataset.class, caption: r.querySelector('.sample-caption').textContent, images: r.querySelectorAll('img.sample').length })));
  assert.deepEqual(classes.map((c) => c.name), ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  for (const c of classes) {
    assert.match(c.caption, new RegExp(`^${c.name}\\s+7 train$`), `caption of class ${c.name}`);
    assert.equal(c.images, 7, `class ${c.name} shows its 7 training images`);
  }
  const train = await loadedImages('#samples-grid img.sample', 70);
  for (const im of train) {
    assert.ok(im.ok, `${im.src} loaded`);
    assert.deepEqual([im.w, im.h], [20, 20], `${im.src} is the dataset's 20x20`);
    assert.match(im.src, /split=train/);
  }
  assert.equal(await page.$$eval('#samples-grid img.broken', (l) => l.length), 0);
  // grey digits: bright strokes on black, so no sample is blank
  const lit = await page.$$eval('#samples-grid img.sample', (imgs) => imgs.map((img) => {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let max = 0;
    for (let i = 0; i < d.length; i += 4) max = Math.max(max, d[i]);
    return max;
  }));
  assert.ok(lit.every((m) => m > 128), `every sample has bright pixels: ${lit.join(' ')}`);

  // the split chooser: the validation images
  assert.deepEqual(await page.$$eval('#samples-split button', (bs) => bs.map((b) => b.dataset.split)), ['train', 'val']);
  await page.click('#samples-split button[data-split="val"]');
  await page.waitForSelector('#samples-grid[data-split="val"]');
  const val = await loadedImages('#samples-grid img.sample', 30);
  assert.equal(val.length, 30);
  for (const im of val) {
    assert.ok(im.ok && im.w === 20 && im.h === 20, `${im.src} loaded at 20x20`);
    assert.match(im.src, /split=val/);
  }
  await page.click('#samples-split button[data-split="train"]');
  await page.waitForSelector('#samples-grid[data-split="train"]');

  // the histogram: a uPlot bar chart of 10 classes, one series per split, drawn
  await page.waitForSelector('#class-chart .uplot canvas');
  const chart = await page.evaluate(() => {
    const cv = document.querySelector('#class-chart canvas');
    const box = document.querySelector('#class-chart');
    const g = cv.getContext('2d');
    const d = g.getImageData(0, 0, cv.width, cv.height).data;
    let inked = 0;
    for (let i = 3; i < d.length; i += 4) inked += d[i] > 0;
    return { w: cv.width, h: cv.height, inked, series: window.kilnCharts['class-histogram'].series(),
      dsSeries: box.dataset.series, categories: box.dataset.categories,
      legend: [...box.querySelectorAll('.u-legend .u-series .u-label')].map((e) => e.textContent) };
  });
  assert.ok(chart.w > 200 && chart.h > 100, `canvas ${chart.w}x${chart.h}`);
  assert.ok(chart.inked > 1000, `bars drawn (${chart.inked} pixels)`);
  assert.equal(chart.series, 2);
  assert.equal(chart.dsSeries, '2');
  assert.equal(chart.categories, '10');
  assert.deepEqual(chart.legend.slice(1), ['train', 'val']);
  const rows = await page.$$eval('#class-histogram tbody tr', (trs) => trs.map((tr) =>
    [...tr.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent)));
  assert.equal(rows.length, 10);
  for (const [cls, t, v] of rows) assert.deepEqual([t, v], ['7', '3'], `class ${cls}`);

  // the mean image: loaded at the dataset's size, not blank
  const [meanImg] = await loadedImages('#mean-image');
  assert.ok(meanImg.ok, 'the mean image loaded');
  assert.deepEqual([meanImg.w, meanImg.h], [20, 20]);
  assert.match(await page.textContent('#mean-note'), /70 training images, 20×20, grey/);

  // the import report
  assert.match(await page.textContent('#report-counts'), /images read\s*100/);
  assert.match(await page.textContent('#report-problems'), /every file was read/);
  await page.screenshot({ path: path.join(OUT, 'dataset-explorer.png'), fullPage: true });
});

test('the page made no request off the machine and logged no error', () => {
  assert.deepEqual(problems, []);
});
