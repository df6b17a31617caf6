// The comparison page's pure functions, in node without a browser:
// web/charts.js's smoothing (TensorBoard's debiased EMA) and series
// alignment, web/runs.js's run list, config flattening, differing keys and
// final/best, against hand-worked values. The dashboard's modules are browser
// ES modules (.js without "type": "module"), so they are imported from their
// source as data: URLs (neither has imports).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const load = (file) => import(`data:text/javascript;base64,${
  Buffer.from(readFileSync(path.join(ROOT, 'web', file))).toString('base64')}`);
const charts = await load('charts.js');
const runs = await load('runs.js');

const close = (a, b, what) => {
  assert.equal(a.length, b.length, what);
  a.forEach((v, i) => {
    if (b[i] === null || Number.isNaN(b[i])) assert.deepEqual(v, b[i], `${what}[${i}]`);
    else assert.ok(Math.abs(v - b[i]) < 1e-12, `${what}[${i}]: ${v} != ${b[i]}`);
  });
};

test('smoothEma is TensorBoard\'s debiased exponential moving average', () => {
  // w = 0.5 on 1, 2, 3: a = 0.5, 1.25, 2.125; debias 0.5, 0.75, 0.875
  close(charts.smoothEma([1, 2, 3], 0.5), [1, 1.25 / 0.75, 2.125 / 0.875], 'w 0.5');
  // w = 0.9 on 10, 0: a = 1, 0.9; debias 0.1, 0.19 -> 10, 4.7368...
  close(charts.smoothEma([10, 0], 0.9), [10, 0.9 / 0.19], 'w 0.9');
  // w = 0: the values themselves; a constant series stays as it is
  close(charts.smoothEma([3, 1, 4], 0), [3, 1, 4], 'w 0');
  close(charts.smoothEma([0.7, 0.7, 0.7], 0.99), [0.7, 0.7, 0.7], 'constant');
  // a non-finite value passes through and does not count: 2, NaN, 4 at w 0.5
  // -> a = 1 (k 1), skip, a = 2.5 (k 2) -> 2, NaN, 2.5 / 0.75
  close(charts.smoothEma([2, NaN, 4], 0.5), [2, NaN, 2.5 / 0.75], 'NaN');
  const ys = [5, 1, 2];
  charts.smoothEma(ys, 0.6);
  assert.deepEqual(ys, [5, 1, 2], 'the input is not changed');
});

test('seriesXY picks x by axis, sorts, smooths and drops non-positive values on a log scale', () => {
  const pts = [
    { step: 20, epoch: 2, wall: 1030, value: 4 },
    { step: 10, epoch: 1, wall: 1010, value: 2 },
    { step: 30, epoch: 3, wall: 1060, value: -1 },
  ];
  assert.deepEqual(charts.seriesXY(pts, { x: 'step', smoothing: 0, log: false }), [[10, 20, 30], [2, 4, -1]]);
  assert.deepEqual(charts.seriesXY(pts, { x: 'epoch', smoothing: 0, log: true }), [[1, 2, 3], [2, 4, null]]);
  assert.deepEqual(charts.seriesXY(pts, { x: 'wall', smoothing: 0, log: false }, 1000)[0], [10, 30, 60]);
  const [, sm] = charts.seriesXY(pts, { x: 'step', smoothing: 0.5, log: false });
  // by step: 2, 4, -1 at w 0.5: a = 1, 2.5, 0.75; debias 0.5, 0.75, 0.875
  close(sm, [2, 2.5 / 0.75, 0.75 / 0.875], 'smoothed');
});

test('alignSeries puts series on the union of their xs with null gaps', () => {
  const d = charts.alignSeries([[[1, 3], [10, 30]], [[2, 3, 4], [20, 31, 40]]]);
  assert.deepEqual(d, [[1, 2, 3, 4], [10, null, 30, null], [null, 20, 31, 40]]);
  assert.deepEqual(charts.alignSeries([[[5], [1]]]), [[5], [1]]);
});

test('parseRuns reads the ids a comparison URL names', () => {
  assert.deepEqual(runs.parseRuns('?runs=3,1,7'), [3, 1, 7]);
  assert.deepEqual(runs.parseRuns('?x=1&runs=3,%201,3,abc,-2,0,1.5,,9'), [3, 1, 9]);
  assert.deepEqual(runs.parseRuns(''), []);
  assert.deepEqual(runs.parseRuns('?runs='), []);
  assert.deepEqual(runs.parseRuns('?runs=4,%E0,5,%'), [4, 5], 'a malformed escape does not throw');
  const many = Array.from({ length: runs.MAX_RUNS + 5 }, (_, i) => i + 1).join(',');
  assert.equal(runs.parseRuns(`?runs=${many}`).length, runs.MAX_RUNS);
});

test('flattenConfig makes dotted keys; differingKeys lists only what differs', () => {
  const a = { epochs: 2, batch_size: 64, solver: { type: 'sgd', lr: 0.01, momentum: 0.9 }, input: [1, 28, 28],
    network: { layers: [{ type: 'dense', units: 10 }] }, lr_policy: {} };
  assert.deepEqual(runs.flattenConfig(a), {
    epochs: 2, batch_size: 64, 'solver.type': 'sgd', 'solver.lr': 0.01, 'solver.momentum': 0.9,
    input: '[1,28,28]', 'network.layers.0.type': 'dense', 'network.layers.0.units': 10, lr_policy: '{}',
  });
  const b = { ...a, solver: { ...a.solver, lr: 0.1 }, id: 9 };
  const c = { ...a, solver: { ...a.solver, lr: 0.001 }, seed: 3, id: 10 };
  const flats = [a, b, c].map((x) => runs.flattenConfig(x));
  assert.deepEqual(runs.differingKeys(flats, ['id']), ['seed', 'solver.lr']);
  assert.deepEqual(runs.differingKeys(flats), ['id', 'seed', 'solver.lr']);
  assert.deepEqual(runs.differingKeys(flats.slice(0, 1)), []);
  assert.deepEqual(runs.differingKeys([{ x: null }, { x: null }]), []);
});

test('finalAndBest: the value at the last step; min for a loss, max otherwise', () => {
  const pts = [{ step: 3, value: 0.5 }, { step: 1, value: 0.9 }, { step: 2, value: 0.2 }, { step: 4, value: NaN }];
  assert.deepEqual(runs.finalAndBest('train/loss', pts), { final: 0.5, best: 0.2 });
  assert.deepEqual(runs.finalAndBest('val/accuracy', pts), { final: 0.5, best: 0.9 });
  assert.deepEqual(runs.finalAndBest('lr', []), { final: null, best: null });
  assert.deepEqual(runs.sortTags(['lr', 'amp/loss_scale', 'val/loss', 'train/loss', 'a/b']),
    ['train/loss', 'val/loss', 'lr', 'a/b', 'amp/loss_scale']);
});
