// GET /metrics (issue 17) against a real `kiln serve` that trains a tiny job:
//   - the text passes `promtool check metrics` (Debian's prometheus package);
//   - kiln_http_requests_total grows by exactly the requests made, labelled by
//     the route's pattern (never the raw URL) and status, and the latency
//     histogram's _count equals it, its buckets cumulative up to +Inf;
//   - kiln_jobs{status} matches GET /api/v1/jobs; kiln_queue_length,
//     kiln_dataset_images match the API; GPU series come from the fake NVML
//     (tests/tools/fake_nvml.c, KILN_NVML_LIBRARY), its quoted name escaped;
//   - kiln_sse_clients counts a live event stream, and forgets it once closed;
//   - with a user, /metrics needs a bearer token like any API route.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  api, describeResponse, makeDigitArchive, runKiln, startServer, tempDir, waitDataset, waitFor,
} from './lib/kiln.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K', '--limit', 'hardware-interval=1'];
const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };

let tmp;
let server;
let base;
let datasetId;
let jobId;

/* The exposition text as {name, labels (object), value} samples, and the families' TYPE lines. */
function parseMetrics(text) {
  const samples = [];
  const types = {};
  for (const line of text.split('\n')) {
    if (!line) continue;
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) { types[t[1]] = t[2]; continue; }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${JSON.stringify(line)}`);
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (let l; (l = re.exec(m[3] || ''));) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return { samples, types };
}

const pick = (parsed, name, want = {}) => parsed.samples.filter(
  (s) => s.name === name && Object.entries(want).every(([k, v]) => s.labels[k] === v));
const one = (parsed, name, want) => {
  const found = pick(parsed, name, want);
  assert.equal(found.length, 1, `${name} ${JSON.stringify(want)}: ${found.length} samples`);
  return found[0].value;
};
const sum = (parsed, name, want) => pick(parsed, name, want).reduce((a, s) => a + s.value, 0);

async function scrape(headers = {}) {
  const res = await fetch(`${base}/metrics`, { headers });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  return { text, parsed: parseMetrics(text) };
}

before(async () => {
  tmp = tempDir('kiln-metrics-');
  process.env.KILN_NVML_LIBRARY = process.env.KILN_FAKE_NVML || '';
  assert.ok(process.env.KILN_NVML_LIBRARY, 'KILN_FAKE_NVML names the fake NVML (tests/node.cmake sets it)');
  const archive = await makeDigitArchive(path.join(tmp.dir, 'work'), 20);
  server = await startServer({ dataDir: path.join(tmp.dir, 'data'), args: CHEAP });
  base = server.url;
  const form = new FormData();
  form.append('name', 'digits');
  form.append('archive', new Blob([readFileSync(archive)], { type: 'application/gzip' }), 'digits.tar.gz');
  const up = await api(base, 'POST', '/api/v1/datasets', form);
  assert.equal(up.status, 202, describeResponse('POST', '/api/v1/datasets', up));
  datasetId = up.body.id;
  assert.equal((await waitDataset(base, datasetId, 120_000)).status, 'ready');
  const job = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: TINY, epochs: 1, batch_size: 16 });
  assert.equal(job.status, 201, describeResponse('POST', '/api/v1/jobs', job));
  jobId = job.body.id;
  await waitFor(async () => (await api(base, 'GET', `/api/v1/jobs/${jobId}`)).body.status === 'done',
    { timeoutMs: 120_000, what: 'the tiny job done' });
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('promtool check metrics accepts the text', async () => {
  const { text } = await scrape();
  const file = path.join(tmp.dir, 'metrics.txt');
  writeFileSync(file, text);
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.ok(!r.error, `promtool could not run (scripts/install-deps installs Debian's prometheus): ${r.error}`);
  assert.equal(r.status, 0, `promtool check metrics (${file}):\n${r.stdout}${r.stderr}`);
});

