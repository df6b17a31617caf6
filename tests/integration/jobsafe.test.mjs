// Job safety (issue 15, findings 6, 7 and 9) against a real `kiln serve`:
// - the SSE replay of a finished job with many stored metrics is streamed from
//   the store a page at a time: the wire format and Last-Event-ID (one stored
//   id sequence for metrics, log lines and the status, issue 17),
//   and clients that never read cost the server little memory while other
//   requests are answered;
// - a job whose training memory does not fit in what is available is refused
//   at creation with 422 and the largest batch that fits;
// - a job folder's lock: a second hand-started worker on one folder refuses or
//   waits, and after a kill -9 of the server the orphaned worker keeps the job
//   queued until it is gone;
// - POST /jobs/{id}/resume of a cancelled job with a checkpoint, and its 409s.
// The jobs train a one-layer network on the demo digits, so each takes seconds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {
  ROOT, api, describeResponse, importDemo, kilnBin, readSSE, sleep, startServer, tempDir, waitFor,
} from './lib/kiln.mjs';

const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
const STOP_AT = 20;                    // the first server's workers stop (as if cancelled) at this step
const FILL = process.env.KILN_FILL_METRICS || path.join(ROOT, 'build', 'tests', 'kiln_fill_metrics');

let tmp;
let dataDir;
let server;
let base;
let datasetId;

/* `kiln serve` on dataDir with extra environment for its workers. */
async function serveWith(env) {
  const saved = {};
  for (const [k, v] of Object.entries(env)) { saved[k] = process.env[k]; if (v === undefined) delete process.env[k]; else process.env[k] = v; }
  try {
    return await startServer({ dataDir });
  } finally {
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; }
  }
}

