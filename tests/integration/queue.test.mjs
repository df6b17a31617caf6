// The visible queue and job priority (issue 17) against a real `kiln serve
// --max-jobs 1`: GET /api/v1/queue lists the running job with the devices its
// worker got (["cpu"] here, also in the job object), the queued jobs and an
// evaluation in the order they will start with their position and what they
// wait for (the scheduler's own reason); a higher-priority job submitted later
// is ahead and starts first; PATCH priority reorders a waiting job and is 409
// once the job runs; another user's items are shown anonymised to a
// non-admin; bad priorities are 400s naming the field. GPU ids recorded for
// "any N GPUs" jobs are checked in tests/unit/test_scheduler.c (its fake GPUs).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { api, describeResponse, importDemo, runKiln, startServer, tempDir, waitFor } from './lib/kiln.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };

let tmp;
let server;
let base;
let datasetId;
let dataDir;
const tok = {};
const ids = {};

const as = (who) => ({ headers: { authorization: `Bearer ${tok[who]}` } });

async function call(who, method, p, body, want) {
  const r = await api(base, method, p, body, as(who));
  if (want !== undefined) assert.equal(r.status, want, describeResponse(method, p, r));
  return r;
}

async function user(dataDir, name, admin) {
  const pw = path.join(tmp.dir, `${name}.pw`);
  writeFileSync(pw, `${name}-secret-1\n`);
  const r = await runKiln(['user', 'add', name, '--data', dataDir, '--password-file', pw, ...(admin ? ['--admin'] : []), ...CHEAP]);
  assert.equal(r.code, 0, r.stderr);
}

async function job(who, fields) {
  const r = await call(who, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, batch_size: 16, seed: 1, ...fields }, 201);
  return r.body;
}

async function jobStatus(id, want) {
  return waitFor(async () => {
    const r = await call('alice', 'GET', `/api/v1/jobs/${id}`, undefined, 200);
    return r.body.status === want ? r.body : null;
  }, { timeoutMs: 60_000, what: `job ${id} ${want}` });
}

/* Every thread of the worker that runs job id, found by its --job-dir:
 * {nice (field 19 of /proc/PID/task/TID/stat), blocked, caught (SigBlk and
 * SigCgt of its status, as BigInt masks)}. */
function workerThreads(id) {
  const dir = path.join(dataDir, 'jobs', String(id));
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    let argv;
    try { argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'); } catch { continue; }
    if (argv[1] !== 'worker' || argv[argv.indexOf('--job-dir') + 1] !== dir) continue;
    try {
      return readdirSync(`/proc/${pid}/task`).map((tid) => {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
        const mask = (name) => BigInt(`0x${new RegExp(`^${name}:\\s*([0-9a-f]+)`, 'm').exec(status)[1]}`);
        return {
          nice: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]),
          blocked: mask('SigBlk'),
          caught: mask('SigCgt'),
        };
      });
    } catch { return null; }  /* a thread that ended while read */
  }
  return null;
}

