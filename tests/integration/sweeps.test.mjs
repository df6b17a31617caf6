// Hyper-parameter sweeps (issue 16) through the API of a real `kiln serve` on
// the demo digits with tiny networks and 1-3 epoch trials: grid (with a trial
// that diverges and fails: the sweep still finishes), random, asha (promotions
// resume a trial from its rung's checkpoint; the others are stopped by the
// sweep), bad requests naming the path, cancel, delete, and a restart in the
// middle of a sweep (the controller picks it up from the store); ownership
// as for jobs (another user's sweep and its trials' jobs are 404s).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { api, describeResponse, importDemo, runKiln, startServer, tempDir, waitFor } from './lib/kiln.mjs';

// A softmax regression: fast, and it does not diverge at a high rate.
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
// Two linear layers: at lr 10 their weights grow each other and the loss goes to NaN.
const LIN2 = { name: 'lin2', layers: [{ type: 'flatten' }, { type: 'dense', units: 16 }, { type: 'dense', units: 'classes' }] };

let tmp;
let dataDir;
let server;
let base;
let datasetId;
// cheap password hashing for the users of the last test
const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];

before(async () => {
  tmp = tempDir('kiln-sweeps-');
  dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: CHEAP });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function create(body, status = 201) {
  const r = await api(base, 'POST', '/api/v1/sweeps', body);
  assert.equal(r.status, status, describeResponse('POST', '/api/v1/sweeps', r));
  return r.body;
}

const sweepNow = async (id) => {
  const r = await api(base, 'GET', `/api/v1/sweeps/${id}`);
  assert.equal(r.status, 200, describeResponse('GET', `/api/v1/sweeps/${id}`, r));
  return r.body;
};

async function finished(id, timeoutMs = 120_000) {
  let s;
  await waitFor(async () => (s = await sweepNow(id)).status !== 'running',
    { timeoutMs, intervalMs: 300, what: `sweep ${id} to end` });
  return s;
}

/* The trials are sorted by the metric, best first, trials without one last. */
function assertSorted(s) {
  const ms = s.trials.map((t) => t.metric);
  const have = ms.filter((m) => m !== null);
  assert.deepEqual(ms.slice(0, have.length), have, 'trials with a metric come first');
  for (let i = 1; i < have.length; i++)
    assert.ok(s.mode === 'max' ? have[i - 1] >= have[i] : have[i - 1] <= have[i], `sorted: ${ms}`);
}

const baseReq = (extra = {}) => ({ dataset_id: datasetId, network: TINY, batch_size: 64, epochs: 1, ...extra });

test('bad sweeps are 400s that name the problem; nothing is made', async () => {
  const cases = [
    [{ base: baseReq(), method: 'grid', space: { 'solver.lr': { uniform: [0.01, 0.1] } } }, 'space.solver.lr: a grid takes only value lists'],
    [{ base: baseReq(), method: 'grid', space: { 'solver.lrate': { values: [0.01] } } }, 'solver.lrate'],
    [{ base: baseReq(), method: 'grid', space: { 'solver.lr': { values: [0.01, 50] } } }, '{"solver.lr":50}'],
    [{ base: baseReq(), method: 'random', space: { 'solver.lr': { log_uniform: [0, 0.1] } }, trials: 2 }, 'space.solver.lr.log_uniform'],
    [{ base: baseReq(), method: 'random', space: { 'solver.lr': { values: [0.1] } } }, 'trials is required'],
    [{ base: baseReq(), method: 'asha', trials: 3, max_epochs: 3, space: { epochs: { values: [1, 2] } } }, 'space.epochs'],
    [{ base: baseReq(), method: 'grid', space: { 'solver.lr': { values: [0.1] } }, colour: 1 }, 'colour'],
  ];
  for (const [body, want] of cases) {
    const r = await api(base, 'POST', '/api/v1/sweeps', body);
    assert.equal(r.status, 400, describeResponse('POST', '/api/v1/sweeps', r));
    assert.ok(r.body.error.message.includes(want), `${r.body.error.message} names ${want}`);
  }
  // a missing dataset: the first trial's job cannot be made, the sweep is not kept
  const r = await api(base, 'POST', '/api/v1/sweeps', { base: baseReq({ dataset_id: 999 }), method: 'grid', space: { 'solver.lr': { values: [0.1] } } });
  assert.equal(r.status, 422, describeResponse('POST', '/api/v1/sweeps', r));
  assert.equal(r.body.error.code, 'dataset_not_found');
  assert.deepEqual((await api(base, 'GET', '/api/v1/sweeps')).body.items, []);
  assert.equal((await api(base, 'GET', '/api/v1/sweeps/12345')).status, 404);
});

