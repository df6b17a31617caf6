// The jobs list and a job's name, tags and notes (issue 16) against a real
// `kiln serve`: GET /api/v1/jobs with filters, search, every sort both ways,
// keyset paging through next_cursor (every job once, in order), total, the
// 400s naming the bad parameter; PATCH /api/v1/jobs/{id} by the owner and an
// admin, not by another user (404), its limits and unknown fields. The store
// is filled by kiln_fill_jobs (its rules mirrored in lib/fill_jobs.mjs, so the
// expected answers are computed here, not recorded).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { api, describeResponse, runKiln, startServer, tempDir } from './lib/kiln.mjs';
import { fillJobs, fillModel } from './lib/fill_jobs.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];
const N = 300;          // alice's fill (owned by nobody: an admin sees them)
const NB = 7;           // bob's fill

let tmp;
let server;
let base;
let model;              // every job as the rules make it, alice's then bob's
let bobJobs;
const tok = {};

async function user(dataDir, name, admin) {
  const pw = path.join(tmp.dir, `${name}.pw`);
  writeFileSync(pw, `${name}-secret-1\n`);
  const r = await runKiln(['user', 'add', name, '--data', dataDir, '--password-file', pw, ...(admin ? ['--admin'] : []), ...CHEAP]);
  assert.equal(r.code, 0, r.stderr);
  return Number(/id (\d+)/.exec(r.stdout)[1]);
}

const as = (who) => (who ? { headers: { authorization: `Bearer ${tok[who]}` } } : {});
async function list(qs, who = 'alice') {
  const r = await api(base, 'GET', `/api/v1/jobs${qs ? `?${qs}` : ''}`, undefined, as(who));
  assert.equal(r.status, 200, describeResponse('GET', `/api/v1/jobs?${qs}`, r));
  return r.body;
}

/* Every page of a query: the ids in order; asserts each page's size and total. */
async function pageAll(qs, limit, who = 'alice') {
  const ids = [];
  let cursor = null;
  let total = null;
  for (let pages = 0; pages < 1000; pages++) {
    const b = await list(`${qs}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, who);
    if (total === null) total = b.total;
    assert.equal(b.total, total, 'total stays the same across pages');
    if (b.next_cursor) assert.equal(b.items.length, limit, 'a page before the last is full');
    ids.push(...b.items.map((j) => j.id));
    cursor = b.next_cursor;
    if (!cursor) break;
  }
  assert.equal(ids.length, total, `${qs}: the pages hold total (${total}) jobs`);
  assert.equal(new Set(ids).size, ids.length, `${qs}: no job twice`);
  return ids;
}

before(async () => {
  tmp = tempDir('kiln-jobslist-');
  const dataDir = path.join(tmp.dir, 'data');
  // users first (the fill's owner must exist), then the jobs
  await user(dataDir, 'alice', true);
  const bob = await user(dataDir, 'bob', false);
  const fa = fillJobs(dataDir, N);
  const fb = fillJobs(dataDir, NB, bob);
  model = [...fillModel(fa, N), ...fillModel(fb, NB)];
  bobJobs = fillModel(fb, NB);
  server = await startServer({ dataDir, args: CHEAP });
  base = server.url;
  for (const who of ['alice', 'bob']) {
    const r = await api(base, 'POST', '/api/v1/tokens', { user: who, password: `${who}-secret-1` });
    assert.equal(r.status, 201, describeResponse('POST', '/api/v1/tokens', r));
    tok[who] = r.body.token;
  }
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('the first page: 50 newest jobs with names, tags, notes, precision and dataset names; the old shape kept', async () => {
  const b = await list('');
  assert.equal(b.items.length, 50);
  assert.equal(b.total, N + NB);
  assert.equal(typeof b.next_cursor, 'string');
  const newest = [...model].sort((x, y) => y.id - x.id).slice(0, 50);
  assert.deepEqual(b.items.map((j) => j.id), newest.map((j) => j.id));
  for (const [k, j] of b.items.entries()) {
    const m = newest[k];
    for (const f of ['name', 'network', 'precision', 'status', 'dataset_id', 'dataset_name', 'epochs', 'notes'])
      assert.deepEqual(j[f], m[f], `job ${j.id}'s ${f}`);
    assert.deepEqual(j.tags, m.tags, `job ${j.id}'s tags`);
    assert.ok('config' in j && 'metrics' in j && 'progress' in j && 'created_at' in j, 'the fields callers had stay');
  }
  // the one-job answer has them too
  const one = await api(base, 'GET', `/api/v1/jobs/${model[0].id}`, undefined, as('alice'));
  assert.equal(one.body.name, 'run-00001');
  assert.equal(one.body.dataset_name, 'cifar');
});

