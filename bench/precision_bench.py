#!/usr/bin/python3
"""What bf16 costs and buys in the loop (docs/benchmarks.md, "Precision"), with `cohort run`.

Runs the Fashion-MNIST active-learning example (examples/fashion-mnist/loop.toml: 8 members, 2
CPU devices, `bald`) once per variant, the variants one after the other for each repetition:

- fp32: the example as it is;
- pool-bf16: `pool_precision = "bf16"` for every member: trained in fp32, the pool scored in
  bfloat16. Round 0's members are then the fp32 run's, so round 0's picks differ only by the
  precision of the scores;
- bf16: `precision = "bf16"` for every member: trained and predicting in bfloat16.

and prints per variant: the members' training and prediction seconds (summed over members and
rounds, from the journal's attempt metrics), the loop's wall time, each round's overlap of the
picked ids with the fp32 run's picks of that round, and the final test accuracy and NLL.

  bench/precision_bench.py [--rounds 3] [--start 1000] [--k 1000] [--repeat 1] [--scratch DIR]
  bench/precision_bench.py --quick     # smoke: a small store, 2 members, 2 rounds of 1 epoch

Figures are printed, never asserted. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import shutil
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_config import bench_main, build_store, config_text, executable, run  # noqa: E402

PROG = "precision_bench"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"fp32": {}, "pool-bf16": {"pool_precision": '"bf16"'},
            "bf16": {"precision": '"bf16"'}}



def run_variant(cohort, work, name, store, rounds, k, epochs, members, defaults):
    path = os.path.join(work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(config_text(name, store, rounds, epochs=epochs, members=members, k=k,
                            defaults=defaults or None))
    run_dir = os.path.join(work, "runs", name)
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    run([cohort, "run", "--plain", path])
    wall = time.perf_counter() - t0
    db = sqlite3.connect(f"file:{run_dir}/run.db?mode=ro", uri=True)
    final = db.execute("SELECT test_accuracy, test_nll FROM rounds ORDER BY round DESC "
                       "LIMIT 1").fetchone()
    train_s = predict_s = 0.0
    for (metrics,) in db.execute("SELECT metrics_json FROM attempts WHERE status = 'done'"):
        m = json.loads(metrics)
        train_s += m.get("seconds", 0.0)
        predict_s += m.get("predict_seconds", 0.0)
    picks = {}
    for rnd, sample in db.execute("SELECT round, sample_id FROM acquisitions"):
        picks.setdefault(rnd, set()).add(sample)
    db.close()
    return {"wall": wall, "train_s": train_s, "predict_s": predict_s, "accuracy": final[0],
            "nll": final[1], "picks": picks}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "precision-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--start", type=int, default=1000, help="labels to start from")
    ap.add_argument("--k", type=int, default=1000, help="labels acquired per round")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each variant")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    a = ap.parse_args()
    cohort = executable(a.cohort)
    work = os.path.abspath(a.scratch)
    os.makedirs(work, exist_ok=True)
    members = epochs = None
    rounds, k, start = a.rounds, a.k, a.start
    if a.quick:
        store = os.path.join(work, "quick-store")
        build_store(cohort, store, 300, 1500, 500, reuse=True)
        members, epochs, rounds, k, start = 2, 1, 2, 100, 300
    else:
        store = os.path.join(work, f"store-{start}")
        build_store(cohort, store, start, 60000 - start, 10000, reuse=True)
    results = {name: [] for name in VARIANTS}
    for rep in range(a.repeat):
        for name, defaults in VARIANTS.items():
            print(f"{PROG}: {name} (run {rep + 1} of {a.repeat}) ...", file=sys.stderr,
                  flush=True)
            results[name].append(run_variant(cohort, work, f"{name}-{rep}", store, rounds, k,
                                             epochs, members, defaults))

    print(f"\n{rounds} rounds, {start} labels +{k} per round, {a.repeat} run(s) per variant "
          "(means)")
    print(f"{'variant':<10} {'train_s':>8} {'predict_s':>9} {'loop_s':>7} {'test_acc':>8} "
          f"{'test_nll':>8}  overlap of picks with fp32, per round")
    for name, runs in results.items():
        n = len(runs)
        mean = {key: sum(r[key] for r in runs) / n
                for key in ("train_s", "predict_s", "wall", "accuracy", "nll")}
        overlaps = []
        for rnd in sorted(runs[0]["picks"]):
            shares = [len(r["picks"].get(rnd, set()) & ref["picks"].get(rnd, set())) /
                      max(len(ref["picks"].get(rnd, set())), 1)
                      for r, ref in zip(runs, results["fp32"])]
            overlaps.append(f"{sum(shares) / len(shares):.3f}")
        print(f"{name:<10} {mean['train_s']:>8.1f} {mean['predict_s']:>9.1f} {mean['wall']:>7.1f} "
              f"{mean['accuracy']:>8.4f} {mean['nll']:>8.4f}  {' '.join(overlaps)}")
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
