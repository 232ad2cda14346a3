#!/usr/bin/python3
"""The pool pass: one member predicting a whole table, fp32 against bf16 (docs/benchmarks.md,
"Precision").

Trains two of the example's members for one epoch on the 60,000 Fashion-MNIST training images
(`mlp-256-relu` and `cnn-32-elu`, with `cohort train`), then asks one long-lived worker
(`cohort-member worker --threads T`, the process the loop runs) to predict the 60,000 images
with each member in up to four variants (--variants), interleaved, --repeats times: the
network's own fp32 forward, dense layers through the BLAS (`fp32-blas`, a worker with
COHORT_ONEDNN=off), the default fp32 plan (`fp32`: dense layers through oneDNN on a CPU with
AVX-512, the BLAS elsewhere; docs/models.md), the plan with oneDNN dense layers on any CPU
(`fp32-onednn`, COHORT_ONEDNN=on) and bf16 (`"precision"` of the predict command). Prints the medians of the worker's own timing (uint8
rows in, probabilities written out): rows/s, for the MLP its GFLOPS-equivalent (2 x rows x
weights of its dense layers per second), the speed-up over the BLAS variant, and how many rows
keep the predicted class the BLAS variant gave them.

  bench/pool_pass_bench.py [--repeats 5] [--threads 1] [--cohort BUILD/src/cli/cohort]
  bench/pool_pass_bench.py --variants fp32,fp32-onednn   # fp32-blas always runs
  bench/pool_pass_bench.py --quick     # smoke: 2,000 rows, one repeat

Figures are printed, never asserted. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_config import BenchError, bench_main, build_store, executable, run  # noqa: E402

PROG = "pool_pass_bench"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMBERS = {  # name -> (spec, multiply-adds per row of its dense layers, or None)
    "mlp-256-relu": ("dense 256 relu, dense 10", 784 * 256 + 256 * 10),
    "cnn-32-elu": ("conv2d 32 3 1 1 elu, maxpool 2, dropout 0.1, flatten, dense 128 elu, "
                   "dense 10", None),
}



class Worker:
    """A `cohort-member worker` on stdin/stdout (docs/protocol.md)."""

    def __init__(self, member_binary, threads, env=None):
        self.proc = subprocess.Popen([member_binary, "worker", "--device", "cpu", "--threads",
                                      str(threads)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})))
        self.event("hello")

    def event(self, kind):
        for line in self.proc.stdout:
            if not line.startswith("@cohort "):
                continue
            e = json.loads(line[len("@cohort "):])
            if e.get("ev") == "error":
                raise BenchError(f"worker: {e.get('message')}")
            if e.get("ev") == kind:
                return e
        raise BenchError(f"the worker exited before its {kind} event")

    def predict(self, command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.event("predictions")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "pool-pass-bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    ap.add_argument("--variants", default="fp32-blas,fp32,fp32-onednn,bf16",
                    help="comma-separated subset of fp32-blas, fp32, fp32-onednn, bf16 "
                         "(fp32-blas is always run: the others are compared with it)")
    a = ap.parse_args()
    cohort = executable(a.cohort)
    member_binary = executable(os.path.join(os.path.dirname(cohort), "cohort-member"))
    work = os.path.abspath(a.scratch)
    os.makedirs(work, exist_ok=True)
    rows = 2000 if a.quick else 60000
    repeats = 1 if a.quick else a.repeats
    store = os.path.join(work, f"store-{rows}")
    build_store(cohort, store, rows, 0, 500, reuse=True)
    generation = json.loads(run([cohort, "data", "info", store, "--json"]).stdout)["generation"]

    # variant -> (worker, precision): the network's own forward (COHORT_ONEDNN=off: dense layers
    # through the BLAS), the default plan (docs/models.md: dense layers in oneDNN on a CPU with
    # AVX-512, through the BLAS elsewhere), the plan with oneDNN dense layers on any CPU
    # (COHORT_ONEDNN=on), bf16.
    plain = Worker(member_binary, a.threads)
    blas = Worker(member_binary, a.threads, {"COHORT_ONEDNN": "off"})
    onednn = Worker(member_binary, a.threads, {"COHORT_ONEDNN": "on"})
    every = {"fp32-blas": (blas, "fp32"), "fp32": (plain, "fp32"),
             "fp32-onednn": (onednn, "fp32"), "bf16": (plain, "bf16")}
    chosen = {"fp32-blas"} | set(a.variants.split(","))
    unknown = chosen - set(every)
    if unknown:
        raise BenchError(f"--variants: unknown {', '.join(sorted(unknown))}")
    variants = {name: v for name, v in every.items() if name in chosen}
    print(f"{rows} rows of 28x28 uint8, 1 member at a time, {a.threads} thread(s), "
          f"median of {repeats}")
    print(f"{'member':<14} {'variant':<11} {'seconds':>8} {'rows/s':>9} {'GFLOPS-eq':>9} "
          f"{'speed-up':>8} {'same class':>10}")
    try:
        for name, (spec, macs) in MEMBERS.items():
            ckpt = os.path.join(work, f"{name}.ckpt")
            if not os.path.exists(ckpt):
                run([cohort, "train", "--store", store, "--table", "train", "--model", spec,
                     "--epochs", "1", "--seed", "1", "--batch-size", "128", "--standardize",
                     "--out", ckpt])
            seconds = {variant: [] for variant in variants}
            for rep in range(repeats):
                order = list(variants) if rep % 2 == 0 else list(reversed(variants))
                for variant in order:
                    worker, precision = variants[variant]
                    e = worker.predict({
                        "op": "predict", "id": f"{name}-{variant}-{rep}", "store": store,
                        "generation": generation, "table": "train", "checkpoint": ckpt,
                        "out": os.path.join(work, f"{name}-{variant}.npy"),
                        "precision": precision})
                    seconds[variant].append(e["seconds"])
            reference = np.load(os.path.join(work, f"{name}-fp32-blas.npy")).argmax(1)
            base = statistics.median(seconds["fp32-blas"])
            for variant in variants:
                same = float((np.load(os.path.join(work, f"{name}-{variant}.npy")).argmax(1) ==
                              reference).mean())
                s = statistics.median(seconds[variant])
                gflops = f"{2 * rows * macs / s / 1e9:9.1f}" if macs else f"{'-':>9}"
                print(f"{name:<14} {variant:<11} {s:>8.3f} {rows / s:>9.0f} {gflops} "
                      f"{base / s:>7.2f}x {same:>10.4f}")
    finally:
        plain.close()
        blas.close()
        onednn.close()
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
