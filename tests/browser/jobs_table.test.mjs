// The dashboard's jobs table in headless Chromium (issue 16), over a store
// filled by kiln_fill_jobs (its rules in ../integration/lib/fill_jobs.mjs give
// the expected rows): names (and "#id network" without one), the Created
// column whole at 1400 px, sorting by a header click, the status filter, the
// debounced search, Next/Previous pages, a tag chip as a filter, row
// checkboxes and Compare (n) -> #/compare?runs=..., and the job page's name,
// tags and notes editor saving with PATCH. Screenshots go to tests/browser/out/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, startServer, tempDir } from '../integration/lib/kiln.mjs';
import { fillJobs, fillModel } from '../integration/lib/fill_jobs.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const N = 130;

let tmp;
let server;
let base;
let browser;
let page;
let model;
const problems = [];
const listRequests = [];       // the query strings of the page's GET /api/v1/jobs

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-jobstable-');
  const dataDir = path.join(tmp.dir, 'data');
  model = fillModel(fillJobs(dataDir, N), N);
  server = await startServer({ dataDir });
  base = server.url;
  // a 400 is expected once (the editor's bad tags, checked below); any other 4xx is a problem
  ({ browser, page } = await openPage(base, { viewport: { width: 1400, height: 900 }, problems,
    allowConsole: (t) => /Failed to load resource: the server responded with a status of 400/.test(t) }));
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (r.status() >= 400 && !(r.request().method() === 'PATCH' && r.status() === 400))
      problems.push(`${r.request().method()} ${u.pathname}${u.search} -> ${r.status()}`);
  });
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (r.method() === 'GET' && u.pathname === '/api/v1/jobs') listRequests.push(u.searchParams);
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

const rowIds = () => page.$$eval('#jobs-table tbody tr[data-job-id]', (rs) => rs.map((r) => Number(r.dataset.jobId)));
const byId = (id) => model.find((j) => j.id === id);

/* Waits until the table's rows are the ids wanted, in order. */
async function expectRows(want, what) {
  try {
    await page.waitForFunction((w) => {
      const got = [...document.querySelectorAll('#jobs-table tbody tr[data-job-id]')].map((r) => Number(r.dataset.jobId));
      return got.length === w.length && got.every((id, k) => id === w[k]);
    }, want, { timeout: 10_000 });
  } catch {
    assert.deepEqual(await rowIds(), want, what);
  }
}

const newest = () => [...model].sort((a, b) => b.id - a.id).map((j) => j.id);

test('the table shows names, newest first, and the Created column whole at 1400 px', async () => {
  await page.goto(`${base}/`);
  await expectRows(newest().slice(0, 50), 'the first page');
  for (const id of (await rowIds()).slice(0, 10)) {
    const j = byId(id);
    const link = await page.textContent(`#jobs-table tr[data-job-id="${id}"] .job-link`);
    assert.equal(link, j.name || `#${j.id} ${j.network}`, `job ${id}'s name`);
    const chips = await page.$$eval(`#jobs-table tr[data-job-id="${id}"] .tag-chip`, (cs) => cs.map((c) => c.textContent));
    assert.deepEqual(chips, j.tags, `job ${id}'s tags`);
  }
  // nothing overflows the table's box: the Created column is whole
  const fit = await page.$eval('#jobs-table', (t) => {
    const wrap = t.parentElement;
    const created = [...t.querySelectorAll('thead th')].pop().getBoundingClientRect();
    return { scroll: wrap.scrollWidth, client: wrap.clientWidth, right: created.right, wrapRight: wrap.getBoundingClientRect().right };
  });
  assert.ok(fit.scroll <= fit.client, `the table fits its box (${fit.scroll} > ${fit.client})`);
  assert.ok(fit.right <= fit.wrapRight + 0.5, 'Created ends inside the card');
  assert.match(await page.textContent('#jobs-summary'), new RegExp(`^${N} jobs`));
  await page.screenshot({ path: path.join(OUT, 'jobs-table-1400.png') });
  await page.setViewportSize({ width: 1920, height: 1080 });
  await page.screenshot({ path: path.join(OUT, 'jobs-table-1920.png') });
  await page.setViewportSize({ width: 1400, height: 900 });
});

test('a header click sorts by it, a second click reverses; Next and Previous page through', async () => {
  const byName = [...model].sort((a, b) => {
    const x = a.name.toLowerCase();
    const y = b.name.toLowerCase();
    return x < y ? -1 : x > y ? 1 : a.id - b.id;
  }).map((j) => j.id);
  await page.click('#jobs-table th[data-sort="name"] button');
  await expectRows(byName.slice(0, 50), 'by name');
  assert.equal(await page.getAttribute('#jobs-table th[data-sort="name"]', 'aria-sort'), 'ascending');
  await page.click('#jobs-next');
  await expectRows(byName.slice(50, 100), 'page 2 by name');
  await page.click('#jobs-next');
  await expectRows(byName.slice(100), 'page 3 by name');
  assert.ok(await page.isDisabled('#jobs-next'), 'no page after the last');
  await page.click('#jobs-prev');
  await expectRows(byName.slice(50, 100), 'back to page 2');
  await page.click('#jobs-table th[data-sort="name"] button');          // reverse: back to page 1
  await expectRows([...byName].reverse().slice(0, 50), 'by name, descending');
  assert.equal(await page.getAttribute('#jobs-table th[data-sort="name"]', 'aria-sort'), 'descending');
  const byProgress = [...model].sort((a, b) => a.progress - b.progress || a.id - b.id).map((j) => j.id);
  await page.click('#jobs-table th[data-sort="progress"] button');
  await expectRows(byProgress.slice(0, 50), 'by progress');
  await page.click('#jobs-table th[data-sort="created"] button');
  await expectRows(newest().slice(0, 50), 'back to newest first');
});

