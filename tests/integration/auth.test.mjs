// Users, tokens, sessions and ownership (issue 15), against a real `kiln serve`:
//   - open mode: on loopback with no users everything answers as before;
//   - the first user (kiln user add, while the server runs) closes it: every
//     API call then needs a bearer token or the session cookie (401 with
//     WWW-Authenticate: Bearer), except /healthz, the OpenAPI document, the
//     sign-in routes and the dashboard's files;
//   - tokens: made for a password, listed without their secret, revoked
//     (then 401), expired (then 401); users: admins only;
//   - ownership between two users: another user's job, dataset and their
//     sub-resources answer 404 everywhere, lists are filtered, a shared dataset
//     is readable and trainable but not deletable, an admin sees everything;
//   - the session cookie: sign in, use the API and the SSE stream with it, sign out;
//   - kiln serve --host 0.0.0.0 refuses to start without users (exit 2) unless
//     --insecure-no-auth, and requires a sign-in once users exist.
// Argon2id runs at libsodium's minimum cost here (--limit password-ops=1,
// password-mem=8K).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, importDemo, makeDigitArchive, runKiln, startServer, tempDir, waitDataset, waitFor,
} from './lib/kiln.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];

let tmp;
let dataDir;
let server;
let base;
let demoId;                 // imported by kiln import before any user: nobody's
const tok = {};             // user name -> bearer token
const ids = {};             // user name -> user id

const as = (who) => ({ headers: { authorization: `Bearer ${tok[who]}` } });
const call = (method, p, body, who) => api(base, method, p, body, who ? as(who) : {});

async function expectStatus(method, p, body, who, status) {
  const r = await call(method, p, body, who);
  assert.equal(r.status, status, describeResponse(method, p, r));
  return r;
}

function passwordFile(name, password) {
  const f = path.join(tmp.dir, `${name}.pw`);
  writeFileSync(f, `${password}\n`);
  return f;
}

async function tokenFor(name, password, extra = {}) {
  const r = await api(base, 'POST', '/api/v1/tokens', { user: name, password, ...extra });
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/tokens', r));
  return r.body;
}

before(async () => {
  tmp = tempDir('kiln-auth-');
  dataDir = path.join(tmp.dir, 'data');
  demoId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: CHEAP });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('on loopback with no users the server is open, as before', async () => {
  const s = await expectStatus('GET', '/api/v1/session', undefined, null, 200);
  assert.deepEqual(s.body, { auth_required: false, user: null });
  const ds = await expectStatus('GET', '/api/v1/datasets', undefined, null, 200);
  assert.ok(ds.body.items.some((d) => d.id === demoId));
  assert.equal(ds.body.items.find((d) => d.id === demoId).owner_id, null);
  await expectStatus('GET', '/api/v1/jobs', undefined, null, 200);
});

test('the first user, added by kiln user add while the server runs, closes the API', async () => {
  const add = await runKiln(['user', 'add', 'alice', '--data', dataDir, '--password-file',
    passwordFile('alice', 'alice-secret-1'), ...CHEAP]);
  assert.equal(add.code, 0, add.stderr);
  assert.match(add.stdout, /user alice added \(id \d+, admin\)/);
  const dup = await runKiln(['user', 'add', 'ALICE', '--data', dataDir, '--password-file',
    passwordFile('alice2', 'another-one-2'), ...CHEAP]);
  assert.equal(dup.code, 1);
  assert.match(dup.stderr, /exists already/);

  for (const p of ['/api/v1/jobs', '/api/v1/datasets', '/api/v1/info', '/api/v1/limits', '/api/v1/session',
    '/api/v1/tokens', `/api/v1/datasets/${demoId}`]) {
    const r = await call('GET', p);
    assert.equal(r.status, 401, describeResponse('GET', p, r));
    assert.equal(r.body.error.code, 'unauthorized');
    assert.equal(r.headers.get('www-authenticate'), 'Bearer');
  }
  // A write without a sign-in is refused before anything happens.
  const post = await call('POST', '/api/v1/jobs', { dataset_id: demoId, network: 'lenet', epochs: 1 });
  assert.equal(post.status, 401);
  // Open: liveness, the API's description, the dashboard's files.
  await expectStatus('GET', '/healthz', undefined, null, 200);
  await expectStatus('GET', '/api/v1/openapi.json', undefined, null, 200);
  const page = await fetch(`${base}/`);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /<html/);
  // A made-up token is refused.
  tok.nobody = `kiln_${'A'.repeat(43)}`;
  const bad = await call('GET', '/api/v1/jobs', undefined, 'nobody');
  assert.equal(bad.status, 401);
  assert.match(bad.body.error.message, /not valid/);
});

