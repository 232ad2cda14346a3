#!/usr/bin/python3
"""Training benchmark: `cohort train` against the plain-PyTorch baseline (bench/torch_baseline.py).

One command; prints tables (docs/benchmarks.md, "Training"). It never asserts timings.

1. Throughput. A store of the 60,000 Fashion-MNIST training images (built here with
   `cohort data init` and `cohort data import --idx`, or reused with --store). For each
   setting (model x batch size x threads) it runs `cohort train --json` and the baseline on
   the same table with the same settings, alternating which goes first, --repeats times
   (rounds over all settings, so drifting machine noise spreads over every setting), and
   prints medians: samples/s of the training loop (start-up, loading and the checkpoint
   excluded), their ratio, and the per-step time split (data / forward / backward /
   optimizer / other, ms per step) of each.
2. Start-up. A 64-row table (its own small store), one epoch, batch 64 = one trained batch,
   1 thread, median of --startup-repeats, after one unmeasured warm-up run of each (a warm
   page cache). The parent takes time.monotonic() just before spawning and timestamps the
   child's output lines: `first batch` is spawn -> the line the child prints right after its
   first (only) step (cohort train: its "epoch 1/1" progress line; cohort worker: the first
   "progress" event of a train command written on its stdin at spawn; python: "first-batch");
   `finished` is spawn -> process exit (cohort train, python: checkpoint written) or, for the
   worker, spawn -> its "done" event (checkpoint written). Reference rows, spawn -> exit:
   `cohort --version` (the torch-free front end, which execs `cohort-member` for train and
   worker), `cohort-member --version` (loads libtorch: the floor for cohort's start-up) and
   `python3 -c "import torch"` (the floor for Python's).

--quick: a 2,000-row table, one setting, one repeat (the ctest smoke test).

Run with Debian's interpreter (numpy; torch for the baseline): /usr/bin/python3.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import cohort_store  # noqa: E402

BASELINE = os.path.join(HERE, "torch_baseline.py")
PYTHON = sys.executable or "/usr/bin/python3"

MODELS = {
    "mlp256": "dense 256 relu, dropout 0.1, dense 10",
    "mlp512-256": "dense 512 relu, dense 256 relu, dense 10",
}
PARTS = ("data", "forward", "backward", "optimizer", "other")


class BenchError(Exception):
    pass


def fail(message: str) -> None:
    print(f"train_bench: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def busy_cpu_seconds() -> float:
    """CPU-seconds all CPUs have spent busy since boot (user, nice, system, irq, softirq and
    steal: time the hypervisor gave to someone else), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return float("nan")
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    guest = sum(ticks[8:10]) if len(ticks) > 9 else 0  # already counted in user and nice
    return (sum(ticks) - idle - guest) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


LAST_BACKGROUND = [float("nan")]  # CPUs busy with other work during the last run()


def run(cmd: list[str], what: str, timeout: float = 600) -> str:
    """Runs `cmd` to completion; notes in LAST_BACKGROUND how many CPUs, on average, were busy
    with something other than it while it ran (other processes, or steal)."""
    busy0, child0, t0 = busy_cpu_seconds(), children_cpu_seconds(), time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    wall = time.monotonic() - t0
    other = (busy_cpu_seconds() - busy0) - (children_cpu_seconds() - child0)
    LAST_BACKGROUND[0] = max(0.0, other / wall) if wall > 0 else float("nan")
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-10:])
        raise BenchError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    return p.stdout


def parse_json(text: str, what: str) -> dict:
    """The JSON object a child printed (cohort: indented; baseline: one line)."""
    start = text.find("{")
    if start < 0:
        raise BenchError(f"{what} printed no JSON: {text.strip()[:300]}")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError:
        # Anything else printed after the object: take the last line that is a whole object.
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    pass
    raise BenchError(f"{what} printed unparsable JSON: {text.strip()[:300]}")


