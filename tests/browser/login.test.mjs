// The sign-in page in headless Chromium (issue 15): a kiln with a user shows
// the sign-in form instead of the dashboard (the API answers 401); a wrong
// password is said so; the right one loads the dashboard with the user's name
// and a sign-out control in the header, the session cookie being HttpOnly
// (the page's script cannot read it) and carrying the API calls and the job
// page's live stream; signing out, or the session being revoked, returns to
// the form. Screenshots go to tests/browser/out/ (git-ignored).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { openPage } from './lib.mjs';
import { ROOT, api, importDemo, runKiln, startServer, tempDir } from '../integration/lib/kiln.mjs';


const OUT = path.join(ROOT, 'tests', 'browser', 'out');
const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];

let tmp;
let server;
let base;
let browser;
let page;
let datasetId;
const problems = [];

before(async () => {
  mkdirSync(OUT, { recursive: true });
  tmp = tempDir('kiln-browser-login-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  const pw = path.join(tmp.dir, 'pw');
  writeFileSync(pw, 'ada-lovelace-1\n');
  const add = await runKiln(['user', 'add', 'ada', '--data', dataDir, '--password-file', pw, ...CHEAP]);
  assert.equal(add.code, 0, add.stderr);
  server = await startServer({ dataDir, args: CHEAP });
  base = server.url;
  ({ browser, page } = await openPage(base, {
    viewport: { width: 1280, height: 800 }, problems,
    // 401s are this test's subject; any other console error is a problem.
    allowConsole: (t) => /status of 401/.test(t),
  }));
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

const shot = (name) => page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });

test('a kiln with users shows the sign-in form, not the dashboard', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('#login-form', { timeout: 15_000 });
  assert.equal(await page.locator('#datasets-table').count(), 0);
  assert.equal(await page.textContent('#session-info'), '');
  assert.equal(await page.title(), 'Sign in · kiln');
  await shot('login');
});

test('a wrong password is said so and signs nobody in', async () => {
  await page.fill('#login-user', 'ada');
  await page.fill('#login-password', 'not-her-password');
  await page.click('#login-submit');
  await page.waitForSelector('#login-error:not([hidden])');
  assert.equal(await page.textContent('#login-error'), 'Wrong user name or password.');
  assert.equal(await page.locator('#login-form').count(), 1);
  await shot('login-error');
});

test('the right password loads the dashboard with the user in the header', async () => {
  await page.fill('#login-password', 'ada-lovelace-1');
  await page.click('#login-submit');
  await page.waitForSelector(`#datasets-table tr[data-dataset-id="${datasetId}"]`, { timeout: 15_000 });
  await page.waitForSelector('#info-version');
  assert.match(await page.textContent('#session-user'), /^ada · admin$/);
  assert.equal(await page.locator('#sign-out').count(), 1);
  // HttpOnly: the page's own script cannot read the session.
  assert.ok(!(await page.evaluate(() => document.cookie)).includes('kiln_session'));
  const cookies = await page.context().cookies();
  const c = cookies.find((x) => x.name === 'kiln_session');
  assert.ok(c, 'the browser keeps the session cookie');
  assert.equal(c.httpOnly, true);
  assert.equal(c.sameSite, 'Strict');
  await shot('login-dashboard');
});

test('the cookie carries a job page\'s live stream', async () => {
  const cookie = (await page.context().cookies()).find((x) => x.name === 'kiln_session');
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, batch_size: 64 },
    { headers: { cookie: `kiln_session=${cookie.value}` } });
  assert.equal(r.status, 201, r.text);
  const events = page.waitForResponse((res) => res.url().endsWith(`/api/v1/jobs/${r.body.id}/events`));
  await page.goto(`${base}/#/jobs/${r.body.id}`);
  const res = await events;
  assert.equal(res.status(), 200);
  await page.waitForSelector('main[data-status]', { timeout: 30_000 });
  await api(base, 'POST', `/api/v1/jobs/${r.body.id}/cancel`, undefined,
    { headers: { cookie: `kiln_session=${cookie.value}` } });
});

test('signing out returns to the form, and so does a session revoked elsewhere', async () => {
  await page.goto(`${base}/#/`);
  await page.waitForSelector('#sign-out');
  await page.click('#sign-out');
  await page.waitForSelector('#login-form');
  assert.equal(await page.textContent('#session-info'), '');
  const left = (await page.context().cookies()).find((x) => x.name === 'kiln_session');
  assert.ok(!left, 'the cookie is cleared');

  // Sign in again, then end the session behind the page's back: the next call's 401 shows the form.
  await page.fill('#login-user', 'ada');
  await page.fill('#login-password', 'ada-lovelace-1');
  await page.click('#login-submit');
  await page.waitForSelector('#sign-out');
  const cookie = (await page.context().cookies()).find((x) => x.name === 'kiln_session');
  const out = await api(base, 'DELETE', '/api/v1/session', undefined, { headers: { cookie: `kiln_session=${cookie.value}` } });
  assert.equal(out.status, 204);
  await page.evaluate(() => { location.hash = '#/datasets/1'; });
  await page.waitForSelector('#login-notice', { timeout: 15_000 });
  assert.match(await page.textContent('#login-notice'), /signed out/);
  await shot('login-expired');
  assert.deepEqual(problems, []);
});
