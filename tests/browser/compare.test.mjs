// The comparison page in headless Chromium (issue 16): three small runs that
// differ only in solver.lr, ticked in the dashboard's jobs table and opened
// side by side with Compare (3) at #/compare?runs=A,B,C: one
// chart per tag with a series per run holding the run's own points, the
// parameter table's solver.lr row (and no rows for what is the same), final
// and best values, the smoothing / x-axis / log controls, removing and adding
// a run by id (the URL follows), a running run whose curves grow while the
// page is open, and the job page's same controls. Also the metrics endpoint's
// tag= and max_points= on a real run. Screenshots go to tests/browser/out/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, importDemo, startServer, tempDir, waitFor } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
const RATES = [0.001, 0.01, 0.1];

let tmp;
let server;
let base;
let browser;
let page;
let datasetId;
const ids = [];
const problems = [];

const jobNow = async (id) => (await api(base, 'GET', `/api/v1/jobs/${id}`)).body;
const metricsOf = async (id, q = '') => (await api(base, 'GET', `/api/v1/jobs/${id}/metrics${q}`)).body.items;
const waitDone = (id, timeoutMs = 300_000) => waitFor(async () => (await jobNow(id)).status === 'done',
  { timeoutMs, intervalMs: 250, what: `job ${id} to finish` });

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-compare-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir });
  base = server.url;
  for (const lr of RATES) {
    const r = await api(base, 'POST', '/api/v1/jobs', {
      name: `lr-${lr}`, dataset_id: datasetId, network: TINY, epochs: 1, batch_size: 32, solver: { type: 'sgd', lr },
    });
    assert.equal(r.status, 201, r.text);
    ids.push(r.body.id);
  }
  for (const id of ids) await waitDone(id);
  ({ browser, page } = await openPage(base, { viewport: { width: 1360, height: 900 }, problems }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('GET /jobs/{id}/metrics: tag= keeps the tags named, max_points= keeps each tag\'s ends and extremes', async () => {
  const all = await metricsOf(ids[0]);
  const loss = all.filter((m) => m.tag === 'train/loss');
  assert.ok(loss.length >= 10, `train/loss points: ${loss.length}`);
  const only = await metricsOf(ids[0], '?tag=train/loss,val/loss');
  assert.deepEqual(only, all.filter((m) => m.tag === 'train/loss' || m.tag === 'val/loss'));
  const few = (await metricsOf(ids[0], '?tag=train/loss&max_points=4'));
  assert.equal(few.length, 4);
  assert.equal(few[0].step, loss[0].step);
  assert.equal(few[3].step, loss.at(-1).step);
  const inner = loss.slice(1, -1).map((m) => m.value);
  assert.deepEqual(few.slice(1, 3).map((m) => m.value).sort((a, b) => a - b),
    [Math.min(...inner), Math.max(...inner)], 'the one bucket keeps its min and max');
  for (const q of ['?max_points=1', '?max_points=x', '?tag=', '?tag=a%20b', '?tag=train/loss,,lr']) {
    const r = await api(base, 'GET', `/api/v1/jobs/${ids[0]}/metrics${q}`);
    assert.equal(r.status, 400, `${q}: ${r.text}`);
    assert.equal(r.body.error.code, 'invalid_field');
  }
  assert.equal((await api(base, 'GET', '/api/v1/jobs/99999/metrics?max_points=10')).status, 404);
});

/* What a chart holds, per series: its label and its non-null [x, y] points. */
const chartSeries = (tag) => page.evaluate((t) => {
  const c = window.kilnCharts[`compare:${t}`];
  const d = c.data();
  return c.labels().map((label, i) => ({
    label, pts: d[0].map((x, j) => [x, d[i + 1][j]]).filter(([, y]) => y !== null && y !== undefined),
  }));
}, tag);

test('the comparison page overlays the three runs and lists the parameter that differs', async () => {
  // as a user gets there: the three runs ticked in the dashboard's jobs table, then Compare (3)
  await page.goto(`${base}/#/`);
  for (const id of ids) await page.check(`#jobs-table tr[data-job-id="${id}"] .job-select`);
  assert.equal(await page.textContent('#jobs-compare'), 'Compare (3)');
  await page.click('#jobs-compare');
  await page.waitForFunction(() => location.hash.startsWith('#/compare'));
  assert.equal(new URL(page.url()).hash, `#/compare?runs=${ids.join(',')}`);
  await page.waitForSelector('main[data-compare="ready"]', { timeout: 30_000 });
  assert.equal(await page.locator('#compare-runs li').count(), 3);
  // one chart per tag the runs have, three series each, the runs' own points
  const tags = [...new Set((await metricsOf(ids[0])).map((m) => m.tag))];
  for (const t of ['train/loss', 'train/accuracy', 'val/loss', 'val/accuracy', 'lr']) assert.ok(tags.includes(t), t);
  const charts = await page.evaluate(() => Object.keys(window.kilnCharts).filter((k) => k.startsWith('compare:')));
  assert.deepEqual(charts.sort(), tags.map((t) => `compare:${t}`).sort());
  const series = await chartSeries('train/loss');
  assert.deepEqual(series.map((s) => s.label), RATES.map((lr) => `lr-${lr}`));
  for (const [i, id] of ids.entries()) {
    const want = (await metricsOf(id)).filter((m) => m.tag === 'train/loss').map((m) => [m.step, m.value]);
    assert.deepEqual(series[i].pts, want, `run ${id}'s train/loss by step`);
  }
  // (a full-page picture: charts out of the viewport are drawn first)
  await page.evaluate(() => Object.values(window.kilnCharts).forEach((c) => c.flush && c.flush()));
  await page.screenshot({ path: path.join(OUT, 'compare.png'), fullPage: true });

  // the parameter table: solver.lr differs; batch size, epochs, network do not
  const lrRow = page.locator('#compare-params tr[data-key="solver.lr"] td');
  assert.deepEqual(await lrRow.allTextContents(), ['0.001', '0.01', '0.1']);
  for (const key of ['batch_size', 'epochs', 'network', 'solver.type', 'dataset_id', 'name', 'id'])
    assert.equal(await page.locator(`#compare-params tr[data-key="${key}"]`).count(), 0, `${key} is the same`);
  // final = the value at the last step, best = the least loss / the most accuracy
  for (const [key, pick] of [['final:train/loss', (v) => v.at(-1)], ['best:train/loss', (v) => Math.min(...v)],
    ['best:val/accuracy', (v) => Math.max(...v)]]) {
    const tag = key.split(':')[1];
    const cells = await page.locator(`#compare-params tr[data-key="${key}"] td`).allTextContents();
    for (const [i, id] of ids.entries()) {
      const want = pick((await metricsOf(id)).filter((m) => m.tag === tag).map((m) => m.value));
      assert.ok(Math.abs(Number(cells[i]) - want) <= 1e-3 * Math.abs(want) + 1e-9, `${key} of ${id}: ${cells[i]} vs ${want}`);
    }
  }
  assert.deepEqual(problems, []);
});

test('smoothing, the x-axis and the log scale apply to every chart', async () => {
  const raw = await chartSeries('train/loss');
  await page.locator('#compare-smoothing').fill('0.9');
  await page.waitForFunction(() => document.querySelector('#compare-smoothing-value').value === '0.900');
  await page.waitForTimeout(100);
  const sm = await chartSeries('train/loss');
  // TensorBoard's debiased EMA, written out again here
  let a = 0;
  const want = raw[0].pts.map(([, y], k) => { a = 0.9 * a + 0.1 * y; return a / (1 - 0.9 ** (k + 1)); });
  sm[0].pts.forEach(([x, y], k) => {
    assert.equal(x, raw[0].pts[k][0]);
    assert.ok(Math.abs(y - want[k]) < 1e-9, `smoothed point ${k}: ${y} vs ${want[k]}`);
  });
  await page.selectOption('#compare-x', 'epoch');
  await page.waitForTimeout(100);
  const byEpoch = await chartSeries('train/loss');
  const last = byEpoch[0].pts.at(-1)[0];
  assert.ok(Math.abs(last - 1) < 1e-9, `the last point is at epoch 1: ${last}`);
  await page.selectOption('#compare-x', 'wall');
  await page.waitForTimeout(100);
  const byWall = await chartSeries('val/accuracy');
  for (const s of byWall) assert.ok(s.pts[0][0] >= 0 && s.pts[0][0] < 600, `wall time from the run's start: ${s.pts[0][0]}`);
  await page.check('#compare-log');
  await page.waitForTimeout(100);
  const distr = await page.evaluate(() => Object.entries(window.kilnCharts).filter(([k]) => k.startsWith('compare:'))
    .map(([, c]) => (c.flush(), c.plot().scales.y.distr)));
  assert.ok(distr.every((d) => d === 3), `log scales: ${distr}`);
  await page.uncheck('#compare-log');
  await page.selectOption('#compare-x', 'step');
  await page.locator('#compare-smoothing').fill('0');
  assert.deepEqual(problems, []);
});

test('a run is removed and added back by id, and the URL names the runs', async () => {
  await page.click(`#compare-runs li[data-run-id="${ids[1]}"] button`);
  await page.waitForFunction(() => window.kilnCharts['compare:train/loss']?.series() === 2);
  assert.equal(new URL(page.url()).hash, `#/compare?runs=${ids[0]},${ids[2]}`);
  assert.equal(await page.locator('#compare-params tr[data-key="solver.lr"] td').count(), 2);
  await page.fill('#compare-add-id', String(ids[1]));
  await page.click('#compare-add');
  await page.waitForFunction(() => window.kilnCharts['compare:train/loss']?.series() === 3);
  assert.equal(new URL(page.url()).hash, `#/compare?runs=${ids[0]},${ids[2]},${ids[1]}`);
  await page.fill('#compare-add-id', '99999');
  await page.click('#compare-add');
  await page.waitForSelector(`#compare-runs li[data-run-id="99999"] .chip-error`);
  assert.match(await page.textContent('#compare-runs li[data-run-id="99999"]'), /There is no job 99999/);
  problems.splice(0, problems.length, ...problems.filter((p) => !/status of 404/.test(p)));
  assert.deepEqual(problems, []);
});

test('a running run\'s curves grow on the page until it is done', async () => {
  const r = await api(base, 'POST', '/api/v1/jobs', {
    name: 'live', dataset_id: datasetId, network: TINY, epochs: 3, batch_size: 4, solver: { type: 'sgd', lr: 0.01 },
  });
  assert.equal(r.status, 201, r.text);
  const live = r.body.id;
  await page.goto(`${base}/#/compare?runs=${ids[0]},${live}`);
  await page.waitForSelector('main[data-compare="ready"]', { timeout: 30_000 });
  const atLoad = await page.evaluate((id) => window.kilnCharts['compare:train/loss'].countOf(id), live);
  const statusAtLoad = (await jobNow(live)).status;
  await waitDone(live);
  assert.ok(['queued', 'running'].includes(statusAtLoad), `the run was still going when the page loaded: ${statusAtLoad}`);
  const want = (await metricsOf(live)).filter((m) => m.tag === 'train/loss').length;
  await page.waitForFunction((args) => window.kilnCharts['compare:train/loss']?.countOf(args.id) === args.want,
    { id: live, want }, { timeout: 30_000 });
  assert.ok(want > atLoad, `points arrived after the page loaded (${atLoad} at load, ${want} at the end)`);
  await page.waitForSelector(`#compare-runs li[data-run-id="${live}"] [data-status="done"]`, { timeout: 15_000 });
  assert.deepEqual(problems, []);
});

test('the job page\'s charts take the same controls', async () => {
  await page.goto(`${base}/#/jobs/${ids[2]}`);
  await page.waitForSelector('main[data-status="done"]', { timeout: 30_000 });
  await page.waitForFunction(() => window.kilnCharts?.loss?.countOf('train/loss') >= 5);
  const job = await jobNow(ids[2]);
  await page.selectOption('#job-charts-x', 'step');
  await page.waitForTimeout(100);
  const xs = await page.evaluate(() => window.kilnCharts.loss.data()[0]);
  assert.equal(xs.at(-1), job.steps, 'by step, the last point is at the last step');
  const raw = await page.evaluate(() => window.kilnCharts.loss.data()[1].filter((v) => v !== null));
  await page.locator('#job-charts-smoothing').fill('0.5');
  await page.waitForTimeout(100);
  const sm = await page.evaluate(() => window.kilnCharts.loss.data()[1].filter((v) => v !== null));
  assert.equal(sm.length, raw.length);
  assert.ok(Math.abs(sm[1] - (0.25 * raw[0] + 0.5 * raw[1]) / 0.75) < 1e-9, 'smoothed by the same EMA');
  await page.check('#job-charts-log');
  await page.waitForTimeout(100);
  assert.equal(await page.evaluate(() => window.kilnCharts.loss.plot().scales.y.distr), 3);
  await page.screenshot({ path: path.join(OUT, 'job-controls.png'), fullPage: true });
  assert.deepEqual(problems, []);
});