# ---------------------------------------------------------------------------------------------
# Data


def read_idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def idx_files(data_dir: str) -> tuple[str, str]:
    for suffix in ("", ".gz"):
        images = os.path.join(data_dir, "train-images-idx3-ubyte" + suffix)
        labels = os.path.join(data_dir, "train-labels-idx1-ubyte" + suffix)
        if os.path.exists(images) and os.path.exists(labels):
            return images, labels
    raise BenchError(f"no Fashion-MNIST training IDX files (train-images-idx3-ubyte[.gz], "
                     f"train-labels-idx1-ubyte[.gz]) in {data_dir}; install the "
                     "dataset-fashion-mnist package or pass --data DIR")


def make_store(cohort: str, path: str, data_dir: str, rows: int | None) -> None:
    """A fresh store at `path` with table `train`: all IDX rows, or the first `rows`."""
    if os.path.exists(path):
        shutil.rmtree(path)
    images, labels = idx_files(data_dir)
    run([cohort, "data", "init", path], "cohort data init")
    if rows is None:
        run([cohort, "data", "import", path, "--table", "train", "--idx", images, labels],
            "cohort data import")
        return
    x, y = read_idx(images)[:rows], read_idx(labels)[:rows].astype(np.int64)
    xp, yp = path + ".x.npy", path + ".y.npy"
    np.save(xp, np.ascontiguousarray(x))
    np.save(yp, y)
    try:
        run([cohort, "data", "import", path, "--table", "train", "--npy", xp, yp],
            "cohort data import")
    finally:
        os.remove(xp)
        os.remove(yp)


# ---------------------------------------------------------------------------------------------
# Throughput


