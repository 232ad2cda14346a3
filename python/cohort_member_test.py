#!/usr/bin/python3
"""Tests of cohort_member.py (the helper for outside-script members) and the example members.

Builds small stores with the real `cohort` binary, writes a round spec and environment the way
`cohort run` does (docs/outside-members.md), runs member scripts in subprocesses and checks
their event lines, prediction files, checkpoints and errors.

    /usr/bin/python3 python/cohort_member_test.py [COHORT_BINARY] [unittest args]

COHORT_BINARY defaults to $COHORT_BIN, else build/src/cli/cohort. Needs numpy; the example
PyTorch member's tests need torch (Debian's python3-torch). Keras cannot be installed here:
the Keras tests check the callback against a stand-in `keras.callbacks.Callback`, the message
without Keras, and that the Keras example compiles; they do not run Keras.
"""

import importlib
import io
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import textwrap
import tomllib
import unittest
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cohort_member  # noqa: E402

PYTHON = "/usr/bin/python3"
COHORT = None
TIMEOUT = 300

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

ROWS = {"train": 40, "pool": 30, "test": 20}
CLASSES = 3


def load_json(path):
    with open(path) as f:
        return json.load(f)


def save_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def cohort(*args):
    proc = subprocess.run([COHORT, *args], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"cohort {' '.join(args)} failed: {proc.stderr}")
    return proc