test('tokens: a password buys one; wrong names and passwords are the same 401', async () => {
  for (const body of [{ user: 'alice', password: 'wrong-password' }, { user: 'mallory', password: 'alice-secret-1' }]) {
    const r = await api(base, 'POST', '/api/v1/tokens', body);
    assert.equal(r.status, 401, describeResponse('POST', '/api/v1/tokens', r));
    assert.equal(r.body.error.code, 'invalid_credentials');
    assert.equal(r.body.error.message, 'wrong user name or password');
  }
  const r = await api(base, 'POST', '/api/v1/tokens', { user: 'alice', password: 'alice-secret-1', bogus: 1 });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.code, 'unknown_field');

  const t = await tokenFor('alice', 'alice-secret-1', { name: 'laptop' });
  assert.match(t.token, /^kiln_[A-Za-z0-9_-]{43}$/);
  assert.equal(t.name, 'laptop');
  assert.equal(t.expires_at, null);
  tok.alice = t.token;
  const me = await expectStatus('GET', '/api/v1/session', undefined, 'alice', 200);
  assert.equal(me.body.auth_required, true);
  assert.equal(me.body.user.name, 'alice');
  assert.equal(me.body.user.admin, true);
  ids.alice = me.body.user.id;
  // The admin sees the dataset imported before users existed.
  const ds = await expectStatus('GET', '/api/v1/datasets', undefined, 'alice', 200);
  assert.ok(ds.body.items.some((d) => d.id === demoId));
});

