// Deployment details (issue 17) against a real `kiln serve`:
// - configured by KILN_* variables only (no flag on its command line): port,
//   data directory, max jobs (two jobs run at once), a limit; the command line
//   wins over a variable; a bad variable stops the start and is named;
// - the access log: one line a request on stderr, in the documented format,
//   with status, bytes, duration and the user who asked; GET /healthz left out;
// - --base-path from the outside: /PREFIX redirects, paths outside it are 404;
// - SIGTERM: an open SSE stream ends, the server exits 0, running jobs stop at
//   a checkpoint, are requeued and resume from it at the next start.
// The jobs train LeNet on the demo digits; they are stopped long before the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {
  api, describeResponse, importDemo, kilnBin, readSSE, runKiln, sleep, startServer, tempDir, waitFor,
} from './lib/kiln.mjs';

const CHEAP = ['--limit', 'password-ops=1', '--limit', 'password-mem=8K'];
// The documented line: kiln: access TIME CLIENT METHOD PATH STATUS BYTES MS user=ID
const ACCESS = /^kiln: access (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) ([A-Z]+) (\S+) (\d{3}|-) (\d+|-) (\d+\.\d{3}) user=(\d+|-)$/;

let tmp;
let dataDir;
let datasetId;
let token;
let userId;

before(async () => {
  tmp = tempDir('kiln-deploy-');
  dataDir = path.join(tmp.dir, 'data');
  datasetId = (await importDemo(dataDir)).id;
  const pw = path.join(tmp.dir, 'pw');
  writeFileSync(pw, 'deploy-secret-1\n');
  const add = await runKiln(['user', 'add', 'olive', '--data', dataDir, '--password-file', pw, ...CHEAP]);
  assert.equal(add.code, 0, add.stderr);
  userId = Number(/id (\d+)/.exec(add.stdout)[1]);
  const tok = await runKiln(['token', 'add', 'olive', '--data', dataDir]);
  assert.equal(tok.code, 0, tok.stderr);
  token = tok.stdout.trim();
});

let envServer;

after(async () => {
  if (envServer && envServer.child.exitCode === null && envServer.child.signalCode === null) {
    envServer.child.kill('SIGKILL');
    await envServer.exit;
  }
  if (tmp) tmp.cleanup();
});

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

/* `kiln serve ARGS` with exactly env (plus PATH and HOME) from cwd tmp.dir;
 * resolves to {url, out(), stop(), exit} once listening, or to {exit, out()}
 * when it exits first. */
function serveEnv(env, args = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(kilnBin(), ['serve', ...args], {
      cwd: tmp.dir, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    let url = null;
    const exit = new Promise((res) => child.on('exit', (code, signal) => res({ code, signal })));
    const handle = {
      child, exit,
      out: () => out,
      err: () => err,
      async stop() { child.kill('SIGTERM'); return exit; },
    };
    child.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
    child.stdout.setEncoding('utf8').on('data', (d) => {
      out += d;
      const m = /kiln: listening on (http:\/\/\S+)/.exec(out);
      if (m && !url) { url = m[1]; handle.url = url; resolve(handle); }
    });
    child.on('error', reject);
    exit.then(() => { if (!url) resolve(handle); });
    const t = setTimeout(() => { if (!url) { child.kill('SIGKILL'); reject(new Error(`no listening line:\n${out}\n${err}`)); } }, 30_000);
    exit.then(() => clearTimeout(t));
    const stopTimer = () => { if (url) clearTimeout(t); };
    child.stdout.on('data', stopTimer);
  });
}

const call = (base, method, p, body) => api(base, method, p, body, { headers: { authorization: `Bearer ${token}` } });

async function createJob(base, extra = {}) {
  // LeNet, so that 20 epochs outlast the test on any machine (the tiny net does 100k images/s)
  const body = { dataset_id: datasetId, network: 'lenet', epochs: 20, batch_size: 16, ...extra };
  const r = await call(base, 'POST', '/api/v1/jobs', body);
  assert.equal(r.status, 201, describeResponse('POST', '/api/v1/jobs', r));
  return r.body.id;
}

/* Sends a request head (no body) and resolves to what came back within 3 s. */
function rawHead(port, text) {
  return new Promise((resolve, reject) => {
    let got = '';
    const sock = net.connect({ host: '127.0.0.1', port }, () => sock.write(text));
    sock.setEncoding('latin1').on('data', (d) => { got += d; });
    sock.on('error', reject);
    const t = setTimeout(() => sock.destroy(), 3000);
    sock.on('close', () => { clearTimeout(t); resolve(got); });
  });
}

