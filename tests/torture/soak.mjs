#!/usr/bin/env node
// tests/torture/soak.mjs: a bounded soak of `kiln serve`: training, 1,000
// Server-Sent-Events clients and API load for --minutes, sampling the
// server's resident memory; fails when it grows after the warm-up.
//
// On a temporary data directory with the demo digits it starts
// `kiln serve --max-jobs 1` on a free loopback port (raising any connection
// limit of GET /api/v1/limits that is below what the clients need, with
// --limit), then for --minutes:
//   - training: a sequence of LeNet jobs, the next created when one ends;
//   - --clients SSE clients, opened over the first seconds, each reading
//     GET /api/v1/jobs/{id}/events as an EventSource does: the job training
//     now (nine in ten) or a finished one (a replay); when a stream ends it
//     reconnects after a pause, with Last-Event-ID when it stays on the job;
//   - API load: one request after another (GETs of jobs, a job, its metrics
//     and log, datasets, info, healthz), and every 30 s a POST of a model
//     summary and a job that is cancelled at once;
//   - every --sample seconds the server's VmRSS, threads and open fds
//     (/proc/PID/status, /proc/PID/fd).
// It prints RSS at the start, after the warm-up and at the end, and fails
// (exit 1) when:
//   - RSS grew after the warm-up by more than the bound: max(--bound-mib,
//     --bound-pct % of the RSS after the warm-up), comparing the medians of the
//     30 s after the warm-up and of the last 30 s, or projecting the
//     Theil-Sen slope of the second half of the samples after the warm-up (12
//     at least) over the whole time after it (steady growth not yet stopped).
//     Why this bound: once the clients are connected and a job has run,
//     what the server holds is bounded (a ring of events per job, SQLite's
//     page cache, malloc's arenas per thread); a leak of a few hundred bytes
//     per SSE event, request or metric (tens of thousands a minute here)
//     exceeds 16 MiB within minutes, while allocator noise stays within a few;
//   - the server exits, answers a request with a 5xx or not within 60 s;
//   - fewer than 99% of the SSE clients ever got their stream, or none got events;
//   - after the clients disconnect, the server still holds more than 64 file
//     descriptors above what it held before they connected.
//
//   node tests/torture/soak.mjs [--minutes 10] [--clients 1000] ...   (--help lists all)
// The kiln binary is $KILN_BIN, else build/server/kiln. Needs `ulimit -n` above
// --clients + 200 for this process.

import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';

import { FINAL_STATUSES, importDemo, rng, sleep, startServer, tempDir } from '../integration/lib/kiln.mjs';
import { openFds, parseOptions, rssKiB } from './lib.mjs';

const USAGE = `usage: node tests/torture/soak.mjs [options]
  --minutes N      how long (default 10)
  --clients N      SSE clients (default 1000)
  --warmup S       seconds before the RSS baseline, at least (default: a fifth of the run, at most 120);
                   the warm-up also lasts until 30 s after the first job ended (at most half the run)
  --sample S       seconds between RSS samples (default 5)
  --bound-mib N    allowed RSS growth after the warm-up, MiB (default 16) ...
  --bound-pct P    ... or this percentage of the RSS after the warm-up, if larger (default 10)
  --epochs N       each training job's epochs (default 10: a job lasts long beside the clients'
                   reconnects, from about 30 s on an idle 2-core machine to minutes under load)
  --seed N         seeds the clients' choices (default 1)
  --keep           keep the temporary data directory`;

const opts = parseOptions(process.argv.slice(2), {
  minutes: 10, clients: 1000, warmup: 0, sample: 5, boundMib: 16, boundPct: 10, epochs: 10, seed: 1, keep: false,
}, USAGE);
const runMs = opts.minutes * 60_000;
let warmupMs = (opts.warmup || Math.min(120, opts.minutes * 60 / 5)) * 1000;   // and see firstEndMs
const REQUEST_MS = 60_000;
const WINDOW_MS = 30_000;            // the medians' windows
const rand = rng(opts.seed);
const t0 = Date.now();
const violations = [];

