#!/usr/bin/env node
/* bench/compare_page.mjs: the comparison page (#/compare) with many long runs
 * (issue 16: "smooth with 20 runs of 10,000 points each"). Not a test.
 *
 *   node bench/compare_page.mjs [--kiln build/server/kiln] [--seed build/tests/kiln_seed_runs]
 *        [--runs 20] [--steps 10000] [--loads 5] [--moves 10] [--db FILE]
 *
 * (--db: a copy of a store kiln_seed_runs filled before, instead of seeding
 * one again, which takes a minute or more on a busy machine.)
 * Fills a fresh store with --runs finished runs of --steps steps each
 * (kiln_seed_runs: train/loss, train/accuracy and lr every step, four tags
 * every epoch), starts `kiln serve` on it and, in headless Chromium
 * (playwright-core, KILN_CHROMIUM or /usr/bin/chromium), opens the page for all
 * runs --loads times. Prints one JSON object:
 *   api: GET /jobs/{id}/metrics for one run, whole and ?max_points=500 (ms, bytes)
 *   load: from navigation to the page's first complete drawing (ms), and its
 *         fetching part (kilnCompare.fetchMs)
 *   smoothing: from moving the smoothing slider to the second frame after it,
 *              that is until the new curves are on screen (ms)
 *   axis: the same for switching the x-axis to epoch (every chart rebuilt)
 * each as {n, min, median, max}.
 */
import { spawn, execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const kiln = path.resolve(args.kiln || 'build/server/kiln');
const seed = path.resolve(args.seed || 'build/tests/kiln_seed_runs');
const runs = Number(args.runs || 20);
const steps = Number(args.steps || 10000);
const loads = Number(args.loads || 5);
const moves = Number(args.moves || 10);

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const r = (x) => +x.toFixed(1);
  return { n: s.length, min: r(s[0]), median: r(s[Math.floor(s.length / 2)]), max: r(s.at(-1)) };
};

const dir = mkdtempSync(path.join(os.tmpdir(), 'kiln-compare-bench-'));
const data = path.join(dir, 'data');
mkdirSync(data);
const t0 = performance.now();
let ids;
if (args.db) {
  copyFileSync(path.resolve(args.db), path.join(data, 'kiln.db'));
  ids = Array.from({ length: runs }, (_, i) => i + 1);
} else {
  const seeded = execFileSync(seed, [path.join(data, 'kiln.db'), String(runs), String(steps)], { encoding: 'utf8' });
  ids = seeded.trim().split(/\s+/).slice(1).map(Number);
}
const seedMs = performance.now() - t0;
const srv = spawn(kiln, ['serve', '--port', '0', '--host', '127.0.0.1', '--data', data], { stdio: ['ignore', 'pipe', 'pipe'] });
let out = '';
const url = await new Promise((res, rej) => {
  const t = setTimeout(() => rej(new Error(`no listening line:\n${out}`)), 30_000);
  srv.stdout.on('data', (d) => {
    out += d;
    const m = /listening on (http:\/\/\S+)/.exec(out);
    if (m) { clearTimeout(t); res(m[1].replace(/\/$/, '')); }
  });
  srv.stderr.on('data', (d) => { out += d; });
});

let browser;
try {
  // the API alone: one run's metrics, whole and downsampled
  const api = {};
  for (const [name, q] of [['whole', ''], ['max_points_500', '?max_points=500']]) {
    const ms = [];
    let bytes = 0;
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      const r = await fetch(`${url}/api/v1/jobs/${ids[i % ids.length]}/metrics${q}`);
      bytes = (await r.arrayBuffer()).byteLength;
      ms.push(performance.now() - t);
    }
    api[name] = { ...stats(ms), bytes };
  }

  browser = await chromium.launch({ executablePath: process.env.KILN_CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  const load = [];
  const fetchMs = [];
  for (let i = 0; i < loads; i++) {
    await page.goto('about:blank');
    const t = performance.now();
    await page.goto(`${url}/#/compare?runs=${ids.join(',')}`);
    await page.waitForSelector('main[data-compare="ready"]', { timeout: 120_000 });
    load.push(performance.now() - t);
    fetchMs.push(await page.evaluate(() => window.kilnCompare.fetchMs));
  }
  const series = await page.evaluate(() => window.kilnCharts['compare:train/loss'].series());
  const time = (fn, arg) => page.evaluate(async ([f, a]) => {
    const t = performance.now();
    // eslint-disable-next-line no-new-func
    new Function('a', f)(a);
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return performance.now() - t;
  }, [fn, arg]);
  const slide = `const el = document.querySelector('#compare-smoothing'); el.value = String(a);
    el.dispatchEvent(new Event('input'));`;
  const smoothing = [];
  for (let i = 0; i < moves; i++) smoothing.push(await time(slide, ((i * 0.37) % 0.99).toFixed(3)));
  const pick = `const el = document.querySelector('#compare-x'); el.value = a; el.dispatchEvent(new Event('change'));`;
  const axis = [];
  for (let i = 0; i < Math.max(2, moves / 2); i++) axis.push(await time(pick, i % 2 ? 'step' : 'epoch'));
  console.log(JSON.stringify({
    runs, steps, metrics_per_run: 3 * steps + 4 * 10, seed_ms: Math.round(seedMs), series_per_chart: series,
    machine: `${os.cpus().length} x ${os.cpus()[0].model}, load ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`,
    api, load: stats(load), fetch: stats(fetchMs), smoothing: stats(smoothing), axis: stats(axis),
  }, null, 1));
} finally {
  if (browser) await browser.close();
  srv.kill('SIGTERM');
  await new Promise((r) => srv.on('exit', r));
  rmSync(dir, { recursive: true, force: true });
}
