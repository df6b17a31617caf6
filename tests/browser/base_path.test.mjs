// The dashboard behind a reverse proxy's sub-path: `kiln serve --base-path /kiln`
// in headless Chromium. The home page loads from /kiln/ and every request it
// makes (scripts, styles, vendored uPlot, API calls) stays under /kiln/; a job
// page follows its live stream (EventSource on /kiln/api/v1/jobs/ID/events) to
// `done`; the model download and the snapshot links work; /kiln redirects to
// /kiln/ and a path outside the prefix is a 404 outside_base_path; the sign-in
// page works there and its cookie is scoped to /kiln/.
// Screenshots go to tests/browser/out/ (git-ignored).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, describeResponse, importDemo, runKiln, startServer, tempDir } from '../integration/lib/kiln.mjs';

const OUT = path.join(ROOT, 'tests', 'browser', 'out');

let tmp;
let server;
let base;          // http://127.0.0.1:PORT/kiln
let origin;        // http://127.0.0.1:PORT
let datasetId;
let browser;
let page;
let jobId;
const problems = [];
const requests = [];   // the path of every request the page made to the server

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-base-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ['--base-path', '/kiln'] });
  base = server.url;
  origin = new URL(base).origin;
  assert.equal(base, `${origin}/kiln`, 'the listening line names the prefix');
  ({ browser, page } = await openPage(base, {
    viewport: { width: 1280, height: 860 }, problems,
    // the outside-the-prefix navigation below is a 404 on purpose
    allowConsole: (t) => /Failed to load resource: the server responded with a status of 40[14]/.test(t),
  }));
  page.on('request', (r) => { const u = new URL(r.url()); if (u.origin === origin) requests.push(u.pathname); });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function shot(name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

test('the home page loads under /kiln/ and every request it makes stays under the prefix', async () => {
  const res = await page.goto(`${base}/`);
  assert.equal(res.status(), 200);
  await page.waitForSelector('#info-version', { timeout: 15_000 });
  await page.waitForSelector(`#datasets-table tr[data-dataset-id="${datasetId}"]`, { timeout: 15_000 });
  assert.equal(await page.evaluate(() => typeof window.uPlot), 'function', 'vendored uPlot loaded from /kiln/static/');
  assert.equal(await page.evaluate(() => document.baseURI), `${base}/`, 'the server pointed <base> at the prefix');
  for (const p of ['/kiln/', '/kiln/app.js', '/kiln/api.js', '/kiln/style.css', '/kiln/static/vendor/uPlot.iife.min.js',
    '/kiln/api/v1/session', '/kiln/api/v1/info', '/kiln/api/v1/datasets']) {
    assert.ok(requests.includes(p), `the page asked for ${p}: ${requests.join(' ')}`);
  }
  const outside = requests.filter((p) => !p.startsWith('/kiln/'));
  assert.deepEqual(outside, [], 'no request outside /kiln/');
  assert.deepEqual(problems, []);
  await shot('base-path-home');
});

test('a job page follows its live stream to done under the prefix; its downloads work', { timeout: 300_000 }, async () => {
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64 });
  assert.equal(r.status, 201, describeResponse('POST', '/kiln/api/v1/jobs', r));
  jobId = r.body.id;
  const streams = [];
  page.on('request', (q) => { if (q.url().includes('/events')) streams.push(new URL(q.url()).pathname); });
  await page.goto(`${base}/#/jobs/${jobId}`);
  await page.waitForSelector('main[data-status="done"]', { timeout: 240_000 });
  assert.ok(streams.includes(`/kiln/api/v1/jobs/${jobId}/events`), `EventSource under the prefix: ${streams.join(' ')}`);
  assert.match(await page.textContent('#stat-epoch'), /1\s*\/\s*1/);
  assert.equal(await page.getAttribute('#job-progress', 'aria-valuenow'), '100');

  const dl = page.locator('#job-download');
  assert.ok(await dl.isVisible(), 'the download link shows once done');
  assert.equal(await dl.evaluate((a) => a.href), `${base}/api/v1/jobs/${jobId}/model?format=tar`);
  const [download] = await Promise.all([page.waitForEvent('download'), dl.click()]);
  assert.equal(download.suggestedFilename(), `kiln-job-${jobId}.tar`);   // the server's Content-Disposition
  const file = path.join(tmp.dir, 'model.tar');
  await download.saveAs(file);
  assert.ok(statSync(file).size > 10_000, 'the tarball arrived');

  // The snapshot table's links (API URLs the server gave) resolve under the prefix too.
  await page.waitForSelector('a[download$=".onnx"]', { timeout: 30_000 });
  const links = await page.$$eval('a[download]', (as) => as.map((a) => a.href));
  assert.ok(links.length >= 3, links.join(' '));
  for (const l of links) assert.ok(l.startsWith(`${base}/api/v1/jobs/${jobId}/model?`), l);
  const onnx = links.find((l) => l.includes('format=onnx'));
  const got = await page.evaluate(async (u) => { const x = await fetch(u); return { s: x.status, n: (await x.arrayBuffer()).byteLength }; }, onnx);
  assert.equal(got.s, 200);
  assert.ok(got.n > 10_000);

  assert.deepEqual(requests.filter((p) => !p.startsWith('/kiln/')), [], 'no request outside /kiln/');
  assert.deepEqual(problems, []);
  await shot('base-path-job');
});