test('users: admins add them through the API; others may not', async () => {
  for (const name of ['bob', 'carol']) {
    const r = await expectStatus('POST', '/api/v1/users', { name, password: `${name}-secret-1` }, 'alice', 201);
    assert.equal(r.body.name, name);
    assert.equal(r.body.admin, false);
    ids[name] = r.body.id;
  }
  await expectStatus('POST', '/api/v1/users', { name: 'Bob', password: 'whatever-1' }, 'alice', 409);
  await expectStatus('POST', '/api/v1/users', { name: 'dave', password: 'short' }, 'alice', 400);
  await expectStatus('POST', '/api/v1/users', { name: '../x', password: 'long-enough' }, 'alice', 400);
  const bob = await tokenFor('bob', 'bob-secret-1', { name: 'ci', expires_in_days: 30 });
  assert.match(bob.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  tok.bob = bob.token;
  tok.carol = (await tokenFor('carol', 'carol-secret-1')).token;
  const list = await expectStatus('GET', '/api/v1/users', undefined, 'alice', 200);
  assert.deepEqual(list.body.items.map((u) => u.name), ['alice', 'bob', 'carol']);
  await expectStatus('GET', '/api/v1/users', undefined, 'bob', 403);
  await expectStatus('POST', '/api/v1/users', { name: 'eve', password: 'eve-secret-1', admin: true }, 'bob', 403);
  await expectStatus('DELETE', `/api/v1/users/${ids.alice}`, undefined, 'bob', 403);
  // The last admin stays while others remain.
  const last = await expectStatus('DELETE', `/api/v1/users/${ids.alice}`, undefined, 'alice', 409);
  assert.equal(last.body.error.code, 'last_admin');
});

test('tokens are listed without their secret, each user their own, an admin all', async () => {
  const bobs = await expectStatus('GET', '/api/v1/tokens', undefined, 'bob', 200);
  assert.equal(bobs.body.items.length, 1);
  assert.equal(bobs.body.items[0].user, 'bob');
  assert.equal(bobs.body.items[0].name, 'ci');
  assert.ok(!('token' in bobs.body.items[0]));
  assert.ok(!bobs.text.includes(tok.bob), 'the secret is never listed');
  assert.ok(bobs.body.items[0].last_used_at, 'its use is recorded');
  const all = await expectStatus('GET', '/api/v1/tokens', undefined, 'alice', 200);
  assert.deepEqual(new Set(all.body.items.map((t) => t.user)), new Set(['alice', 'bob', 'carol']));
  for (const t of [tok.alice, tok.bob, tok.carol]) assert.ok(!all.text.includes(t));
  // A signed-in caller may make another token without the password.
  const more = await expectStatus('POST', '/api/v1/tokens', { name: 'second' }, 'carol', 201);
  assert.equal(more.body.user, 'carol');
  await expectStatus('POST', '/api/v1/tokens', { name: 'anonymous' }, null, 401);
});

let bobDataset;
let bobJob;
let carolJob;

test('ownership: a dataset and a job belong to their maker; the other user gets 404 everywhere', async () => {
  const work = path.join(tmp.dir, 'work');
  const archive = await makeDigitArchive(work, 12);
  const form = new FormData();
  form.append('name', 'bobs-digits');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const up = await api(base, 'POST', '/api/v1/datasets', form, as('bob'));
  assert.equal(up.status, 202, describeResponse('POST', '/api/v1/datasets', up));
  bobDataset = up.body.id;
  assert.equal(up.body.owner_id, ids.bob);
  let d;
  await waitFor(async () => {
    d = await call('GET', `/api/v1/datasets/${bobDataset}`, undefined, 'bob');
    return d.status === 200 && d.body.status !== 'importing';
  }, { timeoutMs: 120_000, what: 'bob\'s dataset' });
  assert.equal(d.body.status, 'ready', JSON.stringify(d.body));

  const job = await expectStatus('POST', '/api/v1/jobs',
    { dataset_id: bobDataset, network: 'lenet', epochs: 1, batch_size: 16 }, 'bob', 201);
  bobJob = job.body.id;
  assert.equal(job.body.owner_id, ids.bob);

  // Carol sees none of it, and cannot tell it from nothing.
  const missing = await call('GET', '/api/v1/jobs/999999', undefined, 'carol');
  const other = await expectStatus('GET', `/api/v1/jobs/${bobJob}`, undefined, 'carol', 404);
  assert.equal(other.body.error.code, missing.body.error.code);
  for (const [m, p] of [
    ['GET', `/api/v1/jobs/${bobJob}/metrics`], ['GET', `/api/v1/jobs/${bobJob}/log`],
    ['GET', `/api/v1/jobs/${bobJob}/events`], ['GET', `/api/v1/jobs/${bobJob}/model`],
    ['GET', `/api/v1/jobs/${bobJob}/snapshots`], ['GET', `/api/v1/jobs/${bobJob}/evaluations`],
    ['POST', `/api/v1/jobs/${bobJob}/evaluations`], ['POST', `/api/v1/jobs/${bobJob}/cancel`],
    ['DELETE', `/api/v1/jobs/${bobJob}`],
    ['GET', `/api/v1/datasets/${bobDataset}`], ['GET', `/api/v1/datasets/${bobDataset}/samples`],
    ['GET', `/api/v1/datasets/${bobDataset}/mean.png`],
    ['GET', `/api/v1/datasets/${bobDataset}/image.png?split=train&index=0`],
    ['DELETE', `/api/v1/datasets/${bobDataset}`], ['PATCH', `/api/v1/datasets/${bobDataset}`],
    ['GET', `/api/v1/datasets/${demoId}`],
  ]) {
    const body = m === 'PATCH' ? { shared: true } : m === 'POST' && p.endsWith('evaluations') ? {} : undefined;
    const r = await call(m, p, body, 'carol');
    assert.equal(r.status, 404, describeResponse(m, p, r));
  }
  const inf = new FormData();
  inf.append('image', new Blob([Buffer.from('not a png')], { type: 'image/png' }), 'x.png');
  const infer = await api(base, 'POST', `/api/v1/jobs/${bobJob}/infer`, inf, as('carol'));
  assert.equal(infer.status, 404, describeResponse('POST', 'infer', infer));
  // Training on another user's dataset: as if it did not exist.
  const train = await expectStatus('POST', '/api/v1/jobs',
    { dataset_id: bobDataset, network: 'lenet', epochs: 1 }, 'carol', 422);
  assert.equal(train.body.error.code, 'dataset_not_found');
  // Lists are filtered.
  const cj = await expectStatus('GET', '/api/v1/jobs', undefined, 'carol', 200);
  assert.deepEqual(cj.body.items, []);
  const cd = await expectStatus('GET', '/api/v1/datasets', undefined, 'carol', 200);
  assert.deepEqual(cd.body.items, []);
  const bj = await expectStatus('GET', '/api/v1/jobs', undefined, 'bob', 200);
  assert.deepEqual(bj.body.items.map((j) => j.id), [bobJob]);
  const bd = await expectStatus('GET', '/api/v1/datasets', undefined, 'bob', 200);
  assert.deepEqual(bd.body.items.map((x) => x.id), [bobDataset]);
  // Bob reaches his own.
  await expectStatus('GET', `/api/v1/jobs/${bobJob}/metrics`, undefined, 'bob', 200);
  await expectStatus('GET', `/api/v1/datasets/${bobDataset}/samples`, undefined, 'bob', 200);
});

test('a shared dataset is readable and trainable by all, changed only by its owner or an admin', async () => {
  const r = await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { shared: true }, 'bob', 200);
  assert.equal(r.body.shared, true);
  await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { shared: 'yes' }, 'bob', 400);
  await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { owner_id: 3 }, 'bob', 400);
  const g = await expectStatus('GET', `/api/v1/datasets/${bobDataset}`, undefined, 'carol', 200);
  assert.equal(g.body.shared, true);
  const cd = await expectStatus('GET', '/api/v1/datasets', undefined, 'carol', 200);
  assert.deepEqual(cd.body.items.map((x) => x.id), [bobDataset]);
  await expectStatus('GET', `/api/v1/datasets/${bobDataset}/samples`, undefined, 'carol', 200);
  const del = await expectStatus('DELETE', `/api/v1/datasets/${bobDataset}`, undefined, 'carol', 403);
  assert.equal(del.body.error.code, 'forbidden');
  await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { shared: false }, 'carol', 403);
  const job = await expectStatus('POST', '/api/v1/jobs',
    { dataset_id: bobDataset, network: 'lenet', epochs: 1, batch_size: 16 }, 'carol', 201);
  carolJob = job.body.id;
  assert.equal(job.body.owner_id, ids.carol);
  // ... and bob does not see carol's job on his dataset.
  await expectStatus('GET', `/api/v1/jobs/${carolJob}`, undefined, 'bob', 404);
});

