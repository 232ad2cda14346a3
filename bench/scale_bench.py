#!/usr/bin/python3
"""How the loop's own cost grows with the pool (issue 16, docs/benchmarks.md "Scale").

For each pool size, a synthetic store (8 float32 features, 10 classes, 1,000 labelled rows,
1,000 test rows, the pool's labels hidden) and a two-round `cohort run` with 8 tiny members
(`dense 8 relu, dense 10`, one epoch) acquiring 100 rows by BALD. Per size it prints round 0's
overhead, what is neither training nor predicting: acquisition (read and score every member's
pool predictions, pick), labelling and the commit, their sum (controller_s), next to the
round's wall time; and the controller's peak resident memory (VmHWM of the `cohort run`
process, sampled every 0.1 s; its workers are separate processes).

  bench/scale_bench.py [--sizes 10000,100000,1000000] [--scratch DIR] [--cohort PATH]
  bench/scale_bench.py --quick      # smoke: 2,000 rows

Figures are printed, never asserted.
"""
import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_config import BenchError, bench_main, executable, run  # noqa: E402

PROG = "scale_bench"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """name = "scale"
devices = ["cpu:0", "cpu:1"]
threads_per_cpu_device = 1

[store]
source = "{store}"

[defaults]
epochs = 1
batch_size = 256
classes = 10

{members}
[acquisition]
strategy = "bald"
batch_size = 100
seed = 1

[stop]
max_rounds = 2

[failure]
heartbeat_timeout_s = 600
"""


def build_store(cohort, path, pool):
    rng = np.random.default_rng(pool)
    shutil.rmtree(path, ignore_errors=True)
    run([cohort, "data", "init", path])
    for table, rows in (("train", 1000), ("test", 1000), ("pool", pool)):
        x = os.path.join(os.path.dirname(path), f"{table}.x.npy")
        y = os.path.join(os.path.dirname(path), f"{table}.y.npy")
        np.save(x, rng.standard_normal((rows, 8), dtype=np.float32))
        np.save(y, rng.integers(0, 10, rows, dtype=np.int64))
        run([cohort, "data", "import", path, "--table", table, "--npy", x, y])
        os.remove(x)
        os.remove(y)


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def measure(cohort, scratch, pool):
    work = os.path.join(scratch, f"pool-{pool}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    store = os.path.join(work, "store")
    t0 = time.perf_counter()
    build_store(cohort, store, pool)
    build_s = time.perf_counter() - t0
    members = "".join(f'[[member]]\nname = "m{i}"\nmodel = "dense 8 relu, dense 10"\nseed = {i}\n\n'
                      for i in range(8))
    config = os.path.join(work, "loop.toml")
    with open(config, "w") as f:
        f.write(CONFIG.format(store=store, members=members))
    proc = subprocess.Popen([cohort, "run", "--plain", config], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        rss = peak_rss_mb(proc.pid)
        if rss is not None:
            peak = max(peak, rss)
        time.sleep(0.1)
    if proc.returncode != 0:
        raise BenchError(f"cohort run with a pool of {pool} exited {proc.returncode}: "
                         f"{proc.stderr.read().strip()[-300:]}")
    db = sqlite3.connect(f"file:{work}/runs/scale/run.db?mode=ro", uri=True)
    r = db.execute("SELECT acquire_s, label_s, commit_s, train_s, predict_s, "
                   "(julianday(ended_at) - julianday(started_at)) * 86400 FROM rounds "
                   "WHERE round = 0").fetchone()
    db.close()
    acquire, label, commit, train, predict, wall = r
    shutil.rmtree(work, ignore_errors=True)
    return {"pool": pool, "build_s": build_s, "acquire_s": acquire, "label_s": label,
            "commit_s": commit, "controller_s": acquire + label + commit, "round_s": wall,
            "peak_rss_mb": peak}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "scale"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    cohort = executable(a.cohort)
    sizes = [2000] if a.quick else [int(s) for s in a.sizes.split(",") if s]
    os.makedirs(a.scratch, exist_ok=True)
    print(f"{'pool_rows':>10} {'acquire_s':>10} {'label_s':>8} {'commit_s':>9} "
          f"{'controller_s':>13} {'round_s':>8} {'controller_peak_MB':>19}", flush=True)
    for pool in sizes:
        m = measure(cohort, os.path.abspath(a.scratch), pool)
        print(f"{m['pool']:>10} {m['acquire_s']:>10.3f} {m['label_s']:>8.3f} "
              f"{m['commit_s']:>9.3f} {m['controller_s']:>13.3f} {m['round_s']:>8.2f} "
              f"{m['peak_rss_mb']:>19.0f}", flush=True)
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