before(async () => {
  tmp = tempDir('kiln-jobsafe-');
  dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await serveWith({ KILN_STOP_AFTER_STEP: String(STOP_AT) });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function createJob(extra = {}) {
  const body = { dataset_id: datasetId, network: TINY, epochs: 1, batch_size: 32, ...extra };
  const r = await api(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

async function waitStatus(id, want, timeoutMs = 120_000) {
  let last;
  await waitFor(async () => {
    last = await api(base, 'GET', `/api/v1/jobs/${id}`);
    return want.includes(last.body && last.body.status);
  }, { timeoutMs, intervalMs: 200, what: `job ${id} to be ${want.join(' or ')} (last: ${last && last.text.slice(0, 300)})` });
  return last.body;
}

const jobDir = (id) => path.join(dataDir, 'jobs', String(id));
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const memAvailable = () => Number(/MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))[1]) * 1024;

// ---- resume (finding 9) -------------------------------------------------------

let cancelledJob;   // stopped at STOP_AT, then resumed to the end

test('resume: a cancelled job with a checkpoint continues from it and keeps its metrics up to it', async () => {
  const id = await createJob();
  const job = await waitStatus(id, ['cancelled', 'failed', 'done']);
  assert.equal(job.status, 'cancelled', JSON.stringify(job));
  assert.equal(job.resumable, true, 'a cancelled job with a checkpoint is resumable');
  assert.ok(existsSync(path.join(jobDir(id), 'checkpoints', `step-${STOP_AT}.safetensors`)));
  const before = (await api(base, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  assert.ok(before.length > 0 && before.every((m) => m.step <= STOP_AT), `metrics up to step ${STOP_AT}`);

  const r = await api(base, 'POST', `/api/v1/jobs/${id}/resume`);
  assert.equal(r.status, 202, describeResponse('POST', `/api/v1/jobs/${id}/resume`, r));
  assert.ok(['queued', 'running'].includes(r.body.status), r.text);
  assert.equal(r.body.error, null);
  assert.equal(r.body.resumable, false);
  const again = await api(base, 'POST', `/api/v1/jobs/${id}/resume`);
  assert.equal(again.status, 409, describeResponse('POST', 'resume while queued or running', again));
  assert.equal(again.body.error.code, 'job_not_resumable');
  assert.match(again.body.error.message, /is (queued|running); only a failed or cancelled job/);

  const done = await waitStatus(id, ['done', 'failed', 'cancelled']);
  assert.equal(done.status, 'done', JSON.stringify(done));
  assert.equal(done.step, done.steps);
  const afterItems = (await api(base, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  assert.deepEqual(afterItems.filter((m) => m.step <= STOP_AT), before,
    'the metrics up to the checkpoint are kept as they were');
  assert.ok(afterItems.some((m) => m.step === done.steps && m.tag === 'val/accuracy'), 'the resumed run validated');
  const keys = afterItems.map((m) => `${m.step} ${m.tag}`);
  assert.equal(new Set(keys).size, keys.length, `no metric is recorded twice across the resume: ${keys.filter((k, i) => keys.indexOf(k) !== i).slice(0, 5)}`);
  const log = readFileSync(path.join(jobDir(id), 'log'), 'utf8');
  assert.match(log, new RegExp(`resuming from .*step-${STOP_AT}\\.safetensors: step ${STOP_AT}`));

  const doneAgain = await api(base, 'POST', `/api/v1/jobs/${id}/resume`);
  assert.equal(doneAgain.status, 409, describeResponse('POST', 'resume of a done job', doneAgain));
  assert.match(doneAgain.body.error.message, /is done; only a failed or cancelled job/);
  cancelledJob = id;
});

let replayJob;      // cancelled, its checkpoints removed; later filled with many metrics

test('resume: 409 for a cancelled job without a checkpoint, 404 for no job', async () => {
  const id = await createJob();
  const job = await waitStatus(id, ['cancelled', 'failed', 'done']);
  assert.equal(job.status, 'cancelled');
  rmSync(path.join(jobDir(id), 'checkpoints'), { recursive: true, force: true });
  const j = await api(base, 'GET', `/api/v1/jobs/${id}`);
  assert.equal(j.body.resumable, false);
  const r = await api(base, 'POST', `/api/v1/jobs/${id}/resume`);
  assert.equal(r.status, 409, describeResponse('POST', 'resume without a checkpoint', r));
  assert.equal(r.body.error.code, 'job_not_resumable');
  assert.match(r.body.error.message, /has no checkpoint to resume from/);
  assert.equal((await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status, 'cancelled', 'nothing changed');
  const none = await api(base, 'POST', '/api/v1/jobs/987654/resume');
  assert.equal(none.status, 404, describeResponse('POST', 'resume of no job', none));
  replayJob = id;
});

// ---- SSE replay in pages (finding 6) ---------------------------------------------

const FILLED = 20_000;

test('SSE replay: a finished job with many metrics streams every one, ids and Last-Event-ID as before', async () => {
  assert.ok(replayJob, 'needs the cancelled job');
  // A restarted server has no live stream of it: the replay comes from the store.
  await server.stop();
  server = await serveWith({ KILN_STOP_AFTER_STEP: String(STOP_AT) });
  base = server.url;
  const out = execFileSync(FILL, [path.join(dataDir, 'kiln.db'), String(replayJob), String(FILLED), '1000'], { encoding: 'utf8' });
  assert.match(out, new RegExp(`${FILLED} metrics`));
  const stored = (await api(base, 'GET', `/api/v1/jobs/${replayJob}/metrics`)).body.items;
  const n = stored.length;
  assert.ok(n >= FILLED, `${n} stored metrics`);

  // One stored id sequence (issue 17): metrics, log lines and the status each
  // have an id, increasing; the metric events are the stored metrics in order.
  const url = `${base}/api/v1/jobs/${replayJob}/events`;
  const all = await readSSE(url, { timeoutMs: 60_000 });
  assert.equal(all.status, 200);
  assert.match(all.contentType, /^text\/event-stream/);
  assert.ok(all.ended, 'the replay ends');
  const L = all.events.length;
  all.events.forEach((e, i) => assert.ok(Number.isInteger(e.id) && (i === 0 || e.id > all.events[i - 1].id),
    `event ${i} has an increasing id (${e.id})`));
  const metrics = all.events.filter((e) => e.event === 'metric');
  assert.equal(metrics.length, n);
  assert.deepEqual(metrics.map((e) => e.data), stored, 'the replay carries the stored metrics in order');
  assert.ok(all.events.every((e) => ['metric', 'log', 'status'].includes(e.event)), 'only stored events');
  assert.equal(all.events[L - 1].event, 'status');
  assert.deepEqual(all.events[L - 1].data, { status: 'cancelled', error: null });
  assert.equal(all.events[L - 1].raw, '{"status":"cancelled","error":null}');
  assert.equal(all.events.filter((e) => e.event === 'status').length, 1, 'one status: the job\'s end');

  const ids = all.events.map((e) => e.id);
  const tail = await readSSE(url, { timeoutMs: 30_000, headers: { 'Last-Event-ID': String(ids[L - 4]) } });
  assert.deepEqual(tail.events.map((e) => e.id), ids.slice(L - 3));
  assert.deepEqual(tail.events.map((e) => e.data), all.events.slice(L - 3).map((e) => e.data));
  const q = await readSSE(`${url}?last_event_id=${ids[L - 3]}`, { timeoutMs: 30_000 });
  assert.deepEqual(q.events.map((e) => e.id), ids.slice(L - 2));
  const nothing = await readSSE(url, { timeoutMs: 30_000, headers: { 'Last-Event-ID': String(ids[L - 1]) } });
  assert.ok(nothing.ended);
  assert.equal(nothing.events.length, 0, 'a client that has everything gets nothing more');
  const past = await readSSE(url, { timeoutMs: 60_000, headers: { 'Last-Event-ID': String(ids[L - 1] + 7) } });
  assert.equal(past.events.length, L, 'an id past the job\'s newest (not one of its ids) gets all of it');
  assert.equal(past.events[0].id, ids[0]);
});

test('SSE replay: clients that never read cost little memory and other requests are answered', async () => {
  const CLIENTS = 200;
  const pid = server.child.pid;
  const port = Number(new URL(base).port);
  const rss0 = rssKiB(pid);
  const socks = [];
  try {
    for (let i = 0; i < CLIENTS; i++) {
      const s = net.connect({ port, host: '127.0.0.1' }, () => {
        s.write(`GET /api/v1/jobs/${replayJob}/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
        s.pause();                                   // never read: the server's writes back up
      });
      s.on('error', () => {});
      socks.push(s);
    }
    const answered = [];
    let rssPeak = rss0;
    for (let k = 0; k < 12; k++) {
      const t0 = Date.now();
      const r = await fetch(`${base}/api/v1/jobs`, { signal: AbortSignal.timeout(10_000) });
      assert.equal(r.status, 200);
      const body = await r.json();
      assert.ok(body.items.some((j) => j.id === replayJob));
      answered.push(Date.now() - t0);
      rssPeak = Math.max(rssPeak, rssKiB(pid));
      await sleep(250);
    }
    const perClient = ((rssPeak - rss0) * 1024) / CLIENTS;
    // Loading the whole replay cost each client the stored metrics (80 bytes
    // each, 1.6 MB here) plus their formatting; a page-bounded stream costs a
    // page and a buffer.
    assert.ok(perClient < 250 * 1024,
      `the server grew ${((rssPeak - rss0) / 1024).toFixed(1)} MiB for ${CLIENTS} clients that do not read (${(perClient / 1024).toFixed(0)} KiB each)`);
    assert.equal(answered.length, 12, `GET /api/v1/jobs answered every time (${answered.join(', ')} ms)`);
  } finally {
    for (const s of socks) s.destroy();
  }
});

// ---- memory fit at creation (finding 7) ---------------------------------------------

test('a job whose training memory does not fit in what is available is refused with 422 and the batch that fits', async () => {
  // 2048 channels of 128 x 128 per layer: about 0.8 GB of activations an
  // image, over 3 TB at batch 4096, more than any machine has available.
  const huge = {
    layers: [
      { type: 'conv2d', filters: 2048, kernel: 1, padding: 50 },
      { type: 'conv2d', filters: 2048, kernel: 1 },
      { type: 'conv2d', filters: 2048, kernel: 1 },
      { type: 'global_avgpool' },
      { type: 'dense', units: 'classes' },
    ],
  };
  const jobsBefore = (await api(base, 'GET', '/api/v1/jobs')).body.items.length;
  const sum = await api(base, 'POST', '/api/v1/networks/summary',
    { network: huge, input: [1, 28, 28], classes: 10, batch_size: 4096 });
  assert.equal(sum.status, 200, describeResponse('POST', '/api/v1/networks/summary', sum));
  const tm = sum.body.training_memory;
  const fixed = tm.total_bytes - 4096 * tm.per_image_bytes;
  const cpu = tm.devices[0];
  assert.equal(cpu.fits_available, false);

  const avail = memAvailable();
  const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: huge, epochs: 1, batch_size: 4096 });
  assert.equal(r.status, 422, describeResponse('POST', '/api/v1/jobs', r));
  assert.equal(r.body.error.code, 'insufficient_memory');
  const msg = r.body.error.message;
  assert.match(msg, /needs at least [\d,]+ MiB at batch size 4096/);
  assert.match(msg, /MemAvailable less a 10% margin/);
  assert.match(msg, /lower bound/);
  const m = /at most ([\d,]+) fits/.exec(msg);
  assert.ok(m, msg);
  const fits = Number(m[1].replace(/,/g, ''));
  const expected = Math.floor((avail * 0.9 - fixed) / tm.per_image_bytes);
  assert.ok(fits >= 1, msg);
  // MemAvailable moves between the test's read and the server's.
  assert.ok(Math.abs(fits - expected) <= Math.max(2, expected * 0.1), `the batch that fits: ${fits}, from MemAvailable ${expected}`);
  assert.ok(Math.abs(cpu.max_batch_available - expected) <= Math.max(2, expected * 0.1), JSON.stringify(cpu));
  assert.equal((await api(base, 'GET', '/api/v1/jobs')).body.items.length, jobsBefore, 'no job was created');
});

// ---- the job folder's lock (finding 9) ---------------------------------------------

function startWorker(dir, args = [], env = {}) {
  const e = { ...process.env, ...env };
  delete e.KILN_STOP_AFTER_STEP;
  Object.assign(e, env);
  const child = spawn(kilnBin(), ['worker', '--job-dir', dir, ...args], { env: e, stdio: ['ignore', 'pipe', 'pipe'] });
  const w = { child, stdout: '', stderr: '', exit: null };
  child.stdout.setEncoding('utf8').on('data', (d) => { w.stdout += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { w.stderr += d; });
  w.exited = new Promise((res) => child.on('exit', (code, signal) => { w.exit = { code, signal }; res(w.exit); }));
  return w;
}

const lockPid = (dir) => { try { return Number(readFileSync(path.join(dir, 'lock'), 'utf8').trim()); } catch { return 0; } };

test('lock: a second worker on a folder another holds refuses without writing, or waits until it is gone', async () => {
  assert.ok(cancelledJob, 'needs a job.json');
  const dir = path.join(tmp.dir, 'handjob');
  mkdirSync(dir);
  copyFileSync(path.join(jobDir(cancelledJob), 'job.json'), path.join(dir, 'job.json'));

  const a = startWorker(dir, [], { KILN_STOP_AFTER_STEP: '100000' });
  await waitFor(() => lockPid(dir) === a.child.pid, { timeoutMs: 10_000, intervalMs: 5, what: 'worker A to lock the folder' });
  process.kill(a.child.pid, 'SIGSTOP');               // it holds the lock and writes nothing more
  const files = readdirSync(dir).sort();

  const b = startWorker(dir, ['--lock-wait', '0']);
  const bExit = await b.exited;
  assert.equal(bExit.code, 1, `B: ${b.stdout} ${b.stderr}`);
  const report = JSON.parse(b.stdout.trim().split('\n').at(-1));
  assert.equal(report.t, 'error');
  assert.match(report.message, new RegExp(`in use: another process \\(pid ${a.child.pid}\\) holds its lock`));
  assert.ok(!/"running"/.test(b.stdout), 'B never started');
  assert.deepEqual(readdirSync(dir).sort(), files, 'B wrote nothing in the folder');
  assert.equal(lockPid(dir), a.child.pid);

  const c = startWorker(dir, ['--lock-wait', '60'], { KILN_STOP_AFTER_STEP: '3' });
  await sleep(1500);
  assert.equal(c.exit, null, 'C waits while A holds the lock');
  assert.equal(c.stdout, '', 'C reported nothing yet');
  assert.equal(lockPid(dir), a.child.pid);
  process.kill(a.child.pid, 'SIGKILL');               // A dies: the kernel frees its lock
  await a.exited;
  const cExit = await c.exited;
  assert.equal(cExit.code, 0, `C: ${c.stdout} ${c.stderr}`);
  assert.match(c.stdout, /"status":"running"/);
  assert.match(c.stdout, /"status":"cancelled"/);     // KILN_STOP_AFTER_STEP=3
  assert.equal(lockPid(dir), c.child.pid, 'C took the lock');
});

test('lock: after kill -9 of the server the job stays queued while its folder is held, then runs', async () => {
  // A server whose workers run to their end.
  await server.stop();
  server = await serveWith({ KILN_STOP_AFTER_STEP: undefined });
  base = server.url;
  const id = await createJob({ epochs: 3 });
  const dir = jobDir(id);
  const serverPid = server.child.pid;
  let worker = 0;
  await waitFor(() => { const p = lockPid(dir); if (p && p !== serverPid) worker = p; return worker; },
    { timeoutMs: 30_000, intervalMs: 5, what: 'the worker to lock its folder' });
  server.child.kill('SIGKILL');
  await waitFor(() => server.exited(), { timeoutMs: 10_000, what: 'the server to die' });
  // The orphaned worker dies at its next report, on the closed pipe.
  const gone = (pid) => !existsSync(`/proc/${pid}`) || /State:\s+Z/.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  await waitFor(() => gone(worker), { timeoutMs: 30_000, intervalMs: 20, what: 'the orphaned worker to die' });

  // One that would live on (stuck, or in a long step) is played by a process
  // that holds the folder's lock the way a worker does.
  const holder = await holdLock(dir);
  try {
    server = await startServer({ dataDir });
    base = server.url;
    await waitFor(() => new RegExp(`job ${id}: its worker from the previous server \\(pid ${holder.pid}\\) is still running`).test(server.output()),
      { timeoutMs: 10_000, what: `the server to notice the folder's holder:\n${server.output()}` });
    for (let k = 0; k < 4; k++) {                     // the queue is looked at every 2 s
      assert.equal((await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status, 'queued', 'no second worker starts');
      await sleep(1000);
    }
    assert.equal(lockPid(dir), holder.pid);
  } finally {
    holder.kill('SIGKILL');
  }
  const job = await waitStatus(id, ['done', 'failed', 'cancelled'], 180_000);
  assert.equal(job.status, 'done', `${JSON.stringify(job)}\n${server.output().slice(-2000)}`);
  assert.ok(![holder.pid, worker, 0].includes(lockPid(dir)), 'a new worker took the folder');
  assert.match(readFileSync(path.join(dir, 'log'), 'utf8'), /resuming from|epoch 1/);

  // Its folder is not deleted from under a process that still holds it.
  const h2 = await holdLock(dir);
  try {
    const del = await api(base, 'DELETE', `/api/v1/jobs/${id}`);
    assert.equal(del.status, 409, describeResponse('DELETE', `/api/v1/jobs/${id}`, del));
    assert.match(del.body.error.message, new RegExp(`still written by a worker \\(pid ${h2.pid}\\)`));
    assert.ok(existsSync(path.join(dir, 'job.json')));
  } finally {
    h2.kill('SIGKILL');
    await new Promise((res) => h2.on('exit', res));
  }
  const del = await api(base, 'DELETE', `/api/v1/jobs/${id}`);
  assert.equal(del.status, 204, describeResponse('DELETE', `/api/v1/jobs/${id}`, del));
  assert.ok(!existsSync(dir), 'the folder is gone');
});

/* A process (python3) that holds dir/lock as a worker does, its pid written in it. */
async function holdLock(dir) {
  const holder = spawn('python3', ['-c', [
    'import fcntl, os, sys, time',
    'f = open(sys.argv[1], "r+")',
    'fcntl.flock(f, fcntl.LOCK_EX)',
    'f.truncate(0); f.write(str(os.getpid())); f.flush()',
    'print("locked", flush=True)',
    'time.sleep(600)'].join('\n'), path.join(dir, 'lock')], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((res) => holder.stdout.once('data', res));
  return holder;
}