test('a sweep\'s trial and a resumed job may not use a dataset their owner cannot read', async () => {
  // Bob's sweep names the demo (nobody's, not shared) in its space, beside his own base dataset:
  // as its first trial the sweep is refused; as its second, that trial fails and makes no job.
  const sweepOf = (values) => ({
    base: { dataset_id: bobDataset, network: 'lenet', epochs: 1, batch_size: 16 },
    method: 'grid', parallel: 2, space: { dataset_id: { values } },
  });
  const first = await expectStatus('POST', '/api/v1/sweeps', sweepOf([demoId]), 'bob', 422);
  assert.match(first.body.error.message, new RegExp(`first trial: dataset ${demoId} does not exist`));
  const sw = await expectStatus('POST', '/api/v1/sweeps', sweepOf([bobDataset, demoId]), 'bob', 201);
  let s;
  await waitFor(async () => {
    s = (await call('GET', `/api/v1/sweeps/${sw.body.id}`, undefined, 'bob')).body;
    return s.trials && s.trials.length === 2;
  }, { timeoutMs: 30_000, what: 'the sweep\'s two trials' });
  const bad = s.trials.find((t) => t.params && t.params.dataset_id === demoId) || s.trials.find((t) => t.state === 'failed');
  assert.ok(bad, JSON.stringify(s.trials));
  assert.equal(bad.state, 'failed', JSON.stringify(bad));
  assert.equal(bad.job_id, null, 'no job was made on the demo');
  assert.match(JSON.stringify(bad), new RegExp(`dataset ${demoId} does not exist`));
  const cancel = await call('POST', `/api/v1/sweeps/${sw.body.id}/cancel`, undefined, 'bob');
  assert.ok(cancel.status < 300, describeResponse('POST', 'cancel', cancel));
  await waitFor(async () => (await call('GET', `/api/v1/sweeps/${sw.body.id}`, undefined, 'bob')).body.state !== 'running',
    { timeoutMs: 30_000, what: 'the sweep cancelled' });
  // Bob's job list is his one job again, as the tests after this expect.
  for (const t of s.trials.filter((x) => x.job_id)) {
    await waitFor(async () => (await call('DELETE', `/api/v1/jobs/${t.job_id}`, undefined, 'bob')).status === 204,
      { timeoutMs: 30_000, what: `the trial's job ${t.job_id} deleted` });
  }
  // Carol's job on bob's dataset, after he unshares it, does not run again.
  await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { shared: false }, 'bob', 200);
  const res = await expectStatus('POST', `/api/v1/jobs/${carolJob}/resume`, undefined, 'carol', 422);
  assert.equal(res.body.error.code, 'dataset_not_found');
  await expectStatus('PATCH', `/api/v1/datasets/${bobDataset}`, { shared: true }, 'bob', 200);
});

