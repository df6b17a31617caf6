// GET /api/v1/hardware (issue 17) against a real `kiln serve`:
//   - CPU, memory and load of this machine in sane ranges (memory total equal
//     to /proc/meminfo's MemTotal), sampled every hardware-interval seconds,
//     the history growing oldest first;
//   - GPU figures through a fake NVML (tests/tools/fake_nvml.c, opened through
//     the KILN_NVML_LIBRARY test seam): exact values, an unsupported sensor as
//     null, no job on a GPU the scheduler does not share out;
//   - without NVML: available false with the reason, no GPUs; the header's
//     facts (GET /api/v1/info's backends_available) say only the CPU can run.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { api, sleep, startServer, tempDir } from './lib/kiln.mjs';

let tmp;
let server;
let base;

const memTotal = () => Number(/^MemTotal:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))[1]) * 1024;

async function hardware(b = base) {
  const r = await api(b, 'GET', '/api/v1/hardware');
  assert.equal(r.status, 200, r.text);
  return r.body;
}

before(async () => {
  tmp = tempDir('kiln-hardware-');
  process.env.KILN_NVML_LIBRARY = process.env.KILN_FAKE_NVML || '';
  assert.ok(process.env.KILN_NVML_LIBRARY, 'KILN_FAKE_NVML names the fake NVML (tests/node.cmake sets it)');
  server = await startServer({ dataDir: path.join(tmp.dir, 'data'), args: ['--limit', 'hardware-interval=1'] });
  base = server.url;
});

after(async () => {
  if (server) await server.stop();
  if (tmp) tmp.cleanup();
});

test('CPU, memory and load of this machine, in sane ranges', async () => {
  const hw = await hardware();
  assert.equal(hw.interval_seconds, 1);
  assert.equal(hw.history_seconds, 600);
  assert.equal(hw.cores, os.cpus().length);
  const c = hw.current;
  assert.ok(c, 'a first sample is taken at start');
  assert.ok(c.cpu_utilization >= 0 && c.cpu_utilization <= 100, `cpu ${c.cpu_utilization}`);
  assert.equal(c.memory_total_bytes, memTotal());
  assert.ok(c.memory_used_bytes > 0 && c.memory_used_bytes < c.memory_total_bytes);
  assert.equal(c.load.length, 3);
  for (const l of c.load) assert.ok(l >= 0 && l < 10_000, `load ${l}`);
  assert.ok(Math.abs(c.time - Date.now() / 1000) < 5, 'time is Unix seconds, now');
});

test('the history grows by one sample an interval, oldest first', async () => {
  const first = await hardware();
  await sleep(3500);
  const later = await hardware();
  const grew = later.history.length - first.history.length;
  assert.ok(grew >= 2 && grew <= 5, `grew by ${grew} in 3.5 s at 1 s`);
  const times = later.history.map((s) => s.time);
  for (let i = 1; i < times.length; i++) {
    const gap = times[i] - times[i - 1];
    assert.ok(gap > 0.5 && gap < 3, `gap ${gap}`);
  }
  assert.deepEqual(later.current, later.history.at(-1));
});

test('?since= answers only the newer samples; a bad since is a 400', async () => {
  const all = await hardware();
  const cut = all.history.at(-2).time;
  const r = await api(base, 'GET', `/api/v1/hardware?since=${cut}`);
  assert.equal(r.status, 200);
  assert.ok(r.body.history.length >= 1 && r.body.history.length <= 3, `${r.body.history.length} newer`);
  for (const s of r.body.history) assert.ok(s.time > cut);
  assert.deepEqual(r.body.history[0], all.history.at(-1));
  for (const bad of ['', 'abc', '-1', '1e400', '12x']) {
    const b = await api(base, 'GET', `/api/v1/hardware?since=${encodeURIComponent(bad)}`);
    assert.equal(b.status, 400, `since=${bad}`);
    assert.equal(b.body.error.code, 'invalid_parameter');
    assert.match(b.body.error.message, /since must be a time in Unix seconds/);
  }
});

test('GPU figures through the fake NVML', async () => {
  const hw = await hardware();
  assert.deepEqual(hw.nvml, { available: true, error: null });
  assert.equal(hw.cluster, null, 'no Slurm cluster without --dispatcher slurm');
  const [a, b] = hw.current.gpus;
  assert.equal(hw.current.gpus.length, 2);
  assert.deepEqual(a, {
    index: 0, name: 'Fake GPU "A" \\ 0', utilization: 37, memory_used_bytes: 3 * 2 ** 30,
    memory_total_bytes: 16 * 2 ** 30, temperature_c: 61, power_w: 123.456, job_id: null, evaluation_id: null,
  });
  assert.equal(b.name, 'Fake GPU B');
  assert.equal(b.utilization, 0);
  assert.equal(b.temperature_c, null, 'NOT_SUPPORTED is unknown, not 0');
  assert.equal(b.power_w, 50);
  for (const s of hw.history) assert.equal(s.gpus.length, 2);
});

test('without NVML: no GPUs, the reason, and only the CPU can run', async () => {
  const missing = path.join(tmp.dir, 'no-such-libnvidia-ml.so');
  process.env.KILN_NVML_LIBRARY = missing;
  const other = await startServer({ dataDir: path.join(tmp.dir, 'data2') });
  try {
    const hw = await hardware(other.url);
    assert.equal(hw.nvml.available, false);
    assert.match(hw.nvml.error, /no-such-libnvidia-ml\.so cannot be opened/);
    assert.deepEqual(hw.current.gpus, []);
    assert.equal(hw.interval_seconds, 2, 'the hardware-interval default');
    const info = (await api(other.url, 'GET', '/api/v1/info')).body;
    assert.deepEqual(info.backends_available, ['cpu'], 'no CUDA device here: only the CPU');
    assert.ok(info.backends.includes('cpu'));
  } finally {
    await other.stop();
  }
});