test('a long name in two-byte characters names the trials\' jobs, cut at a character', async () => {
  const name = `a${'é'.repeat(99)}`;                     // 199 bytes: byte 150 is inside an é
  const s = await create({ name, base: baseReq(), method: 'grid', parallel: 1, space: { 'solver.lr': { values: [0.01] } } });
  assert.equal(s.trials[0].state, 'running', JSON.stringify(s.trials[0]));
  const j = (await api(base, 'GET', `/api/v1/jobs/${s.trials[0].job_id}`)).body;
  assert.equal(j.config.name, `a${'é'.repeat(74)} · trial 0`);
  await api(base, 'POST', `/api/v1/sweeps/${s.id}/cancel`);
  assert.equal((await api(base, 'DELETE', `/api/v1/sweeps/${s.id}`)).status, 204);
});

test('grid: every point runs as an ordinary job; a diverging trial fails and the sweep still finishes', async () => {
  const s0 = await create({
    name: 'grid with a bad rate', base: { ...baseReq(), network: LIN2 }, method: 'grid', parallel: 2,
    space: { 'solver.lr': { values: [0.01, 10] }, 'solver.momentum': { values: [0.9] } },
  });
  assert.equal(s0.status, 'running');
  assert.equal(s0.method, 'grid');
  assert.equal(s0.trials_planned, 2);
  assert.equal(s0.trials_made, 2);                        // parallel 2: both made at once
  const s = await finished(s0.id);
  assert.equal(s.status, 'done');
  assert.equal(s.counts.done, 1);
  assert.equal(s.counts.failed, 1);
  const [good, bad] = s.trials;                           // sorted: the one with a metric first
  assert.deepEqual(good.params, { 'solver.lr': 0.01, 'solver.momentum': 0.9 });
  assert.deepEqual(bad.params, { 'solver.lr': 10, 'solver.momentum': 0.9 });
  assert.equal(bad.state, 'failed');
  assert.equal(bad.job_status, 'failed');
  assert.match(bad.message, /diverged/);
  assert.equal(bad.metric, null);
  assert.ok(good.metric > 0.5 && good.metric <= 1, `val/accuracy ${good.metric}`);
  assert.equal(s.best.trial, good.trial);
  assert.equal(s.best.job_id, good.job_id);
  assert.equal(s.epochs_spent, 1);                        // the failed one did not finish its epoch
  // the trials are ordinary jobs, linked to their sweep, with the trial's values
  const j = (await api(base, 'GET', `/api/v1/jobs/${good.job_id}`)).body;
  assert.equal(j.sweep_id, s.id);
  assert.equal(j.status, 'done');
  assert.equal(j.config.solver.lr, 0.01);
  assert.equal(j.config.name, 'grid with a bad rate · trial 0');
  assert.equal(j.metrics['val/accuracy'], good.metric);
  const m = (await api(base, 'GET', `/api/v1/jobs/${good.job_id}/metrics`)).body.items;
  assert.ok(m.some((x) => x.tag === 'val/accuracy'));
  // the list shows it, with its best
  const list = (await api(base, 'GET', '/api/v1/sweeps')).body.items;
  const mine = list.find((x) => x.id === s.id);
  assert.equal(mine.best.trial, good.trial);
  assert.equal(mine.trials, undefined);                   // the list leaves the trials out
  // a job not of a sweep says so, and the jobs list filters by sweep
  const lone = await api(base, 'POST', '/api/v1/jobs', baseReq());
  assert.equal(lone.body.sweep_id, null);
  const listed = (await api(base, 'GET', `/api/v1/jobs?sweep=${s.id}&sort=created&order=asc`)).body;
  assert.deepEqual(listed.items.map((x) => x.id), s.trials.map((t) => t.job_id).sort((a, b) => a - b));
  assert.ok(listed.items.every((x) => x.sweep_id === s.id));
  assert.equal((await api(base, 'GET', '/api/v1/jobs?sweep=x')).status, 400);
  await api(base, 'POST', `/api/v1/jobs/${lone.body.id}/cancel`);
});