const accessLines = (text) => text.split('\n').filter((l) => l.startsWith('kiln: access '));

test('a bad KILN_* value stops the start and names the variable', async () => {
  for (const [k, v, want] of [['KILN_MAX_JOBS', '0', /KILN_MAX_JOBS="0": --max-jobs must be 1\.\.256/],
    ['KILN_LIMIT_UPLOAD_BYTES', 'huge', /KILN_LIMIT_UPLOAD_BYTES="huge": limit upload-bytes must be/],
    ['KILN_BASE_PATH', 'no-slash', /KILN_BASE_PATH="no-slash": --base-path must start with '\/'/],
    ['KILN_ACCESS_LOG', 'loud', /KILN_ACCESS_LOG="loud"/]]) {
    const s = await serveEnv({ KILN_DATA: dataDir, KILN_PORT: '0', [k]: v });
    const e = await s.exit;
    assert.equal(e.code, 2, `${k}=${v}: ${s.err()}`);
    assert.match(s.err(), want);
    assert.equal(s.url, undefined);
  }
});

test('configured by KILN_* variables only: port, data directory, a limit, two jobs at once', async () => {
  const port = await freePort();
  envServer = await serveEnv({
    KILN_PORT: String(port), KILN_DATA: dataDir, KILN_MAX_JOBS: '2', KILN_LIMIT_UPLOAD_BYTES: '3M',
    KILN_LIMIT_CHECKS: '3',
  });
  assert.ok(envServer.url, `no listening line: ${envServer.err()}`);
  assert.equal(new URL(envServer.url).port, String(port), 'KILN_PORT was used');
  assert.ok(!existsSync(path.join(tmp.dir, 'var')), 'not the default ./var');
  const base = envServer.url;
  const info = await call(base, 'GET', '/api/v1/datasets');
  assert.ok(info.body.items.some((d) => d.id === datasetId), 'KILN_DATA: the demo dataset is there');
  const limits = await call(base, 'GET', '/api/v1/limits');
  const lim = Object.fromEntries(limits.body.limits.map((l) => [l.name, l.value]));
  assert.equal(lim['upload-bytes'], 3 * 1024 * 1024);
  assert.equal(lim.checks, 3);
  // A declared upload over 3M is refused at that limit, naming it.
  const head = await rawHead(port, `POST /api/v1/datasets HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`
    + `Authorization: Bearer ${token}\r\nContent-Type: multipart/form-data; boundary=x\r\n`
    + `Content-Length: ${4 << 20}\r\n\r\n`);
  assert.match(head, /^HTTP\/1\.1 413 /, 'upload over KILN_LIMIT_UPLOAD_BYTES');
  assert.match(head, /upload-bytes/);

  // KILN_MAX_JOBS=2: two CPU jobs run at the same time.
  const a = await createJob(base);
  const b = await createJob(base);
  await waitFor(async () => {
    const [ja, jb] = await Promise.all([call(base, 'GET', `/api/v1/jobs/${a}`), call(base, 'GET', `/api/v1/jobs/${b}`)]);
    return ja.body.status === 'running' && jb.body.status === 'running';
  }, { timeoutMs: 60_000, intervalMs: 100, what: 'both jobs running at once' });
  envServer.jobs = [a, b];
});

test('the command line wins over the environment', async () => {
  const s = await serveEnv({ KILN_DATA: path.join(tmp.dir, 'other'), KILN_PORT: 'not-a-port', KILN_LIMIT_CHECKS: '3' },
    ['--port', '0', '--limit', 'checks=5', '--access-log', 'off']);
  assert.ok(s.url, s.err());
  const r = await api(s.url, 'GET', '/api/v1/limits');
  assert.equal(r.body.limits.find((l) => l.name === 'checks').value, 5);
  await s.stop();
  assert.equal(accessLines(s.err()).length, 0, '--access-log off: no lines');
});

