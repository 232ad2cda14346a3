#!/usr/bin/python3
"""A command oracle for tests/loop_test.py: labels each sample `id % 10`, or misbehaves as
$ORACLE_MODE says (`fail`: exit 1; `short`: one label too few; `range`: label 99 for the
first two samples; `hang`: sleeps forever)."""
import os
import sys
import time

import numpy as np

ids = np.load(os.environ["COHORT_ORACLE_IDS"])
features = np.load(os.environ["COHORT_ORACLE_FEATURES"])
assert len(features) == len(ids), (features.shape, ids.shape)
mode = os.environ.get("ORACLE_MODE", "ok")
print(f"labelling {len(ids)} samples of round {os.environ['COHORT_ROUND']}", file=sys.stderr)
if mode == "fail":
    sys.exit(1)
if mode == "hang":
    while True:
        time.sleep(1)
labels = (ids % 10).astype(np.int64)
if mode == "short":
    labels = labels[:-1]
if mode == "range":
    labels[:2] = 99
np.save(os.environ["COHORT_ORACLE_LABELS"], labels)
