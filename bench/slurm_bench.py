#!/usr/bin/python3
"""The Slurm host's overhead (docs/benchmarks.md, "Slurm against local"): the same loop with
`launcher = "local"` and `launcher = "slurm"`, side by side in one invocation, alternating.

A small Fashion-MNIST store (300 labels, 1,200 pool, 300 test), 4 MLP members on 2 slots
(2 CPU devices locally, 2 one-CPU worker steps under Slurm), 1 epoch, 100 labels per round, so
compute is small and the launcher's share shows. For each run it takes from the journal:

- start-up: the run's start -> the first attempt running (local: 2 worker processes;
  Slurm: the shared-store probe step and 2 srun steps);
- round wall time: a round's start -> its end, averaged over rounds 1.. (round 0 includes
  the workers' start-up);
- round transition: the last attempt of round r done -> the last slot busy again in round
  r + 1 (what the launcher adds between rounds with persistent workers);
- end to end: `cohort run`'s wall time.

Needs a Slurm cluster: the one SLURM_CONF names, else it starts the test cluster of
tests/slurm/slurm-up.sh (root) and stops it afterwards.

  bench/slurm_bench.py [--cohort BUILD/src/cli/cohort] [--repeats 3] [--rounds 4]
                       [--slurm-extra 'srun_args = ["--unbuffered"]']

Figures are printed, never asserted. Run it on an otherwise idle machine.
"""
import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
import loop_test  # noqa: E402  (build_source, write_config)

PROG = "slurm_bench"
CLUSTER = "/tmp/cohort-slurm-bench"
MEMBERS = [
    ("mlp-a", "dense 32 relu, dense 10", 1),
    ("mlp-b", "dense 24 tanh, dense 10", 2),
    ("mlp-c", "dense 16 relu, dense 10", 3),
    ("mlp-d", "dense 32 tanh, dense 10", 4),
]


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(1)


def cluster_up():
    """SLURM_CONF of a cluster that answers, and whether this bench started it."""
    if os.environ.get("SLURM_CONF") and subprocess.run(
            ["sinfo", "-h"], capture_output=True).returncode == 0:
        return os.environ["SLURM_CONF"], False
    if os.geteuid() != 0:
        fail("no Slurm cluster answers and starting the test cluster needs root")
    env = dict(os.environ, SLURM_PROBE_DIR=CLUSTER, SLURM_NCPUS="4", SLURM_NGPUS="0",
               SLURM_INSTALL="1")
    proc = subprocess.run([os.path.join(REPO, "tests", "slurm", "slurm-up.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        fail(f"tests/slurm/slurm-up.sh failed: {proc.stderr.strip()[-300:]}")
    return f"{CLUSTER}/etc/slurm.conf", True


def cluster_down():
    subprocess.run([os.path.join(REPO, "tests", "slurm", "slurm-down.sh")],
                   env=dict(os.environ, SLURM_PROBE_DIR=CLUSTER), capture_output=True,
                   timeout=120)


def seconds(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def measure(run_dir):
    db = sqlite3.connect(f"file:{run_dir}/run.db?mode=ro", uri=True)
    run_start = seconds(db.execute("SELECT started_at FROM runs").fetchone()[0])
    rounds = db.execute("SELECT round, started_at, ended_at FROM rounds ORDER BY round").fetchall()
    attempts = db.execute("SELECT round, started_at, ended_at FROM attempts").fetchall()
    db.close()
    by_round = {}
    for r, start, end in attempts:
        by_round.setdefault(r, []).append((seconds(start), seconds(end)))
    first = min(s for s, _ in by_round[0])
    walls = [seconds(e) - seconds(s) for r, s, e in rounds if r > 0]
    transitions = []
    for r in sorted(by_round):
        if r == 0:
            continue
        last_done = max(e for _, e in by_round[r - 1])
        starts = sorted(s for s, _ in by_round[r])
        # The second slot's first start: both slots busy again.
        transitions.append(starts[min(1, len(starts) - 1)] - last_done)
    return {"startup": first - run_start, "round": statistics.mean(walls),
            "transition": statistics.mean(transitions)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scratch", default="/tmp/cohort-slurm-bench-runs")
    ap.add_argument("--slurm-extra", default="",
                    help="lines for the [slurm] table, e.g. 'srun_args = [\"--unbuffered\"]'")
    args = ap.parse_args()
    if not os.access(args.cohort, os.X_OK):
        fail(f"{args.cohort}: not an executable (build cohort first)")
    loop_test.COHORT = os.path.abspath(args.cohort)
    shutil.rmtree(args.scratch, ignore_errors=True)
    os.makedirs(args.scratch)
    loop_test.SOURCE = os.path.join(args.scratch, "source")
    loop_test.build_source(loop_test.SOURCE)
    conf, started = cluster_up()
    env = dict(os.environ, SLURM_CONF=conf)
    for k in list(env):
        if k.startswith("SLURM_JOB"):
            del env[k]
    results = {"local": [], "slurm": []}
    try:
        for rep in range(args.repeats):
            for launcher in ("local", "slurm"):
                d = os.path.join(args.scratch, f"{launcher}-{rep}")
                path = loop_test.write_config(d, members=MEMBERS, rounds=args.rounds, k=100,
                                              epochs=1, strategy="entropy")
                if launcher == "slurm":
                    with open(path) as f:
                        text = f.read()
                    text = text.replace('devices = ["cpu:0", "cpu:1"]', 'devices = "auto"')
                    text = 'launcher = "slurm"\n' + text
                    text += ("\n[slurm]\nslots = 2\ncpus_per_member = 1\nqueue_timeout_s = 60\n"
                             + args.slurm_extra + "\n")
                    with open(path, "w") as f:
                        f.write(text)
                t0 = time.monotonic()
                proc = subprocess.run([args.cohort, "run", path], env=env, capture_output=True,
                                      text=True, timeout=900)
                wall = time.monotonic() - t0
                if proc.returncode != 0:
                    fail(f"{launcher} run failed: {proc.stderr.strip()[-300:]}")
                m = measure(os.path.join(d, "runs", "loop"))
                m["total"] = wall
                results[launcher].append(m)
    finally:
        if started:
            cluster_down()

    print(f"slurm_bench: 4 MLP members on 2 slots, {args.rounds} rounds of 1 epoch, "
          f"{args.repeats} runs each, alternating (median, seconds)")
    print(f"{'':<14}{'local':>10}{'slurm':>10}{'slurm-local':>14}")
    for key, label in (("startup", "start-up"), ("round", "round wall"),
                       ("transition", "transition"), ("total", "end to end")):
        a = statistics.median(m[key] for m in results["local"])
        b = statistics.median(m[key] for m in results["slurm"])
        print(f"{label:<14}{a:>10.3f}{b:>10.3f}{b - a:>+14.3f}")


if __name__ == "__main__":
    main()