def build_store(directory):
    """A store with classification tables train/pool/test (8x8 uint8 images, 3 classes, all
    labelled as a hidden_labels run has them) and regression tables rtrain/rpool/rtest, then
    one more generation that moves 5 pool rows into train (a round's acquisition)."""
    store = os.path.join(directory, "store")
    rng = np.random.default_rng(7)
    cohort("data", "init", store)
    for table, n in ROWS.items():
        y = rng.integers(0, CLASSES, size=n).astype(np.int64)
        # Learnable: the class sets the brightness of one quadrant.
        x = rng.integers(0, 60, size=(n, 8, 8)).astype(np.uint8)
        for i, c in enumerate(y):
            x[i, (c // 2) * 4:(c // 2) * 4 + 4, (c % 2) * 4:(c % 2) * 4 + 4] += 150
        np.save(os.path.join(directory, f"{table}.x.npy"), x)
        np.save(os.path.join(directory, f"{table}.y.npy"), y)
        cohort("data", "import", store, "--table", table, "--npy",
               os.path.join(directory, f"{table}.x.npy"), os.path.join(directory, f"{table}.y.npy"))
    for table, n in (("rtrain", 12), ("rpool", 9), ("rtest", 6)):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        y = x[:, :2].sum(axis=1, keepdims=True).astype(np.float32)
        np.save(os.path.join(directory, f"{table}.x.npy"), x)
        np.save(os.path.join(directory, f"{table}.y.npy"), y)
        cohort("data", "import", store, "--table", table, "--npy",
               os.path.join(directory, f"{table}.x.npy"), os.path.join(directory, f"{table}.y.npy"))
    info = json.loads(cohort("data", "info", store, "--json").stdout)
    generation = info["generation"]
    cohort("data", "split", store, "--from", "pool", "--to", "train", "--count", "5", "--seed", "1")
    return store, generation


class MemberCase(unittest.TestCase):
    """Each test gets a scratch directory; the store is built once per class."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix=f"cohort-member-{cls.__name__}-")
        cls.store, cls.generation = build_store(cls.scratch)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def setUp(self):
        self.dir = os.path.join(self.scratch, self.id().split(".")[-1])
        os.makedirs(self.dir)

    def make_round(self, member="m1", config=None, round_=0, attempt=1, warm_start_from=None,
                   tables=("train", "pool", "test"), device="cpu:0", threads=1, changes=None):
        """Writes spec.json into a fresh attempt directory; returns (spec path, environment),
        both as the controller makes them."""
        out_dir = os.path.join(self.dir, "runs", f"round-{round_:04d}", member,
                               f"attempt-{attempt}")
        os.makedirs(out_dir)
        torch_device = "cpu" if device.startswith("cpu") else "cuda:0"
        spec = {
            "version": 1, "store": self.store, "generation": self.generation,
            "tables": dict(zip(("train", "pool", "test"), tables)),
            "member": member, "member_index": 0, "round": round_, "attempt": attempt,
            "device": device, "torch_device": torch_device, "threads": threads,
            "out_dir": out_dir,
            "predictions": {"pool": os.path.join(out_dir, "predictions-pool.npy"),
                            "test": os.path.join(out_dir, "predictions-test.npy")},
            "checkpoint": os.path.join(out_dir, "checkpoint"),
            "warm_start_from": warm_start_from,
            "config": config if config is not None else {"classes": CLASSES},
        }
        path = os.path.join(out_dir, "spec.json")
        save_json(path, {**spec, **(changes or {})})
        env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
        env.update({
            "COHORT_SPEC": path, "COHORT_STORE": self.store,
            "COHORT_GENERATION": str(self.generation),
            "COHORT_TRAIN_TABLE": spec["tables"]["train"],
            "COHORT_POOL_TABLE": spec["tables"]["pool"],
            "COHORT_TEST_TABLE": spec["tables"]["test"],
            "COHORT_MEMBER": member, "COHORT_MEMBER_INDEX": "0", "COHORT_ROUND": str(round_),
            "COHORT_ATTEMPT": str(attempt), "COHORT_DEVICE": device,
            "COHORT_TORCH_DEVICE": torch_device, "COHORT_THREADS": str(threads),
            "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads), "COHORT_OUT_DIR": out_dir,
        })
        if device.startswith("cpu"):
            env["COHORT_CPU_SET"] = "0"
        else:
            env["CUDA_VISIBLE_DEVICES"] = device.split(":")[1]
        return path, env

    def run_script(self, argv, env, cwd=None):
        proc = subprocess.run(argv, env=env, cwd=cwd or self.dir, capture_output=True,
                              text=True, timeout=TIMEOUT)
        events, log = [], []
        for line in proc.stdout.splitlines():
            if line.startswith("@cohort "):
                obj = json.loads(line[len("@cohort "):])  # every event line must parse
                self.assertIsInstance(obj, dict, line)
                self.assertIn("ev", obj, line)
                events.append(obj)
            else:
                log.append(line)
        return proc, events, log

    def write_script(self, body):
        path = os.path.join(self.dir, "member.py")
        with open(path, "w") as f:
            f.write(f"import sys\nsys.path.insert(0, {HERE!r})\n" + textwrap.dedent(body))
        return path


SCRIPT = """
    import json, time
    import numpy as np
    import cohort_member

    r = cohort_member.Round.from_env()
    print("a plain line for the log")
    x, y = r.train()
    xp, yp = r.pool()
    xt, yt = r.test()
    k = r.classes

    def probs(x):
        c = x.reshape(len(x), -1).astype(np.int64).sum(axis=1) % k
        p = np.full((len(x), k), 0.1 / (k - 1))
        p[np.arange(len(x)), c] = 0.9
        return p  # float64: written as float32

    for epoch in (1, 2):
        for step in (1, 2, 3, 4):
            r.progress(epoch, 2, 1.0 / epoch, step=step, steps=4,
                       samples_per_second=float("inf"))
    with r.heartbeat(0.05):
        time.sleep(0.4)
    r.write_predictions(probs(xp), probs(xt))
    r.done({"accuracy": np.float32(0.5), "broken": float("nan")})
    print("RESULT " + json.dumps({
        "rows": [len(x), len(xp), len(xt)], "pool_labels": yp is None, "y": y.tolist(),
        "x_dtype": str(x.dtype), "x_shape": list(x.shape), "config": r.config,
        "torch_device": r.torch_device, "threads": r.threads, "round": r.round,
        "attempt": r.attempt, "member": r.member, "task": r.task, "classes": k,
        "warm": r.warm_start_from}))
"""


class HelperInASubprocess(MemberCase):
    def test_a_member_round_prints_events_and_writes_predictions(self):
        spec_path, env = self.make_round(config={"classes": 3, "epochs": 2, "note": "hi",
                                                 "optimizer": {"name": "adam"}},
                                         round_=1, attempt=2)
        proc, events, log = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stderr, "")
        self.assertIn("a plain line for the log", log)
        result = json.loads(next(l for l in log if l.startswith("RESULT "))[7:])

        # The round's generation, not CURRENT (which moved 5 pool rows into train).
        self.assertEqual(result["rows"], [ROWS["train"], ROWS["pool"], ROWS["test"]])
        self.assertTrue(result["pool_labels"], "pool labels must stay hidden")
        self.assertEqual(result["y"], np.load(os.path.join(self.scratch, "train.y.npy")).tolist())
        self.assertEqual((result["x_dtype"], result["x_shape"]), ("uint8", [40, 8, 8]))
        self.assertEqual(result["config"], {"classes": 3, "epochs": 2, "note": "hi",
                                            "optimizer": {"name": "adam"}})
        self.assertEqual((result["torch_device"], result["threads"], result["round"],
                          result["attempt"], result["member"], result["task"],
                          result["classes"], result["warm"]),
                         ("cpu", 1, 1, 2, "m1", "classification", 3, None))

        kinds = [e["ev"] for e in events]
        progress = [e for e in events if e["ev"] == "progress"]
        # Mid-epoch progress is throttled; each epoch's end is always reported.
        ends = [e for e in progress if e["step"] == e["steps"]]
        self.assertEqual([(e["epoch"], e["epochs"], e["loss"]) for e in ends],
                         [(1, 2, 1.0), (2, 2, 0.5)])
        self.assertLess(len(progress), 8)
        for e in progress:
            self.assertIsNone(e["samples_per_second"])  # inf is not JSON: null
        self.assertGreaterEqual(kinds.count("heartbeat"), 2)
        self.assertEqual(kinds[-1], "done")
        done = events[-1]
        self.assertEqual(done["metrics"], {"accuracy": 0.5, "broken": None})
        self.assertEqual([(e["epoch"], e["train_loss"]) for e in done["epochs"]],
                         [(1, 1.0), (2, 0.5)])
        for e in done["epochs"]:
            self.assertGreaterEqual(e["seconds"], 0)
        # Compact JSON, one event per line.
        for line in proc.stdout.splitlines():
            if line.startswith("@cohort "):
                self.assertNotIn(", ", line)
                self.assertNotIn("NaN", line)

        spec = load_json(spec_path)
        for role in ("pool", "test"):
            arr = np.load(spec["predictions"][role])
            self.assertEqual(arr.dtype, np.float32)
            x = np.load(os.path.join(self.scratch, f"{role}.x.npy"))
            self.assertEqual(arr.shape, (len(x), CLASSES))
            want = np.full((len(x), CLASSES), 0.05, dtype=np.float32)
            want[np.arange(len(x)), x.reshape(len(x), -1).astype(np.int64).sum(1) % CLASSES] = 0.9
            np.testing.assert_allclose(arr, want, rtol=1e-6)
        leftovers = [n for n in os.listdir(spec["out_dir"]) if ".tmp" in n]
        self.assertEqual(leftovers, [])

    def test_missing_environment_is_one_line_and_status_2(self):
        _, env = self.make_round()
        del env["COHORT_SPEC"]
        proc, events, _ = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
        self.assertEqual(proc.returncode, 2)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("COHORT_SPEC is not set", lines[0])
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual([e["ev"] for e in events], ["error"])
        self.assertIn("COHORT_SPEC", events[0]["message"])

    def test_bad_specs_are_one_line_naming_the_field(self):
        cases = [
            ({"generation": None}, '"generation": expected an integer, got null'),
            ({"tables": {"train": "train", "pool": "pool"}}, '"tables.test"'),
            ({"version": 2}, "round spec version 2"),
            ({"threads": True}, '"threads": expected an integer, got true'),
            ({"warm_start_from": 3}, '"warm_start_from"'),
        ]
        for n, (change, mention) in enumerate(cases):
            with self.subTest(change=change):
                spec_path, env = self.make_round(member=f"m{n}", changes=change)
                proc, _, _ = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
                self.assertEqual(proc.returncode, 2)
                self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
                self.assertIn(mention, proc.stderr)
                self.assertIn(spec_path, proc.stderr)
        # A field missing altogether, and a spec that is not JSON.
        spec_path, env = self.make_round(member="gone")
        spec = load_json(spec_path)
        del spec["checkpoint"]
        save_json(spec_path, spec)
        proc, _, _ = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
        self.assertEqual((proc.returncode, proc.stderr.count("\n")), (2, 1), proc.stderr)
        self.assertIn('has no field "checkpoint"', proc.stderr)
        with open(spec_path, "w") as f:
            f.write("{not json")
        proc, _, _ = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
        self.assertEqual((proc.returncode, proc.stderr.count("\n")), (2, 1), proc.stderr)
        self.assertIn("not JSON", proc.stderr)
        env["COHORT_SPEC"] = os.path.join(self.dir, "nowhere.json")
        proc, _, _ = self.run_script([PYTHON, self.write_script(SCRIPT)], env)
        self.assertEqual((proc.returncode, proc.stderr.count("\n")), (2, 1), proc.stderr)
        self.assertIn("nowhere.json: cannot read the round spec", proc.stderr)

    def test_isolate_stdout_keeps_stray_output_off_the_event_channel(self):
        _, env = self.make_round()
        script = self.write_script("""
            import os, cohort_member
            r = cohort_member.Round.from_env()
            r.isolate_stdout()
            print("progress bar 50%", end="", flush=True)   # no newline, as progress bars do
            os.write(1, b"from C\\n")
            r.progress(1, 1, 0.25)
            print("after")
        """)
        proc, events, log = self.run_script([PYTHON, script], env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, '@cohort {"ev":"progress","epoch":1,"epochs":1,'
                                      '"loss":0.25}\n')
        self.assertEqual(proc.stderr, "progress bar 50%from C\nafter\n")


class HelperInProcess(MemberCase):
    def round(self, **kw):
        spec_path, _ = self.make_round(**kw)
        return cohort_member.Round.from_spec(spec_path)

    def test_from_env_without_exit_raises(self):
        with self.assertRaises(cohort_member.RoundError) as cm:
            cohort_member.Round.from_env({}, exit_on_error=False)
        self.assertIn("COHORT_SPEC is not set", str(cm.exception))
        spec_path, env = self.make_round()
        r = cohort_member.Round.from_env(env)
        self.assertEqual((r.store, r.generation, r.out_dir, r.checkpoint),
                         (self.store, self.generation, os.path.dirname(spec_path),
                          os.path.join(os.path.dirname(spec_path), "checkpoint")))

    def test_wrong_predictions_are_refused_and_nothing_is_written(self):
        r = self.round()
        good_pool = np.full((ROWS["pool"], CLASSES), 1 / CLASSES)
        good_test = np.full((ROWS["test"], CLASSES), 1 / CLASSES)
        cases = [
            (good_pool[:-1], good_test, "shape (29, 3), expected (30, 3) for the 30 rows"),
            (good_pool, good_test[:, :2] * 1.5, "shape (20, 2), expected (20, 3)"),
            (good_pool.reshape(-1), good_test, "expected (30, 3)"),
            (good_pool, np.where(np.eye(20, 3) > 0, np.nan, good_test), "non-finite value nan"),
            (good_pool * 4, good_test, "probabilities in [0, 1]"),
            (good_pool * 0.5, good_test, "row 0 sums to 0.5"),
            (good_pool.astype(object), good_test, "dtype object"),
        ]
        for pool, test, mention in cases:
            with self.subTest(mention=mention):
                with self.assertRaises(ValueError) as cm:
                    r.write_predictions(pool, test)
                self.assertIn(mention, str(cm.exception))
                for path in r.prediction_paths.values():
                    self.assertFalse(os.path.exists(path))
        # Without a configured class count, any width that both agree on is fine ...
        r = self.round(member="free", config={})
        with self.assertRaises(ValueError) as cm:
            r.write_predictions(np.full((30, 4), 0.25), good_test)
        self.assertIn("differ past the row count", str(cm.exception))
        r.write_predictions(np.full((30, 4), 0.25), np.full((20, 4), 0.25, dtype=np.float32))
        self.assertEqual(np.load(r.prediction_paths["pool"]).shape, (30, 4))

    def test_regression_predictions_are_mean_and_variance(self):
        r = self.round(tables=("rtrain", "rpool", "rtest"), config={})
        self.assertEqual(r.task, "regression")
        x, y = r.train()
        self.assertEqual((x.dtype, x.shape, y.dtype, y.shape),
                         (np.float32, (12, 4), np.float32, (12, 1)))
        with self.assertRaises(ValueError) as cm:
            r.write_predictions(np.zeros((9, 1)), np.zeros((6, 1)))
        self.assertIn("expected (9, 2, 1)", str(cm.exception))
        bad = np.zeros((9, 2, 1))
        bad[3, 1, 0] = -1
        with self.assertRaises(ValueError) as cm:
            r.write_predictions(bad, np.zeros((6, 2, 1)))
        self.assertIn("negative variance", str(cm.exception))
        mean_var = np.stack([np.arange(9.0), np.ones(9)], axis=1)[:, :, None]
        r.write_predictions(mean_var, np.ones((6, 2, 1)))
        got = np.load(r.prediction_paths["pool"])
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, mean_var.astype(np.float32))

    def test_pool_labels_only_on_request_and_tables_give_ids(self):
        r = self.round()
        self.assertIsNone(r.pool()[1])
        self.assertEqual(r.pool(with_labels=True)[1].shape, (ROWS["pool"],))
        self.assertEqual(len(r.table("pool").ids), ROWS["pool"])
        self.assertEqual(r.classes, CLASSES)
        self.assertEqual(self.round(member="m2", config={}).classes, CLASSES)

    def test_events_format(self):
        line = cohort_member.format_event(
            "done", metrics={"a": np.float64(1.5), "b": float("-inf"), "c": np.int64(3)},
            epochs=[{"epoch": 1, "train_loss": np.float32(0.25)}], skipped=None)
        self.assertEqual(line, '@cohort {"ev":"done","metrics":{"a":1.5,"b":null,"c":3},'
                               '"epochs":[{"epoch":1,"train_loss":0.25}]}\n')

    def test_keras_callback_without_keras_is_a_clear_import_error(self):
        r = self.round()
        with mock.patch.dict(sys.modules, {"keras": None, "keras.callbacks": None,
                                           "tensorflow": None, "tensorflow.keras": None,
                                           "tensorflow.keras.callbacks": None}):
            cohort_member._KERAS_CLASS = None
            with self.assertRaises(ImportError) as cm:
                r.keras_callback()
        msg = str(cm.exception)
        self.assertIn("keras_callback() needs Keras", msg)
        self.assertIn("tensorflow.keras", msg)
        self.assertNotIn("\n", msg)

    def test_keras_callback_reports_progress_against_a_stand_in_callback(self):
        # Keras is not installable here: a stand-in with Keras's Callback interface.
        class Callback:
            def __init__(self):
                self.params = {}

            def set_params(self, params):
                self.params = params

        keras = type(sys)("keras")
        keras.callbacks = type(sys)("keras.callbacks")
        keras.callbacks.Callback = Callback
        lines = []

        class Sink:
            def write(self, s):
                lines.append(s)

            def flush(self):
                pass

        spec_path, _ = self.make_round()
        r = cohort_member.Round(load_json(spec_path), spec_path, stream=Sink())
        with mock.patch.dict(sys.modules, {"keras": keras, "keras.callbacks": keras.callbacks}):
            cohort_member._KERAS_CLASS = None
            cb = r.keras_callback()
        cohort_member._KERAS_CLASS = None
        self.assertIsInstance(cb, Callback)
        cb.set_params({"epochs": 2, "steps": 3, "verbose": 2})
        cb.on_train_begin()
        for epoch in range(2):
            cb.on_epoch_begin(epoch)
            for batch in range(3):
                cb.on_train_batch_end(batch, {"loss": 1.0 / (batch + 1)})
            cb.on_epoch_end(epoch, {"loss": 0.5 / (epoch + 1), "accuracy": 0.75,
                                    "val_loss": np.float32(0.6)})
        with mock.patch("sys.stderr", new=io.StringIO()) as err:
            r.done()
        self.assertIn("done() before write_predictions()", err.getvalue())
        events = [json.loads(l[len("@cohort "):]) for l in lines]
        ends = [e for e in events if e["ev"] == "progress" and "step" not in e]
        self.assertEqual(ends, [
            {"ev": "progress", "epoch": 1, "epochs": 2, "loss": 0.5, "accuracy": 0.75,
             "val_loss": 0.6000000238418579},
            {"ev": "progress", "epoch": 2, "epochs": 2, "loss": 0.25, "accuracy": 0.75,
             "val_loss": 0.6000000238418579}])
        mid = [e for e in events if e["ev"] == "progress" and "step" in e]
        self.assertTrue(mid and all(e["step"] < e["steps"] == 3 for e in mid), mid)
        self.assertEqual([(e["epoch"], e["train_loss"]) for e in events[-1]["epochs"]],
                         [(1, 0.5), (2, 0.25)])


@unittest.skipUnless(HAVE_TORCH, "the PyTorch example needs torch (Debian's python3-torch)")
class PyTorchExample(MemberCase):
    SCRIPT = os.path.join(REPO, "examples", "pytorch-member", "train.py")

    def run_member(self, config, script=None, **kw):
        spec_path, env = self.make_round(config=config, **kw)
        script = script or self.SCRIPT
        proc, events, log = self.run_script([PYTHON, script], env,
                                            cwd=os.path.dirname(script))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return load_json(spec_path), events, log

    def test_trains_a_round_then_warm_starts_the_next(self):
        config = {"classes": 3, "epochs": 3, "batch_size": 8, "hidden": [32], "seed": 1,
                  "optimizer": {"name": "adam", "learning_rate": 0.01}}
        spec, events, log = self.run_member(config)
        self.assertTrue(any("3 classes, mlp on cpu (cpu:0) with 1 threads" in l for l in log),
                        log)
        ends = [e for e in events if e["ev"] == "progress" and e.get("step") == e.get("steps")]
        self.assertEqual([e["epoch"] for e in ends], [1, 2, 3])
        done = events[-1]
        self.assertEqual(done["ev"], "done")
        self.assertEqual(len(done["epochs"]), 3)
        self.assertGreater(done["metrics"]["test_accuracy"], 0.6)  # the quadrant is easy
        for role in ("pool", "test"):
            arr = np.load(spec["predictions"][role])
            self.assertEqual((arr.dtype, arr.shape), (np.float32, (ROWS[role], CLASSES)))
            np.testing.assert_allclose(arr.sum(axis=1), 1, atol=1e-5)
        self.assertTrue(os.path.isfile(spec["checkpoint"]))

        spec2, events2, log2 = self.run_member(dict(config, epochs=1), round_=1,
                                               warm_start_from=spec["checkpoint"])
        self.assertIn(f"m1: warm start from {spec['checkpoint']}", log2)
        # Warm weights start where the last round ended, well below a fresh model's loss.
        first = next(e for e in events2 if e["ev"] == "progress")
        self.assertLess(first["loss"], ends[0]["loss"])
        self.assertTrue(os.path.isfile(spec2["checkpoint"]))

    def test_the_complete_example_in_the_docs_runs(self):
        with open(os.path.join(REPO, "docs", "outside-members.md")) as f:
            doc = f.read()
        start = doc.index("```python", doc.index("## A complete example")) + len("```python\n")
        code = doc[start:doc.index("```", start)]
        script = os.path.join(self.dir, "doc_example.py")
        with open(script, "w") as f:  # the docs' script sits two levels below the repository
            f.write(code.replace("os.path.dirname(os.path.abspath(__file__)), \"..\", \"..\"",
                                 repr(REPO)))
        spec, events, _ = self.run_member({"epochs": 2, "hidden": 16}, script=script)
        self.assertEqual(events[-1]["ev"], "done")
        self.assertEqual(np.load(spec["predictions"]["pool"]).shape, (ROWS["pool"], CLASSES))
        self.run_member({"epochs": 1, "hidden": 16}, script=script, round_=1,
                        warm_start_from=spec["checkpoint"])

    def test_cnn(self):
        spec, events, _ = self.run_member({"arch": "cnn", "channels": [4], "hidden": 8,
                                           "epochs": 1, "batch_size": 16, "standardize": True,
                                           "classes": 3})
        self.assertEqual(events[-1]["ev"], "done")
        self.assertEqual(np.load(spec["predictions"]["test"]).shape, (ROWS["test"], CLASSES))


class ExampleConfigs(unittest.TestCase):
    """What can be checked of the examples without running cohort (and without Keras)."""

    def check_loop(self, directory, outside):
        path = os.path.join(REPO, "examples", directory, "loop.toml")
        with open(path, "rb") as f:
            loop = tomllib.load(f)
        members = loop["member"]
        scripts = [m for m in members if "command" in m]
        native = [m for m in members if "command" not in m]
        self.assertEqual(len(scripts), outside)
        self.assertGreaterEqual(len(native), 2)
        for m in scripts:
            argv = m["command"]
            self.assertIsInstance(argv, list)
            self.assertNotIn("model", m)
            script = os.path.join(os.path.dirname(path), argv[1])
            self.assertTrue(os.path.isfile(script), script)
            py_compile.compile(script, doraise=True, cfile=os.path.join(
                tempfile.mkdtemp(prefix="cohort-pyc-"), "x.pyc"))
        for m in native:
            self.assertIn("model", {**loop.get("defaults", {}), **m})
        self.assertEqual(loop["store"]["source"], "../fashion-mnist/store")

    def test_pytorch_loop(self):
        self.check_loop("pytorch-member", outside=2)

    def test_keras_loop_and_script_compile(self):
        # Keras is not installed here: the script is compiled, not run.
        self.check_loop("keras-member", outside=1)
        if importlib.util.find_spec("keras") is None:
            print("\n  note: keras is not installed; examples/keras-member/train.py was "
                  "compiled, not run", file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and not args[0].startswith("-") and os.path.isfile(args[0]):
        COHORT = os.path.abspath(args.pop(0))
    else:
        COHORT = os.environ.get("COHORT_BIN") or os.path.join(REPO, "build", "src", "cli",
                                                              "cohort")
    if not os.access(COHORT, os.X_OK):
        sys.exit(f"cohort_member_test: no cohort binary at {COHORT} (build it with "
                 f"scripts/bootstrap, or pass its path / set COHORT_BIN)")
    unittest.main(argv=[sys.argv[0], "-v"] + args)
