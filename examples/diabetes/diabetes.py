#!/usr/bin/env python3
"""Active learning on a small real regression set: scikit-learn's bundled diabetes data (442
patients, 10 features, a disease-progression score one year later), Debian's python3-sklearn.

  diabetes.py make COHORT STORE [--seed S]
        builds the source store: `train` (20 labelled patients), `pool` (322, labels hidden
        until acquired: the hidden_labels oracle) and `test` (100), split at random by the
        seed; the members standardise the features (`standardize = true`); the target is
        divided by its standard deviation over all 442 patients, so an RMSE of 1 is as good as
        predicting the mean
"""
import argparse
import os
import subprocess
import sys

import numpy as np


def make(cohort, store, seed):
    try:
        from sklearn.datasets import load_diabetes
    except ImportError:
        sys.exit("diabetes.py: needs python3-sklearn (apt-get install python3-sklearn)")
    data = load_diabetes()
    x = data.data.astype(np.float32)
    y = (data.target / data.target.std()).astype(np.float32)[:, None]
    order = np.random.default_rng(seed).permutation(len(x))
    parts = {"train": order[:20], "pool": order[20:342], "test": order[342:]}
    subprocess.run([cohort, "data", "init", store], check=True, stdout=subprocess.DEVNULL)
    for table, rows in parts.items():
        xp, yp = f"{store}.{table}-x.npy", f"{store}.{table}-y.npy"
        np.save(xp, x[rows])
        np.save(yp, y[rows])
        subprocess.run([cohort, "data", "import", store, "--table", table, "--npy", xp, yp,
                        "--label-type", "vector", "--note", f"diabetes {table}"], check=True,
                       stdout=subprocess.DEVNULL)
        os.remove(xp)
        os.remove(yp)
    print(f"diabetes: {store}: train 20, pool 322, test 100 (split seed {seed})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    m = sub.add_parser("make")
    m.add_argument("cohort")
    m.add_argument("store")
    m.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    make(args.cohort, args.store, args.seed)


if __name__ == "__main__":
    main()
