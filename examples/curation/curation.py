#!/usr/bin/env python3
"""Curation with cohort: find train labels that were flipped on purpose (examples/curation/).

One script, three roles:
  curation.py make COHORT STORE [--train N] [--flip F] [--seed S]
        builds the source store from Debian's Fashion-MNIST: `train` (N images, F of them with
        their label changed to another class at random), `pool` (a few unlabelled images: this
        loop acquires nothing) and `test` (2,000 images); the true labels and the flipped ids go
        to STORE.truth.npz
  curation.py label
        the loop's command oracle: answers with the true labels of the ids it is asked about
        (COHORT_ORACLE_IDS), from store.truth.npz in its working directory (the config's) or
        $CURATION_TRUTH (a person checking the images, in real use)
  curation.py score RUN_DIR
        precision and recall, round by round, of the flipped labels the relabel_or_drop step
        found (relabelled or dropped), from the run's store history and its oracle files;
        run from the config's directory (or with $CURATION_TRUTH)
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import cohort_store  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = 10


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def truth_path(store):
    return f"{store}.truth.npz"


def truth_file():
    """The truth of the store beside the loop's config (the oracle runs in its directory)."""
    return os.environ.get("CURATION_TRUTH") or truth_path(os.path.abspath("store"))


def make(cohort, store, train, flip, seed):
    rng = np.random.default_rng(seed)
    x = read_idx(f"{FMNIST}/train-images-idx3-ubyte.gz")
    y = read_idx(f"{FMNIST}/train-labels-idx1-ubyte.gz").astype(np.int64)
    order = rng.permutation(len(x))
    train_rows, pool_rows = order[:train], order[train:train + 200]
    true = y[train_rows]
    given = true.copy()
    flipped_rows = rng.choice(train, size=flip, replace=False)
    # Another class, uniformly: the label is wrong for sure.
    given[flipped_rows] = (true[flipped_rows] + rng.integers(1, CLASSES, size=flip)) % CLASSES
    tx = read_idx(f"{FMNIST}/t10k-images-idx3-ubyte.gz")[:2000]
    ty = read_idx(f"{FMNIST}/t10k-labels-idx1-ubyte.gz")[:2000].astype(np.int64)
    files = {"train": (x[train_rows], given), "pool": (x[pool_rows], None), "test": (tx, ty)}
    subprocess.run([cohort, "data", "init", store], check=True, stdout=subprocess.DEVNULL)
    for table, (features, labels) in files.items():
        paths = [f"{store}.{table}-x.npy"]
        np.save(paths[0], features)
        if labels is not None:
            paths.append(f"{store}.{table}-y.npy")
            np.save(paths[1], labels)
        subprocess.run([cohort, "data", "import", store, "--table", table, "--classes",
                        str(CLASSES), "--npy", *paths], check=True, stdout=subprocess.DEVNULL)
        for p in paths:
            os.remove(p)
    ids = cohort_store.open(store).table("train").ids
    np.savez(truth_path(store), ids=ids, true=true, flipped=ids[flipped_rows])
    print(f"curation: {store}: {train} train images, {flip} with a flipped label "
          f"(ids in {truth_path(store)})")


def label():
    truth = np.load(truth_file())
    true_of = dict(zip(truth["ids"].tolist(), truth["true"].tolist()))
    ids = np.load(os.environ["COHORT_ORACLE_IDS"])
    np.save(os.environ["COHORT_ORACLE_LABELS"],
            np.array([true_of[int(i)] for i in ids], dtype=np.int64))


def found_by_round(run_dir):
    """{round: ids the relabel_or_drop step flagged}: asked of the oracle, or dropped."""
    found = {}
    for ids_file in sorted(glob.glob(f"{run_dir}/updates/round-*/step-*/oracle/ids.npy")):
        rnd = int(ids_file.split("round-")[1].split("/")[0])
        found.setdefault(rnd, set()).update(np.load(ids_file).tolist())
    store = cohort_store.open(os.path.join(run_dir, "store"))
    gens = store.generations()
    for before, after in zip(gens, gens[1:]):
        a = cohort_store.open(store.path, generation=after)
        if "(relabel_or_drop" not in a.note:
            continue
        rnd = int(a.note.split(" round ")[1].split(":")[0])
        b = cohort_store.open(store.path, generation=before)
        dropped = set(b.table("train").ids.tolist()) - set(a.table("train").ids.tolist())
        found.setdefault(rnd, set()).update(dropped)
    return found


def score(run_dir, as_json):
    truth = np.load(truth_file())
    flipped = set(truth["flipped"].tolist())
    rows, seen = [], set()
    for rnd, ids in sorted(found_by_round(run_dir).items()):
        seen |= ids
        hits = len(seen & flipped)
        rows.append({"round": rnd, "flagged": len(ids), "flagged_total": len(seen),
                     "precision": hits / len(seen) if seen else 0.0,
                     "recall": hits / len(flipped)})
    if as_json:
        print(json.dumps(rows))
        return
    print(f"{len(flipped)} flipped labels")
    print("round  flagged  flagged so far  precision  recall")
    for r in rows:
        print(f"{r['round']:5d}  {r['flagged']:7d}  {r['flagged_total']:14d}  "
              f"{r['precision']:9.3f}  {r['recall']:6.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    m = sub.add_parser("make")
    m.add_argument("cohort")
    m.add_argument("store")
    m.add_argument("--train", type=int, default=4000)
    m.add_argument("--flip", type=int, default=400)
    m.add_argument("--seed", type=int, default=1)
    sub.add_parser("label")
    s = sub.add_parser("score")
    s.add_argument("run_dir")
    s.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.role == "make":
        make(args.cohort, args.store, args.train, args.flip, args.seed)
    elif args.role == "label":
        label()
    else:
        score(args.run_dir, args.json)


if __name__ == "__main__":
    main()