test('an admin sees and reaches everyone\'s', async () => {
  const jobs = await expectStatus('GET', '/api/v1/jobs', undefined, 'alice', 200);
  const seen = new Set(jobs.body.items.map((j) => j.id));
  assert.ok(seen.has(bobJob) && seen.has(carolJob));
  await expectStatus('GET', `/api/v1/jobs/${bobJob}`, undefined, 'alice', 200);
  await expectStatus('GET', `/api/v1/datasets/${bobDataset}/samples`, undefined, 'alice', 200);
  await expectStatus('GET', `/api/v1/jobs/${carolJob}/metrics`, undefined, 'alice', 200);
});

/* Reads an SSE stream with headers until its first event; resolves to {status, first}. */
async function firstEvent(url, headers) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 30_000);
  try {
    const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: ctl.signal });
    if (res.status !== 200) return { status: res.status, body: await res.json() };
    // Up to the first event: the stream opens with a comment line (": events
    // of job N"), which may arrive in a read of its own before any event.
    const reader = res.body.getReader();
    let text = '';
    while (!/^(event|id|data): [^\n]*\n(?:[^\n]+\n)*\n/m.test(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    ctl.abort();
    return { status: 200, type: res.headers.get('content-type'), first: text };
  } finally {
    clearTimeout(timer);
  }
}

test('the session cookie: sign in, use the API and the SSE stream, sign out', async () => {
  const bad = await api(base, 'POST', '/api/v1/session', { user: 'bob', password: 'nope-nope' });
  assert.equal(bad.status, 401);
  assert.equal(bad.headers.get('set-cookie'), null);
  const r = await api(base, 'POST', '/api/v1/session', { user: 'bob', password: 'bob-secret-1' });
  assert.equal(r.status, 200, describeResponse('POST', '/api/v1/session', r));
  assert.equal(r.body.user.name, 'bob');
  const set = r.headers.get('set-cookie');
  assert.match(set, /^kiln_session=kiln_[A-Za-z0-9_-]{43}; /);
  for (const attr of ['HttpOnly', 'SameSite=Strict', 'Path=/', 'Max-Age=604800']) assert.ok(set.includes(attr), set);
  const cookie = { cookie: set.split(';')[0] };

  const me = await api(base, 'GET', '/api/v1/session', undefined, { headers: cookie });
  assert.equal(me.body.user.name, 'bob');
  const jobs = await api(base, 'GET', '/api/v1/jobs', undefined, { headers: cookie });
  assert.deepEqual(jobs.body.items.map((j) => j.id), [bobJob]);
  // A session is not a bearer token.
  const asBearer = await api(base, 'GET', '/api/v1/jobs', undefined,
    { headers: { authorization: `Bearer ${cookie.cookie.split('=')[1]}` } });
  assert.equal(asBearer.status, 401);

  // The SSE stream, as EventSource asks for it: with the cookie events come; without, 401.
  const url = `${base}/api/v1/jobs/${bobJob}/events`;
  const ok = await firstEvent(url, cookie);
  assert.equal(ok.status, 200);
  assert.match(ok.type, /^text\/event-stream/);
  assert.match(ok.first, /^(event|id|data): /m);
  const none = await firstEvent(url, {});
  assert.equal(none.status, 401);
  assert.equal(none.body.error.code, 'unauthorized');
  const carols = await firstEvent(url, { authorization: `Bearer ${tok.carol}` });
  assert.equal(carols.status, 404);

  // Cancel with the cookie, then sign out: the cookie stops working.
  await waitFor(async () => {
    const c = await api(base, 'POST', `/api/v1/jobs/${bobJob}/cancel`, undefined, { headers: cookie });
    return c.status === 202 || c.status === 409;
  }, { what: 'the cancel' });
  const out = await api(base, 'DELETE', '/api/v1/session', undefined, { headers: cookie });
  assert.equal(out.status, 204);
  assert.match(out.headers.get('set-cookie'), /^kiln_session=; .*Max-Age=0/);
  const after = await api(base, 'GET', '/api/v1/jobs', undefined, { headers: cookie });
  assert.equal(after.status, 401);
  assert.match(after.body.error.message, /sign in again/);
});

