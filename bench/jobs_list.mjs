#!/usr/bin/env node
/* bench/jobs_list.mjs: the jobs list with 10,000 jobs in the store (issue 16).
 * Not a test.
 *
 *   node bench/jobs_list.mjs [--kiln build/server/kiln] [--fill build/tests/kiln_fill_jobs]
 *        [--jobs 10000] [--requests 500] [--rounds 3] [--loads 10]
 *
 * Fills a fresh data directory with --jobs ended jobs (kiln_fill_jobs, through
 * the store: three datasets, names, tags, notes, statuses, precisions), starts
 * `kiln serve` on it, and measures, one request at a time over a keep-alive
 * connection, the latency of GET /api/v1/jobs for:
 *   first     ?limit=50 (the dashboard's first page)
 *   filtered  status / network+precision / tag / dataset+sort filters, in turn
 *   search    ?q=... (a substring search: a scan of every job)
 *   deep      pages 100..199 of 200 (by created, name and progress) through their cursors
 *   baseline  GET /api/v1/jobs/{id} (one job: the floor of the server's answer path)
 * --requests of each, in --rounds rounds (p50/p90/p99/max per set over all
 * rounds; the p99 of each round shows the spread; and the server's CPU time
 * per request, which a busy machine disturbs less). Then the dashboard in
 * headless Chromium (playwright-core, Debian's chromium): --loads fresh loads of
 * #/ until the table's first row shows (from navigation start), a header click
 * until the re-sorted rows show, and Next until page 2 shows. Prints a JSON
 * object; run it on an idle machine.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
process.env.KILN_BIN = path.resolve(args.kiln || path.join(ROOT, 'build/server/kiln'));
process.env.KILN_FILL_JOBS = path.resolve(args.fill || path.join(ROOT, 'build/tests/kiln_fill_jobs'));
const JOBS = Number(args.jobs || 10000);
const REQUESTS = Number(args.requests || 500);
const ROUNDS = Number(args.rounds || 3);
const LOADS = Number(args.loads || 10);

const { startServer, tempDir } = await import('../tests/integration/lib/kiln.mjs');
const { fillJobs } = await import('../tests/integration/lib/fill_jobs.mjs');

function stats(ms) {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)];
  const r = (x) => Math.round(x * 1000) / 1000;
  return { n: s.length, p50: r(q(0.5)), p90: r(q(0.9)), p99: r(q(0.99)), max: r(s.at(-1)),
    mean: r(s.reduce((a, b) => a + b, 0) / s.length) };
}

async function timed(url) {
  const t0 = performance.now();
  const r = await fetch(url);
  const body = await r.arrayBuffer();
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`${url} -> ${r.status} ${Buffer.from(body).toString().slice(0, 200)}`);
  return { ms, body };
}

/* The cursors of pages from..to (1-based; page 1 has none) of a query. */
async function cursors(base, qs, from, to) {
  const out = [];
  let cursor = null;
  for (let page = 1; page <= to; page++) {
    if (page >= from) out.push(cursor);
    const { body } = await timed(`${base}/api/v1/jobs?${qs}&limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    cursor = JSON.parse(Buffer.from(body).toString()).next_cursor;
    if (!cursor) break;
  }
  return out;
}

/* The server's CPU time so far (utime + stime of /proc/<pid>/stat), in ms:
 * what a request costs it, less sensitive than latency to a busy machine. */
let serverPid = 0;
function cpuMs() {
  const f = readFileSync(`/proc/${serverPid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return ((Number(rest[11]) + Number(rest[12])) * 1000) / 100;      // USER_HZ = 100
}

async function measure(urls) {
  const perRound = [];
  const all = [];
  const cpu0 = cpuMs();
  for (let round = 0; round < ROUNDS; round++) {
    const ms = [];
    for (let i = 0; i < REQUESTS; i++) ms.push((await timed(urls[i % urls.length])).ms);
    perRound.push(stats(ms).p99);
    all.push(...ms);
  }
  return { ...stats(all), p99_per_round: perRound,
    server_cpu_ms_per_request: Math.round(((cpuMs() - cpu0) / all.length) * 1000) / 1000 };
}

async function browserLoads(base) {
  const require = createRequire(import.meta.url);
  const { chromium } = require('playwright-core');
  const browser = await chromium.launch({ executablePath: process.env.KILN_CHROMIUM || '/usr/bin/chromium',
    headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const load = [];
  const sort = [];
  const next = [];
  const firstRow = '#jobs-table tbody tr[data-job-id]';
  try {
    for (let i = 0; i < LOADS + 1; i++) {
      await page.goto('about:blank');
      await page.goto(`${base}/`);
      await page.waitForSelector(firstRow, { timeout: 30_000 });
      const ms = await page.evaluate(() => performance.now());        // since this navigation started
      if (i > 0) load.push(ms);                                          // the first load warms the caches
      const top = await page.getAttribute(firstRow, 'data-job-id');
      let t0 = await page.evaluate(() => performance.now());
      await page.click('#jobs-table th[data-sort="name"] button');
      await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr[data-job-id]')?.dataset.jobId !== id
        && document.querySelector('#jobs-table th[data-sort="name"]')?.getAttribute('aria-sort') === 'ascending', top);
      if (i > 0) sort.push(await page.evaluate(() => performance.now()) - t0);
      const top2 = await page.getAttribute(firstRow, 'data-job-id');
      t0 = await page.evaluate(() => performance.now());
      await page.click('#jobs-next');
      await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr[data-job-id]')?.dataset.jobId !== id, top2);
      if (i > 0) next.push(await page.evaluate(() => performance.now()) - t0);
    }
  } finally {
    await browser.close();
  }
  return { first_rows_ms: stats(load), sort_click_ms: stats(sort), next_page_ms: stats(next) };
}

const tmp = tempDir('kiln-bench-jobs-');
const dataDir = path.join(tmp.dir, 'data');
let server;
try {
  let t0 = performance.now();
  const fill = fillJobs(dataDir, JOBS);
  const fillS = (performance.now() - t0) / 1000;
  server = await startServer({ dataDir });
  serverPid = server.child.pid;
  const base = server.url;
  const one = `${base}/api/v1/jobs/${fill.first + Math.floor(JOBS / 2)}`;
  const first = [`${base}/api/v1/jobs?limit=50`];
  const filtered = ['status=failed,cancelled', 'network=resnet20&precision=amp-bf16', 'tag=baseline',
    `dataset=${fill.datasets[1]}&sort=progress&order=desc`, 'status=done&sort=name']
    .map((q) => `${base}/api/v1/jobs?${q}&limit=50`);
  const search = ['q=run-0123', 'q=note%2077', 'q=baseline', 'q=%235000'].map((q) => `${base}/api/v1/jobs?${q}&limit=50`);
  const deep = [];
  for (const qs of ['sort=created', 'sort=name', 'sort=progress&order=desc']) {
    const pages = Math.ceil(JOBS / 50);
    for (const c of await cursors(base, qs, Math.floor(pages / 2) + 1, pages))
      deep.push(`${base}/api/v1/jobs?${qs}&limit=50${c ? `&cursor=${encodeURIComponent(c)}` : ''}`);
  }
  for (let i = 0; i < 50; i++) await timed(first[0]);          // warm up
  t0 = performance.now();
  const result = {
    machine: `${os.cpus()[0].model} x${os.cpus().length}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`,
    jobs: JOBS,
    fill_seconds: Math.round(fillS * 10) / 10,
    first_page_bytes: (await timed(first[0])).body.byteLength,
    api_ms: {
      baseline_one_job: await measure([one]),
      first: await measure(first),
      filtered: await measure(filtered),
      search: await measure(search),
      deep: await measure(deep),
    },
  };
  try {
    result.browser = await browserLoads(base);
  } catch (e) {
    result.browser = { error: String(e.message || e).slice(0, 300) };
  }
  result.load_after = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  result.seconds = Math.round((performance.now() - t0) / 100) / 10;
  console.log(JSON.stringify(result, null, 2));
} finally {
  if (server) await server.stop();
  tmp.cleanup();
}
