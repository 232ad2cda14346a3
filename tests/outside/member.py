#!/usr/bin/python3
"""A numpy-only outside member for tests/outside_member_test.py: a nearest-centroid classifier
with softmax over negative distances, plus misbehaviours chosen by its config's `behaviour`:

  ok              train, print progress and done, write predictions
  crash-first     exit 3 on attempt 1, behave on the next
  hang            keep printing lines but never finish (the wall-clock limit must end it)
  garbage         print junk, a broken @cohort line, an unknown event and a `done` nested
                  300,000 deep, then behave
  no-predictions  exit 0 without writing anything
  env             write the COHORT_*, CUDA and thread variables to out_dir/env.json, print a
                  `hello` naming its host and CUDA_VISIBLE_DEVICES (journalled), sleep
                  `sleep_s` (so members overlap), behave
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402

import cohort_member  # noqa: E402


def main():
    r = cohort_member.Round.from_env()
    behaviour = r.config.get("behaviour", "ok")
    if behaviour == "crash-first" and r.attempt == 1:
        print("crashing on purpose\n", file=sys.stderr)
        sys.exit(3)
    if behaviour == "hang":
        while True:
            print("still thinking", flush=True)
            time.sleep(0.2)
    if behaviour == "no-predictions":
        return
    if behaviour == "garbage":
        print("some library chatter")
        print("@cohort {not json")
        print('@cohort {"ev": "mystery", "x": 1}')
        print("@cohort [1, 2, 3]", flush=True)
        # A `done` nested 300,000 deep once overflowed the controller's stack (issue 14).
        deep = 300000
        print('@cohort {"ev":"done","metrics":' + '{"a":' * deep + "1" + "}" * (deep + 1),
              flush=True)
    if behaviour == "env":
        keys = [k for k in os.environ if k.startswith(("COHORT_", "CUDA_", "OMP_", "MKL_",
                                                       "OPENBLAS_"))]
        with open(os.path.join(r.out_dir, "env.json"), "w") as f:
            json.dump({k: os.environ[k] for k in keys}, f)
        hello = {"ev": "hello", "hostname": os.uname().nodename,
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
        print("@cohort " + json.dumps(hello), flush=True)
        time.sleep(float(r.config.get("sleep_s", 0)))

    x, y = r.train()
    x = x.reshape(len(x), -1).astype(np.float32) / 255.0
    classes = int(r.config.get("classes", 10))
    centroids = np.zeros((classes, x.shape[1]), np.float32)
    for c in range(classes):
        if np.any(y == c):
            centroids[c] = x[y == c].mean(axis=0)
    r.progress(1, 1, loss=0.5)

    def predict(features):
        f = features.reshape(len(features), -1).astype(np.float32) / 255.0
        d = ((f[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        logits = -d * float(r.config.get("temperature", 0.1))
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)

    pool, _ = r.pool()
    test, _ = r.test()
    train_x, _ = r.train()
    r.write_predictions(predict(np.asarray(pool)), predict(np.asarray(test)),
                        train=predict(np.asarray(train_x)) if r.predicts_train else None)
    r.done(metrics={"centroids": classes}, epochs=[{"epoch": 1, "train_loss": 0.5, "seconds": 0.1}])


if __name__ == "__main__":
    main()