test('revoked and expired tokens answer 401', async () => {
  const mine = await expectStatus('GET', '/api/v1/tokens', undefined, 'bob', 200);
  const id = mine.body.items[0].id;
  await expectStatus('DELETE', `/api/v1/tokens/${id}`, undefined, 'carol', 404);   // not hers
  await expectStatus('GET', '/api/v1/jobs', undefined, 'bob', 200);
  await expectStatus('DELETE', `/api/v1/tokens/${id}`, undefined, 'bob', 204);
  const r = await expectStatus('GET', '/api/v1/jobs', undefined, 'bob', 401);
  assert.equal(r.body.error.code, 'unauthorized');
  const listed = await expectStatus('GET', '/api/v1/tokens', undefined, 'alice', 200);
  assert.equal(listed.body.items.find((t) => t.id === id).revoked, true);

  // Expiry: a one-day token whose day has passed (moved into the past in the
  // database, as time would) stops working at once.
  const t = await tokenFor('bob', 'bob-secret-1', { expires_in_days: 1 });
  tok.bob = t.token;
  await expectStatus('GET', '/api/v1/jobs', undefined, 'bob', 200);
  execFileSync('python3', ['-c', `import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
db.execute("UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE id = ?", (int(sys.argv[2]),))
db.commit()`, path.join(dataDir, 'kiln.db'), String(t.id)]);
  await expectStatus('GET', '/api/v1/jobs', undefined, 'bob', 401);
});

test('kiln token add prints a working token once; kiln user list and remove', async () => {
  const add = await runKiln(['token', 'add', 'carol', '--data', dataDir, '--expires-days', '2']);
  assert.equal(add.code, 0, add.stderr);
  const t = add.stdout.trim();
  assert.match(t, /^kiln_[A-Za-z0-9_-]{43}$/);
  const me = await api(base, 'GET', '/api/v1/session', undefined, { headers: { authorization: `Bearer ${t}` } });
  assert.equal(me.body.user.name, 'carol');
  const list = await runKiln(['user', 'list', '--data', dataDir]);
  assert.equal(list.code, 0);
  assert.match(list.stdout, /alice\s+yes/);
  assert.match(list.stdout, /carol\s+no/);
  const rm = await runKiln(['user', 'remove', 'carol', '--data', dataDir]);
  assert.equal(rm.code, 0, rm.stderr);
  // Her tokens went with her; her job stays, seen by admins only, ownerless.
  const gone = await api(base, 'GET', '/api/v1/jobs', undefined, { headers: { authorization: `Bearer ${t}` } });
  assert.equal(gone.status, 401);
  const j = await expectStatus('GET', `/api/v1/jobs/${carolJob}`, undefined, 'alice', 200);
  assert.equal(j.body.owner_id, null);
  await waitFor(async () => {
    const c = await call('POST', `/api/v1/jobs/${carolJob}/cancel`, undefined, 'alice');
    return c.status === 202 || c.status === 409;
  }, { what: 'the cancel' });
});

test('kiln serve beyond loopback: refused without users unless --insecure-no-auth; sign-in once users exist', async () => {
  const empty = tempDir('kiln-auth-bind-');
  try {
    const refused = await runKiln(['serve', '--host', '0.0.0.0', '--port', '0', '--data', path.join(empty.dir, 'd')],
      { timeoutMs: 30_000 });
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /kiln user add/);
    assert.match(refused.stderr, /--insecure-no-auth/);
    assert.equal(refused.stdout, '');

    const open = await startServer({ dataDir: path.join(empty.dir, 'd'), args: ['--host', '0.0.0.0', '--insecure-no-auth'] });
    try {
      const port = new URL(open.url).port;
      const r = await api(`http://127.0.0.1:${port}`, 'GET', '/api/v1/jobs');
      assert.equal(r.status, 200, 'open with --insecure-no-auth while there are no users');
    } finally {
      await open.stop();
    }

    const add = await runKiln(['user', 'add', 'root', '--data', path.join(empty.dir, 'd'), '--password-file',
      passwordFile('root', 'root-secret-1'), ...CHEAP]);
    assert.equal(add.code, 0, add.stderr);
    const closed = await startServer({ dataDir: path.join(empty.dir, 'd'), args: ['--host', '0.0.0.0', ...CHEAP] });
    try {
      const b = `http://127.0.0.1:${new URL(closed.url).port}`;
      assert.equal((await api(b, 'GET', '/api/v1/jobs')).status, 401);
      const t = await api(b, 'POST', '/api/v1/tokens', { user: 'root', password: 'root-secret-1' });
      assert.equal(t.status, 201);
      const r = await api(b, 'GET', '/api/v1/jobs', undefined, { headers: { authorization: `Bearer ${t.body.token}` } });
      assert.equal(r.status, 200);
    } finally {
      await closed.stop();
    }
  } finally {
    empty.cleanup();
  }
});