test('request counters grow by exactly the requests made, by route pattern and status', async () => {
  const before = (await scrape()).parsed;
  const info0 = sum(before, 'kiln_http_requests_total', { method: 'GET', route: '/api/v1/info', code: '200' });
  const job0 = sum(before, 'kiln_http_requests_total', { method: 'GET', route: '/api/v1/jobs/:id', code: '404' });
  const scrapes0 = sum(before, 'kiln_http_requests_total', { method: 'GET', route: '/metrics', code: '200' });
  for (let i = 0; i < 7; i++) assert.equal((await api(base, 'GET', '/api/v1/info')).status, 200);
  for (const id of [999001, 999002, 999003]) assert.equal((await api(base, 'GET', `/api/v1/jobs/${id}`)).status, 404);
  const after = (await scrape()).parsed;
  assert.equal(sum(after, 'kiln_http_requests_total', { method: 'GET', route: '/api/v1/info', code: '200' }), info0 + 7);
  assert.equal(sum(after, 'kiln_http_requests_total', { method: 'GET', route: '/api/v1/jobs/:id', code: '404' }), job0 + 3);
  assert.equal(sum(after, 'kiln_http_requests_total', { method: 'GET', route: '/metrics', code: '200' }), scrapes0 + 1,
    'the scrape before counts; the scrape itself does not');
  assert.equal(after.samples.filter((s) => /999001/.test(s.labels.route || '')).length, 0, 'no raw URL as a label');
  assert.equal(after.types.kiln_http_requests_total, 'counter');
  assert.equal(after.types.kiln_http_request_duration_seconds, 'histogram');

  // every histogram: _count is the route's requests over all codes; buckets cumulative, +Inf = _count
  const routes = new Set(pick(after, 'kiln_http_requests_total').map((s) => `${s.labels.method} ${s.labels.route}`));
  for (const key of routes) {
    const [method, route] = key.split(' ');
    const count = one(after, 'kiln_http_request_duration_seconds_count', { method, route });
    assert.equal(count, sum(after, 'kiln_http_requests_total', { method, route }), key);
    const buckets = pick(after, 'kiln_http_request_duration_seconds_bucket', { method, route });
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value, `${key} cumulative`);
    assert.equal(buckets.at(-1).labels.le, '+Inf');
    assert.equal(buckets.at(-1).value, count);
    assert.ok(one(after, 'kiln_http_request_duration_seconds_sum', { method, route }) >= 0);
  }
});

test('jobs by status, the queue, dataset images and the process match the API', async () => {
  const { parsed } = await scrape();
  const jobs = (await api(base, 'GET', '/api/v1/jobs')).body.items;
  for (const status of ['queued', 'running', 'done', 'failed', 'cancelled']) {
    assert.equal(one(parsed, 'kiln_jobs', { status }), jobs.filter((j) => j.status === status).length, status);
  }
  assert.equal(one(parsed, 'kiln_jobs', { status: 'done' }), 1);
  const info = (await api(base, 'GET', '/api/v1/info')).body;
  assert.equal(one(parsed, 'kiln_queue_length'), info.queue.queued);
  const ds = (await api(base, 'GET', `/api/v1/datasets/${datasetId}`)).body;
  const counts = ds.counts;
  for (const split of ['train', 'val', 'test']) {
    assert.equal(one(parsed, 'kiln_dataset_images', { split }), counts[split] ?? 0, split);   // no test split: absent
  }
  assert.equal(counts.train + counts.val + (counts.test ?? 0), 200);
  assert.equal(one(parsed, 'kiln_sse_clients'), 0);
  assert.ok(one(parsed, 'process_resident_memory_bytes') > 1 << 20);
  assert.ok(one(parsed, 'process_threads') >= 2);
  const cpu = one(parsed, 'kiln_cpu_utilization_ratio');
  assert.ok(cpu >= 0 && cpu <= 1, `cpu ${cpu}`);
});

