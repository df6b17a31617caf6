// The Slurm cluster in GET /api/v1/hardware (issue 18), against a real
// one-machine cluster (tests/integration/lib/slurm.mjs: munged, slurmctld and
// slurmd in a temporary folder, 2 fake GPUs) and a real `kiln serve
// --dispatcher slurm` that runs `sinfo --json` every cluster-interval (1 s here):
//   - the node appears with its 2 GPUs, idle, its CPUs, memory and partition;
//   - a job submitted to Slurm directly (sbatch --gres=gpu:1) shows as 1 GPU
//     used and the node mixed or allocated within a few sampling intervals,
//     and the node idle again once the job is cancelled;
//   - with slurmctld stopped, sinfo --json takes about 9 s to give up: the
//     hardware answer keeps coming at once meanwhile, then carries sinfo's
//     error and no nodes, and kiln serve still stops promptly, killing the
//     sinfo it is waiting on.
// Where the daemons cannot start here, every test is a skip with the reason.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { api, startServer, tempDir, waitFor } from './lib/kiln.mjs';
import { startCluster, slurm } from './lib/slurm.mjs';

const INTERVAL = 1;             // --limit cluster-interval, seconds
const MiB = 1024 * 1024;

let cluster;
let skip = null;
let tmp;
let server;
let base;

async function clusterOf() {
  const r = await api(base, 'GET', '/api/v1/hardware');
  assert.equal(r.status, 200, r.text);
  assert.ok(r.body.current, 'the host sample is still there');
  return r.body.cluster;
}

/* Cancels every job and waits until Slurm has none left, not even
 * completing: a job's slurmstepd that cannot report its end to a stopped
 * slurmctld lingers after the cluster is gone. */
async function noJobs() {
  try { slurm(cluster, 'scancel', ['--user', os.userInfo().username]); } catch { /* none */ }
  await waitFor(() => slurm(cluster, 'squeue', ['-h']).trim() === '', { timeoutMs: 30_000, what: 'no Slurm jobs' });
}

/* The first cluster answer taken after `after` (Unix seconds) that satisfies ok. */
function sampleAfter(after, ok, what, timeoutMs) {
  return waitFor(async () => {
    const c = await clusterOf();
    return c && c.time > after && ok(c) ? c : null;
  }, { timeoutMs, intervalMs: 200, what });
}

before(async () => {
  cluster = await startCluster({ gpus: 2 });
  if (cluster.skip) {
    skip = cluster.skip;
    console.log(`# skip: ${skip}`);
    return;
  }
  tmp = tempDir('kiln-cluster-hw-');
  process.env.SLURM_CONF = cluster.conf;       // kiln serve's sinfo reads it from the environment
  server = await startServer({
    dataDir: path.join(tmp.dir, 'data'),
    args: ['--dispatcher', 'slurm', '--limit', `cluster-interval=${INTERVAL}`],
  });
  base = server.url;
});

after(async () => {
  delete process.env.SLURM_CONF;
  if (server) await server.stop();
  if (cluster && !cluster.skip) {
    let ctld = false;
    try { process.kill(cluster.pids.slurmctld, 0); ctld = true; } catch { /* stopped by the last test */ }
    if (ctld) await noJobs().catch((e) => console.log(`# ${e.message}`));
    await cluster.stop();
  }
  if (tmp) tmp.cleanup();
});