test('/kiln redirects to /kiln/; a path outside the prefix is 404 outside_base_path', async () => {
  const res = await page.goto(`${origin}/kiln`);
  assert.equal(page.url(), `${base}/`);
  assert.equal(res.status(), 200);
  await page.waitForSelector('#info-version', { timeout: 15_000 });
  for (const h of [`${base}/healthz`, `${origin}/healthz`]) {
    const r = await fetch(h);
    assert.equal(r.status, 200, `${h} answers (the container's HEALTHCHECK needs no prefix)`);
  }
  const doc = await api(base, 'GET', '/api/v1/openapi.json');
  assert.equal(doc.status, 200);
  assert.equal(doc.body.servers[0].url, '/kiln', 'the OpenAPI document names the prefix as its server');
  for (const p of ['/', '/api/v1/info', '/app.js', '/kilnx/api/v1/info']) {
    const out = await page.goto(`${origin}${p}`);
    assert.equal(out.status(), 404, p);
    const body = JSON.parse(await out.text());
    assert.equal(body.error.code, 'outside_base_path', p);
    assert.match(body.error.message, /served under \/kiln\//);
  }
});

test('the sign-in page works under the prefix, and its cookie is scoped to /kiln/', async () => {
  const pw = path.join(tmp.dir, 'pw');
  writeFileSync(pw, 'base-path-secret-1\n');
  const add = await runKiln(['user', 'add', 'bea', '--data', server.dataDir, '--password-file', pw,
    '--limit', 'password-ops=1', '--limit', 'password-mem=8K']);
  assert.equal(add.code, 0, add.stderr);
  await page.goto(`${base}/`);
  await page.waitForSelector('#login-form', { timeout: 15_000 });
  await page.fill('#login-user', 'bea');
  await page.fill('#login-password', 'base-path-secret-1');
  await page.click('#login-submit');
  await page.waitForSelector(`#datasets-table tr[data-dataset-id="${datasetId}"]`, { timeout: 15_000 });
  assert.match(await page.textContent('#session-user'), /^bea/);
  const c = (await page.context().cookies()).find((x) => x.name === 'kiln_session');
  assert.ok(c, 'the session cookie');
  assert.equal(c.path, '/kiln/');
  assert.deepEqual(requests.filter((p) => !p.startsWith('/kiln/') && !['/kiln', '/', '/api/v1/info', '/app.js', '/kilnx/api/v1/info'].includes(p)),
    [], 'no request outside /kiln/ but the ones the test sent there');
  await shot('base-path-signed-in');
});