test('the access log: one line a request, in the documented format', async () => {
  const base = envServer.url;
  const before = accessLines(envServer.err()).length;
  const ok = await call(base, 'GET', '/api/v1/limits');
  const missing = await call(base, 'GET', '/api/v1/jobs/987654');
  const anon = await api(base, 'GET', '/api/v1/jobs');
  const bad = await call(base, 'POST', '/api/v1/jobs', '{"not json');
  const odd = await call(base, 'GET', '/api/v1/jobs/1"x y%');
  await api(base, 'GET', '/healthz');
  assert.equal(ok.status, 200);
  assert.equal(missing.status, 404);
  assert.equal(anon.status, 401);
  assert.equal(bad.status, 400);
  let lines;
  await waitFor(() => { lines = accessLines(envServer.err()).slice(before); return lines.length >= 5; },
    { timeoutMs: 5_000, what: 'five access lines' });
  const parsed = lines.map((l) => { const m = ACCESS.exec(l); assert.ok(m, `format: ${l}`); return m; });
  const find = (p, method = 'GET') => parsed.find((m) => m[4] === p && m[3] === method);
  const lOk = find('/api/v1/limits');
  assert.ok(lOk, lines.join('\n'));
  assert.equal(lOk[2], '127.0.0.1');
  assert.equal(lOk[5], '200');
  assert.equal(lOk[8], String(userId), 'the user who asked');
  const bodyBytes = Buffer.byteLength(ok.text);
  assert.ok(Number(lOk[6]) > bodyBytes && Number(lOk[6]) < bodyBytes + 1024, `bytes ${lOk[6]} = body ${bodyBytes} + headers`);
  assert.ok(Number(lOk[7]) >= 0 && Number(lOk[7]) < 10_000);
  assert.ok(Math.abs(Date.parse(lOk[1]) - Date.now()) < 60_000, 'TIME is now, in UTC');
  assert.equal(find('/api/v1/jobs/987654')[5], '404');
  const lAnon = find('/api/v1/jobs');
  assert.equal(lAnon[5], '401');
  assert.equal(lAnon[8], '-', 'nobody signed in');
  assert.equal(find('/api/v1/jobs', 'POST')[5], '400');
  assert.ok(find('/api/v1/jobs/1%22x%20y%25'), `the path escaped: ${lines.join('\n')}`);
  assert.equal(find('/healthz'), undefined, 'GET /healthz is not logged by default');
});

test('SIGTERM: streams end, the server exits 0, running jobs stop at a checkpoint and resume at the next start', async () => {
  const base = envServer.url;
  const [a, b] = envServer.jobs;
  // Both have trained a few steps.
  await waitFor(async () => {
    const r = await call(base, 'GET', `/api/v1/jobs/${a}`);
    return r.body.step >= 5;
  }, { timeoutMs: 60_000, intervalMs: 100, what: `job ${a} past step 5` });
  for (const id of [a, b]) assert.equal((await call(base, 'GET', `/api/v1/jobs/${id}`)).body.status, 'running');
  const stream = readSSE(`${base}/api/v1/jobs/${a}/events`, { timeoutMs: 60_000, endGraceMs: 0, headers: { authorization: `Bearer ${token}` } });
  await sleep(300);
  const t0 = Date.now();
  envServer.child.kill('SIGTERM');
  const s = await stream;
  assert.ok(s.ended, 'the SSE stream ended with the server');
  const e = await envServer.exit;
  assert.equal(e.code, 0, envServer.err().slice(-2000));
  assert.ok(Date.now() - t0 < 30_000, 'stopped within the grace period');
  assert.match(envServer.err(), /SIGTERM, shutting down/);
  const sseLine = accessLines(envServer.err()).find((l) => l.includes(`/api/v1/jobs/${a}/events`));
  assert.ok(sseLine && ACCESS.exec(sseLine)[5] === '200', `the stream's line at its end: ${sseLine}`);
  for (const id of [a, b]) {
    const ck = path.join(dataDir, 'jobs', String(id), 'checkpoints');
    if (!(existsSync(ck) && readdirSync(ck).some((f) => f.endsWith('.safetensors')))) {
      // What the job and the server said, to tell a worker that died early from one that never stopped.
      let log = '';
      try { log = readFileSync(path.join(dataDir, 'jobs', String(id), 'log'), 'utf8').slice(-3000); } catch { /* none */ }
      assert.fail(`job ${id} left no checkpoint (${existsSync(ck) ? readdirSync(ck).join(', ') || 'empty' : 'no'} checkpoints folder)`
        + `\n--- its log:\n${log}\n--- the server:\n${envServer.err().slice(-3000)}`);
    }
  }
  // The next start (flags this time) finds both queued and resumes them from their checkpoints.
  const again = await startServer({ dataDir, args: ['--max-jobs', '2'] });
  try {
    for (const id of [a, b]) {
      await waitFor(async () => {
        const log = await fetch(`${again.url}/api/v1/jobs/${id}/log`, { headers: { authorization: `Bearer ${token}` } });
        return /resuming from \S+: step \d+/.test(await log.text());
      }, { timeoutMs: 60_000, intervalMs: 200, what: `job ${id} to resume from its checkpoint` });
    }
  } finally {
    await again.stop();
  }
});