def per_step_ms(result: dict, batch: int) -> dict[str, float]:
    steps = max(1, -(-int(result["samples"]) // batch))
    st = result["step_times"]
    ms = {k: 1e3 * float(st[k]) / steps for k in PARTS[:-1]}
    ms["other"] = max(0.0, 1e3 * float(result["seconds"]) / steps - sum(ms.values()))
    return ms


def run_cohort(a, store: str, model: str, batch: int, threads: int, epochs: int,
               ckpt: str) -> dict:
    cmd = [a.cohort, "train", "--store", store, "--table", "train", "--model", model,
           "--epochs", str(epochs), "--seed", str(a.seed), "--batch-size", str(batch),
           "--threads", str(threads), "--out", ckpt, "--json"]
    return parse_json(run(cmd, "cohort train"), "cohort train")


def run_python(a, store: str, model: str, batch: int, threads: int, epochs: int) -> dict:
    cmd = [PYTHON, BASELINE, "--store", store, "--table", "train", "--model", model,
           "--epochs", str(epochs), "--seed", str(a.seed), "--batch-size", str(batch),
           "--threads", str(threads)]
    return parse_json(run(cmd, "torch_baseline.py"), "torch_baseline.py")


def krange(values: list[float]) -> str:
    return f"{min(values) / 1e3:.1f}-{max(values) / 1e3:.1f}k"


def throughput(a, store: str, scratch: str, settings: list[tuple[str, int, int]]) -> None:
    results: dict[tuple, dict[str, list[dict]]] = {s: {"cohort": [], "python": []}
                                                   for s in settings}
    ckpt = os.path.join(scratch, "bench.ckpt")
    for rep in range(a.repeats):
        for i, (name, batch, threads) in enumerate(settings):
            order = ("cohort", "python") if (rep + i) % 2 == 0 else ("python", "cohort")
            for who in order:
                if who == "cohort":
                    r = run_cohort(a, store, MODELS[name], batch, threads, a.epochs, ckpt)
                else:
                    r = run_python(a, store, MODELS[name], batch, threads, a.epochs)
                r["background_cpus"] = LAST_BACKGROUND[0]
                results[(name, batch, threads)][who].append(r)
            if a.verbose:
                c = results[(name, batch, threads)]["cohort"][-1]["samples_per_second"]
                p = results[(name, batch, threads)]["python"][-1]["samples_per_second"]
                bg = [results[(name, batch, threads)][w][-1]["background_cpus"]
                      for w in ("cohort", "python")]
                print(f"  round {rep + 1} {name} b{batch} t{threads}: cohort {c:.0f}/s, "
                      f"python {p:.0f}/s (bg_cpus {bg[0]:.2f}, {bg[1]:.2f})", file=sys.stderr,
                      flush=True)

    med = statistics.median
    print(f"\nTraining throughput: samples/s of the training loop (start-up, loading and the "
          f"checkpoint excluded),\n{a.epochs} epoch(s) over {a.rows_label} rows, Adam 1e-3, "
          f"median of {a.repeats} interleaved run(s); ratio = cohort / python")
    print(f"{'model':<11} {'batch':>5} {'threads':>7} {'cohort_sps':>10} {'python_sps':>10} "
          f"{'ratio':>6} {'cohort_range':>14} {'python_range':>14} {'bg_cpus':>7}")
    for (name, batch, threads), r in results.items():
        cs = [x["samples_per_second"] for x in r["cohort"]]
        ps = [x["samples_per_second"] for x in r["python"]]
        bg = max(x["background_cpus"] for x in r["cohort"] + r["python"])
        print(f"{name:<11} {batch:>5} {threads:>7} {med(cs):>10.0f} {med(ps):>10.0f} "
              f"{med(cs) / med(ps):>6.2f} {krange(cs):>14} {krange(ps):>14} {bg:>7.2f}")
    print("range: min-max over the runs, thousands of samples/s. bg_cpus: the most CPUs busy "
          "with other work\n(other processes, hypervisor steal) during any run of the row, "
          f"averaged over that run; {os.cpu_count()} CPUs.")

    print(f"\nPer-step time split, ms per step (median of {a.repeats}); other = loop wall time "
          "outside the timed parts\n(epoch start, shuffling). Both scale by 1/255 in their data "
          "step.")
    head = " ".join(f"{p[:4]:>6}" for p in PARTS)
    print(f"{'model':<11} {'batch':>5} {'threads':>7} {'who':>6} {head} {'total':>7}")
    for (name, batch, threads), r in results.items():
        for who in ("cohort", "python"):
            splits = [per_step_ms(x, batch) for x in r[who]]
            m = {p: med([s[p] for s in splits]) for p in PARTS}
            cells = " ".join(f"{m[p]:>6.3f}" for p in PARTS)
            print(f"{name:<11} {batch:>5} {threads:>7} {who:>6} {cells} "
                  f"{sum(m.values()):>7.3f}")
    print("models: " + "; ".join(f"{k} = \"{v}\"" for k, v in MODELS.items()))


# ---------------------------------------------------------------------------------------------
# Start-up


def timed_lines(cmd: list[str], marker, stdin_text: str | None = None,
                done_marker=None, timeout: float = 120) -> tuple[float | None, float, float | None]:
    """Spawns `cmd`; returns (spawn -> first line matching `marker`, spawn -> exit,
    spawn -> first line matching `done_marker`), in seconds, measured by this process."""
    busy0, child0 = busy_cpu_seconds(), children_cpu_seconds()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_text is not None else
                         subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         bufsize=0)
    if stdin_text is not None:
        p.stdin.write(stdin_text.encode())
        p.stdin.flush()
    first = done = None
    out = []
    deadline = t0 + timeout
    while True:
        line = p.stdout.readline()
        now = time.monotonic()
        if not line:
            break
        text = line.decode(errors="replace")
        out.append(text)
        if first is None and marker is not None and marker(text):
            first = now - t0
        if done is None and done_marker is not None and done_marker(text):
            done = now - t0
            if stdin_text is not None:
                p.stdin.close()  # the worker exits when stdin closes
        if now > deadline:
            p.kill()
            raise BenchError(f"{' '.join(cmd)} took longer than {timeout} s")
    err = p.stderr.read().decode(errors="replace")
    rc = p.wait()
    exited = time.monotonic() - t0
    other = (busy_cpu_seconds() - busy0) - (children_cpu_seconds() - child0)
    LAST_BACKGROUND[0] = max(0.0, other / exited)
    if rc != 0:
        raise BenchError(f"{' '.join(cmd)} exited {rc}:\n" + "\n".join(err.splitlines()[-10:]))
    if marker is not None and first is None:
        raise BenchError(f"{' '.join(cmd)} never printed its first-batch line; output:\n"
                         + "".join(out)[-800:])
    return first, exited, done


def worker_event(ev: str):
    def match(line: str) -> bool:
        if not line.startswith("@cohort "):
            return False
        try:
            return json.loads(line[len("@cohort "):]).get("ev") == ev
        except json.JSONDecodeError:
            return False
    return match


def worker_available(cohort: str) -> bool:
    p = subprocess.run([cohort, "worker", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    return p.returncode == 0


def startup(a, scratch: str) -> None:
    tiny = os.path.join(scratch, "tiny-store")
    make_store(a.cohort, tiny, a.data, 64)
    generation = cohort_store.open(tiny).generation
    model = MODELS["mlp256"]
    ckpt = os.path.join(scratch, "startup.ckpt")
    pyckpt = os.path.join(scratch, "startup.pt")

    train_cmd = [a.cohort, "train", "--store", tiny, "--table", "train", "--model", model,
                 "--epochs", "1", "--seed", str(a.seed), "--batch-size", "64", "--threads",
                 "1", "--out", ckpt]
    py_cmd = [PYTHON, BASELINE, "--store", tiny, "--table", "train", "--model", model,
              "--epochs", "1", "--seed", str(a.seed), "--batch-size", "64", "--threads", "1",
              "--out", pyckpt, "--first-batch"]
    command = json.dumps({"op": "train", "id": 1, "store": tiny, "generation": generation,
                          "table": "train", "checkpoint": ckpt,
                          "config": {"model": model, "epochs": 1, "batch_size": 64,
                                     "seed": a.seed}}) + "\n"
    rows = [
        ("cohort train", lambda: timed_lines(
            train_cmd, lambda s: s.lstrip().startswith("epoch") and "1/1" in s)),
        ("python torch_baseline.py", lambda: timed_lines(
            py_cmd, lambda s: s.startswith("first-batch"))),
    ]
    if worker_available(a.cohort):
        def worker():
            first, exited, done = timed_lines(
                [a.cohort, "worker", "--threads", "1"], worker_event("progress"),
                stdin_text=command, done_marker=worker_event("done"))
            if done is None:
                raise BenchError("cohort worker never sent a done event")
            return first, done, None
        rows.insert(1, ("cohort worker + train cmd", worker))
    else:
        print("\n(cohort worker not available in this build: its row is left out)")
    refs = [("cohort --version", lambda: timed_lines([a.cohort, "--version"], None))]
    member = os.path.join(os.path.dirname(a.cohort), "cohort-member")
    if os.access(member, os.X_OK):
        # `cohort` execs its sibling `cohort-member` (linked with libtorch) for train, worker.
        refs.append(("cohort-member --version", lambda: timed_lines([member, "--version"], None)))
    refs.append(("python3 -c 'import torch'", lambda: timed_lines(
        [PYTHON, "-c", "import torch"], None)))

    samples: dict[str, list[tuple]] = {name: [] for name, _ in rows + refs}
    background: list[float] = []
    fns = dict(rows + refs)
    for name in fns:  # warm-up, not measured
        fns[name]()
    for rep in range(a.startup_repeats):
        names = list(fns) if rep % 2 == 0 else list(reversed(fns))
        for name in names:
            samples[name].append(fns[name]())
            background.append(LAST_BACKGROUND[0])

    med = statistics.median
    print(f"\nStart-up: spawn -> end of the first trained batch, and spawn -> finished; a 64-row "
          f"table, batch 64,\n1 epoch (one step), 1 thread, \"{model}\"; median of "
          f"{a.startup_repeats} after one warm-up run each; ms")
    print(f"{'runner':<27} {'first_batch_ms':>14} {'finished_ms':>11} {'min_first':>9} "
          f"{'max_first':>9}")
    for name, _ in rows:
        firsts = [s[0] * 1e3 for s in samples[name]]
        fins = [s[1] * 1e3 for s in samples[name]]
        print(f"{name:<27} {med(firsts):>14.0f} {med(fins):>11.0f} {min(firsts):>9.0f} "
              f"{max(firsts):>9.0f}")
    for name, _ in refs:
        fins = [s[1] * 1e3 for s in samples[name]]
        print(f"{name:<27} {'-':>14} {med(fins):>11.0f} {'-':>9} {'-':>9}")
    print("finished: process exit after writing the checkpoint (cohort train, python); the "
          "worker's \"done\" event\n(checkpoint written; the worker keeps running). Measured "
          "by the parent from just before spawn.\nbg_cpus over these runs: median "
          f"{statistics.median(background):.2f}, max {max(background):.2f}")


# ---------------------------------------------------------------------------------------------


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas = "?"
    try:
        blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    except OSError:
        pass
    return (f"machine: {os.cpu_count()} CPUs ({cpu}), {platform.system()} "
            f"{platform.release()}, libblas.so.3 -> {blas}")


def main() -> int:
    p = argparse.ArgumentParser(description="cohort train vs plain PyTorch: throughput, "
                                "per-step split, start-up (docs/benchmarks.md)")
    p.add_argument("--cohort", default=os.path.join(HERE, "..", "build", "src", "cli", "cohort"),
                   help="the cohort binary (default build/src/cli/cohort)")
    p.add_argument("--store", help="reuse this store's table 'train' instead of building one")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="directory with the Fashion-MNIST IDX files")
    p.add_argument("--scratch", help="work directory (default: a fresh one under $TMPDIR, "
                   "removed at the end)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--startup-repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true",
                   help="smoke test: a 2,000-row table, one setting, one repeat")
    p.add_argument("--skip-startup", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print each run's figures to stderr")
    a = p.parse_args()
    a.cohort = os.path.abspath(a.cohort)
    if not os.access(a.cohort, os.X_OK):
        fail(f"no cohort binary at {a.cohort} (build it, or pass --cohort PATH)")

    settings = [(m, b, t) for m in MODELS for b in (64, 256) for t in (1, 2)]
    rows = None
    if a.quick:
        settings = [("mlp256", 64, 1)]
        rows = 2000
        a.epochs, a.repeats, a.startup_repeats = 1, 1, 1

    own_scratch = a.scratch is None
    scratch = tempfile.mkdtemp(prefix="train_bench.") if own_scratch else a.scratch
    os.makedirs(scratch, exist_ok=True)
    try:
        print(machine())
        print(f"cohort: {a.cohort}; python: {PYTHON}; baseline: {BASELINE}")
        t = time.monotonic()
        if a.store:
            store = a.store
        else:
            store = os.path.join(scratch, "store")
            make_store(a.cohort, store, a.data, rows)
        n = len(cohort_store.open(store).table("train"))
        a.rows_label = f"{n:,}"
        print(f"store: {store} (table train, {n:,} rows; ready in {time.monotonic() - t:.1f} s)",
              flush=True)
        throughput(a, store, scratch, settings)
        if not a.skip_startup:
            startup(a, scratch)
    except (BenchError, cohort_store.StoreError, subprocess.TimeoutExpired) as e:
        fail(str(e))
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
