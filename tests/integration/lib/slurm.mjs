// A one-machine Slurm cluster for the tests (issue 18): munged, slurmctld
// and slurmd started by hand in a temporary folder, with a slurm.conf that
// names this host, and fake GPUs declared through gres.conf on links to
// /dev/null the harness creates (Slurm hands them out like real ones and sets
// CUDA_VISIBLE_DEVICES; nothing can run CUDA on them).
//
//   const c = await startCluster({ gpus: 2 });
//   if (c.skip) { t.skip(c.skip); return; }     // the daemons cannot start here
//   ... c.env (SLURM_CONF) for sbatch/squeue/scancel/sinfo; c.node; c.dir
//   await c.stop();                             // by process id, every daemon
//
// Every daemon is stopped by its own pid (never by name), and the folder is
// removed unless KILN_KEEP_TMP is set. Ports are chosen free on 127.0.0.1's
// host; the daemons run as the current user (root in CI; a non-root user
// runs them as itself: SlurmUser and SlurmdUser are that user).
//
// What it needs: Debian's slurmctld, slurmd, slurm-client and munge
// (scripts/install-deps). Where one is missing or a daemon does not come up,
// startCluster answers { skip: reason } instead of throwing, so a test can
// report a skip with the reason, never a pass.

import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync, chmodSync, rmSync, mkdtempSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const SBIN = ['/usr/sbin', '/usr/bin', '/sbin', '/bin'];
const which = (name) => SBIN.map((d) => path.join(d, name)).find((p) => existsSync(p)) || null;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* A free TCP port (bound and released at once on 127.0.0.1). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function readPid(file) {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return pid > 1 ? pid : null;
  } catch {
    return null;
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/* The processes that carry this cluster's SLURM_CONF in their environment:
 * the step daemons (slurmstepd) and job processes slurmd started, which
 * outlive a controller that stopped first. Another cluster's or the machine's
 * own processes never match: the path is this cluster's temporary folder. */
function clusterProcesses(conf) {
  const want = Buffer.from(`SLURM_CONF=${conf}\0`);
  const out = [];
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!(pid > 1) || pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${pid}/environ`).includes(want)) out.push(pid);
    } catch { /* gone, or not ours to read */ }
  }
  return out;
}

/* Waits until fn() is truthy, up to ms; returns its last value. */
async function until(fn, ms, step = 100) {
  const end = Date.now() + ms;
  let v = fn();
  while (!v && Date.now() < end) {
    await sleep(step);
    v = fn();
  }
  return v;
}

/* Starts munged, slurmctld and slurmd. Options: gpus (fake GPUs on the node,
 * default 2), cpus (default: this machine's), memoryMiB (default 4000),
 * partition (default 'kiln'), extraConf (lines appended to slurm.conf).
 * Returns { dir, conf, env, node, partition, gpuFiles, pids, slurmBin, stop() }
 * or { skip } with the reason. */
export async function startCluster(opts = {}) {
  const gpus = opts.gpus ?? 2;
  const cpus = opts.cpus ?? os.cpus().length;
  const partition = opts.partition ?? 'kiln';
  const need = ['munged', 'mungekey', 'slurmctld', 'slurmd', 'sbatch', 'squeue', 'scancel', 'sinfo', 'srun'];
  const missing = need.filter((n) => !which(n));
  if (missing.length) return { skip: `Slurm is not installed here (missing ${missing.join(', ')}; scripts/install-deps installs it)` };

  const dir = mkdtempSync(path.join(os.tmpdir(), 'kiln-slurm-'));
  for (const d of ['munge', 'munge/run', 'munge/log', 'munge/lib', 'run', 'log', 'spool', 'state', 'dev']) mkdirSync(path.join(dir, d), { recursive: true });
  for (const d of ['munge', 'munge/run', 'munge/log', 'munge/lib']) chmodSync(path.join(dir, d), 0o700);
  const node = os.hostname().split('.')[0];
  const user = os.userInfo().username;
  const [ctldPort, slurmdPort] = [await freePort(), await freePort()];
  const gpuFiles = [];
  for (let i = 0; i < gpus; i++) {
    // slurmd wants a character device: a link to /dev/null is one to stat()
    // and needs no mknod (so no root).
    const f = path.join(dir, 'dev', `fakegpu${i}`);
    symlinkSync('/dev/null', f);
    gpuFiles.push(f);
  }
  const socket = path.join(dir, 'munge', 'run', 'munge.socket');
  const conf = path.join(dir, 'slurm.conf');
  const lines = [
    'ClusterName=kilntest',
    `SlurmctldHost=${node}`,
    `SlurmUser=${user}`,
    `SlurmdUser=${user}`,
    `SlurmctldPort=${ctldPort}`,
    `SlurmdPort=${slurmdPort}`,
    'AuthType=auth/munge',
    'CredType=cred/munge',
    `AuthInfo=socket=${socket}`,
    `StateSaveLocation=${path.join(dir, 'state')}`,
    `SlurmdSpoolDir=${path.join(dir, 'spool')}`,
    `SlurmctldPidFile=${path.join(dir, 'run', 'slurmctld.pid')}`,
    `SlurmdPidFile=${path.join(dir, 'run', 'slurmd.pid')}`,
    `SlurmctldLogFile=${path.join(dir, 'log', 'slurmctld.log')}`,
    `SlurmdLogFile=${path.join(dir, 'log', 'slurmd.log')}`,
    'ProctrackType=proctrack/linuxproc',
    'TaskPlugin=task/none',
    'SelectType=select/cons_tres',
    'SelectTypeParameters=CR_Core',
    'GresTypes=gpu',
    'JobCompType=jobcomp/none',
    'AccountingStorageType=accounting_storage/none',
    'MpiDefault=none',
    'ReturnToService=2',
    'MinJobAge=600',           // finished jobs stay visible to squeue/scontrol for 10 min
    'KillWait=5',
    'InactiveLimit=0',
    `NodeName=${node} CPUs=${cpus} RealMemory=${opts.memoryMiB ?? 4000}${gpus ? ` Gres=gpu:${gpus}` : ''} State=UNKNOWN`,
    `PartitionName=${partition} Nodes=${node} Default=YES MaxTime=INFINITE State=UP`,
    ...(opts.extraConf || []),
  ];
  writeFileSync(conf, lines.join('\n') + '\n');
  writeFileSync(path.join(dir, 'gres.conf'), gpus ? `NodeName=${node} Name=gpu File=${path.join(dir, 'dev', 'fakegpu')}[0-${gpus - 1}]\n` : '');
  const env = { ...process.env, SLURM_CONF: conf };
  const pids = {};
  const cluster = {
    dir, conf, env, node, partition, gpuFiles, pids, socket,
    async stop() {
      // Jobs first, while the controller can still end them; then whatever
      // step daemon or job process is left, then the daemons.
      if (pids.slurmctld && alive(pids.slurmctld)) {
        spawnSync(which('scancel'), ['--full', '--partition', partition], { env, encoding: 'utf8', timeout: 10000 });
        await until(() => {
          const q = spawnSync(which('squeue'), ['-h', '-o', '%i'], { env, encoding: 'utf8', timeout: 10000 });
          return q.status === 0 && q.stdout.trim() === '';
        }, 5000, 200);
      }
      const leftovers = clusterProcesses(conf).filter((p) => !Object.values(pids).includes(p));
      for (const pid of leftovers) {
        try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      }
      for (const name of ['slurmd', 'slurmctld', 'munged']) {
        const pid = pids[name];
        if (!pid || !alive(pid)) continue;
        try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ }
        if (!(await until(() => !alive(pid), 5000))) {
          try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
        }
      }
      if (process.env.KILN_KEEP_TMP) console.error(`kept ${dir}`);
      else rmSync(dir, { recursive: true, force: true });
    },
    log(name) {
      try { return readFileSync(path.join(dir, 'log', `${name}.log`), 'utf8'); } catch { return ''; }
    },
  };
  const fail = async (why) => {
    const tail = ['slurmctld', 'slurmd'].map((n) => `${n}: ${cluster.log(n).split('\n').slice(-4).join(' | ')}`).join('; ');
    await cluster.stop();
    return { skip: `a Slurm cluster could not start here: ${why} (${tail})` };
  };

  const key = path.join(dir, 'munge', 'munge.key');
  let r = spawnSync(which('mungekey'), ['-c', '-k', key], { encoding: 'utf8' });
  if (r.status !== 0) return fail(`mungekey: ${r.stderr.trim()}`);
  const mungePid = path.join(dir, 'munge', 'run', 'munged.pid');
  r = spawnSync(which('munged'), ['--key-file', key, '--socket', socket, '--pid-file', mungePid,
    '--log-file', path.join(dir, 'munge', 'log', 'munged.log'), '--seed-file', path.join(dir, 'munge', 'lib', 'seed'), '--force'],
  { encoding: 'utf8' });
  pids.munged = await until(() => readPid(mungePid), 5000);
  if (r.status !== 0 || !pids.munged) return fail(`munged: ${(r.stderr || '').trim() || 'no pid file'}`);

  // Both daemons fork into the background; their pid files name them.
  r = spawnSync(which('slurmctld'), ['-f', conf], { env, encoding: 'utf8' });
  pids.slurmctld = await until(() => readPid(path.join(dir, 'run', 'slurmctld.pid')), 10000);
  if (r.status !== 0 || !pids.slurmctld) return fail(`slurmctld: ${(r.stderr || '').trim() || 'no pid file'}`);
  r = spawnSync(which('slurmd'), ['-f', conf], { env, encoding: 'utf8' });
  pids.slurmd = await until(() => readPid(path.join(dir, 'run', 'slurmd.pid')), 10000);
  if (r.status !== 0 || !pids.slurmd) return fail(`slurmd: ${(r.stderr || '').trim() || 'no pid file'}`);

  // The node registers with the controller and turns idle.
  const idle = await until(() => {
    const s = spawnSync(which('sinfo'), ['-h', '-N', '-o', '%T'], { env, encoding: 'utf8' });
    return s.status === 0 && /^idle/m.test(s.stdout);
  }, 20000, 250);
  if (!idle) return fail('the node did not turn idle within 20 s');
  cluster.slurmBin = path.dirname(which('sbatch'));
  return cluster;
}

/* Runs a Slurm client command against the cluster: its stdout (throws on a non-zero exit). */
export function slurm(cluster, cmd, args) {
  return execFileSync(path.join(cluster.slurmBin, cmd), args, { env: cluster.env, encoding: 'utf8' });
}
