// The front door (issue 15, findings 1, 5 and 8): each attack as an attacker
// would make it, with real sockets against a real `kiln serve`, and the
// refusal it now gets. server/guard.c holds the checks.
//
// - cross-site writes: JSON routes take only application/json (415), a
//   state-changing request from another origin is refused before its body is
//   read (403), and a Host header that is not one of the server's names is
//   refused (421: DNS rebinding);
// - connection exhaustion: one client address holds at most
//   connections-per-client connections, and idle ones are closed after
//   idle-timeout while an SSE stream stays open;
// - 414/431 in the JSON error format; \u0000 in a JSON string is a 400 that
//   names the field; a control byte in the URI is 400 invalid_uri; doubled
//   framing headers are 400 and an unknown transfer coding 501.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { FINAL_STATUSES, importDemo, readSSE, sleep, startServer, tempDir, waitFor } from './lib/kiln.mjs';

const IDLE_S = 5;             // --limit idle-timeout (its minimum), on both servers

let tmp;
let server;                   // with the demo digits
let port;
let datasetId;
let starve;                   // a small server for the starvation scenario
let starvePort;

before(async () => {
  tmp = tempDir('kiln-frontdoor-');
  const dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  server = await startServer({ dataDir, args: ['--limit', `idle-timeout=${IDLE_S}`, '--max-jobs', '1'] });
  port = Number(new URL(server.url).port);
  starve = await startServer({
    dataDir: path.join(tmp.dir, 'starve'),
    args: ['--limit', 'connections=16', '--limit', 'connections-per-client=4', '--limit', `idle-timeout=${IDLE_S}`],
  });
  starvePort = Number(new URL(starve.url).port);
});

after(async () => {
  if (server) await server.stop();
  if (starve) await starve.stop();
  if (tmp) tmp.cleanup();
});

/* One request on its own connection (no keep-alive pool), any headers
 * (Host included). Resolves to {status, headers, text, body (JSON or null)}. */
function request(method, p, { headers = {}, body, toPort = port, localAddress } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: toPort, method, path: p, headers, agent: false, localAddress },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { text += d; });
        res.on('end', () => {
          let json = null;
          try { json = JSON.parse(text); } catch { json = null; }
          resolve({ status: res.statusCode, headers: res.headers, text, body: json });
        });
      });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${p}: no answer in 15 s`)));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const JSON_CT = { 'content-type': 'application/json' };
const self = () => `http://127.0.0.1:${port}`;

function assertError(r, status, code, what) {
  assert.equal(r.status, status, `${what}: ${r.status} ${r.text.slice(0, 400)}`);
  assert.match(r.headers['content-type'] || '', /application\/json/, `${what}: content type`);
  assert.ok(r.body && r.body.error, `${what}: a JSON error body: ${r.text.slice(0, 200)}`);
  assert.equal(r.body.error.code, code, `${what}: ${r.text}`);
  return r.body.error.message;
}

/* Writes head (request line and headers) on a raw socket and reads what comes
 * back until the server closes or ms pass: {text, closed, ms}. */
function raw(head, { toPort = port, ms = 5000, localAddress } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const s = net.connect({ host: '127.0.0.1', port: toPort, localAddress });
    let text = '';
    const timer = setTimeout(() => { s.destroy(); resolve({ text, closed: false, ms: Date.now() - t0 }); }, ms);
    s.on('connect', () => s.write(head));
    s.setEncoding('latin1');
    s.on('data', (d) => { text += d; });
    s.on('error', (e) => { if (!text) { clearTimeout(timer); reject(e); } });
    s.on('close', () => { clearTimeout(timer); resolve({ text, closed: true, ms: Date.now() - t0 }); });
  });
}

const jobBody = (extra = {}) => JSON.stringify({ dataset_id: datasetId, network: 'lenet', epochs: 1, devices: 0, ...extra });

async function jobCount() {
  const r = await request('GET', '/api/v1/jobs');
  assert.equal(r.status, 200, r.text);
  return r.body.items.length;
}