const serverNice = () => {
  const stat = readFileSync(`/proc/${server.child.pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
};

const queue = async (who) => (await call(who, 'GET', '/api/v1/queue', undefined, 200)).body;

before(async () => {
  tmp = tempDir('kiln-queue-');
  dataDir = path.join(tmp.dir, 'data');
  await user(dataDir, 'alice', true);
  await user(dataDir, 'bob', false);
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ['--max-jobs', '1', ...CHEAP] });
  base = server.url;
  for (const who of ['alice', 'bob']) {
    const r = await api(base, 'POST', '/api/v1/tokens', { user: who, password: `${who}-secret-1` });
    assert.equal(r.status, 201, describeResponse('POST', '/api/v1/tokens', r));
    tok[who] = r.body.token;
  }
  await call('alice', 'PATCH', `/api/v1/datasets/${datasetId}`, { shared: true }, 200);
});

after(async () => {
  if (server) {
    if (process.env.KILN_SHOW_LOG) console.error(server.output());
    await server.stop();
  }
  tmp?.cleanup();
});

test('a job that finished keeps the devices it ran on; priority defaults to 0', async () => {
  const d = await job('alice', { epochs: 1, name: 'done first' });
  assert.equal(d.priority, 0);
  assert.equal(d.assigned_devices, null, 'not started yet: no devices');
  const done = await jobStatus(d.id, 'done');
  assert.deepEqual(done.assigned_devices, ['cpu']);
  ids.done = d.id;
});

test('the queue: running with devices, queued in priority order with position and reason', async () => {
  const a = await job('alice', { epochs: 10000, name: 'long A' });
  ids.a = a.id;
  const running = await jobStatus(a.id, 'running');
  assert.deepEqual(running.assigned_devices, ['cpu']);
  // The worker and every thread of it yield the CPU to the server: nice 10
  // (jobs/worker_prio.h), the server itself at 0.
  // (The job is "running" from its spawn: the worker lowers itself first
  // thing, and its training threads come after; one left at 0 never passes.)
  let seen;
  let threads;
  await waitFor(() => {
    threads = workerThreads(a.id);
    seen = threads && threads.map((t) => t.nice);
    return seen && seen.length > 1 && seen.every((n) => n === 10);
  }, { timeoutMs: 15_000, what: `job ${a.id}'s worker threads at nice 10` }).catch((e) => {
    throw new Error(`${e.message}; its threads' nice values: ${seen}`);
  });
  assert.equal(serverNice(), 0);
  // No handler for SIGTERM or SIGINT, and every thread but one blocks both:
  // that one takes them in sigwait (which the kernel shows as unblocked while
  // it waits). A handler's frame pushed on a thread that is inside oneDNN
  // 2.x's JIT sgemm lands on the heap (jobs/report.c). The cancel below still
  // stops the worker at a step.
  const STOP = (1n << 14n) | (1n << 1n);   // SIGTERM (15), SIGINT (2)
  for (const t of threads) assert.equal(t.caught & STOP, 0n, `a worker thread has a handler for a stop signal: SigCgt ${t.caught.toString(16)}`);
  const taking = threads.filter((t) => (t.blocked & STOP) !== STOP);
  assert.equal(taking.length, 1,
    `threads that take SIGTERM or SIGINT: ${taking.length} of ${threads.length} (SigBlk ${threads.map((t) => t.blocked.toString(16))})`);

  const b = await job('bob', { epochs: 1, name: 'bob B' });
  const c = await job('alice', { epochs: 1, name: 'urgent C', priority: 5 });
  ids.b = b.id;
  ids.c = c.id;
  assert.equal(c.priority, 5);
  const ev = await call('alice', 'POST', `/api/v1/jobs/${ids.done}/evaluations`, { split: 'val' }, 201);
  ids.ev = ev.body.id;

  const q = await queue('alice');
  assert.deepEqual(q.running.map((i) => [i.kind, i.id]), [['job', a.id]]);
  assert.deepEqual(q.running[0].assigned_devices, ['cpu']);
  assert.equal(q.running[0].position, null);
  // C (priority 5) though submitted after B; then B and the evaluation (both 0) oldest first.
  assert.deepEqual(q.queued.map((i) => [i.kind, i.id]), [['job', c.id], ['job', b.id], ['evaluation', ids.ev]]);
  assert.deepEqual(q.queued.map((i) => i.position), [1, 2, 3]);
  assert.deepEqual(q.queued.map((i) => i.priority), [5, 0, 0]);
  for (const i of q.queued) {
    assert.equal(i.waiting_for, `a free CPU slot (1 of 1 in use by job ${a.id})`, JSON.stringify(i));
    assert.equal(i.assigned_devices, null);
  }
  assert.equal(q.queued[2].job_id, ids.done, "an evaluation names its job");
  assert.equal(q.queued[0].can_change_priority, true);
  assert.equal(q.queued[2].can_change_priority, false, 'an evaluation has no priority of its own');
  assert.equal(q.priority_min, -100);
  assert.equal(q.priority_max, 100);
});

