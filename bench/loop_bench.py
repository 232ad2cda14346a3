#!/usr/bin/python3
"""The closed-loop benchmark (docs/benchmarks.md, "The loop"): cohort against the seed's design.

For each setting, in one invocation on one machine, runs the Fashion-MNIST active-learning
example (examples/fashion-mnist/loop.toml: 8 members, 2 CPU devices, 1,000 labels to start,
+1,000 per round) twice, first with `cohort run`, then with bench/seed_baseline/seed_loop.py
(the same members, seeds, data, rounds, acquisition and thread counts), and prints:

- end-to-end wall time of the loop and the mean time per round, and the ratio;
- the lower bound: training plus prediction compute measured inside the workers, summed over
  members and rounds, divided by the device count; each system's overhead above it;
- the round transition: the last member of a round done -> every device running a member of
  the next round;
- the final ensemble test accuracy and NLL of both.

  bench/loop_bench.py [--settings short,long] [--cohort BUILD/src/cli/cohort] [--scratch DIR]
  bench/loop_bench.py --quick     # smoke: a small store, 2 members, 2 rounds of 1 epoch
  bench/loop_bench.py --devices cuda:0 --python PY --make-store   # on a GPU (bench/gpu_check.sh)

--devices replaces the example's two CPU devices for both systems (--members-per-device sets
how many members share one); --python names the interpreter with torch that runs the baseline;
--make-store builds the example store at --store when it is missing. --pool-precision bf16
has cohort's members score the pool in bfloat16 (the members still train in fp32; the
baseline stays fp32 throughout).

Figures are printed, never asserted. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_config  # noqa: E402
from example_config import BenchError, bench_main, build_store, executable, run  # noqa: E402

PROG = "loop_bench"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(REPO, "bench", "seed_baseline", "seed_loop.py")
PYTHON = "/usr/bin/python3"

SETTINGS = {  # name -> (rounds, epochs override or None)
    "short": (2, None),
    "long": (5, None),
    "quick": (2, 1),
}



def derived_config(path, name, store, rounds, epochs, members, k, devices=None,
                   members_per_device=None, pool_precision=None):
    defaults = {"pool_precision": f'"{pool_precision}"'} if pool_precision else None
    text = example_config.config_text(name, store, rounds, epochs=epochs, members=members, k=k,
                                      defaults=defaults)
    if devices:
        listed = ", ".join(f'"{d}"' for d in devices)
        text = re.sub(r"^devices = .*$", f"devices = [{listed}]", text, count=1, flags=re.M)
    if members_per_device:
        text = re.sub(r"^members_per_device = \d+", f"members_per_device = {members_per_device}",
                      text, count=1, flags=re.M)
    with open(path, "w") as f:
        f.write(text)


def seconds_between(a, b):
    return (b - a) * 86400.0


def cohort_figures(cohort, config, devices):
    run_dir = os.path.join(os.path.dirname(config), "runs", os.path.basename(config)[:-5])
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    run([cohort, "run", "--plain", config])
    wall = time.perf_counter() - t0
    db = sqlite3.connect(f"file:{run_dir}/run.db?mode=ro", uri=True)
    rounds = db.execute("SELECT round, julianday(started_at), julianday(ended_at), test_accuracy,"
                        " test_nll FROM rounds ORDER BY round").fetchall()
    attempts = db.execute("SELECT round, device, julianday(started_at), julianday(ended_at),"
                          " metrics_json FROM attempts WHERE status = 'done'").fetchall()
    db.close()
    compute = 0.0
    for _, _, _, _, metrics in attempts:
        m = json.loads(metrics)
        compute += m.get("seconds", 0.0) + m.get("predict_seconds", 0.0)
    loop_s = seconds_between(rounds[0][1], rounds[-1][2])
    transitions = []
    for r in range(1, len(rounds)):
        last_done = max(a[3] for a in attempts if a[0] == r - 1)
        first_on = {}
        for a in attempts:
            if a[0] == r:
                first_on[a[1]] = min(first_on.get(a[1], a[2]), a[2])
        if len(first_on) == devices:
            transitions.append(seconds_between(last_done, max(first_on.values())))
    return {"wall": wall, "loop": loop_s, "rounds": len(rounds), "compute": compute,
            "transition": sum(transitions) / len(transitions) if transitions else None,
            "accuracy": rounds[-1][3], "nll": rounds[-1][4]}


def baseline_figures(config, store, work, members, epochs, python=PYTHON):
    out = os.path.join(work, "baseline.json")
    argv = [python, BASELINE, "--config", config, "--store", store, "--work", work,
            "--json", out, "--quiet"]
    t0 = time.perf_counter()
    run(argv)
    wall = time.perf_counter() - t0
    with open(out) as f:
        j = json.load(f)
    return {"wall": wall, "loop": j["total_seconds"], "rounds": len(j["rounds"]),
            "compute": j["compute_seconds"], "transition": j["mean_transition_s"],
            "accuracy": j["final_test_accuracy"], "nll": j["final_test_nll"]}


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", default="short,long",
                    help="comma-separated: short (2 rounds), long (5 rounds)")
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--store", default=os.path.join(REPO, "examples", "fashion-mnist", "store"),
                    help="the example store (scripts/demo builds it)")
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "loop-bench"))
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    ap.add_argument("--devices", help="comma-separated devices for both systems, e.g. cuda:0 "
                    "(default: the example's cpu:0,cpu:1)")
    ap.add_argument("--members-per-device", type=int, help="members sharing one device")
    ap.add_argument("--pool-precision", choices=["fp32", "bf16"],
                    help="cohort's members score the pool in this precision (the baseline: fp32)")
    ap.add_argument("--python", default=PYTHON, help="the interpreter with torch for the baseline")
    ap.add_argument("--make-store", action="store_true",
                    help="build the example store at --store when it is missing")
    a = ap.parse_args()
    cohort = executable(a.cohort)
    os.makedirs(a.scratch, exist_ok=True)
    members = k = None
    if a.quick:
        settings = ["quick"]
        store = os.path.join(os.path.abspath(a.scratch), "quick-store")
        build_store(cohort, store, 300, 2000, 500)
        members, k = 2, 200
    else:
        settings = [s for s in a.settings.split(",") if s]
        for s in settings:
            if s not in ("short", "long"):
                raise BenchError(f"unknown setting '{s}' (short, long)")
        store = os.path.abspath(a.store)
        if a.make_store:
            build_store(cohort, store, 1000, 59000, 10000, reuse=True)
        if not os.path.exists(os.path.join(store, "CURRENT")):
            raise BenchError(f"{store}: no store (run scripts/demo, or pass --store or "
                             "--make-store)")
    device_list = [d for d in (a.devices or "").split(",") if d]
    devices = len(device_list) if device_list else 2
    rows = []
    for s in settings:
        rounds, epochs = SETTINGS[s]
        work = os.path.join(os.path.abspath(a.scratch), s)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        config = os.path.join(work, f"bench-{s}.toml")
        derived_config(config, f"bench-{s}", store, rounds, epochs, members, k, device_list,
                       a.members_per_device, a.pool_precision)
        print(f"{PROG}: setting {s}: {rounds} rounds; cohort ...", file=sys.stderr, flush=True)
        c = cohort_figures(cohort, config, devices)
        print(f"{PROG}: setting {s}: baseline ...", file=sys.stderr, flush=True)
        b = baseline_figures(config, store, os.path.join(work, "baseline"), members, epochs,
                             a.python)
        for name, f in (("cohort", c), ("seed_baseline", b)):
            lower = f["compute"] / devices
            rows.append((s, name, f["loop"], f["loop"] / f["rounds"], lower,
                         100.0 * (f["loop"] - lower) / lower if lower > 0 else None,
                         f["transition"], f["accuracy"], f["nll"], f["wall"]))
        rows.append((s, "ratio", b["loop"] / c["loop"], None, None, None, None, None, None, None))

    print(f"\n{'setting':<8} {'system':<14} {'loop_s':>8} {'per_round_s':>11} {'lower_bound_s':>13} "
          f"{'overhead_%':>10} {'transition_s':>12} {'test_acc':>8} {'test_nll':>8} "
          f"{'process_s':>9}")
    for r in rows:
        if r[1] == "ratio":
            print(f"{r[0]:<8} {'baseline/cohort':<14} {r[2]:>8.2f}x")
            continue
        print(f"{r[0]:<8} {r[1]:<14} {r[2]:>8.1f} {r[3]:>11.1f} {r[4]:>13.1f} "
              f"{fmt(r[5], '>10.1f')} {fmt(r[6], '>12.2f')} {r[7]:>8.4f} {r[8]:>8.4f} "
              f"{r[9]:>9.1f}")
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
