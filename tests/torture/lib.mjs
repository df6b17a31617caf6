// Helpers of the torture and soak scripts (tests/torture/kill9.mjs, soak.mjs):
// command-line options, a server's worker processes, its resident memory, a
// job folder's latest checkpoint and the store's PRAGMA integrity_check.
// Linux only (/proc); loopback only (the servers come from
// tests/integration/lib/kiln.mjs's startServer).

import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import path from 'node:path';

/* Parses --name value / --name=value / --flag against defaults (numbers stay
 * numbers, booleans become flags). Exits 2 on an unknown option, printing usage. */
export function parseOptions(argv, defaults, usage) {
  const opts = { ...defaults };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    if (a === '--help' || a === '-h') { console.log(usage); process.exit(0); }
    if (!a.startsWith('--')) bad(`unexpected argument ${a}`);
    a = a.slice(2);
    let val = null;
    const eq = a.indexOf('=');
    if (eq >= 0) { val = a.slice(eq + 1); a = a.slice(0, eq); }
    const key = a.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in defaults)) bad(`unknown option --${a}`);
    if (typeof defaults[key] === 'boolean') { opts[key] = val === null ? true : val !== 'false'; continue; }
    if (val === null) { val = argv[++i]; if (val === undefined) bad(`--${a} needs a value`); }
    if (typeof defaults[key] === 'number') {
      const n = Number(val);
      if (!Number.isFinite(n)) bad(`--${a} takes a number, not ${val}`);
      opts[key] = n;
    } else {
      opts[key] = val;
    }
  }
  return opts;
  function bad(msg) { console.error(`${msg}\n\n${usage}`); process.exit(2); }
}

/* The direct children of pid: [{pid, args: [...]}] (from /proc/PID/task/T/children). */
export function children(pid) {
  const out = [];
  let tasks = [];
  try { tasks = readdirSync(`/proc/${pid}/task`); } catch { return out; }
  const seen = new Set();
  for (const t of tasks) {
    let txt = '';
    try { txt = readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8'); } catch { continue; }
    for (const s of txt.trim().split(/\s+/)) {
      const c = Number(s);
      if (!c || seen.has(c)) continue;
      seen.add(c);
      let args = [];
      try { args = readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').filter(Boolean); } catch { continue; }
      out.push({ pid: c, args });
    }
  }
  return out;
}

/* The server's `kiln worker --job-dir .../jobs/<id>` children: [{pid, jobId}]. */
export function workers(serverPid) {
  return children(serverPid)
    .filter((c) => c.args[1] === 'worker')
    .map((c) => {
      const i = c.args.indexOf('--job-dir');
      return { pid: c.pid, jobId: i >= 0 ? Number(path.basename(c.args[i + 1])) : null };
    });
}

/* Whether a process with this pid exists (and is not a zombie). */
export function alive(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z/.test(st);
  } catch { return false; }
}

/* VmRSS of pid in KiB, or null when it is gone. */
export function rssKiB(pid) {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

/* How many file descriptors pid has open, or null. */
export function openFds(pid) {
  try { return readdirSync(`/proc/${pid}/fd`).length; } catch { return null; }
}

/* The "__metadata__" of a safetensors file, reading only its header; null when unreadable. */
function safetensorsMeta(file) {
  let fd;
  try {
    fd = openSync(file, 'r');
    const head = Buffer.alloc(8);
    if (readSync(fd, head, 0, 8, 0) !== 8) return null;
    const n = Number(head.readBigUInt64LE(0));
    if (n <= 0 || n > 16 << 20) return null;
    const buf = Buffer.alloc(n);
    if (readSync(fd, buf, 0, n, 8) !== n) return null;
    return JSON.parse(buf.toString('utf8')).__metadata__ || null;
  } catch {
    return null;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/* The step of the job folder's latest complete checkpoint (checkpoints/epoch-N
 * or step-S .safetensors, which kiln writes to a temporary name and renames),
 * or 0 when it has none. */
export function latestCheckpointStep(jobDir) {
  const dir = path.join(jobDir, 'checkpoints');
  let names = [];
  try { names = readdirSync(dir); } catch { return 0; }
  let best = 0;
  for (const n of names) {
    if (!/^(epoch|step)-\d+\.safetensors$/.test(n)) continue;
    const meta = safetensorsMeta(path.join(dir, n));
    const step = meta ? Number(meta.step) : NaN;
    if (Number.isFinite(step) && step > best) best = step;
  }
  return best;
}

/* PRAGMA integrity_check of an SQLite file with the sqlite3 command-line
 * tool, else python3's sqlite3: {ok, text}. */
export function integrityCheck(dbFile) {
  if (!existsSync(dbFile)) return { ok: false, text: `${dbFile} does not exist` };
  let r = spawnSync('sqlite3', [dbFile, 'PRAGMA integrity_check;'], { encoding: 'utf8', timeout: 120_000 });
  if (r.error && r.error.code === 'ENOENT') {
    r = spawnSync('python3', ['-c',
      'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print("\\n".join(r[0] for r in c.execute("PRAGMA integrity_check")))',
      dbFile], { encoding: 'utf8', timeout: 120_000 });
  }
  if (r.error) return { ok: false, text: `integrity_check could not run: ${r.error.message}` };
  const text = `${r.stdout}${r.stderr}`.trim();
  return { ok: r.status === 0 && text === 'ok', text };
}