function log(msg) { console.log(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${msg}`); }
function violation(msg) { violations.push(msg); log(`VIOLATION: ${msg}`); }
const MiB = (kib) => (kib / 1024).toFixed(1);

function softFdLimit() {
  const m = /Max open files\s+(\d+|unlimited)/.exec(readFileSync('/proc/self/limits', 'utf8'));
  return !m || m[1] === 'unlimited' ? Infinity : Number(m[1]);
}

// ---- the server ---------------------------------------------------------------

const tmp = tempDir('kiln-soak-');
const dataDir = path.join(tmp.dir, 'data');
let server = null;
let stopping = false;

async function call(method, p, body) {
  const init = { method, headers: {}, signal: AbortSignal.timeout(REQUEST_MS) };
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers['content-type'] = 'application/json'; }
  const t = performance.now();
  const res = await fetch(server.url + p, init);
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, body: json, text, ms: performance.now() - t };
}

/* --limit NAME=VALUE for every connection limit below what the clients need. */
async function limitArgs() {
  const r = await call('GET', '/api/v1/limits');
  const need = opts.clients + 200;
  const args = [];
  for (const l of (r.body && r.body.limits) || []) {
    if (!/connection/.test(l.name) || l.unit !== 'count' || l.value >= need) continue;
    const v = Math.min(l.max, Math.max(need, l.value));
    args.push('--limit', `${l.name}=${v}`);
  }
  return args;
}

// ---- training: one job after another --------------------------------------------

let datasetId = 0;
let currentJob = 0;
const finishedJobs = [];
let jobsCreated = 0;
let firstEndMs = null;    // when the first job ended: the replaying clients start then

async function trainer() {
  while (!stopping) {
    if (currentJob) {
      const r = await call('GET', `/api/v1/jobs/${currentJob}`);
      if (r.status === 200 && FINAL_STATUSES.has(r.body.status)) {
        if (r.body.status !== 'done') violation(`job ${currentJob} ended ${r.body.status}: ${r.body.error}`);
        finishedJobs.push(currentJob);
        if (firstEndMs === null) firstEndMs = Date.now() - t0;
        currentJob = 0;
      }
    }
    if (!currentJob) {
      const r = await call('POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: opts.epochs,
        batch_size: 64, devices: 0, seed: ++jobsCreated, name: `soak-${jobsCreated}` });
      if (r.status !== 201) { violation(`POST /api/v1/jobs -> ${r.status} ${r.text.slice(0, 200)}`); await sleep(5000); continue; }
      currentJob = r.body.id;
      log(`training job ${currentJob}`);
    }
    await sleep(2000);
  }
}

// ---- SSE clients ------------------------------------------------------------------

const sse = { connects: 0, connected: 0, badStatus: 0, errors: 0, ended: 0, events: 0, ever: new Set(), open: 0 };
const clients = [];

class SseClient {
  constructor(i) {
    this.i = i;
    this.replayer = rand() < 0.1;
    this.jobId = 0;
    this.lastId = null;
    this.req = null;
    this.timer = null;
  }

  pick() {
    if (this.replayer && finishedJobs.length) return finishedJobs[Math.floor(rand() * finishedJobs.length)];
    return currentJob || finishedJobs[finishedJobs.length - 1] || 0;
  }

  later(ms) {
    if (stopping) return;
    this.timer = setTimeout(() => { this.timer = null; this.connect(); }, ms);
  }

  connect() {
    if (stopping) return;
    const job = this.pick();
    if (!job) { this.later(1000); return; }
    if (job !== this.jobId) { this.jobId = job; this.lastId = null; }
    const headers = { accept: 'text/event-stream' };
    if (this.lastId !== null) headers['last-event-id'] = this.lastId;
    const u = new URL(server.url);
    sse.connects++;
    const req = http.request({ host: u.hostname, port: u.port, path: `/api/v1/jobs/${job}/events`, headers, agent: false });
    this.req = req;
    let counted = false;
    const close = (ms) => {
      if (this.req !== req) return;
      this.req = null;
      if (counted) sse.open--;
      this.later(ms);
    };
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        sse.badStatus++;
        res.resume();
        res.on('end', () => close(2000 + rand() * 3000));
        return;
      }
      sse.connected++;
      sse.open++;
      counted = true;
      sse.ever.add(this.i);
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (d) => {
        buf += d;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line === '') sse.events++;
          else if (line.startsWith('id: ')) this.lastId = line.slice(4);
        }
      });
      res.on('end', () => { sse.ended++; close(this.replayer ? 5000 + rand() * 5000 : 1000 + rand() * 3000); });
      res.on('error', () => close(2000));
    });
    req.on('error', () => { if (!stopping) sse.errors++; close(2000 + rand() * 3000); });
    req.end();
  }

  stop() {
    if (this.timer) clearTimeout(this.timer);
    if (this.req) { this.req.destroy(); this.req = null; }
  }
}

// ---- API load ----------------------------------------------------------------------

const apiStats = { requests: 0, byStatus: {}, ms: [] };   // ms: {t, ms} per request

async function apiLoad() {
  let i = 0;
  let lastPost = Date.now();
  while (!stopping) {
    const any = finishedJobs.length ? finishedJobs[i % finishedJobs.length] : currentJob;
    const paths = ['/api/v1/jobs', '/api/v1/datasets', `/api/v1/jobs/${currentJob || any}`,
      `/api/v1/jobs/${currentJob || any}/metrics`, `/api/v1/jobs/${any}/metrics`, '/api/v1/info',
      `/api/v1/jobs/${currentJob || any}/log`, '/healthz', `/api/v1/datasets/${datasetId}`];
    const p = paths[i++ % paths.length];
    if (!currentJob && !any && p.includes('/jobs/')) { await sleep(200); continue; }
    await timed('GET', p);
    if (Date.now() - lastPost > 30_000) {
      lastPost = Date.now();
      await timed('POST', '/api/v1/networks/summary', { network: 'lenet' });
      const r = await timed('POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 1, devices: 0,
        name: 'soak-cancelled' });
      if (r && r.status === 201) await timed('POST', `/api/v1/jobs/${r.body.id}/cancel`);
    }
    await sleep(20);
  }
}

async function timed(method, p, body) {
  let r;
  try {
    r = await call(method, p, body);
  } catch (e) {
    if (!stopping) violation(`${method} ${p}: ${e.name === 'TimeoutError' ? `no answer in ${REQUEST_MS / 1000} s` : e.message}`);
    return null;
  }
  apiStats.requests++;
  apiStats.byStatus[r.status] = (apiStats.byStatus[r.status] || 0) + 1;
  apiStats.ms.push({ t: Date.now() - t0, ms: r.ms });
  if (r.status >= 500) violation(`${method} ${p} -> ${r.status} ${r.text.slice(0, 200)}`);
  return r;
}

function pct(a, p) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))];
}

// ---- sampling -----------------------------------------------------------------------

const samples = [];   // {t (ms since t0), rss (KiB), fds, threads}

function sample() {
  const pid = server.child.pid;
  const rss = rssKiB(pid);
  if (rss === null) return;
  let threads = null;
  try { threads = Number(/Threads:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]); } catch { /* gone */ }
  samples.push({ t: Date.now() - t0, rss, fds: openFds(pid), threads, open: sse.open });
}

function median(xs) { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.floor(s.length / 2)] : NaN; }

/* Theil-Sen slope of rss over t (the median of the slopes between every two
 * samples: one dip or spike does not move it): KiB per ms. */
function slope(pts) {
  const all = [];
  for (let i = 0; i < pts.length; i++) {
    for (let j = i + 1; j < pts.length; j++) if (pts[j].t > pts[i].t) all.push((pts[j].rss - pts[i].rss) / (pts[j].t - pts[i].t));
  }
  return all.length ? median(all) : 0;
}

// ---- main -----------------------------------------------------------------------------

async function main() {
  if (softFdLimit() < opts.clients + 200) {
    throw new Error(`this process may open ${softFdLimit()} files; ${opts.clients} clients need ${opts.clients + 200}: raise ulimit -n`);
  }
  log(`${opts.minutes} min, ${opts.clients} SSE clients, warm-up ${warmupMs / 1000} s, data in ${tmp.dir}`);
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ['--max-jobs', '1'], timeoutMs: 120_000 });
  const extra = await limitArgs();
  if (extra.length) {
    log(`raising the server's limits: ${extra.join(' ')}`);
    await server.stop();
    server = await startServer({ dataDir, args: ['--max-jobs', '1', ...extra], timeoutMs: 120_000 });
  }
  server.child.on('exit', (code, signal) => {
    if (!stopping) violation(`kiln serve exited (${code ?? signal}):\n${server.output().slice(-3000)}`);
  });
  sample();
  const fdsBefore = samples[0].fds;
  log(`server pid ${server.child.pid}: RSS ${MiB(samples[0].rss)} MiB, ${samples[0].fds} fds, ${samples[0].threads} threads`);

  const work = [trainer(), apiLoad()];
  const sampler = setInterval(sample, opts.sample * 1000);
  let lastReport = 0;
  const reporter = setInterval(() => {
    const s = samples[samples.length - 1];
    if (!s || s.t - lastReport < 60_000) return;
    lastReport = s.t;
    log(`RSS ${MiB(s.rss)} MiB, ${s.fds} fds, ${s.threads} threads; SSE open ${sse.open}, events ${sse.events}, ` +
        `connects ${sse.connects}; API ${apiStats.requests} requests; ${finishedJobs.length} job(s) done`);
  }, 5000);

  // Clients connect over the first seconds (at most 100 a second).
  while (!currentJob) await sleep(200);
  for (let i = 0; i < opts.clients; i++) {
    const c = new SseClient(i);
    clients.push(c);
    c.connect();
    if (i % 50 === 49) await sleep(500);
  }
  log(`${opts.clients} clients started; ${sse.open} streams open`);

  while (Date.now() - t0 < runMs && server.exited() === null) await sleep(1000);
  stopping = true;
  clearInterval(sampler);
  clearInterval(reporter);
  sample();
  for (const c of clients) c.stop();
  await Promise.allSettled(work);

  // After the clients left: its descriptors go back.
  let fdsAfter = null;
  for (let i = 0; i < 30 && server.exited() === null; i++) {
    await sleep(1000);
    fdsAfter = openFds(server.child.pid);
    if (fdsAfter !== null && fdsAfter <= fdsBefore + 64) break;
  }
  await server.stop(60_000);

  // RSS: start, after the warm-up, end. The warm-up lasts until every kind of
  // load runs: the replaying clients start when the first job has ended.
  warmupMs = Math.max(warmupMs, Math.min(firstEndMs === null ? Infinity : firstEndMs + WINDOW_MS, runMs / 2));
  const start = samples[0];
  const post = samples.filter((s) => s.t >= warmupMs);
  const warmS = post.filter((s) => s.t < warmupMs + WINDOW_MS);
  const warm = warmS.map((s) => s.rss);
  const lastT = samples[samples.length - 1].t;
  const endS = post.filter((s) => s.t >= lastT - WINDOW_MS);
  const end = endS.map((s) => s.rss);
  const warmRss = median(warm);
  const endRss = median(end);
  const bound = Math.max(opts.boundMib * 1024, warmRss * opts.boundPct / 100);
  const late = post.filter((s) => s.t >= (warmupMs + lastT) / 2);   // still rising at the end?
  const perMin = late.length >= 12 ? slope(late) * 60_000 : 0;     // a minute of samples at least
  const projected = perMin * ((lastT - warmupMs) / 60_000);
  const maxRss = Math.max(...samples.map((s) => s.rss));
  if (!(post.length >= 3)) violation(`too few samples after the warm-up (${post.length}): run longer`);
  if (endRss - warmRss > bound) violation(`RSS grew ${MiB(endRss - warmRss)} MiB after the warm-up (bound ${MiB(bound)} MiB)`);
  if (projected > bound) violation(`RSS rose steadily after the warm-up: ${MiB(perMin)} MiB/min, ${MiB(projected)} MiB over the run (bound ${MiB(bound)} MiB)`);
  if (sse.ever.size < 0.99 * opts.clients) violation(`only ${sse.ever.size} of ${opts.clients} SSE clients ever got their stream`);
  if (!sse.events) violation('the SSE clients received no events');
  if (fdsAfter === null || fdsAfter > fdsBefore + 64) violation(`the server holds ${fdsAfter} fds after the clients left (${fdsBefore} before they came)`);

  const secs = ((Date.now() - t0) / 1000).toFixed(0);
  const after = apiStats.ms.filter((x) => x.t >= warmupMs).map((x) => x.ms);
  const ms = (a) => `p50 ${pct(a, 50).toFixed(1)} ms, p99 ${pct(a, 99).toFixed(1)} ms, max ${Math.max(...a).toFixed(0)} ms`;
  console.log(`
soak summary (${secs} s, ${opts.clients} SSE clients, seed ${opts.seed}):
  RSS:        start ${MiB(start.rss)} MiB, after the warm-up (${(warmupMs / 1000).toFixed(0)} s) ${MiB(warmRss)} MiB, end ${MiB(endRss)} MiB, max ${MiB(maxRss)} MiB
  growth:     ${MiB(endRss - warmRss)} MiB after the warm-up, slope ${MiB(perMin)} MiB/min over its second half; bound ${MiB(bound)} MiB (max of ${opts.boundMib} MiB and ${opts.boundPct}%)
  fds:        ${fdsBefore} before the clients, ${Math.max(...samples.map((s) => s.fds || 0))} at most, ${fdsAfter} after they left; threads at most ${Math.max(...samples.map((s) => s.threads || 0))}
  SSE:        ${median(warmS.map((s) => s.open))} streams open after the warm-up, ${median(endS.map((s) => s.open))} at the end (medians); ${sse.ever.size} clients got a stream; ${sse.connects} connects, ${sse.badStatus} non-200, ${sse.errors} errors, ${sse.ended} streams ended, ${sse.events} events
  API:        ${apiStats.requests} requests ${JSON.stringify(apiStats.byStatus)}; after the warm-up ${after.length ? ms(after) : 'none'}
  training:   ${finishedJobs.length} job(s) done, ${jobsCreated} created
  violations: ${violations.length}`);
  for (const v of violations) console.log(`  - ${v.split('\n')[0]}`);
}

let code = 0;
try {
  await main();
  code = violations.length ? 1 : 0;
} catch (e) {
  console.error(`soak: ${e.stack || e}`);
  if (server) console.error(`--- server output (tail) ---\n${server.output().slice(-3000)}`);
  code = 1;
} finally {
  stopping = true;
  for (const c of clients) c.stop();
  if (server && server.exited() === null) await server.stop(30_000);
  if (opts.keep) console.log(`kept ${tmp.dir}`);
  else tmp.cleanup();
}
process.exit(code);