test('the node appears with 2 GPUs, idle', async (t) => {
  if (skip) { t.skip(skip); return; }
  const c = await sampleAfter(0, (x) => x.nodes.length === 1 && x.nodes[0].state === 'idle', 'the idle node', 20_000);
  assert.equal(c.error, null);
  assert.equal(c.interval_seconds, INTERVAL);
  assert.match(c.slurm_version, /^\d+\.\d+\.\d+$/);
  assert.equal(c.nodes_omitted, 0);
  const n = c.nodes[0];
  assert.deepEqual(n, {
    name: cluster.node,
    state: 'idle',
    state_flags: [],
    cpus: os.cpus().length,
    cpus_allocated: 0,
    memory_total_bytes: 4000 * MiB,                  // startCluster's RealMemory
    memory_free_bytes: n.memory_free_bytes,
    memory_allocated_bytes: 0,
    gpus: 2,
    gpus_used: 0,
    partitions: [cluster.partition],
    reason: null,
  });
  assert.ok(n.memory_free_bytes > 0 && n.memory_free_bytes % MiB === 0, `free memory ${n.memory_free_bytes}`);
  // the OpenAPI document names exactly these fields
  const doc = (await api(base, 'GET', '/api/v1/openapi.json')).body;
  const schemas = doc.components.schemas;
  assert.ok(schemas.Hardware.required.includes('cluster'));
  assert.deepEqual(Object.keys(c).sort(), Object.keys(schemas.Cluster.properties).sort());
  assert.deepEqual(Object.keys(n).sort(), Object.keys(schemas.ClusterNode.properties).sort());
  assert.deepEqual(schemas.ClusterNode.required.slice().sort(), Object.keys(n).sort());
});

test('a job on 1 GPU shows as 1 GPU used, the node mixed, within the interval', async (t) => {
  if (skip) { t.skip(skip); return; }
  const id = slurm(cluster, 'sbatch', ['--parsable', '--gres=gpu:1', '--output', path.join(cluster.dir, 'job-%j.out'), '--wrap', 'sleep 30']).trim().split(';')[0];
  assert.match(id, /^\d+$/);
  try {
    await waitFor(() => /^R$/m.test(slurm(cluster, 'squeue', ['-h', '-j', id, '-o', '%t'])),
      { timeoutMs: 20_000, what: `Slurm job ${id} running` });
    const running = Date.now() / 1000;
    // the next sinfo after the job started, give or take one in flight: 2 intervals and sinfo's own time
    const c = await sampleAfter(running, (x) => x.nodes[0] && x.nodes[0].gpus_used === 1,
      '1 GPU used', 2 * INTERVAL * 1000 + 5_000);
    const n = c.nodes[0];
    console.log(`# seen ${(c.time - running).toFixed(2)} s after squeue said R`);
    assert.ok(['mixed', 'allocated'].includes(n.state), `state ${n.state}`);
    assert.equal(n.gpus, 2);
    assert.ok(n.cpus_allocated >= 1 && n.cpus_allocated <= n.cpus, `cpus_allocated ${n.cpus_allocated}`);
    assert.equal(c.error, null);
  } finally {
    slurm(cluster, 'scancel', [id]);
  }
  const cancelled = Date.now() / 1000;
  const c = await sampleAfter(cancelled, (x) => x.nodes[0] && x.nodes[0].gpus_used === 0 && x.nodes[0].state === 'idle',
    'the node idle again', 20_000);
  assert.equal(c.nodes[0].cpus_allocated, 0);
});

test('a failing sinfo is cluster.error, and never holds up a request or the shutdown', async (t) => {
  if (skip) { t.skip(skip); return; }
  await noJobs();
  process.kill(cluster.pids.slurmctld, 'SIGTERM');
  await waitFor(() => { try { process.kill(cluster.pids.slurmctld, 0); return false; } catch { return true; } },
    { timeoutMs: 10_000, what: 'slurmctld gone' });
  // sinfo now waits about 9 s for the controller; requests are answered from
  // the last result meanwhile (a bound on a hang, not a timing)
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    await clusterOf();
    assert.ok(Date.now() - t0 < 2000, `GET /api/v1/hardware took ${Date.now() - t0} ms while sinfo waited`);
  }
  const stopped = Date.now() / 1000;
  const c = await sampleAfter(stopped, (x) => x.error !== null, 'cluster.error', 40_000);
  assert.match(c.error, /^sinfo --json reported: .+ \(and no nodes: is slurmctld running and reachable\?\)$/);
  assert.deepEqual(c.nodes, []);
  // kiln serve stops at once, killing the sinfo that is waiting on the controller
  const t0 = Date.now();
  const r = await server.stop(15_000);
  server = null;
  assert.equal(r.killed, false, `kiln serve needed SIGKILL (${Date.now() - t0} ms)`);
  assert.equal(r.code, 0);
});