/* The model's order for a sort: the key (names case-insensitive), then the id. */
function modelOrder(sort, order, rows = model) {
  const key = {
    created: (j) => j.id, name: (j) => j.name.toLowerCase(), status: (j) => j.status, network: (j) => j.network,
    dataset: (j) => j.dataset_id, epochs: (j) => j.epochs, progress: (j) => j.progress,
  }[sort];
  const dir = order === 'desc' ? -1 : 1;
  return [...rows].sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    const c = ka < kb ? -1 : ka > kb ? 1 : a.id - b.id;
    return dir * c;
  }).map((j) => j.id);
}

test('every sort key, both ways, pages through next_cursor in the model\'s order, ties by id', async () => {
  for (const sort of ['created', 'name', 'status', 'network', 'dataset', 'epochs', 'progress']) {
    for (const order of ['asc', 'desc']) {
      const ids = await pageAll(`sort=${sort}&order=${order}`, 23);
      assert.deepEqual(ids, modelOrder(sort, order), `sort=${sort}&order=${order}`);
    }
  }
  // the default order: created newest first, the others ascending
  assert.deepEqual((await list('sort=name&limit=5')).items.map((j) => j.id), modelOrder('name', 'asc').slice(0, 5));
});

test('filters and search match what the rules say, with total, on every page', async () => {
  const cases = [
    ['status=failed,cancelled', (j) => j.status === 'failed' || j.status === 'cancelled'],
    ['status=done', (j) => j.status === 'done'],
    [`dataset=${model[1].dataset_id}`, (j) => j.dataset_id === model[1].dataset_id],
    ['network=resnet20&precision=amp-bf16', (j) => j.network === 'resnet20' && j.precision === 'amp-bf16'],
    ['tag=baseline', (j) => j.tags.includes('baseline')],
    ['tag=sweep&status=cancelled', (j) => j.tags.includes('sweep') && j.status === 'cancelled'],
    ['q=run-0001', (j) => j.name.includes('run-0001')],
    ['q=NOTE%2022', (j) => j.notes.toLowerCase().includes('note 22')],
    ['q=cifar10', (j) => j.network.includes('cifar10')],
    ['q=basel', (j) => j.tags.some((t) => t.includes('basel'))],
    [`q=%23${model[40].id}`, (j) => j.id === model[40].id],
    ['q=no-such-thing', () => false],
  ];
  for (const [qs, match] of cases) {
    const want = model.filter(match).sort((a, b) => b.id - a.id).map((j) => j.id);
    const ids = await pageAll(qs, 40);
    assert.deepEqual(ids, want, qs);
  }
  // filters with a sort: in the sort's order
  const want = modelOrder('progress', 'desc', model.filter((j) => j.status === 'failed'));
  assert.deepEqual(await pageAll('status=failed&sort=progress&order=desc', 9), want);
  // an empty value is no filter
  assert.equal((await list('status=&q=&limit=1')).total, N + NB);
});

test('bad parameters are 400 naming the parameter', async () => {
  const sortCursor = (await list('sort=name&limit=2')).next_cursor;
  const cases = [
    ['sort=bogus', 'invalid_parameter', /^sort must be created, name/],
    ['order=up', 'invalid_parameter', /^order must be asc or desc/],
    ['limit=0', 'invalid_parameter', /^limit must be an integer from 1 to 500/],
    ['limit=501', 'invalid_parameter', /^limit/],
    ['limit=ten', 'invalid_parameter', /^limit/],
    ['status=done,bogus', 'invalid_parameter', /^status must be/],
    ['dataset=0', 'invalid_parameter', /^dataset must be a dataset id/],
    ['dataset=x', 'invalid_parameter', /^dataset/],
    ['precision=fp64', 'invalid_parameter', /^precision must be fp32, amp-bf16 or amp-fp16/],
    ['cursor=%21%21', 'invalid_parameter', /^cursor/],
    [`cursor=${sortCursor}`, 'invalid_parameter', /^cursor .*same sort and order/],              // made for sort=name
    [`sort=name&order=desc&cursor=${sortCursor}`, 'invalid_parameter', /^cursor/],
    [`q=${'x'.repeat(201)}`, 'invalid_parameter', /^q must be text of at most 200 bytes/],
    ['q=%01', 'invalid_uri', /control character/],                                           // the front door's
    ['bogus=1', 'unknown_parameter', /unknown parameter "bogus"/],
  ];
  for (const [qs, code, msg] of cases) {
    const r = await api(base, 'GET', `/api/v1/jobs?${qs}`, undefined, as('alice'));
    assert.equal(r.status, 400, describeResponse('GET', qs, r));
    assert.equal(r.body.error.code, code, qs);
    assert.match(r.body.error.message, msg, qs);
  }
  // the cursor works with its own sort
  const ok = await list(`sort=name&limit=2&cursor=${sortCursor}`);
  assert.deepEqual(ok.items.map((j) => j.id), modelOrder('name', 'asc').slice(2, 4));
});

test('a user lists only their own jobs; an admin all of them', async () => {
  const ids = await pageAll('sort=created', 3, 'bob');
  assert.deepEqual(ids, bobJobs.map((j) => j.id).reverse());
  assert.equal((await list('q=run-00001&limit=500', 'bob')).total, 1);
  assert.equal((await list('q=run-00001&limit=500', 'alice')).total, 2);
});

