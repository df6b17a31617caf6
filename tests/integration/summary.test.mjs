// The model summary, through the API (POST /api/v1/networks/summary) and the
// CLI (`kiln summary`): the figures of LeNet and VGG-16 worked out by hand in
// tests/unit/test_engine_summary.c, the defaults, and the errors.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, api, describeResponse, runKiln, startServer, tempDir } from './lib/kiln.mjs';

const VGG16 = JSON.parse(readFileSync(path.join(ROOT, 'tests', 'unit', 'data', 'vgg16.json'), 'utf8'));
const P = '/api/v1/networks/summary';

let tmp;
let server;

before(async () => {
  tmp = tempDir('kiln-summary-');
  server = await startServer({ dataDir: path.join(tmp.dir, 'data') });
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function summarize(body) {
  const r = await api(server.url, 'POST', P, body);
  assert.equal(r.status, 200, describeResponse('POST', P, r));
  return r.body;
}

async function refused(body, status, code) {
  const r = await api(server.url, 'POST', P, body);
  const what = describeResponse('POST', P, r);
  assert.equal(r.status, status, what);
  assert.equal(r.body?.error?.code, code, what);
  return r.body.error.message;
}

test('lenet with the defaults: 1x28x28, 10 classes, batch 64, sgd with momentum', async () => {
  const s = await summarize({ network: 'lenet' });
  assert.deepEqual(s.input, [1, 28, 28]);
  assert.equal(s.classes, 10);
  assert.equal(s.params, 431080);
  assert.equal(s.macs, 2293000);
  assert.equal(s.flops, 4616450);
  assert.equal(s.layers.length, 8);
  const conv2 = s.layers.find((l) => l.name === 'conv2');
  assert.deepEqual(conv2.output_shape, [50, 8, 8]);
  assert.equal(conv2.params, 25050);
  assert.equal(conv2.activation_bytes, 12800);
  const m = s.training_memory;
  assert.equal(m.batch_size, 64);
  assert.equal(m.optimizer_states_per_param, 1);
  // per image: the input (3,136 bytes) and 19,410 outputs with their gradients (8 bytes each)
  assert.equal(m.per_image_bytes, 3136 + 19410 * 8);
  assert.equal(m.total_bytes, 431080 * 12 + 64 * (3136 + 19410 * 8));
  assert.equal(m.precision, 'fp32');
  assert.equal(m.devices[0].kind, 'cpu');
  assert.ok(m.devices[0].fits && m.devices[0].max_batch > 64, JSON.stringify(m.devices));
  // conv1's and conv2's filters, conv2's 20 input channels, fc1's and fc2's units
  assert.equal(s.warnings.length, 5, JSON.stringify(s.warnings));
  assert.ok(s.warnings.some((w) => w.includes('"conv1"): 20 filters')), JSON.stringify(s.warnings));
  assert.ok(s.warnings.includes('layer 3 (conv2d "conv2"): 20 input channels is not a multiple of 8'),
    JSON.stringify(s.warnings));
});

test('devices: the CPU (and any GPU) with its memory, whether the estimate fits, the largest batch', async () => {
  for (const precision of ['fp32', 'amp-bf16', 'amp-fp16']) {
    const s = await summarize({ network: 'resnet18', batch_size: 128, precision });
    const m = s.training_memory;
    assert.equal(m.precision, precision);
    const fixed = m.total_bytes - m.batch_size * m.per_image_bytes;
    assert.equal(fixed, m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.weight_copies_bytes);
    assert.ok(m.devices.length >= 1);
    assert.equal(m.devices[0].kind, 'cpu');
    for (const d of m.devices) {
      const what = JSON.stringify(d);
      assert.ok(['cpu', 'cuda'].includes(d.kind), what);
      assert.equal(typeof d.name, 'string', what);
      assert.ok(d.name.length > 0, what);
      assert.ok(Number.isInteger(d.memory_bytes) && d.memory_bytes > 0, what);
      assert.equal(d.fits, m.total_bytes <= d.memory_bytes, what);
      assert.ok(Number.isInteger(d.max_batch) && d.max_batch >= 0, what);
      // memory is linear in the batch: max_batch fits, one more does not
      if (d.max_batch > 0) assert.ok(fixed + d.max_batch * m.per_image_bytes <= d.memory_bytes, what);
      assert.ok(fixed + (d.max_batch + 1) * m.per_image_bytes > d.memory_bytes, what);
      assert.equal(d.fits, d.max_batch >= m.batch_size, what);
    }
  }
});

test('vgg16 as a spec: 138,357,544 parameters and 15.47 G multiply-adds', async () => {
  const s = await summarize({ network: VGG16, classes: 1000, batch_size: 128, solver: 'adam' });
  assert.deepEqual(s.input, [3, 224, 224]);
  assert.equal(s.params, 138357544);
  assert.equal(s.macs, 15470264320);
  assert.equal(s.flops, 30973770728);
  const m = s.training_memory;
  assert.equal(m.optimizer_states_per_param, 2);
  assert.equal(m.weights_bytes, 4 * 138357544);
  assert.equal(m.optimizer_bytes, 2 * 4 * 138357544);
  // outputs and their gradients: twice what is kept, less the input counted once
  const input = 4 * 3 * 224 * 224;
  assert.equal(m.per_image_bytes, 2 * s.kept_activation_bytes - input +
    4 * s.layers.filter((l) => l.type === 'dropout').reduce((a, l) => a + l.activation_bytes / 4, 0));
  assert.equal(m.activations_bytes, 128 * m.per_image_bytes);
  assert.equal(m.total_bytes, 4 * 4 * 138357544 + 128 * m.per_image_bytes);
  assert.deepEqual(s.warnings, []);
});

test('mixed precision: 16-bit activations and weight copies', async () => {
  const f = await summarize({ network: 'cifar10-cnn' });
  const h = await summarize({ network: 'cifar10-cnn', precision: 'amp-bf16' });
  assert.equal(h.training_memory.precision, 'amp-bf16');
  const conv1 = (s) => s.layers.find((l) => l.name === 'conv1').activation_bytes;
  assert.equal(conv1(h) * 2, conv1(f));
  const fc2 = (s) => s.layers.find((l) => l.name === 'fc2').activation_bytes;
  assert.equal(fc2(h), fc2(f), 'the logits stay FP32');
  assert.ok(h.training_memory.weight_copies_bytes > 0 && f.training_memory.weight_copies_bytes === 0);
  assert.ok(h.training_memory.per_image_bytes < f.training_memory.per_image_bytes);
  const a = await summarize({ network: 'cifar10-cnn', precision: 'amp-fp16' });
  assert.equal(a.training_memory.total_bytes, h.training_memory.total_bytes, 'fp16 and bf16 are both 2 bytes');
  assert.equal(f.training_memory.gradients_bytes, h.training_memory.gradients_bytes, 'FP32 gradients');
  assert.equal(f.training_memory.optimizer_bytes, h.training_memory.optimizer_bytes, 'FP32 optimizer state');
  assert.equal((await summarize({ network: 'lenet', precision: 'fp32' })).training_memory.precision, 'fp32');
  for (const precision of ['fp8', 'FP32', '', 16, null, ['amp-bf16']]) {
    const msg = await refused({ network: 'lenet', precision }, 400, 'invalid_field');
    assert.equal(msg, 'precision must be "fp32", "amp-bf16" or "amp-fp16"', `precision ${JSON.stringify(precision)}`);
  }
});

test('resnet18 for 1000 classes; a batch that is not a multiple of 8 warns', async () => {
  const s = await summarize({ network: 'resnet18', batch_size: 12, solver: { type: 'sgd', momentum: 0 } });
  assert.equal(s.params, 11689512);
  assert.equal(s.classes, 1000);
  assert.equal(s.training_memory.optimizer_bytes, 0);
  assert.ok(s.warnings.includes('batch size 12 is not a multiple of 8'), JSON.stringify(s.warnings));
});

test('bad requests: unknown fields, bad values, unknown networks, specs that do not fit', async () => {
  await refused({ network: 'lenet', epochs: 3 }, 400, 'unknown_field');
  await refused({ network: 'lenet', solver: { type: 'sgd', lr: 0.1 } }, 400, 'unknown_field');
  await refused({ input: [1, 28, 28] }, 400, 'missing_field');
  await refused({ network: 'lenet', batch_size: 0 }, 400, 'invalid_field');
  await refused({ network: 'lenet', input: [1, 28] }, 400, 'invalid_field');
  assert.match(await refused({ network: 'lenet', solver: 'rmsprop' }, 400, 'invalid_field'), /^solver must be/);
  assert.match(await refused({ network: 'lenet', batch_size: 5000 }, 400, 'invalid_field'), /^batch_size must be/);
  assert.match(await refused({ network: 42 }, 400, 'invalid_field'), /^network must be/);
  await refused({ network: 'nonesuch' }, 422, 'unknown_network');
  const msg = await refused({ network: 'lenet', input: [1, 4, 4] }, 422, 'invalid_network');
  assert.match(msg, /layer 1 \(conv2d "conv1"\)/);
  const bad = { input: [1, 8, 8], layers: [{ type: 'conv2d', name: 'c', filters: 0, kernel: 3 }] };
  assert.match(await refused({ network: bad, classes: 2 }, 422, 'invalid_network'), /"c"/);
  const r = await api(server.url, 'GET', '/api/v1/info');
  assert.equal(r.status, 200, 'the server still answers');
});

test('kiln summary: a table, --json, and errors', async () => {
  const t = await runKiln(['summary', 'lenet', '--batch', '64']);
  assert.equal(t.code, 0, t.stderr);
  assert.match(t.stdout, /parameters\s+431,080/);
  assert.match(t.stdout, /multiply-adds\s+2,293,000/);
  assert.match(t.stdout, /conv2\s+conv2d\s+50x8x8\s+25,050/);
  const file = path.join(ROOT, 'tests', 'unit', 'data', 'vgg16.json');
  const j = await runKiln(['summary', file, '--classes', '1000', '--batch', '128', '--solver', 'adamw', '--json']);
  assert.equal(j.code, 0, j.stderr);
  const s = JSON.parse(j.stdout);
  assert.equal(s.params, 138357544);
  assert.equal(s.macs, 15470264320);
  assert.equal(s.training_memory.optimizer_states_per_param, 2);
  const bad = await runKiln(['summary', 'lenet', '--input', '1,4,4']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /layer 1 \(conv2d "conv1"\)/);
  const usage = await runKiln(['summary', 'lenet', '--solver', 'rmsprop']);
  assert.equal(usage.code, 2);
  const amp = await runKiln(['summary', file, '--classes', '1000', '--batch', '100', '--precision', 'amp-bf16']);
  assert.equal(amp.code, 0, amp.stderr);
  assert.match(amp.stdout, /training memory, batch 100, sgd with momentum \(1 state per parameter\), amp-bf16:/);
  assert.match(amp.stdout, /16-bit copies\s+263\.87 MiB/);
  assert.match(amp.stdout, /a lower bound: workspaces/);
  assert.match(amp.stdout, /device\s+name\s+memory\s+fits\s+largest batch\n(cpu 0|cuda \d)/);
  assert.match(amp.stdout, /batch size 100 is not a multiple of 8/);
  const ampJson = JSON.parse((await runKiln(['summary', 'lenet', '--precision', 'amp-fp16', '--json'])).stdout);
  assert.equal(ampJson.training_memory.precision, 'amp-fp16');
  const badPrecision = await runKiln(['summary', 'lenet', '--precision', 'fp8']);
  assert.equal(badPrecision.code, 2);
  assert.match(badPrecision.stderr, /--precision: fp8/);
  const help = await runKiln(['summary', '--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /usage: kiln summary/);
  const top = await runKiln(['--help']);
  assert.match(top.stdout, /summary\s+a network's layers/);
});