test('the status filter, the debounced search and a tag chip narrow the rows', async () => {
  await page.selectOption('#jobs-filter-status', 'failed');
  const failed = newest().filter((id) => byId(id).status === 'failed');
  await expectRows(failed.slice(0, 50), 'failed jobs');
  assert.match(await page.textContent('#jobs-summary'), new RegExp(`^${failed.length} jobs matching`));
  await page.selectOption('#jobs-filter-status', '');
  await expectRows(newest().slice(0, 50), 'every status');

  const before = listRequests.length;
  await page.type('#jobs-search', 'run-0001', { delay: 20 });
  const hits = newest().filter((id) => byId(id).name.includes('run-0001'));
  await expectRows(hits, 'search run-0001');
  const asked = listRequests.slice(before).filter((p) => p.get('q'));
  assert.ok(asked.length >= 1 && asked.length <= 2, `typing 8 characters asked ${asked.length} times`);
  assert.equal(asked.at(-1).get('q'), 'run-0001');
  await page.fill('#jobs-search', '');
  await expectRows(newest().slice(0, 50), 'search cleared');

  const tagged = newest().filter((id) => byId(id).tags.includes('baseline'));
  await page.click(`#jobs-table tr[data-job-id="${tagged[0]}"] .tag-chip:text-is("baseline")`);
  await expectRows(tagged, 'tag baseline');
  assert.match(await page.textContent('#jobs-filter-tag'), /baseline/);
  await page.click('#jobs-filter-tag');
  await expectRows(newest().slice(0, 50), 'tag filter off');
});

test('row checkboxes select runs; Compare (n) opens #/compare?runs=', async () => {
  const ids = (await rowIds()).slice(2, 5);
  assert.ok(await page.isDisabled('#jobs-compare'));
  for (const id of ids) await page.check(`#jobs-table tr[data-job-id="${id}"] .job-select`);
  assert.equal(await page.textContent('#jobs-compare'), 'Compare (3)');
  // the selection survives a page change
  await page.click('#jobs-next');
  await page.waitForSelector(`#jobs-table tr[data-job-id="${newest()[50]}"]`);
  await page.click('#jobs-prev');
  await page.waitForSelector(`#jobs-table tr[data-job-id="${ids[0]}"] .job-select:checked`);
  await page.click('#jobs-compare');
  await page.waitForFunction(() => location.hash.startsWith('#/compare'));
  const hash = await page.evaluate(() => location.hash);
  assert.equal(hash, `#/compare?runs=${[...ids].sort((a, b) => a - b).join(',')}`);
});

test('the job page edits name, tags and notes; the table shows them', async () => {
  const id = newest().find((x) => !byId(x).name);          // an unnamed job: "#id network"
  await page.goto(`${base}/#/jobs/${id}`);
  await page.waitForSelector('#job-meta-edit');
  assert.equal((await page.textContent('h1.page-title')).trim(), `Job ${id}`);
  await page.click('#job-meta-edit');
  await page.fill('#job-meta-name', 'lr 0.05 try');
  await page.fill('#job-meta-tags', 'promising, lr-sweep, promising');
  await page.fill('#job-meta-notes', 'loss flattened at epoch 3');
  await page.click('#job-meta-save');
  await page.waitForFunction(() => document.querySelector('h1.page-title')?.textContent === 'lr 0.05 try');
  assert.deepEqual(await page.$$eval('#job-meta-tags-view .tag-chip', (cs) => cs.map((c) => c.textContent)),
    ['promising', 'lr-sweep']);
  assert.equal(await page.textContent('#job-meta-notes-view'), 'loss flattened at epoch 3');
  await page.screenshot({ path: path.join(OUT, 'job-meta.png'), fullPage: true });
  // a bad edit shows the server's message
  await page.click('#job-meta-edit');
  await page.fill('#job-meta-tags', 'x'.repeat(41));
  await page.click('#job-meta-save');
  await page.waitForSelector('#job-meta-form .form-error:not([hidden])');
  assert.match(await page.textContent('#job-meta-form .form-error'), /tags must be/);
  await page.click('#job-meta-cancel');

  await page.goto(`${base}/`);
  await page.fill('#jobs-search', 'promising');
  await expectRows([id], 'found by its new tag');
  assert.equal(await page.textContent(`#jobs-table tr[data-job-id="${id}"] .job-link`), 'lr 0.05 try');
  assert.deepEqual(problems, []);
});
