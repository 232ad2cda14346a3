"""The benchmarks' shared parts: running cohort and failing with one line (every bench/*.py),
and the Fashion-MNIST example's loop config (examples/fashion-mnist/loop.toml) and store,
varied for loop_bench.py and quality.py."""
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "fashion-mnist", "loop.toml")
# Debian's dataset-fashion-mnist; COHORT_FASHION_MNIST names another directory with the four
# .gz IDX files (a GPU machine without Debian's packages: bench/gpu_check.sh --data).
FMNIST = os.environ.get("COHORT_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"


class BenchError(Exception):
    """A step failed; the message is one line."""


def bench_main(prog, main):
    """Runs a benchmark's main(): its return value is the exit status; a BenchError ends the
    program with `prog: error: message` on stderr and status 1."""
    try:
        status = main()
    except BenchError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        status = 1
    sys.exit(status)


def executable(path):
    """The absolute path of a built binary (`cohort`, `cohort-member`); a BenchError if it is
    missing."""
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        raise BenchError(f"{path}: not an executable (build first, or pass --cohort)")
    return path


def run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise BenchError(f"{' '.join(argv[:3])} ... exited {proc.returncode}: {tail}")
    return proc


def build_store(cohort, path, train, pool, test, reuse=False):
    """Fashion-MNIST: `train` labelled images, `pool` more split off them (seed 1), `test`
    test images. With pool = 0 a copy of the test images stands in as the pool table (the
    loop names one even when nothing is acquired)."""
    if reuse and os.path.exists(os.path.join(path, "CURRENT")):
        return
    shutil.rmtree(path, ignore_errors=True)
    images = (f"{FMNIST}/train-images-idx3-ubyte.gz", f"{FMNIST}/train-labels-idx1-ubyte.gz")
    tests = (f"{FMNIST}/t10k-images-idx3-ubyte.gz", f"{FMNIST}/t10k-labels-idx1-ubyte.gz")
    run([cohort, "data", "init", path])
    run([cohort, "data", "import", path, "--table", "train", "--limit", str(train + pool),
         "--idx", *images])
    run([cohort, "data", "import", path, "--table", "test", "--limit", str(test), "--idx", *tests])
    if pool > 0:
        run([cohort, "data", "split", path, "--from", "train", "--to", "pool", "--count",
             str(pool), "--seed", "1"])
    else:
        run([cohort, "data", "import", path, "--table", "pool", "--limit", str(test), "--idx",
             *tests])


def config_text(name, store, rounds, strategy=None, seed=None, epochs=None, members=None,
                k=None, defaults=None, base=EXAMPLE):
    """The example config (or another one laid out like it, `base`) with another name, store
    and round count; optionally another strategy, seeds (acquisition and member seeds shifted
    by 100 * seed), epochs, the first `members` members only, k, and more [defaults] settings
    (a dict of TOML values)."""
    with open(base) as f:
        text = f.read()

    def sub(pattern, repl):
        nonlocal text
        text = re.sub(pattern, repl, text, count=1, flags=re.M)

    sub(r'^name = ".*"', f'name = "{name}"')
    sub(r'^source = ".*"', f'source = "{store}"')
    sub(r"^max_rounds = \d+", f"max_rounds = {rounds}")
    if strategy:
        sub(r'^strategy = "\w+"', f'strategy = "{strategy}"')
    if seed is not None:
        text = re.sub(r"^seed = (\d+)", lambda m: f"seed = {int(m.group(1)) + 100 * seed}",
                      text, flags=re.M)
    if epochs is not None:
        sub(r"^epochs = \d+", f"epochs = {epochs}")
    if k is not None:
        sub(r"^batch_size = 1000", f"batch_size = {k}")
    if defaults:
        extra = "".join(f"{key} = {value}\n" for key, value in defaults.items())
        sub(r"^\[defaults\]\n", lambda m: m.group(0) + extra)
    if members is not None:
        parts = text.split("[[member]]")
        tail = parts[-1][parts[-1].index("[acquisition]"):]
        kept = parts[1:members + 1]
        kept[-1] = kept[-1].split("[acquisition]")[0]
        text = parts[0] + "".join("[[member]]" + p for p in kept) + tail
        sub(r"^min_members = \d+", f"min_members = {members}")
    return text
