// Time from POST /api/v1/jobs to the worker's first reported step, through
// the Slurm dispatcher against the local one (issue 18), on the one-machine
// test cluster (tests/integration/lib/slurm.mjs).
//
//   node bench/slurm_start.mjs [RUNS]     (default 5 runs of each, alternating)
//
// Each run posts the same LeNet job (demo digits, batch 64) to a server with
// --dispatcher local or --dispatcher slurm (its own data directory), waits for
// its first train/loss metric and cancels it. The figure is the metric's
// wall_time (the worker's clock, taken at that step) minus the time just
// before the POST, so the server's polling does not enter it; both
// dispatchers report the same first step. Prints each run and the median,
// minimum and maximum of each.

import { cpSync } from 'node:fs';
import path from 'node:path';

import { slurm, startCluster } from '../tests/integration/lib/slurm.mjs';
import { api, importDemo, sleep, startServer, tempDir, waitFor, FINAL_STATUSES } from '../tests/integration/lib/kiln.mjs';

const runs = Number(process.argv[2] || 5);
const cluster = await startCluster({ gpus: 2 });
if (cluster.skip) {
  console.log(`skipped: ${cluster.skip}`);
  process.exit(0);
}
process.env.SLURM_CONF = cluster.conf;
const tmp = tempDir('kiln-slurm-bench-');
const servers = {};
try {
  const local = path.join(tmp.dir, 'local');
  const ds = (await importDemo(local)).id;
  cpSync(local, path.join(tmp.dir, 'slurm'), { recursive: true });
  servers.local = await startServer({ dataDir: local });
  servers.slurm = await startServer({ dataDir: path.join(tmp.dir, 'slurm'),
    args: ['--dispatcher', 'slurm', '--slurm-bin', cluster.slurmBin, '--slurm-poll-ms', '2000'] });
  const times = { local: [], slurm: [] };
  for (let i = 0; i < runs; i++) {
    for (const kind of ['local', 'slurm']) {
      const base = servers[kind].url;
      const t0 = Date.now() / 1000;
      const r = await api(base, 'POST', '/api/v1/jobs', { dataset_id: ds, network: 'lenet', epochs: 1, batch_size: 64, devices: 0 });
      if (r.status !== 201) throw new Error(r.text);
      const id = r.body.id;
      const first = await waitFor(async () => {
        const m = await api(base, 'GET', `/api/v1/jobs/${id}/metrics?tag=train/loss`);
        return (m.body.items || []).find((x) => x.tag === 'train/loss');
      }, { timeoutMs: 120_000, intervalMs: 50, what: `job ${id}'s first step` });
      const s = first.wall_time - t0;
      times[kind].push(s);
      console.log(`${kind} run ${i + 1}: ${s.toFixed(3)} s (step ${first.step})`);
      await api(base, 'POST', `/api/v1/jobs/${id}/cancel`, {});
      await waitFor(async () => FINAL_STATUSES.has((await api(base, 'GET', `/api/v1/jobs/${id}`)).body.status),
        { timeoutMs: 60_000, what: `job ${id} to end` });
      // Until the cancelled worker has left the CPU (Slurm's steps end after kiln's status).
      await waitFor(() => !/\bR\b|\bCG\b/.test(slurm(cluster, 'squeue', ['-h', '-o', '%t'])),
        { timeoutMs: 60_000, intervalMs: 200, what: 'the Slurm job to leave the node' });
      await sleep(1000);
    }
  }
  for (const kind of ['local', 'slurm']) {
    const v = [...times[kind]].sort((a, b) => a - b);
    console.log(`${kind}: median ${v[v.length >> 1].toFixed(3)} s, min ${v[0].toFixed(3)}, max ${v[v.length - 1].toFixed(3)} (${v.length} runs)`);
  }
} finally {
  for (const s of Object.values(servers)) await s.stop();
  await cluster.stop();
  tmp.cleanup();
}
