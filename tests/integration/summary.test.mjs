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
  assert.equal(s.warnings.length, 4);
  assert.ok(s.warnings.some((w) => w.includes('"conv1"): 20 filters')), JSON.stringify(s.warnings));
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
  await refused({ network: 'lenet', precision: 'fp8' }, 400, 'invalid_field');
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
  await refused({ network: 'lenet', solver: 'rmsprop' }, 400, 'invalid_field');
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
  const help = await runKiln(['summary', '--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /usage: kiln summary/);
  const top = await runKiln(['--help']);
  assert.match(top.stdout, /summary\s+a network's layers/);
});
