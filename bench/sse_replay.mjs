#!/usr/bin/env node
/* bench/sse_replay.mjs: the SSE replay of a finished job under clients that do
 * not read (issue 15, finding 6). Not a test.
 *
 *   node bench/sse_replay.mjs --kiln build/server/kiln --fill build/tests/kiln_fill_metrics \
 *        [--clients 1000] [--metrics 50000] [--seconds 15]
 *
 * Makes a data directory whose one finished job has --metrics stored metrics
 * (kiln_fill_metrics, through the store), starts `kiln serve` on it, and
 * measures the server's RSS (VmRSS of /proc/<pid>/status) and the latency of
 * GET /api/v1/jobs before and while --clients connections ask for the job's
 * events and never read them. Prints one JSON object. Run it against two
 * builds (e.g. main's and a branch's) on the same machine to compare.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const kiln = path.resolve(args.kiln || 'build/server/kiln');
const fill = path.resolve(args.fill || 'build/tests/kiln_fill_metrics');
const clients = Number(args.clients || 1000);
const metrics = Number(args.metrics || 50000);
const seconds = Number(args.seconds || 15);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

async function getJobs(url) {
  const t0 = performance.now();
  try {
    const r = await fetch(`${url}/api/v1/jobs`, { signal: AbortSignal.timeout(30_000) });
    await r.arrayBuffer();
    return r.status === 200 ? performance.now() - t0 : Infinity;
  } catch {
    return Infinity;
  }
}

function summary(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  const ms = (x) => (Number.isFinite(x) ? +x.toFixed(1) : "timeout (30 s)");
  return { n: s.length, p50_ms: ms(q(0.5)), p99_ms: ms(q(0.99)), max_ms: ms(s.at(-1)) };
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'kiln-sse-bench-'));
const data = path.join(dir, 'data');
execFileSync('mkdir', ['-p', data]);
const filled = execFileSync(fill, [path.join(data, 'kiln.db'), 'new', String(metrics)], { encoding: 'utf8' });
const job = Number(/job (\d+)/.exec(filled)[1]);
const srv = spawn(kiln, ['serve', '--port', '0', '--host', '127.0.0.1', '--data', data], { stdio: ['ignore', 'pipe', 'pipe'] });
let out = '';
const url = await new Promise((res, rej) => {
  const t = setTimeout(() => rej(new Error(`no listening line:\n${out}`)), 30_000);
  const on = (d) => { out += d; const m = /listening on (http:\/\/\S+)/.exec(out); if (m) { clearTimeout(t); res(m[1].replace(/\/$/, '')); } };
  srv.stdout.setEncoding('utf8').on('data', on);
  srv.stderr.setEncoding('utf8').on('data', on);
});
const port = Number(new URL(url).port);
await sleep(500);
const before = { rss_mib: rssKiB(srv.pid) / 1024, get: [] };
for (let i = 0; i < 20; i++) before.get.push(await getJobs(url));

const socks = [];
for (let i = 0; i < clients; i++) {
  const s = net.connect({ port, host: '127.0.0.1' }, () => {
    s.write(`GET /api/v1/jobs/${job}/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: text/event-stream\r\n\r\n`);
    s.pause();                                   /* never read: the server's writes back up */
  });
  s.on('error', () => {});
  socks.push(s);
}
const during = { get: [], rss_mib: [] };
const t0 = Date.now();
while (Date.now() - t0 < seconds * 1000) {
  during.get.push(await getJobs(url));
  during.rss_mib.push(rssKiB(srv.pid) / 1024);
  await sleep(200);
}
const result = {
  kiln, clients, metrics,
  rss_before_mib: +before.rss_mib.toFixed(1),
  rss_peak_mib: +Math.max(...during.rss_mib).toFixed(1),
  rss_end_mib: +during.rss_mib.at(-1).toFixed(1),
  get_jobs_before: summary(before.get),
  get_jobs_during: summary(during.get),
  get_jobs_failed_or_over_30s: during.get.filter((x) => x === Infinity).length,
  get_jobs_series_ms: during.get.map((x) => (Number.isFinite(x) ? Math.round(x) : null)),
};
for (const s of socks) s.destroy();
srv.kill('SIGTERM');
await new Promise((r) => srv.on('exit', r));
rmSync(dir, { recursive: true, force: true });
console.log(JSON.stringify(result));
