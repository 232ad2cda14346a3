#!/usr/bin/python3
"""A cohort ensemble member written in Keras (Keras 3 on any backend, or tf.keras).

`cohort run loop.toml` starts this script once per round (docs/outside-members.md) with the
round in $COHORT_SPEC. It fits a small Keras model on the round's training table, reports
every epoch (and, at most twice a second, batches) as `@cohort` progress through
`Round.keras_callback()`, writes softmax probabilities for the pool and the test table, saves
the model, and prints `done` with test metrics.

Settings, from the member's table in loop.toml ([defaults] merged in):

  hidden        dense hidden widths: 256 or [256, 128] (default 256)
  dropout       after each hidden layer (default 0.0)
  epochs        default 5
  batch_size    default 128
  lr            learning rate; else optimizer.learning_rate; else 1e-3
  seed          default 0
  classes       number of classes (default: from the labels)

Keras is not installed on cohort's development machine: this script is compiled by
python/cohort_member_test.py but not run there (see README.md).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import cohort_member  # noqa: E402


def main():
    r = cohort_member.Round.from_env()
    # Keras and TensorFlow print to stdout (progress bars, C++ logs); keep the event channel
    # clean: everything but the events goes to the member's log.
    r.isolate_stdout()

    try:
        import keras
    except ImportError:
        from tensorflow import keras

    cfg = r.config
    seed = int(cfg.get("seed", 0))
    keras.utils.set_random_seed(seed)
    backend = keras.backend.backend() if hasattr(keras.backend, "backend") else "tensorflow"
    if r.device.startswith("cpu"):  # OMP_NUM_THREADS is set too; the backends want it said
        if backend == "tensorflow":
            import tensorflow as tf
            tf.config.threading.set_intra_op_parallelism_threads(r.threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        elif backend == "torch":
            import torch
            torch.set_num_threads(r.threads)
    # On a GPU, CUDA_VISIBLE_DEVICES names the one GPU this member may use: the backend's
    # default device is it.

    x_train, y_train = r.train()
    x_pool, _ = r.pool()
    x_test, y_test = r.test()
    classes = r.classes
    scale = 1 / 255 if x_train.dtype == np.uint8 else 1.0
    print(f"{r.member}: round {r.round} attempt {r.attempt}, {len(x_train)} train / "
          f"{len(x_pool)} pool / {len(x_test)} test, keras {keras.__version__} ({backend}) "
          f"on {r.device}", flush=True)

    lr = float(cfg.get("lr", (cfg.get("optimizer") or {}).get("learning_rate", 1e-3)))
    model_file = os.path.join(r.warm_start_from, "model.keras") if r.warm_start_from else None
    if model_file:
        model = keras.models.load_model(model_file)
        print(f"{r.member}: warm start from {model_file}", flush=True)
    else:
        model = keras.Sequential([keras.Input(shape=x_train.shape[1:]), keras.layers.Flatten(),
                                  keras.layers.Rescaling(scale)])
        hidden = cfg.get("hidden", 256)
        for width in hidden if isinstance(hidden, list) else [hidden]:
            model.add(keras.layers.Dense(int(width), activation="relu"))
            model.add(keras.layers.Dropout(float(cfg.get("dropout", 0.0))))
        model.add(keras.layers.Dense(classes, activation="softmax"))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    model.fit(x_train, y_train, epochs=int(cfg.get("epochs", 5)),
              batch_size=int(cfg.get("batch_size", 128)), shuffle=True, verbose=2,
              callbacks=[r.keras_callback()])

    # The checkpoint path is ours to use: a directory holding model.keras (Keras 3 wants the
    # extension). The next round gets it as warm_start_from when warm_start = true.
    os.makedirs(r.checkpoint, exist_ok=True)
    model.save(os.path.join(r.checkpoint, "model.keras"))

    with r.heartbeat(busy="predict"):  # a large pool can outlast the heartbeat timeout
        pool_probs = model.predict(x_pool, batch_size=1024, verbose=0)
        test_probs = model.predict(x_test, batch_size=1024, verbose=0)
    r.write_predictions(pool_probs, test_probs)

    metrics = {}
    if y_test is not None and len(y_test):
        p = test_probs[np.arange(len(y_test)), y_test]
        metrics = {"test_accuracy": float((test_probs.argmax(1) == y_test).mean()),
                   "test_nll": float(-np.log(np.maximum(p, 1e-12)).mean())}
    r.done(metrics)


if __name__ == "__main__":
    main()