test('a JSON route refuses the bodies a cross-site form or simple fetch can send (415), and creates nothing', async () => {
  for (const ct of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', null]) {
    const headers = ct ? { 'content-type': ct } : {};
    const r = await request('POST', '/api/v1/jobs', { headers, body: jobBody() });
    const msg = assertError(r, 415, 'unsupported_media_type', `POST /api/v1/jobs as ${ct}`);
    assert.match(msg, /application\/json/);
  }
  // A route that takes no body: a form's body is refused too (the job need not exist: refused first).
  const cancel = await request('POST', '/api/v1/jobs/1/cancel',
    { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=b' });
  assertError(cancel, 415, 'unsupported_media_type', 'a form body to POST .../cancel');
  assert.equal(await jobCount(), 0, 'no job was created');
  // application/json with a charset parameter is JSON.
  const summary = await request('POST', '/api/v1/networks/summary', {
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: JSON.stringify({ network: 'lenet', input: [1, 28, 28], classes: 10 }),
  });
  assert.equal(summary.status, 200, summary.text);
});

test('a state-changing request from another site is refused (403) before its body is read', async () => {
  const uploads = path.join(server.dataDir, 'uploads');
  const datasetsBefore = (await request('GET', '/api/v1/datasets')).body.items.length;
  // A multipart upload that declares 50 MB and sends none of it: answered at once, from the headers.
  const head = [
    'POST /api/v1/datasets HTTP/1.1', `Host: 127.0.0.1:${port}`, 'Origin: http://evil.example',
    'Content-Type: multipart/form-data; boundary=XyZ', `Content-Length: ${50 * 1024 * 1024}`, '', '',
  ].join('\r\n');
  const early = await raw(head, { ms: 5000 });
  assert.match(early.text, /^HTTP\/1\.1 403 /, `answered before the body: ${early.text.slice(0, 300)}`);
  assert.match(early.text, /"code":"cross_origin"/);
  assert.match(early.text, /http:\/\/evil\.example/, 'the message names the origin');
  // The whole upload sent, as a page's form would.
  const boundary = 'kilnfrontdoor';
  const body = Buffer.concat([
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nevil\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="archive"; filename="a.tar.gz"\r\n` +
      'Content-Type: application/gzip\r\n\r\n'),
    Buffer.alloc(256 * 1024, 7),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  const up = await request('POST', '/api/v1/datasets', {
    headers: { origin: 'http://evil.example', 'content-type': `multipart/form-data; boundary=${boundary}` }, body,
  });
  assert.match(assertError(up, 403, 'cross_origin', 'multipart upload from evil.example'), /http:\/\/evil\.example/);
  assert.deepEqual(readdirSync(uploads), [], 'nothing stored in uploads/');
  assert.equal((await request('GET', '/api/v1/datasets')).body.items.length, datasetsBefore, 'no dataset created');

  // JSON, DELETE, an opaque origin, and another port of the same host are other sites too.
  const cases = [
    ['POST', '/api/v1/jobs', 'http://evil.example', jobBody()],
    ['DELETE', `/api/v1/datasets/${datasetId}`, 'http://evil.example', undefined],
    ['POST', '/api/v1/jobs', 'null', jobBody()],
    ['POST', '/api/v1/jobs', `http://127.0.0.1:${port + 1}`, jobBody()],
    ['POST', '/api/v1/jobs', `https://127.0.0.1:${port}.evil.example`, jobBody()],
  ];
  for (const [method, p, origin, b] of cases) {
    const r = await request(method, p, { headers: { ...JSON_CT, origin }, body: b });
    assert.ok(assertError(r, 403, 'cross_origin', `${method} ${p} from ${origin}`).includes(origin));
  }
  assert.equal(await jobCount(), 0, 'no job was created');
  assert.equal((await request('GET', `/api/v1/datasets/${datasetId}`)).status, 200, 'the dataset is still there');
  // Reads are not refused, and no answer carries CORS headers (another site cannot read it).
  const read = await request('GET', '/api/v1/jobs', { headers: { origin: 'http://evil.example' } });
  assert.equal(read.status, 200);
  const pre = await request('OPTIONS', '/api/v1/jobs', {
    headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' },
  });
  for (const r of [read, pre])
    assert.ok(!Object.keys(r.headers).some((h) => h.startsWith('access-control-')), JSON.stringify(r.headers));
});

test('same-origin requests and requests without Origin (curl) still work', async () => {
  // The dashboard's own page: Origin is the server's origin.
  const a = await request('POST', '/api/v1/jobs', { headers: { ...JSON_CT, origin: self() }, body: jobBody({ epochs: 50 }) });
  assert.equal(a.status, 201, a.text);
  // Reached by another of its names, with the Origin that name gives.
  const viaName = await request('POST', `/api/v1/jobs/${a.body.id}/cancel`, {
    headers: { host: `localhost:${port}`, origin: `http://localhost:${port}` },
  });
  assert.ok([200, 202].includes(viaName.status), viaName.text);
  // No Origin, as curl sends; an escaped backslash before u0000 is text, kept as it is.
  const name = 'back\\u0000slash';
  const b = await request('POST', '/api/v1/jobs', { headers: JSON_CT, body: jobBody({ name, epochs: 50 }) });
  assert.equal(b.status, 201, b.text);
  assert.equal(b.body.config.name, name);
  // A running job's cancel is asynchronous: delete once it has ended.
  await waitFor(async () => FINAL_STATUSES.has((await request('GET', `/api/v1/jobs/${a.body.id}`)).body.status),
    { timeoutMs: 30_000, intervalMs: 100, what: 'the cancelled job to end' });
  const del = await request('DELETE', `/api/v1/jobs/${a.body.id}`, { headers: { origin: self() } });
  assert.ok(del.status === 200 || del.status === 204, del.text);
  const cancel = await request('POST', `/api/v1/jobs/${b.body.id}/cancel`);
  assert.ok([200, 202].includes(cancel.status), cancel.text);
});

test('a Host header that is not a name of the server is refused (421): DNS rebinding', async () => {
  const c = await request('POST', '/api/v1/jobs', { headers: JSON_CT, body: jobBody({ epochs: 50 }) });
  assert.equal(c.status, 201, c.text);
  const id = c.body.id;
  for (const host of ['evil.example', `evil.example:${port}`, `127.0.0.1:${port + 1}`, `localhost.evil.example:${port}`]) {
    for (const [method, p] of [['GET', '/api/v1/jobs'], ['GET', '/'], ['DELETE', `/api/v1/jobs/${id}`]]) {
      const r = await request(method, p, { headers: { host } });
      assert.match(assertError(r, 421, 'unknown_host', `${method} ${p} with Host ${host}`), /--allowed-host/);
    }
  }
  assert.equal((await request('GET', `/api/v1/jobs/${id}`)).status, 200, 'the job was not deleted');
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `LOCALHOST:${port}`]) {
    const r = await request('GET', '/api/v1/jobs', { headers: { host } });
    assert.equal(r.status, 200, `Host ${host}: ${r.text}`);
  }
  // HTTP/1.0 without Host (no browser sends that) is answered.
  const old = await raw('GET /api/v1/info HTTP/1.0\r\n\r\n');
  assert.match(old.text, /^HTTP\/1\.[01] 200 /, old.text.slice(0, 200));
  const cancel = await request('POST', `/api/v1/jobs/${id}/cancel`);
  assert.ok([200, 202].includes(cancel.status), cancel.text);
});

test('414 and 431 are JSON errors that name the limit', async () => {
  const ok = await request('GET', `/api/v1/info?x=${'a'.repeat(7000)}`);
  assert.equal(ok.status, 200, 'a URI under uri-bytes');
  const uri = await request('GET', `/api/v1/info?x=${'a'.repeat(9000)}`);
  assert.match(assertError(uri, 414, 'uri_too_long', '9 KB URI'), /uri-bytes/);
  const big = await request('GET', `/api/v1/info?x=${'a'.repeat(30000)}`);
  assert.match(assertError(big, 414, 'uri_too_long', '30 KB URI'), /uri-bytes/);
  const hdr = await request('GET', '/api/v1/info', { headers: { 'x-big': 'b'.repeat(40000) } });
  assert.match(assertError(hdr, 431, 'headers_too_large', '40 KB header'), /header-bytes/);
  const many = {};
  for (let i = 0; i < 400; i++) many[`x-h${i}`] = 'v'.repeat(90);
  const hdrs = await request('GET', '/api/v1/info', { headers: many });
  assert.match(assertError(hdrs, 431, 'headers_too_large', '400 headers of 100 bytes'), /header-bytes/);
  // Far past both (over libmicrohttpd's own buffer, guard_mhd_memory_limit): its own short
  // answer, with the same status; the server goes on.
  const huge = await raw(`GET /api/v1/jobs?x=${'a'.repeat(400_000)} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  assert.match(huge.text, /^HTTP\/1\.1 414 /, huge.text.slice(0, 200));
  assert.equal((await request('GET', '/api/v1/info')).status, 200);
});

test('\\u0000 in any JSON string is refused naming the field, not truncated', async () => {
  const before = await jobCount();
  const cases = [
    ['/api/v1/jobs', `{"dataset_id": ${datasetId}, "network": "lenet", "devices": 0, "name": "a\\u0000b"}`, /the field "name"/],
    ['/api/v1/jobs', `{"dataset_id": ${datasetId}, "devices": 0, "network": {"layers": [{"type": "flatten"}, ` +
      '{"type": "dense", "units": "classes", "name": "fc\\u0000"}]}}', /the field "network\.layers\[1\]\.name"/],
    ['/api/v1/jobs', `{"dataset_id": ${datasetId}, "network": "lenet", "solver": {"ty\\u0000pe": "sgd"}}`, /a key in "solver"/],
    ['/api/v1/datasets', '{"name": "d", "source": {"type": "folder", "path": "/tmp\\u0000/x"}}', /the field "source\.path"/],
    ['/api/v1/networks/summary', '{"network": "lenet\\u0000", "input": [1, 28, 28], "classes": 10}', /the field "network"/],
  ];
  for (const [p, body, field] of cases) {
    const r = await request('POST', p, { headers: JSON_CT, body });
    const msg = assertError(r, 400, 'invalid_json', `${p} ${body}`);
    assert.match(msg, field);
    assert.match(msg, /\\u0000/);
  }
  assert.equal(await jobCount(), before, 'no job was created');
});

test('a key given twice in any JSON object is refused naming it, not resolved by a guess', async () => {
  const before = await jobCount();
  const cases = [
    ['/api/v1/jobs', `{"dataset_id": ${datasetId}, "network": "lenet", "devices": 0, "epochs": 1, "epochs": 9}`,
      /the key "epochs" is given twice in the body/],
    ['/api/v1/networks/summary', '{"network": {"layers": [{"type": "flatten"}, {"type": "dense", "units": "classes", ' +
      '"units": 5}]}, "input": [1, 28, 28], "classes": 10}', /the key "units" is given twice in "network\.layers\[1\]"/],
    ['/api/v1/sweeps', '{"method": "grid", "method": "random"}', /the key "method" is given twice/],
  ];
  for (const [p, body, msg] of cases) {
    const r = await request('POST', p, { headers: JSON_CT, body });
    assert.match(assertError(r, 400, 'invalid_json', `${p} ${body}`), msg);
  }
  const r = await request('PATCH', `/api/v1/datasets/${datasetId}`, { headers: JSON_CT, body: '{"shared": true, "shared": false}' });
  assert.match(assertError(r, 400, 'invalid_json', 'PATCH shared twice'), /"shared" is given twice/);
  assert.equal(await jobCount(), before, 'no job was created');
});

test('a control byte in the URI, escaped or raw, is 400 and deletes nothing (%00 would cut the path short)', async () => {
  const ds = `/api/v1/datasets/${datasetId}`;
  for (const [method, p] of [['DELETE', `${ds}%00/samples`], ['DELETE', `${ds}%0a`], ['GET', '/index.html%00.png'],
    ['GET', '/api/v1/jobs?q=a%1fb'], ['GET', '/api/v1/jobs%7F']]) {
    assertError(await request(method, p), 400, 'invalid_uri', `${method} ${p}`);
  }
  const r = await raw('GET /api/v1/da\x01tasets HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
  assert.match(r.text, /^HTTP\/1\.1 400 [^]*"invalid_uri"/, r.text);
  // A raw NUL, which ends the URI's C string before libmicrohttpd's version.
  const nul = await raw(`DELETE ${ds}\x00/samples HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`);
  assert.match(nul.text, /^HTTP\/1\.1 400 [^]*"invalid_uri"/, nul.text);
  assert.equal((await request('GET', ds)).status, 200, 'the dataset is still there');
  // A literal "%00" in a query value, sent escaped as %25, is text like any other.
  assert.equal((await request('GET', '/api/v1/jobs?q=a%2500b')).status, 200);
});

test('framing is not guessed at: doubled headers, Content-Length with Transfer-Encoding, no Host on HTTP/1.1', async () => {
  const host = `Host: 127.0.0.1:${port}\r\n`;
  const summary = 'POST /api/v1/networks/summary HTTP/1.1\r\nContent-Type: application/json\r\nConnection: close\r\n';
  const body = '{"network":"lenet"}';
  const cases = [
    [`${summary}${host}Content-Length: ${body.length}\r\nContent-Length: 5\r\n\r\n${body}`, 400, /more than one Content-Length/],
    [`${summary}${host}Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${body}`, 400,
      /both Content-Length and Transfer-Encoding/],
    [`${summary}${host}${host}Content-Length: ${body.length}\r\n\r\n${body}`, 400, /more than one Host/],
    [`${summary}${host}Origin: ${self()}\r\nOrigin: http://evil.example\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      400, /more than one Origin/],
    [`GET /api/v1/datasets HTTP/1.1\r\nConnection: close\r\n\r\n`, 400, /must have a Host header/],
    [`${summary}${host}Content-Length : ${body.length}\r\n\r\n${body}`, 400, /header name \\"Content-Length \\" holds a space/],
    // A coding MHD would never deliver a body for: answered at once, not after the idle timeout.
    [`${summary}${host}Transfer-Encoding: gzip\r\n\r\n`, 501, /Transfer-Encoding \\"gzip\\" is not supported/],
  ];
  for (const [head, status, msg] of cases) {
    const r = await raw(head, { ms: 3000 });
    assert.match(r.text, new RegExp(`^HTTP/1\\.1 ${status} `), head);
    assert.match(r.text, msg, head);
    assert.ok(r.ms < 3000, `answered in ${r.ms} ms: ${head}`);
  }
  const ok = await raw(`GET /api/v1/datasets HTTP/1.0\r\n\r\n`);
  assert.match(ok.text, /^HTTP\/1\.1 200 /, 'HTTP/1.0 without Host still passes (no browser sends it)');
});

async function sseOutlivesIdleTimeout() {
  // Job 1 trains (one CPU job at a time), so a second one waits in the queue: its stream is quiet.
  const running = await request('POST', '/api/v1/jobs', { headers: JSON_CT, body: jobBody({ epochs: 50 }) });
  const queued = await request('POST', '/api/v1/jobs', { headers: JSON_CT, body: jobBody({ epochs: 50 }) });
  assert.equal(queued.status, 201, queued.text);
  const idle = raw('', { ms: (IDLE_S + 10) * 1000 });            // connects and says nothing
  const events = [];
  const sse = readSSE(`${server.url}/api/v1/jobs/${queued.body.id}/events`,
    { timeoutMs: 60_000, endGraceMs: 5_000, onEvent: (e) => events.push(e) });
  const closed = await idle;
  assert.ok(closed.closed, 'the idle connection was closed by the server');
  assert.ok(closed.ms >= (IDLE_S - 1) * 1000 && closed.ms <= (IDLE_S + 4) * 1000, `closed after ${closed.ms} ms`);
  await sleep(2000);                                               // the stream is now past idle-timeout
  const job = await request('GET', `/api/v1/jobs/${queued.body.id}`);
  assert.equal(job.body.status, 'queued', 'the stream was quiet: its job still waits');
  await request('POST', `/api/v1/jobs/${queued.body.id}/cancel`);
  const s = await sse;
  assert.equal(s.finalStatus, 'cancelled', `the stream was still open to report the cancel: ${JSON.stringify(events)}`);
  await request('POST', `/api/v1/jobs/${running.body.id}/cancel`);
}

/* n connections from address, each opened and left idle; resolves once all
 * have connected. .open() counts those the server has not closed. */
async function holdIdle(n, address, toPort) {
  const socks = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect({ host: '127.0.0.1', port: toPort, localAddress: address });
    s.closedAt = null;
    s.on('error', () => {});
    s.on('close', () => { s.closedAt = Date.now(); });
    await new Promise((res) => { s.once('connect', res); s.once('error', res); });
    socks.push(s);
  }
  return {
    socks,
    open: () => socks.filter((s) => s.closedAt === null).length,
    destroy: () => socks.forEach((s) => s.destroy()),
  };
}

async function perClientCap() {
  // 127.0.0.2 tries to take every one of the 16 slots; it keeps 4.
  const attacker = await holdIdle(16, '127.0.0.2', starvePort);
  await waitFor(() => attacker.open() === 4, { timeoutMs: 3000, intervalMs: 50, what: 'the server to close all but 4' });
  const t0 = Date.now();
  const r = await request('GET', '/healthz', { toPort: starvePort, localAddress: '127.0.0.1' });
  assert.equal(r.status, 200);
  assert.ok(Date.now() - t0 < 2000, `another client answered in ${Date.now() - t0} ms`);
  assert.equal(attacker.open(), 4, 'the 4 allowed stay open');
  attacker.destroy();
}

async function idleSlotsComeBack() {
  // Four addresses, four connections each: every slot of the server is taken.
  await sleep(300);                                              // the previous test's sockets are gone
  const holders = [];
  for (const a of ['127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6']) holders.push(await holdIdle(4, a, starvePort));
  const t0 = Date.now();
  const victim = raw(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${starvePort}\r\nConnection: close\r\n\r\n`,
    { toPort: starvePort, ms: (IDLE_S + 8) * 1000, localAddress: '127.0.0.1' });
  await sleep(1000);
  assert.equal(holders.reduce((n, h) => n + h.open(), 0), 16, 'the server is full');
  const v = await victim;
  const waited = Date.now() - t0;
  assert.match(v.text, /^HTTP\/1\.1 200 /, `answered once idle slots were freed: ${JSON.stringify(v)}`);
  assert.ok(waited >= 1000 && waited <= (IDLE_S + 4) * 1000, `the waiting request was answered after ${waited} ms`);
  await waitFor(() => holders.every((h) => h.open() === 0),
    { timeoutMs: 3000, intervalMs: 50, what: 'the idle connections to be closed' });
  console.log(`frontdoor: server full with 16 idle connections; another request answered after ${waited} ms ` +
    `(idle-timeout ${IDLE_S} s)`);
  holders.forEach((h) => h.destroy());
}

// The two servers' waits for idle-timeout overlap, to keep the file short.
test('connections', { concurrency: true }, async (t) => {
  await Promise.all([
    t.test(`an SSE stream stays open past idle-timeout (${IDLE_S} s), an idle connection does not`,
      sseOutlivesIdleTimeout),
    (async () => {
      await t.test('a client holding idle connections cannot starve another client (connections-per-client)',
        perClientCap);
      await t.test('idle connections are closed after idle-timeout, so slots come back even from many addresses',
        idleSlotsComeBack);
    })(),
  ]);
});