test('PATCH /jobs/{id}: the owner or an admin edits name, tags and notes; the list and the job show them', async () => {
  const mine = bobJobs[2].id;
  const theirs = model[5].id;
  const patch = (id, body, who) => api(base, 'PATCH', `/api/v1/jobs/${id}`, body, as(who));
  let r = await patch(mine, { name: 'bob\'s best', tags: [' lr-0.1 ', 'keep', 'keep'], notes: 'line one\nline two' }, 'bob');
  assert.equal(r.status, 200, describeResponse('PATCH', `/jobs/${mine}`, r));
  assert.equal(r.body.name, 'bob\'s best');
  assert.deepEqual(r.body.tags, ['lr-0.1', 'keep'], 'trimmed, duplicates dropped');
  assert.equal(r.body.notes, 'line one\nline two');
  assert.equal(r.body.config.name, 'run-00003', 'job.json keeps the name the job was made with');
  // a field left out stays
  r = await patch(mine, { notes: 'changed' }, 'bob');
  assert.equal(r.body.name, 'bob\'s best');
  assert.deepEqual(r.body.tags, ['lr-0.1', 'keep']);
  const got = await api(base, 'GET', `/api/v1/jobs/${mine}`, undefined, as('bob'));
  assert.equal(got.body.name, 'bob\'s best');
  assert.equal(got.body.notes, 'changed');
  // the list finds it by its new name, tag and notes, and sorts by the new name
  assert.deepEqual((await list('q=best', 'bob')).items.map((j) => j.id), [mine]);
  assert.deepEqual((await list('tag=keep', 'bob')).items.map((j) => j.id), [mine]);
  assert.deepEqual((await list('q=CHANGED', 'bob')).items.map((j) => j.id), [mine]);
  // by name: bob's unnamed job (i = 7) first, then "bob's best" before his run-0000k
  assert.deepEqual((await list('sort=name&limit=3', 'bob')).items.map((j) => j.id), [bobJobs[6].id, mine, bobJobs[0].id]);
  // an admin edits anyone's; null clears
  r = await patch(mine, { tags: null, name: null }, 'alice');
  assert.equal(r.status, 200);
  assert.deepEqual(r.body.tags, []);
  assert.equal(r.body.name, '');
  // another user's job is as missing
  r = await patch(theirs, { name: 'mine now' }, 'bob');
  assert.equal(r.status, 404);
  assert.equal(r.body.error.code, 'job_not_found');
  assert.equal((await api(base, 'GET', `/api/v1/jobs/${theirs}`, undefined, as('alice'))).body.name, model[5].name);
  r = await patch(999999, { name: 'x' }, 'alice');
  assert.equal(r.status, 404);
  // bad bodies: 400 naming the field and its limit; nothing changes
  const bad = [
    [{ bogus: 1 }, 'unknown_field', /unknown field "bogus"/],
    [{ status: 'done' }, 'unknown_field', /unknown field "status"/],
    [{ name: 5 }, 'invalid_field', /^name must be a string of at most 200 bytes/],
    [{ name: 'x'.repeat(201) }, 'invalid_field', /^name/],
    [{ name: 'a\u0001b' }, 'invalid_field', /^name/],
    [{ tags: 'a,b' }, 'invalid_field', /^tags must be an array of at most 20 strings, each 1 to 40 bytes/],
    [{ tags: Array.from({ length: 21 }, (_, k) => `t${k}`) }, 'invalid_field', /^tags/],
    [{ tags: ['x'.repeat(41)] }, 'invalid_field', /^tags/],
    [{ tags: ['  '] }, 'invalid_field', /^tags/],
    [{ tags: [3] }, 'invalid_field', /^tags/],
    [{ notes: 'x'.repeat(10001) }, 'invalid_field', /^notes must be a string of at most 10000 bytes/],
  ];
  for (const [body, code, msg] of bad) {
    r = await patch(mine, body, 'bob');
    assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${describeResponse('PATCH', '', r)}`);
    assert.equal(r.body.error.code, code);
    assert.match(r.body.error.message, msg);
  }
  // at the limits it takes them
  r = await patch(mine, { name: 'n'.repeat(200), tags: Array.from({ length: 20 }, (_, k) => `${k}`.padEnd(40, 'x')),
    notes: 'y'.repeat(10000) }, 'bob');
  assert.equal(r.status, 200, describeResponse('PATCH', '', r));
  assert.equal(r.body.tags.length, 20);
  // the limits are published
  const schema = (await api(base, 'GET', '/api/v1/schema', undefined, as('bob'))).body;
  assert.deepEqual(schema.job_edit, { name_max_bytes: 200, tags_max: 20, tag_max_bytes: 40, notes_max_bytes: 10000,
    priority_min: -100, priority_max: 100 });
  assert.equal(schema.jobs_list.limit_max, 500);
  assert.equal(schema.jobs_list.limit_default, 50);
});
