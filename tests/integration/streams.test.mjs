// Live streams without gaps (issue 17) against a real `kiln serve`:
// - one stored id sequence per job: a client that read part of a job's events
//   and reconnects with Last-Event-ID gets every remaining event exactly once,
//   in order, whether the hub still has the stream or the server restarted
//   (compared with the full stored list a fresh client reads);
// - the worker's log lines arrive as `log` events and are GET /log's lines;
// - an idle stream gets a `: heartbeat` comment within the interval (the
//   sse-heartbeat limit, shortened here to 1 s);
// - a client that has gone away is noticed at the next heartbeat and its
//   connection is closed by the server.
// The jobs train a one-layer network on the demo digits, so each takes seconds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {
  api, describeResponse, importDemo, readSSE, startServer, tempDir, waitFor,
} from './lib/kiln.mjs';

const TINY = { name: 'tiny', layers: [{ type: 'flatten' }, { type: 'dense', units: 'classes' }] };
const ARGS = ['--limit', 'sse-heartbeat=1', '--max-jobs', '1'];

let tmp;
let dataDir;
let server;
let base;
let datasetId;

before(async () => {
  tmp = tempDir('kiln-streams-');
  dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ARGS });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

async function createJob(extra = {}) {
  const body = { dataset_id: datasetId, network: TINY, epochs: 2, batch_size: 32, ...extra };
  const r = await api(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

async function waitFinal(id) {
  let job;
  await waitFor(async () => {
    job = (await api(base, 'GET', `/api/v1/jobs/${id}`)).body;
    return ['done', 'failed', 'cancelled'].includes(job.status);
  }, { timeoutMs: 120_000, what: `job ${id} to end` });
  return job;
}

const idsOf = (evs) => evs.map((e) => e.id);
const stored = (evs) => evs.filter((e) => e.id !== null);

test('a reconnect with Last-Event-ID resumes exactly: from the hub, and after a server restart', async () => {
  const id = await createJob();
  const url = `${base}/api/v1/jobs/${id}/events`;
  // A client that reads the first few events and goes away (raw socket, so
  // that it really disconnects mid-stream).
  const first = await readRaw(url, 5);
  assert.equal(first.length, 5);
  const job = await waitFinal(id);
  assert.equal(job.status, 'done', `job ${id}: ${job.error}`);

  const full = stored((await readSSE(url, { timeoutMs: 60_000 })).events);
  assert.ok(full.length > 20, `the job has ${full.length} stored events`);
  assert.equal(new Set(idsOf(full)).size, full.length, 'ids are unique');
  full.forEach((e, i) => assert.ok(i === 0 || e.id > full[i - 1].id, 'ids increase'));
  assert.deepEqual(first.map((e) => e.id), idsOf(full).slice(0, 5), 'the first client saw the first events');

  // The hub still holds the finished stream: the rest, exactly once.
  const last = first[4].id;
  const fromHub = await readSSE(url, { timeoutMs: 60_000, headers: { 'Last-Event-ID': String(last) } });
  assert.ok(fromHub.ended);
  assert.deepEqual(idsOf(stored(fromHub.events)), idsOf(full).slice(5));
  assert.deepEqual(stored(fromHub.events).map((e) => e.raw), full.slice(5).map((e) => e.raw));

  // After a restart the hub has nothing of it: the store serves the same ids.
  await server.stop();
  server = await startServer({ dataDir, args: ARGS });
  base = server.url;
  const url2 = `${base}/api/v1/jobs/${id}/events`;
  const again = stored((await readSSE(url2, { timeoutMs: 60_000 })).events);
  assert.deepEqual(again.map((e) => [e.id, e.event, e.raw]), full.map((e) => [e.id, e.event, e.raw]),
    'the stored list is the same after a restart');
  const fromStore = await readSSE(url2, { timeoutMs: 60_000, headers: { 'Last-Event-ID': String(last) } });
  assert.ok(fromStore.ended);
  assert.deepEqual(stored(fromStore.events).map((e) => [e.id, e.event, e.raw]),
    full.slice(5).map((e) => [e.id, e.event, e.raw]), 'every remaining event exactly once, in order');
  const metrics = (await api(base, 'GET', `/api/v1/jobs/${id}/metrics`)).body.items;
  assert.deepEqual(full.filter((e) => e.event === 'metric').map((e) => e.data), metrics,
    'the metric events are the stored metrics');

  // The log events are GET /log's lines.
  const log = await fetch(`${base}/api/v1/jobs/${id}/log`).then((r) => r.text());
  const lines = log.replace(/\n$/, '').split('\n');
  assert.ok(lines.length >= 2, `the log has lines: ${JSON.stringify(log.slice(0, 200))}`);
  assert.deepEqual(full.filter((e) => e.event === 'log').map((e) => e.data.line), lines);
  assert.equal(full.at(-1).event, 'status');
  assert.ok(full.findIndex((e) => e.event === 'log') < full.length - 1, 'log lines come before the end');
});

test('a live reconnect while the job runs gets every event after its Last-Event-ID once', async () => {
  const id = await createJob({ epochs: 3 });
  const url = `${base}/api/v1/jobs/${id}/events`;
  const first = await readRaw(url, 8);
  const rest = await readSSE(url, { timeoutMs: 120_000, headers: { 'Last-Event-ID': String(first.at(-1).id) } });
  assert.ok(rest.ended);
  assert.equal(rest.finalStatus, 'done');
  assert.ok(rest.events.some((e) => e.event === 'progress' && e.id === null), 'progress events carry no id');
  const full = stored((await readSSE(url, { timeoutMs: 60_000 })).events);
  assert.deepEqual([...first, ...stored(rest.events)].map((e) => [e.id, e.raw]), full.map((e) => [e.id, e.raw]));
});

test('an idle stream gets a heartbeat within the interval; a vanished client is closed', async () => {
  const busy = await createJob({ epochs: 50 });            // holds the one CPU slot
  await waitFor(async () => (await api(base, 'GET', `/api/v1/jobs/${busy}`)).body.status === 'running',
    { timeoutMs: 60_000, what: 'the first job to run' });
  const idle = await createJob();                         // queued: its stream is idle
  const port = Number(new URL(base).port);
  const sock = net.connect({ port, host: '127.0.0.1' });
  await new Promise((res, rej) => { sock.once('connect', res); sock.once('error', rej); });
  const localPort = sock.localPort;
  let text = '';
  sock.setEncoding('utf8').on('data', (d) => { text += d; });
  sock.write(`GET /api/v1/jobs/${idle}/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  await waitFor(() => text.includes(`: events of job ${idle}`), { timeoutMs: 10_000, what: 'the stream to open' });
  const t0 = Date.now();
  await waitFor(() => text.includes(': heartbeat'), { timeoutMs: 5_000, intervalMs: 50, what: 'a heartbeat' });
  const waited = Date.now() - t0;
  assert.ok(waited <= 2500, `a heartbeat within the 1 s interval (${waited} ms)`);

  // The server's side of this connection, in /proc/net/tcp.
  const hex = (n) => n.toString(16).toUpperCase().padStart(4, '0');
  const serverSide = () => readFileSync('/proc/net/tcp', 'utf8').split('\n')
    .some((l) => l.includes(`0100007F:${hex(port)} 0100007F:${hex(localPort)}`));
  assert.ok(serverSide(), 'the server holds the stream');
  sock.destroy();                                         // the client goes away
  await waitFor(() => !serverSide(), { timeoutMs: 5_000, intervalMs: 100, what: 'the server to close it' });

  for (const j of [idle, busy]) await api(base, 'POST', `/api/v1/jobs/${j}/cancel`);
  await waitFinal(busy);
});

/* Reads a job's stream until `count` events with ids have come, then cancels
 * it (the client goes away mid-stream). Returns those events ({id, raw}). */
async function readRaw(url, count) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 60_000);
  const res = await fetch(url, { signal: ctl.signal, headers: { accept: 'text/event-stream' } });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const got = [];
  try {
    while (got.length < count) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0 && got.length < count) {
        const block = buf.slice(0, k).split('\n');
        buf = buf.slice(k + 2);
        const id = block.find((l) => l.startsWith('id: '));
        const data = block.filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        if (id) got.push({ id: Number(id.slice(4)), raw: data });
      }
    }
  } finally {
    clearTimeout(timer);
    await reader.cancel().catch(() => {});
    ctl.abort();
  }
  return got;
}
