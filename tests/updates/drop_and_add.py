#!/usr/bin/env python3
"""An update step for tests/update_step_test.py (docs/updates.md): removes the first few train
samples and adds a few new rows (copies of test features, labelled by their id's last digit).

UPDATE_MODE picks what it does: "ok" (default), "unknown-id" (removes an id that is not
live), "empty" (an empty change set), "fail" (exits 3 without writing), "hang" (sleeps past
any timeout). Every start appends a line to UPDATE_RUNS (when set), so a test can count how
often the program ran.
"""
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import cohort_store  # noqa: E402

DROP = 3
ADD = 2


def main():
    out = os.environ["COHORT_CHANGES_DIR"]
    mode = os.environ.get("UPDATE_MODE", "ok")
    runs = os.environ.get("UPDATE_RUNS")
    if runs:
        with open(runs, "a") as f:
            f.write(f"round {os.environ['COHORT_ROUND']} generation "
                    f"{os.environ['COHORT_GENERATION']}\n")
    with open(os.environ["COHORT_PREDICTIONS"]) as f:
        predictions = json.load(f)
    for m in predictions["members"]:
        np.load(m["test"])  # the files are there and readable
    print(f"step {os.environ['COHORT_STEP']} ({os.environ['COHORT_STEP_NAME']}) of round "
          f"{os.environ['COHORT_ROUND']}: {len(predictions['members'])} members", flush=True)
    if mode == "fail":
        sys.exit(3)
    if mode == "hang":
        time.sleep(600)
    if mode == "empty":
        with open(os.path.join(out, "changes.json"), "w") as f:
            f.write("{}")
        return
    store = cohort_store.open(os.environ["COHORT_STORE"],
                              generation=int(os.environ["COHORT_GENERATION"]))
    train, test = store.table("train"), store.table("test")
    drop = np.asarray(train.ids[:DROP], dtype=np.uint64)
    if mode == "unknown-id":
        drop = np.array([999999999], dtype=np.uint64)
    x = np.asarray(test.features[:ADD]).astype(np.uint8)
    y = (np.asarray(test.ids[:ADD]) % 10).astype(np.int64)
    np.save(os.path.join(out, "drop.npy"), drop)
    np.save(os.path.join(out, "add-x.npy"), x)
    np.save(os.path.join(out, "add-y.npy"), y)
    changes = {"remove": [{"table": "train", "ids": "drop.npy"}],
               "add": [{"table": "train", "features": "add-x.npy", "labels": "add-y.npy"}]}
    with open(os.path.join(out, "changes.json"), "w") as f:
        json.dump(changes, f)


if __name__ == "__main__":
    main()