test('random: seeded samples within the ranges, log-uniform rates, one integer', async () => {
  const s0 = await create({
    base: baseReq(), method: 'random', trials: 3, seed: 42, parallel: 3, metric: 'val/loss',
    space: { 'solver.lr': { log_uniform: [0.001, 0.1] }, 'solver.momentum': { uniform: [0.5, 0.9] }, batch_size: { int_uniform: [32, 64] } },
  });
  assert.equal(s0.mode, 'min');                           // a loss: lower is better
  const s = await finished(s0.id);
  assert.equal(s.status, 'done');
  assert.equal(s.counts.done, 3);
  for (const t of s.trials) {
    const p = t.params;
    assert.ok(p['solver.lr'] >= 0.001 && p['solver.lr'] <= 0.1, JSON.stringify(p));
    assert.ok(p['solver.momentum'] >= 0.5 && p['solver.momentum'] <= 0.9, JSON.stringify(p));
    assert.ok(Number.isInteger(p.batch_size) && p.batch_size >= 32 && p.batch_size <= 64, JSON.stringify(p));
    const j = (await api(base, 'GET', `/api/v1/jobs/${t.job_id}`)).body;
    assert.equal(j.config.batch_size, p.batch_size);
    assert.equal(j.config.solver.lr, p['solver.lr']);
  }
  assertSorted(s);
  assert.equal(s.best.trial, s.trials[0].trial);
  // the same seed samples the same values again
  const again = await create({ ...s.spec, parallel: 1 });
  assert.deepEqual(again.trials.map((t) => t.params)[0], s.trials.find((t) => t.trial === 0).params);
  await api(base, 'POST', `/api/v1/sweeps/${again.id}/cancel`);
});

test('asha: promotions resume trials from their rung\'s checkpoint; the rest are stopped by the sweep', async () => {
  const s0 = await create({
    base: baseReq(), method: 'asha', trials: 6, min_epochs: 1, max_epochs: 3, eta: 3, parallel: 2, seed: 3,
    space: { 'solver.lr': { log_uniform: [0.0005, 0.5] } },
  });
  assert.deepEqual(s0.rungs, [1, 3]);
  const s = await finished(s0.id);
  assert.equal(s.status, 'done');
  assert.equal(s.trials_made, 6);
  const top = s.trials.filter((t) => t.rung === 1);
  const low = s.trials.filter((t) => t.rung === 0);
  // asynchronous: a trial goes up as soon as it is in the top third of the
  // results so far (1 of 3..5, 2 of 6), so up to 3 of 6 may be promoted
  assert.ok(top.length >= 1 && top.length <= 3, `promoted: ${top.length}`);
  for (const t of top) {
    assert.equal(t.state, 'done');
    assert.equal(t.epochs, 3);
    assert.equal(t.epoch, 3);
    assert.ok(t.metrics[0] !== null && t.metrics[1] !== null);
    // one job, resumed: its val/accuracy at the end of each of its 3 epochs, steps going on from the rung's end
    const m = (await api(base, 'GET', `/api/v1/jobs/${t.job_id}/metrics`)).body.items.filter((x) => x.tag === 'val/accuracy');
    assert.deepEqual(m.map((x) => x.epoch), [1, 2, 3]);
    assert.equal(m[0].value, t.metrics[0]);
    assert.equal(m[2].value, t.metrics[1]);
    assert.ok(m[1].step > m[0].step && m[2].step > m[1].step);
    const log = (await api(base, 'GET', `/api/v1/jobs/${t.job_id}/log`)).text;
    assert.match(log, /resuming from .*epoch-1\.safetensors/);
  }
  for (const t of low) {
    assert.equal(t.state, 'stopped');
    assert.equal(t.job_status, 'done');                   // stopped by the sweep, not failed
    assert.match(t.message, /stopped by the sweep at rung 0 \(1 epoch\)/);
    assert.equal(t.epoch, 1);
  }
  assert.equal(s.epochs_spent, s.trials.reduce((a, t) => a + t.epoch, 0));
  assert.equal(s.epochs_spent, 6 + 2 * top.length);
  assertSorted(s);
});