test('a non-admin sees other users\' items anonymised, and changes only their own', async () => {
  const q = await queue('bob');
  const [run] = q.running;
  assert.equal(run.hidden, true);
  assert.equal(run.id, null);
  assert.equal(run.name, null);
  assert.equal(run.owner_id, null);
  assert.deepEqual(run.assigned_devices, ['cpu'], 'what runs where is not hidden');
  const [c, b, ev] = q.queued;
  assert.deepEqual([c.hidden, c.id, c.name, c.can_change_priority, c.priority, c.position], [true, null, null, false, 5, 1]);
  assert.deepEqual([b.hidden, b.id, b.name, b.can_change_priority, b.position], [false, ids.b, 'bob B', true, 2]);
  assert.equal(ev.hidden, true);
  await call('bob', 'PATCH', `/api/v1/jobs/${ids.c}`, { priority: 50 }, 404);
});

test('PATCH priority reorders a waiting job; bad values are 400; a running job is 409', async () => {
  for (const bad of [101, -101, 1.5, 'high', null, true]) {
    const r = await call('bob', 'PATCH', `/api/v1/jobs/${ids.b}`, { priority: bad }, 400);
    assert.equal(r.body.error.code, 'invalid_field');
    assert.match(r.body.error.message, /priority must be an integer from -100 to 100/);
  }
  const bad = await call('alice', 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, priority: 500 }, 400);
  assert.match(bad.body.error.message, /priority/);

  const r = await call('bob', 'PATCH', `/api/v1/jobs/${ids.b}`, { priority: 10 }, 200);
  assert.equal(r.body.priority, 10);
  const req = await call('bob', 'GET', `/api/v1/jobs/${ids.b}/request`, undefined, 200);
  assert.equal(req.body.priority, 10, 'a clone takes the priority the job has now');
  const q = await queue('alice');
  assert.deepEqual(q.queued.map((i) => i.id), [ids.b, ids.c, ids.ev]);
  assert.deepEqual(q.queued.map((i) => i.position), [1, 2, 3]);

  const run = await call('alice', 'PATCH', `/api/v1/jobs/${ids.a}`, { priority: 7, name: 'renamed?' }, 409);
  assert.equal(run.body.error.code, 'job_not_queued');
  const a = await call('alice', 'GET', `/api/v1/jobs/${ids.a}`, undefined, 200);
  assert.equal(a.body.priority, 0, 'a refused PATCH changes nothing');
  assert.equal(a.body.name, 'long A');
});

test('the scheduler starts them in that order: the higher priority job first', async () => {
  await call('alice', 'POST', `/api/v1/jobs/${ids.a}/cancel`, undefined, 202);
  await jobStatus(ids.a, 'cancelled');
  // B (priority 10) runs or has run before C, which waited behind it.
  const b = await waitFor(async () => {
    const r = await call('alice', 'GET', `/api/v1/jobs/${ids.b}`, undefined, 200);
    return r.body.started_at ? r.body : null;
  }, { what: 'job B started' });
  const c = await jobStatus(ids.c, 'done');
  assert.ok(c.started_at >= b.started_at, `C started ${c.started_at}, B ${b.started_at}`);
  const bDone = await jobStatus(ids.b, 'done');
  assert.ok(c.started_at >= bDone.finished_at, 'one CPU slot: C starts once B has ended');
  assert.deepEqual(bDone.assigned_devices, ['cpu']);
  await waitFor(async () => {
    const r = await call('alice', 'GET', `/api/v1/evaluations/${ids.ev}`, undefined, 200);
    return r.body.status === 'done' ? r.body : null;
  }, { what: 'the evaluation done' });
  const ev = await call('alice', 'GET', `/api/v1/evaluations/${ids.ev}`, undefined, 200);
  assert.deepEqual(ev.body.assigned_devices, ['cpu']);
  const q = await queue('alice');
  assert.deepEqual(q.running, []);
  assert.deepEqual(q.queued, []);
  const done = await call('alice', 'PATCH', `/api/v1/jobs/${ids.b}`, { priority: 1 }, 409);
  assert.equal(done.body.error.code, 'job_not_queued');
});
