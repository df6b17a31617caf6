// The dashboard's queue card (issue 17) in headless Chromium, against a real
// `kiln serve --max-jobs 1` (open on loopback: every job is the visitor's):
// one job running shows the devices it got; two waiting ones show their
// position, priority and reason; the ▲ button of the second raises its
// priority by one with PATCH and the card reorders them. Screenshot:
// tests/browser/out/queue.png.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, describeResponse, importDemo, startServer, tempDir, waitFor } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };

let tmp;
let server;
let base;
let browser;
let page;
const problems = [];
const ids = {};

async function job(fields) {
  const r = await api(base, 'POST', '/api/v1/jobs', { network: TINY, batch_size: 16, ...fields });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-queue-page-');
  const dataDir = path.join(tmp.dir, 'data');
  const ds = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ['--max-jobs', '1'] });
  base = server.url;
  ids.a = await job({ dataset_id: ds, epochs: 10000, name: 'long run' });
  await waitFor(async () => (await api(base, 'GET', `/api/v1/jobs/${ids.a}`)).body.status === 'running',
    { what: 'the first job running' });
  ids.b = await job({ dataset_id: ds, epochs: 1, name: 'first waiting', priority: 1 });
  ids.c = await job({ dataset_id: ds, epochs: 1, name: 'second waiting', priority: 1 });
  ({ browser, page } = await openPage(base, { viewport: { width: 1400, height: 900 }, problems }));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.request().method()} ${new URL(r.url()).pathname} -> ${r.status()}`);
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) {
    for (const id of Object.values(ids)) await api(base, 'POST', `/api/v1/jobs/${id}/cancel`);
    await server.stop();
  }
  if (tmp) tmp.cleanup();
});

const rows = () => page.$$eval('#queue-table tbody tr[data-id]', (rs) => rs.map((r) => ({
  id: Number(r.dataset.id),
  cells: [...r.querySelectorAll('td')].map((td) => td.textContent.trim()),
})));

test('the queue card: running with devices, waiting in order with reasons, ▲ reorders', async () => {
  await page.goto(`${base}/#/`);
  await page.waitForSelector(`#queue-table tr[data-id="${ids.c}"]`);
  let r = await rows();
  assert.deepEqual(r.map((x) => x.id), [ids.a, ids.b, ids.c]);
  assert.equal(r[0].cells[0], '', 'a running job has no position');
  assert.match(r[0].cells[4], /^on cpu$/);
  assert.deepEqual(r.slice(1).map((x) => x.cells[0]), ['1', '2']);
  for (const x of r.slice(1)) assert.equal(x.cells[4], `a free CPU slot (1 of 1 in use by job ${ids.a})`);
  assert.match(await page.textContent('#queue-summary'), /1 running · 2 waiting/);
  await page.screenshot({ path: path.join(OUT, 'queue.png'), fullPage: false });

  await page.click(`#queue-table tr[data-id="${ids.c}"] button.queue-up`);
  await waitFor(async () => {
    r = await rows();
    return r.length === 3 && r[1].id === ids.c;
  }, { timeoutMs: 10_000, what: 'the raised job first in the queue' });
  assert.match(r[1].cells[3], /2/);
  const c = await api(base, 'GET', `/api/v1/jobs/${ids.c}`);
  assert.equal(c.body.priority, 2);

  // A job's name in the card opens its page (the links said #/job/ID, which no route took).
  await page.click(`#queue-table tr[data-id="${ids.a}"] a`);
  await page.waitForSelector('#main[data-view="job"]');
  assert.equal(await page.evaluate(() => location.hash), `#/jobs/${ids.a}`);
  assert.deepEqual(problems, []);
});
