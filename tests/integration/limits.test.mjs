// One rule, one place (jobs/jobcfg.c): a job field's limit is the same from
// the API, from `kiln train` and from a hand-edited job.json that `kiln worker`
// reads, and it is the one GET /api/v1/schema publishes. Real binaries, a real
// server, the npm digits as the dataset.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { api, describeResponse, runKiln, startDemoServer } from './lib/kiln.mjs';

let demo;
let tmp;
let server;
let datasetId;

before(async () => {
  demo = await startDemoServer('kiln-limits-');
  ({ tmp, server, datasetId } = demo);
});

after(async () => {
  if (demo) await demo.stop();
});

/* A resolved job.json as the server writes it: a real job's stored config,
 * the job itself cancelled at once. */
async function storedConfig() {
  const body = { dataset_id: datasetId, network: 'lenet', epochs: 1, devices: 0 };
  const r = await api(server.url, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  await api(server.url, 'POST', `/api/v1/jobs/${r.body.id}/cancel`);
  return { config: r.body.config, datasetDir: r.body.config.dataset_dir };
}

/* The error line a worker reports for job.json cfg. */
async function workerError(cfg, name) {
  const dir = path.join(tmp.dir, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'job.json'), JSON.stringify(cfg, null, 2));
  const w = await runKiln(['worker', '--job-dir', dir]);
  assert.equal(w.code, 1, `kiln worker: ${w.stdout}\n${w.stderr}`);
  const last = JSON.parse(w.stdout.trim().split('\n').pop());
  assert.equal(last.t, 'error');
  return last.message;
}

const CASES = [
  // field in the API's request, its value, kiln train's flag, the path in job.json
  { field: 'batch_size', value: 5000, flag: ['--batch', '5000'], set: (c, v) => { c.batch_size = v; } },
  { field: 'epochs', value: 10001, flag: ['--epochs', '10001'], set: (c, v) => { c.epochs = v; } },
  { field: 'solver.lr', value: 11, flag: ['--lr', '11'], solver: true, set: (c, v) => { c.solver.lr = v; } },
];

test('the same limit, the same message: API, kiln train, kiln worker on job.json, schema', async () => {
  const schema = (await api(server.url, 'GET', '/api/v1/schema')).body.job;
  const { config, datasetDir } = await storedConfig();
  for (const c of CASES) {
    const rule = schema[c.field];
    assert.ok(rule, `the schema has ${c.field}`);
    const body = { dataset_id: datasetId, network: 'lenet' };
    if (c.solver) body.solver = { [c.field.split('.')[1]]: c.value };
    else body[c.field] = c.value;
    const r = await api(server.url, 'POST', '/api/v1/jobs', body);
    assert.equal(r.status, 400, describeResponse('POST', '/api/v1/jobs', r));
    assert.equal(r.body.error.code, 'invalid_field');
    const msg = r.body.error.message;
    assert.ok(msg.startsWith(c.field), msg);
    assert.ok(msg.includes(String(rule.maximum)), `${msg} states the schema's maximum ${rule.maximum}`);

    const t = await runKiln(['train', '--dataset', datasetDir, '--network', 'lenet', ...c.flag,
      '--out', path.join(tmp.dir, `train-${c.field}`)]);
    assert.equal(t.code, 2, `kiln train ${c.flag.join(' ')}: ${t.stderr}`);
    assert.ok(t.stderr.includes(msg), `kiln train says "${t.stderr.trim()}", the API "${msg}"`);

    const edited = structuredClone(config);
    c.set(edited, c.value);
    const w = await workerError(edited, `job-${c.field}`);
    assert.ok(w.endsWith(msg), `kiln worker says "${w}", the API "${msg}"`);
  }
});

test('a job.json naming its devices as a string to parse is refused by the worker', async () => {
  const { config } = await storedConfig();
  const edited = { ...config, backend: 'cpu:0,1' };
  assert.match(await workerError(edited, 'job-backend'), /backend must be "cpu" or "cuda"/);
});
