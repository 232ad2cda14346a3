#!/usr/bin/python3
"""Regression active learning on scikit-learn's diabetes data (examples/diabetes): the
ensemble's test RMSE against labels used, by strategy, over seeds (docs/benchmarks.md).

Each seed draws its own train/pool/test split and its own member and acquisition seeds; the
strategies run interleaved (seed 1 of every strategy, then seed 2, ...), each from the same
split. RMSE is in units of the target's standard deviation (1: as good as the mean).

  bench/diabetes_bench.py [--seeds 3] [--strategies variance,random,max_deviation]
  bench/diabetes_bench.py --quick     # smoke: one seed, two strategies, 2 rounds

Prints a table (and writes it as JSON with --json); asserts nothing.
"""
import argparse
import json
import os
import re
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_config import bench_main, executable, run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "diabetes")
PROG = "diabetes_bench"


def config(name, store, strategy, seed, rounds):
    with open(os.path.join(EXAMPLE, "loop.toml")) as f:
        text = f.read()
    text = re.sub(r'^name = ".*"', f'name = "{name}"', text, count=1, flags=re.M)
    text = re.sub(r'^source = ".*"', f'source = "{store}"', text, count=1, flags=re.M)
    text = re.sub(r'^strategy = ".*"', f'strategy = "{strategy}"', text, count=1, flags=re.M)
    text = re.sub(r"^max_rounds = \d+", f"max_rounds = {rounds}", text, count=1, flags=re.M)
    return re.sub(r"^seed = (\d+)", lambda m: f"seed = {int(m.group(1)) + 100 * seed}", text,
                  flags=re.M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--strategies", default="variance,random,max_deviation")
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "diabetes-bench"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.rounds, a.strategies = 1, 2, "variance,random"
    cohort = executable(a.cohort)
    strategies = [s for s in a.strategies.split(",") if s]
    scratch = os.path.abspath(a.scratch)
    os.makedirs(scratch, exist_ok=True)
    curves = {s: [] for s in strategies}
    for seed in range(1, a.seeds + 1):
        store = os.path.join(scratch, f"store-{seed}")
        if not os.path.exists(os.path.join(store, "CURRENT")):
            run(["/usr/bin/python3", os.path.join(EXAMPLE, "diabetes.py"), "make", cohort, store,
                 "--seed", str(seed)])
        for strategy in strategies:
            name = f"diabetes-{strategy}-{seed}"
            path = os.path.join(scratch, f"{name}.toml")
            with open(path, "w") as f:
                f.write(config(name, store, strategy, seed, a.rounds))
            t0 = time.perf_counter()
            run([cohort, "run", "--plain", path])  # an earlier run of the same name resumes
            db = sqlite3.connect(f"file:{scratch}/runs/{name}/run.db?mode=ro", uri=True)
            rows = db.execute("SELECT round, test_rmse FROM rounds ORDER BY round").fetchall()
            db.close()
            print(f"{PROG}: {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
            curves[strategy].append([rmse for _, rmse in rows])
    print(f"\nDiabetes (442 patients: 20 labelled to start, 20 more per round, 100 test): "
          f"ensemble test RMSE (target sd = 1), mean [min, max] over {a.seeds} seed(s)")
    print(f"{'labels':>6} " + " ".join(f"{s:>22}" for s in strategies))
    for i in range(a.rounds):
        cells = []
        for s in strategies:
            values = [c[i] for c in curves[s] if i < len(c)]
            cells.append(f"{sum(values) / len(values):.3f} [{min(values):.3f}, {max(values):.3f}]"
                         .rjust(22) if values else "-".rjust(22))
        print(f"{20 + 20 * i:>6} " + " ".join(cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"curves": curves}, f, indent=1)
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