test('a running job shows its images per second', async () => {
  const job = await api(base, 'POST', '/api/v1/jobs', { dataset_id: datasetId, network: 'lenet', epochs: 30, batch_size: 8 });
  assert.equal(job.status, 201, describeResponse('POST', '/api/v1/jobs', job));
  const id = job.body.id;
  let seen = null;
  await waitFor(async () => {
    const j = (await api(base, 'GET', `/api/v1/jobs/${id}`)).body;
    if (j.status !== 'running' || !(j.images_per_sec > 0)) return false;
    const { parsed } = await scrape();
    const ips = pick(parsed, 'kiln_job_images_per_second', { job: String(id) });
    if (ips.length !== 1 || !(ips[0].value > 0)) return false;
    seen = ips[0].value;
    assert.equal(one(parsed, 'kiln_jobs', { status: 'running' }), 1);
    return true;
  }, { timeoutMs: 60_000, what: 'a running job with images/s in /metrics' });
  assert.ok(seen > 0);
  // an SSE client on it counts while it is connected
  const ctl = new AbortController();
  const sse = await fetch(`${base}/api/v1/jobs/${id}/events`, { signal: ctl.signal });
  assert.equal(sse.status, 200);
  const reader = sse.body.getReader();
  await reader.read();                            // the stream has begun
  assert.equal(one((await scrape()).parsed, 'kiln_sse_clients'), 1);
  ctl.abort();
  await reader.read().catch(() => {});
  await waitFor(async () => one((await scrape()).parsed, 'kiln_sse_clients') === 0,
    { timeoutMs: 30_000, what: 'the SSE client gone from kiln_sse_clients' });
  assert.equal((await api(base, 'POST', `/api/v1/jobs/${id}/cancel`)).status < 300, true);
  await waitFor(async () => (await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status === 'cancelled',
    { timeoutMs: 60_000, what: 'the job cancelled' });
  const { parsed } = await scrape();
  assert.equal(pick(parsed, 'kiln_job_images_per_second').length, 0, 'no series for a job that stopped');
});

test('GPU figures come from NVML (the fake one here), names escaped', async () => {
  const { text, parsed } = await scrape();
  const a = { gpu: '0', name: 'Fake GPU "A" \\ 0' };
  assert.ok(text.includes('name="Fake GPU \\"A\\" \\\\ 0"'), 'the quote and backslash escaped in the label');
  assert.equal(one(parsed, 'kiln_gpu_utilization_ratio', a), 0.37);
  assert.equal(one(parsed, 'kiln_gpu_memory_used_bytes', a), 3 * 2 ** 30);
  assert.equal(one(parsed, 'kiln_gpu_memory_total_bytes', a), 16 * 2 ** 30);
  assert.equal(one(parsed, 'kiln_gpu_temperature_celsius', a), 61);
  assert.equal(one(parsed, 'kiln_gpu_power_watts', a), 123.456);
  assert.equal(one(parsed, 'kiln_gpu_utilization_ratio', { gpu: '1', name: 'Fake GPU B' }), 0);
  assert.equal(pick(parsed, 'kiln_gpu_temperature_celsius', { gpu: '1' }).length, 0, 'an unknown figure is left out');
});

test('with a user, /metrics needs a bearer token like any API route', async () => {
  const pw = path.join(tmp.dir, 'pw');
  writeFileSync(pw, 'scraper-secret-1\n');
  const add = await runKiln(['user', 'add', 'prom', '--data', server.dataDir, '--password-file', pw,
    '--limit', 'password-ops=1', '--limit', 'password-mem=8K']);
  assert.equal(add.code, 0, add.stderr);
  const anon = await fetch(`${base}/metrics`);
  assert.equal(anon.status, 401);
  const tok = await api(base, 'POST', '/api/v1/tokens', { user: 'prom', password: 'scraper-secret-1' });
  assert.equal(tok.status, 201, describeResponse('POST', '/api/v1/tokens', tok));
  const { parsed } = await scrape({ authorization: `Bearer ${tok.body.token}` });
  assert.equal(sum(parsed, 'kiln_http_requests_total', { method: 'GET', route: '/metrics', code: '401' }), 1);
});