test('cancel stops the running and queued trials; DELETE only once ended, the jobs stay', async () => {
  const s0 = await create({
    base: baseReq({ epochs: 30 }), method: 'grid', parallel: 2,
    space: { 'solver.lr': { values: [0.01, 0.02, 0.03] } },
  });
  await waitFor(async () => (await sweepNow(s0.id)).trials.some((t) => t.job_status === 'running'),
    { timeoutMs: 60_000, intervalMs: 200, what: 'a trial to run' });
  const del = await api(base, 'DELETE', `/api/v1/sweeps/${s0.id}`);
  assert.equal(del.status, 409, describeResponse('DELETE', '', del));
  const c = await api(base, 'POST', `/api/v1/sweeps/${s0.id}/cancel`);
  assert.equal(c.status, 202, describeResponse('POST', 'cancel', c));
  assert.equal(c.body.status, 'cancelled');
  assert.equal(c.body.counts.cancelled, 2);
  const jobs = c.body.trials.map((t) => t.job_id);
  await waitFor(async () => {
    const js = await Promise.all(jobs.map(async (id) => (await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status));
    return js.every((x) => x === 'cancelled');
  }, { timeoutMs: 60_000, intervalMs: 200, what: 'the trials\' jobs to be cancelled' });
  await new Promise((res) => setTimeout(res, 1500));      // a tick later: no third trial was made
  const s = await sweepNow(s0.id);
  assert.equal(s.trials_made, 2);
  assert.equal((await api(base, 'POST', `/api/v1/sweeps/${s0.id}/cancel`)).status, 409);
  assert.equal((await api(base, 'DELETE', `/api/v1/sweeps/${s0.id}`)).status, 204);
  assert.equal((await api(base, 'GET', `/api/v1/sweeps/${s0.id}`)).status, 404);
  const j = (await api(base, 'GET', `/api/v1/jobs/${jobs[0]}`)).body;
  assert.equal(j.status, 'cancelled');
  assert.equal(j.sweep_id, null);                         // an ordinary job now
});

test('a sweep goes on after a server restart', async () => {
  const s0 = await create({
    base: baseReq({ epochs: 2 }), method: 'grid', parallel: 1,
    space: { 'solver.lr': { values: [0.01, 0.02, 0.03, 0.04] } },
  });
  await waitFor(async () => (await sweepNow(s0.id)).counts.done >= 1,
    { timeoutMs: 60_000, intervalMs: 200, what: 'a first trial to finish' });
  await server.stop();
  server = await startServer({ dataDir, args: CHEAP });
  base = server.url;
  const s = await finished(s0.id);
  assert.equal(s.status, 'done');
  assert.equal(s.counts.done, 4);
  assert.equal(s.trials_made, 4);
  assert.equal(new Set(s.trials.map((t) => t.job_id)).size, 4);
});

test('another user\'s sweep and its trials are as missing; an admin sees them', async () => {
  const user = async (name, admin) => {
    const f = path.join(tmp.dir, `${name}.pw`);
    writeFileSync(f, `${name}-secret-1\n`);
    const r = await runKiln(['user', 'add', name, '--data', dataDir, '--password-file', f, ...CHEAP]);
    assert.equal(r.code, 0, r.stderr);
    const t = await api(base, 'POST', '/api/v1/tokens', { user: name, password: `${name}-secret-1` });
    assert.equal(t.status, 201, describeResponse('POST', '/api/v1/tokens', t));
    return { headers: { authorization: `Bearer ${t.body.token}` } };
  };
  const admin = await user('alice');                     // the first user is an admin
  const bob = await user('bob');
  const carol = await user('carol');
  const as = (who, method, p, body) => api(base, method, p, body, who);
  assert.equal((await as(admin, 'PATCH', `/api/v1/datasets/${datasetId}`, { shared: true })).status, 200);
  const c = await as(bob, 'POST', '/api/v1/sweeps', { base: baseReq(), method: 'grid', parallel: 1, space: { 'solver.lr': { values: [0.01] } } });
  assert.equal(c.status, 201, describeResponse('POST', '/api/v1/sweeps', c));
  const id = c.body.id;
  let s;
  await waitFor(async () => (s = (await as(bob, 'GET', `/api/v1/sweeps/${id}`)).body).status === 'done',
    { timeoutMs: 60_000, intervalMs: 300, what: 'bob\'s sweep to end' });
  assert.ok(s.owner_id > 0);
  const job = s.trials[0].job_id;
  assert.equal((await as(bob, 'GET', `/api/v1/jobs/${job}`)).body.owner_id, s.owner_id);   // the trial is bob's job
  for (const [m, p] of [['GET', `/api/v1/sweeps/${id}`], ['POST', `/api/v1/sweeps/${id}/cancel`], ['DELETE', `/api/v1/sweeps/${id}`], ['GET', `/api/v1/jobs/${job}`]]) {
    const r = await as(carol, m, p);
    assert.equal(r.status, 404, describeResponse(m, p, r));
  }
  assert.deepEqual((await as(carol, 'GET', '/api/v1/sweeps')).body.items, []);
  assert.ok((await as(admin, 'GET', '/api/v1/sweeps')).body.items.some((x) => x.id === id));
  assert.equal((await as(admin, 'GET', `/api/v1/sweeps/${id}`)).status, 200);
  assert.equal((await as(bob, 'DELETE', `/api/v1/sweeps/${id}`)).status, 204);
});
