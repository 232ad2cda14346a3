#!/usr/bin/env python3
"""End-to-end tests of `cohort predict RUN_DIR` (the ensemble with uncertainty) and `cohort
export` with its numpy loader, on a small real run whose members use every layer kind the
export writes (dense, conv2d with stride and padding, max and average pooling, batch and
layer norm, dropout, and each activation).

The ensemble's numbers are checked against a direct numpy computation from the members' own
test predictions (the files the loop's workers wrote), and the exported ensemble's outputs,
with numpy and with torch, against `cohort predict`'s to 1e-5. The same for a small regression
run (tests/regression_loop_test.py's store and members: gaussian_nll and mse), whose ensemble
predicts a mean and its aleatoric, epistemic and total variance.

Run by ctest as: /usr/bin/python3 tests/ensemble_test.py COHORT_BINARY SCRATCH_DIR
"""
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_test  # noqa: E402
import regression_loop_test  # noqa: E402

COHORT = None
SCRATCH = None
RUN = None
REG_RUN = None  # the regression run

MEMBERS = [
    ("mlp", "dense 32 relu, dense 10", 1),
    ("norms", "dense 24 gelu, batchnorm, dropout 0.2, dense 16 silu, layernorm, dense 10", 2),
    ("cnn", "conv2d 4 3 1 1 elu, batchnorm, maxpool 2, conv2d 6 3 2 0 tanh, avgpool 2, "
            "flatten, dense 12 sigmoid, dense 10", 3),
]


def cohort(*args, check=True):
    return loop_test.cohort(*args, check=check)


def fail_line(proc):
    """The one error line of a failed command."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cohort: error: "), lines[0]
    return lines[0][len("cohort: error: "):]


def finished_members(run_dir, round_, members=MEMBERS):
    db = loop_test.journal(run_dir)
    rows = db.execute("SELECT member, predictions_json, checkpoint FROM attempts WHERE round = ? "
                      "AND status = 'done' ORDER BY id", (round_,)).fetchall()
    db.close()
    order = {m[0]: i for i, m in enumerate(members)}
    rows = sorted(rows, key=lambda r: order[r["member"]])
    return [(r["member"], os.path.join(run_dir, json.loads(r["predictions_json"])["test"]),
             os.path.join(run_dir, r["checkpoint"])) for r in rows]


def numpy_uncertainty(p):
    """From the members' probabilities (M, n, C), written out here independently of cohort."""
    p = p.astype(np.float64)
    mean = p.mean(axis=0)
    logs = np.log(np.clip(mean, 1e-300, None))
    entropy = -(mean * logs).sum(axis=1)
    member_entropy = -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=2)
    predicted = mean.argmax(axis=1)
    return {"probabilities": mean, "predicted": predicted, "entropy": entropy,
            "mutual_information": entropy - member_entropy.mean(axis=0),
            "variance": p.var(axis=0).mean(axis=1),
            "agreement": (p.argmax(axis=2) == predicted[None, :]).mean(axis=0)}


class Predict(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(SCRATCH, "predict")
        shutil.rmtree(cls.dir, ignore_errors=True)
        os.makedirs(cls.dir)
        cls.npz = os.path.join(cls.dir, "test.npz")
        cls.proc = cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test",
                          "-o", cls.npz)
        cls.out = dict(np.load(cls.npz))

    def test_matches_numpy_from_the_members_own_predictions(self):
        members = finished_members(RUN, 1)
        self.assertEqual([m[0] for m in members], ["mlp", "norms", "cnn"])
        own = np.stack([np.load(path) for _, path, _ in members])
        got = self.out
        self.assertEqual(got["member_probabilities"].shape, own.shape)
        np.testing.assert_allclose(got["member_probabilities"], own, atol=1e-6)
        want = numpy_uncertainty(own)
        n, c = own.shape[1:]
        self.assertEqual(got["probabilities"].shape, (n, c))
        self.assertEqual(got["probabilities"].dtype, np.float32)
        for key in ("probabilities", "entropy", "mutual_information", "variance", "agreement"):
            np.testing.assert_allclose(got[key], want[key], atol=1e-6, err_msg=key)
        np.testing.assert_array_equal(got["predicted"], want["predicted"])
        # Disagreement is real in this ensemble: the checks above compare more than zeros.
        self.assertGreater(got["mutual_information"].max(), 0.01)
        self.assertLess(got["agreement"].min(), 1.0)
        # Sample ids of the table, and the journal's ensemble accuracy from these numbers.
        ids = np.asarray(cohort_store().open(f"{RUN}/store").table("test").ids)
        np.testing.assert_array_equal(got["ids"], ids)
        labels = np.asarray(cohort_store().open(f"{RUN}/store").table("test").labels)
        db = loop_test.journal(RUN)
        acc = db.execute("SELECT test_accuracy FROM rounds WHERE round = 1").fetchone()[0]
        db.close()
        self.assertAlmostEqual(float((got["predicted"] == labels).mean()), acc, places=9)
        self.assertIn("with the 3 members of round 1 (mlp, norms, cnn)", self.proc.stdout)

    def test_same_numbers_as_the_single_checkpoint_predict(self):
        _, _, checkpoint = finished_members(RUN, 1)[2]
        out = os.path.join(self.dir, "cnn.npy")
        cohort("predict", "--checkpoint", checkpoint, "--store", f"{RUN}/store", "--table",
               "test", "-o", out)
        np.testing.assert_allclose(np.load(out), self.out["member_probabilities"][2], atol=1e-6)

    def test_npy_and_csv(self):
        prefix = os.path.join(self.dir, "test")
        cohort("data", "export", f"{RUN}/store", "--table", "test", "--out", prefix)
        csv = os.path.join(self.dir, "from-npy.csv")
        cohort("predict", RUN, "--input", prefix + ".x.npy", "-o", csv)
        with open(csv) as f:
            header = f.readline().strip().split(",")
        self.assertEqual(header[:7], ["row", "predicted", "agreement", "entropy",
                                      "mutual_information", "variance", "p0"])
        table = np.loadtxt(csv, delimiter=",", skiprows=1)
        np.testing.assert_array_equal(table[:, 0], np.arange(len(table)))
        np.testing.assert_array_equal(table[:, 1], self.out["predicted"])
        np.testing.assert_allclose(table[:, 2], self.out["agreement"], atol=1e-8)
        np.testing.assert_allclose(table[:, 3], self.out["entropy"], atol=1e-7)
        np.testing.assert_allclose(table[:, 4], self.out["mutual_information"], atol=1e-7)
        np.testing.assert_allclose(table[:, 5], self.out["variance"], atol=1e-7)
        np.testing.assert_allclose(table[:, 6:], self.out["probabilities"], atol=1e-7)

    def test_idx_input(self):
        out = os.path.join(self.dir, "idx.npz")
        cohort("predict", RUN, "--input", f"{loop_test.FMNIST}/t10k-images-idx3-ubyte.gz",
               "-o", out)
        got = np.load(out)
        self.assertEqual(got["probabilities"].shape, (10000, 10))
        self.assertNotIn("ids", got.files)  # a file has rows, not store ids
        # The store's test table is the first 300 images of the same file.
        np.testing.assert_allclose(got["probabilities"][:300], self.out["probabilities"],
                                   atol=1e-6)

    def test_an_earlier_round(self):
        out = os.path.join(self.dir, "round0.npz")
        proc = cohort("predict", RUN, "--round", "0", "--store", f"{RUN}/store", "--table",
                      "test", "-o", out)
        self.assertIn("of round 0", proc.stdout)
        own = np.stack([np.load(path) for _, path, _ in finished_members(RUN, 0)])
        np.testing.assert_allclose(np.load(out)["member_probabilities"], own, atol=1e-6)

    def test_bad_input(self):
        bad = os.path.join(self.dir, "flat.npy")
        np.save(bad, np.zeros((4, 784), dtype=np.uint8))
        self.assertEqual(
            fail_line(cohort("predict", RUN, "--input", bad, check=False)),
            f"{bad}: samples are uint8 (784,), but the ensemble takes uint8 (28, 28) (the run's "
            "train table)")
        floats = os.path.join(self.dir, "floats.npy")
        np.save(floats, np.zeros((4, 28, 28), dtype=np.float32))
        self.assertIn("samples are float32 (28, 28), but the ensemble takes uint8 (28, 28)",
                      fail_line(cohort("predict", RUN, "--input", floats, check=False)))
        self.assertEqual(fail_line(cohort("predict", RUN, "--input", bad + ".missing",
                                          check=False)), f"{bad}.missing: no such file")
        self.assertIn("exactly one input", fail_line(cohort(
            "predict", RUN, "--input", bad, "--store", f"{RUN}/store", "--table", "test",
            check=False)))
        self.assertIn("table 'nope' does not exist", fail_line(cohort(
            "predict", RUN, "--store", f"{RUN}/store", "--table", "nope", check=False)))
        csv = os.path.join(self.dir, "x.csv")
        with open(csv, "w") as f:
            f.write("a,b\n1,2\n")
        self.assertIn("--label-column", fail_line(cohort("predict", RUN, "--input", csv,
                                                         check=False)))
        self.assertEqual(
            fail_line(cohort("predict", os.path.join(SCRATCH, "nope"), "--input", bad,
                             check=False)),
            f"{SCRATCH}/nope: not a cohort run directory (no loop.toml and run.db)")
        self.assertEqual(
            fail_line(cohort("predict", RUN, "--round", "7", "--input", bad, check=False)),
            "run ens has no round 7 (rounds 0 to 1)")

    def test_calibrated(self):
        # Fitted on the test table and applied to it, so numpy can check the fit itself.
        out = os.path.join(self.dir, "calibrated.npz")
        proc = cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test",
                      "--calibrate", "test", "-o", out)
        got = dict(np.load(out))
        t = float(got["temperature"])
        self.assertEqual(got["temperature"].shape, ())
        mean = got["probabilities"].astype(np.float64)
        np.testing.assert_allclose(mean, self.out["probabilities"], atol=1e-7)

        def scaled(temperature):
            z = np.log(np.maximum(mean, 1.1754943508222875e-38)) / temperature
            z = np.exp(z - z.max(axis=1, keepdims=True))
            return z / z.sum(axis=1, keepdims=True)

        labels = np.asarray(cohort_store().open(f"{RUN}/store").table("test").labels)

        def nll(temperature):
            return -np.log(scaled(temperature)[np.arange(len(labels)), labels]).mean()

        np.testing.assert_allclose(got["calibrated_probabilities"], scaled(t), atol=1e-6)
        np.testing.assert_array_equal(got["calibrated_probabilities"].argmax(axis=1),
                                      got["predicted"])
        # cohort's T minimises the NLL: no temperature on a fine grid does better.
        grid = np.exp(np.linspace(np.log(0.05), np.log(20), 2000))
        best = min(grid, key=nll)
        self.assertLessEqual(nll(t), nll(best) + 1e-9)
        self.assertLess(abs(np.log(t) - np.log(best)), 0.01)
        self.assertNotAlmostEqual(t, 1.0, places=2)  # the fit did something to check
        self.assertIn(f"temperature {t:.4f}; there NLL", proc.stdout)
        self.assertIn(f"calibrated probabilities at temperature {t:.4f}", proc.stdout)

        # The loop fitted the same temperature to the same round's ensemble on the same table,
        # and journalled NLL and ECE with each half of the table calibrated at the temperature
        # fitted on the other half (rows of the other parity).
        db = loop_test.journal(RUN)
        row = db.execute("SELECT test_temperature, test_nll_calibrated, test_ece_calibrated, "
                         "test_nll FROM rounds WHERE status = 'done' ORDER BY round DESC "
                         "LIMIT 1").fetchone()
        db.close()
        self.assertAlmostEqual(row["test_temperature"], t, delta=1e-6 * t)
        self.assertAlmostEqual(row["test_nll"], nll(1.0), places=5)

        def fit(rows):
            def half_nll(u):
                z = np.log(np.maximum(mean[rows], 1.1754943508222875e-38)) * np.exp(u)
                z = z - z.max(axis=1, keepdims=True)
                logq = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
                return -logq[np.arange(len(rows)), labels[rows]].mean()
            lo, hi = -np.log(100), -np.log(0.01)  # golden-section over log(1 / T)
            for _ in range(200):
                a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
                lo, hi = (lo, b) if half_nll(a) <= half_nll(b) else (a, hi)
            return float(np.exp(-(lo + hi) / 2))

        even, odd = np.arange(0, len(labels), 2), np.arange(1, len(labels), 2)
        calibrated = np.empty_like(mean)
        calibrated[even] = scaled(fit(odd))[even]
        calibrated[odd] = scaled(fit(even))[odd]
        cross_nll = -np.log(calibrated[np.arange(len(labels)), labels]).mean()
        self.assertAlmostEqual(row["test_nll_calibrated"], cross_nll, places=5)
        # Fitted on all rows, the NLL could only be lower: the journal's is not that one.
        self.assertGreater(row["test_nll_calibrated"], nll(t) + 1e-5)

        # --calibrated applies the journal's temperature; export writes it for the loader.
        loop_t = row["test_temperature"]
        out = os.path.join(self.dir, "loop-calibrated.npz")
        proc = cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test",
                      "--calibrated", "-o", out)
        got = dict(np.load(out))
        self.assertEqual(float(got["temperature"]), loop_t)
        np.testing.assert_allclose(got["calibrated_probabilities"], scaled(loop_t), atol=1e-6)
        self.assertIn(f"calibrated probabilities at temperature {loop_t:.4f}", proc.stdout)
        exported = os.path.join(self.dir, "loop-calibrated")
        shutil.rmtree(exported, ignore_errors=True)
        cohort("export", RUN, "-o", exported, "--calibrated")
        with open(os.path.join(exported, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["temperature"], loop_t)
        self.assertEqual(manifest["round"]["test_temperature"], loop_t)
        confidence = calibrated.max(axis=1)
        correct = calibrated.argmax(axis=1) == labels
        bins = np.minimum((confidence * 15).astype(int), 14)
        ece = sum(abs(correct[bins == b].sum() - confidence[bins == b].sum())
                  for b in range(15)) / len(labels)
        self.assertAlmostEqual(row["test_ece_calibrated"], ece, places=5)

        # A temperature given instead of fitted, to a CSV: columns q0 ... follow p0 ...
        csv = os.path.join(self.dir, "t2.csv")
        cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test",
               "--temperature", "2", "-o", csv)
        with open(csv) as f:
            header = f.readline().strip().split(",")
        self.assertEqual(header[-10:], [f"q{c}" for c in range(10)])
        self.assertEqual(header[-20:-10], [f"p{c}" for c in range(10)])
        table = np.loadtxt(csv, delimiter=",", skiprows=1)
        np.testing.assert_allclose(table[:, -10:], scaled(2.0), atol=1e-6)
        # Without calibration the output has no calibrated arrays.
        self.assertNotIn("calibrated_probabilities", self.out)
        self.assertNotIn("temperature", self.out)

    def test_calibration_errors(self):
        base = ("predict", RUN, "--store", f"{RUN}/store", "--table", "test")
        self.assertEqual(
            fail_line(cohort(*base, "--calibrate", "test", "--temperature", "2", check=False)),
            "--calibrate fits a temperature, --temperature gives one and --calibrated takes the "
            "loop's: pass one of them")
        self.assertIn("pass one of them",
                      fail_line(cohort(*base, "--calibrated", "--temperature", "2", check=False)))
        self.assertEqual(fail_line(cohort(*base, "--calibrate-store", f"{RUN}/store",
                                          check=False)),
                         "--calibrate-store needs --calibrate TABLE")
        for bad in ("0", "-1", "inf", "nan"):
            self.assertIn(f"--temperature {bad}", fail_line(cohort(*base, "--temperature", bad,
                                                                   check=False)).lower())
        self.assertIn("table 'nope' does not exist",
                      fail_line(cohort(*base, "--calibrate", "nope", check=False)))
        # A table without labels, in another store.
        unlabelled = os.path.join(self.dir, "unlabelled")
        shutil.rmtree(unlabelled, ignore_errors=True)
        x = os.path.join(self.dir, "x.npy")
        np.save(x, np.zeros((4, 28, 28), dtype=np.uint8))
        cohort("data", "init", unlabelled)
        cohort("data", "import", unlabelled, "--table", "x", "--npy", x)
        self.assertEqual(
            fail_line(cohort(*base, "--calibrate", "x", "--calibrate-store", unlabelled,
                             check=False)),
            f"{unlabelled} table x (generation 1): --calibrate needs class labels, and it has "
            "none")
        # Another sample shape.
        flat = os.path.join(self.dir, "flat-x.npy")
        np.save(flat, np.zeros((4, 784), dtype=np.uint8))
        cohort("data", "import", unlabelled, "--table", "flat", "--npy", flat)
        self.assertIn("samples are uint8 (784,), but the ensemble takes uint8 (28, 28)",
                      fail_line(cohort(*base, "--calibrate", "flat", "--calibrate-store",
                                       unlabelled, check=False)))

    def test_a_round_without_a_journalled_temperature(self):
        # A copy of the run as a cohort before journal version 6 would have left it.
        copy = os.path.join(self.dir, "no-temperature")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(RUN, copy, ignore=shutil.ignore_patterns("lock"))
        db = sqlite3.connect(os.path.join(copy, "run.db"))
        db.execute("UPDATE rounds SET test_temperature = NULL")
        db.commit()
        db.close()
        want = (f"{copy}: round 1 has no test temperature in the journal (the loop fits one to "
                "classification runs with 2 or more test rows, since journal version 6)")
        self.assertEqual(fail_line(cohort("predict", copy, "--store", f"{RUN}/store", "--table",
                                          "test", "--calibrated", check=False)), want)
        out = os.path.join(self.dir, "no-temperature-export")
        shutil.rmtree(out, ignore_errors=True)
        self.assertEqual(fail_line(cohort("export", copy, "--calibrated", "-o", out,
                                          check=False)), want)
        self.assertFalse(os.path.exists(out))  # refused before anything was written

    def test_a_round_not_finished(self):
        # A copy of the run whose last round the journal says is still training.
        copy = os.path.join(self.dir, "unfinished")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(RUN, copy, ignore=shutil.ignore_patterns("lock"))
        db = sqlite3.connect(os.path.join(copy, "run.db"))
        db.execute("UPDATE rounds SET status = 'training', output_generation = NULL "
                   "WHERE round = 1")
        db.commit()
        db.close()
        self.assertEqual(fail_line(cohort("predict", copy, "--round", "1", "--store",
                                          f"{RUN}/store", "--table", "test", check=False)),
                         "round 1 of run ens is not finished (status training)")
        # Without --round: the last finished round, 0.
        proc = cohort("predict", copy, "--store", f"{RUN}/store", "--table", "test", "-o",
                      os.path.join(self.dir, "u.npz"))
        self.assertIn("of round 0", proc.stdout)
        # A member whose checkpoint is gone: its own error, named, for predict and export.
        ckpt = os.path.join(copy, "members", "cnn", "round-0000", "attempt-1", "checkpoint.pt")
        os.remove(ckpt)
        self.assertEqual(fail_line(cohort("predict", copy, "--store", f"{RUN}/store", "--table",
                                          "test", check=False)),
                         f"member cnn: checkpoint {ckpt}: No such file or directory")
        self.assertEqual(fail_line(cohort("export", copy, "-o", os.path.join(self.dir, "x"),
                                          check=False)),
                         f"export of round 0: checkpoint {ckpt}: No such file or directory")


def numpy_regression(own):
    """From the members' (M, n, 2, *target_shape) predictions, written out here independently
    of cohort: the mixture's mean and variance, split into its two parts."""
    mu = own[:, :, 0].astype(np.float64)
    var = own[:, :, 1].astype(np.float64)
    mean = mu.mean(axis=0)
    epistemic = ((mu - mean) ** 2).mean(axis=0)
    return {"mean": mean, "aleatoric": var.mean(axis=0), "epistemic": epistemic,
            "total": var.mean(axis=0) + epistemic}


REGRESSION_KEYS = ("mean", "aleatoric", "epistemic", "total", "member_means", "member_variances")


class RegressionPredict(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(SCRATCH, "regression-predict")
        shutil.rmtree(cls.dir, ignore_errors=True)
        os.makedirs(cls.dir)
        cls.npz = os.path.join(cls.dir, "test.npz")
        cls.proc = cohort("predict", REG_RUN, "--store", f"{REG_RUN}/store", "--table", "test",
                          "-o", cls.npz)
        cls.out = dict(np.load(cls.npz))
        cls.own = np.stack([np.load(path) for _, path, _ in
                            finished_members(REG_RUN, 1, regression_loop_test.MEMBERS)])

    def test_matches_numpy_from_the_members_own_predictions(self):
        members = finished_members(REG_RUN, 1, regression_loop_test.MEMBERS)
        self.assertEqual([m[0] for m in members], ["gauss-a", "gauss-b", "mse-c"])
        own, got = self.own, self.out
        n = regression_loop_test.TEST
        self.assertEqual(own.shape, (3, n, 2, 2))
        self.assertEqual(sorted(got), sorted(REGRESSION_KEYS + ("ids",)))
        for key in ("member_means", "member_variances"):
            self.assertEqual(got[key].shape, (3, n, 2), key)
            self.assertEqual(got[key].dtype, np.float32, key)
        np.testing.assert_allclose(got["member_means"], own[:, :, 0], atol=1e-6)
        np.testing.assert_allclose(got["member_variances"], own[:, :, 1], atol=1e-6)
        want = numpy_regression(own)
        for key in ("mean", "aleatoric", "epistemic", "total"):
            self.assertEqual(got[key].shape, (n, 2), key)
            np.testing.assert_allclose(got[key], want[key], atol=1e-5, rtol=0, err_msg=key)
        # The members disagree, and the mse member's variance is one number per component.
        self.assertGreater(got["epistemic"].max(), 1e-4)
        self.assertEqual(len(np.unique(own[2, :, 1, 0])), 1)
        # The sample ids, and the journal's ensemble RMSE and MAE from these means.
        table = cohort_store().open(f"{REG_RUN}/store").table("test")
        np.testing.assert_array_equal(got["ids"], np.asarray(table.ids))
        y = np.asarray(table.labels, dtype=np.float64)
        db = loop_test.journal(REG_RUN)
        rmse, mae = db.execute("SELECT test_rmse, test_mae FROM rounds WHERE round = 1").fetchone()
        db.close()
        self.assertAlmostEqual(float(np.sqrt(((got["mean"] - y) ** 2).mean())), rmse, places=6)
        self.assertAlmostEqual(float(np.abs(got["mean"] - y).mean()), mae, places=6)
        self.assertIn("with the 3 members of round 1 (gauss-a, gauss-b, mse-c)", self.proc.stdout)

    def test_csv_from_an_npy_file(self):
        prefix = os.path.join(self.dir, "test")
        cohort("data", "export", f"{REG_RUN}/store", "--table", "test", "--out", prefix)
        csv = os.path.join(self.dir, "from-npy.csv")
        cohort("predict", REG_RUN, "--input", prefix + ".x.npy", "-o", csv)
        with open(csv) as f:
            header = f.readline().strip().split(",")
        self.assertEqual(header, ["row", "mean_0", "mean_1", "total_0", "total_1", "aleatoric_0",
                                  "aleatoric_1", "epistemic_0", "epistemic_1"])
        table = np.loadtxt(csv, delimiter=",", skiprows=1)
        np.testing.assert_array_equal(table[:, 0], np.arange(regression_loop_test.TEST))
        want = numpy_regression(self.own)
        for i, key in enumerate(("mean", "total", "aleatoric", "epistemic")):
            np.testing.assert_allclose(table[:, 1 + 2 * i:3 + 2 * i], want[key], atol=1e-5,
                                       rtol=0, err_msg=key)
        # From the store, the CSV adds the ids after the row.
        csv = os.path.join(self.dir, "from-store.csv")
        cohort("predict", REG_RUN, "--store", f"{REG_RUN}/store", "--table", "test", "-o", csv)
        with open(csv) as f:
            self.assertEqual(f.readline().strip().split(",")[:3], ["row", "id", "mean_0"])
        table = np.loadtxt(csv, delimiter=",", skiprows=1)
        np.testing.assert_array_equal(table[:, 1], self.out["ids"])
        np.testing.assert_allclose(table[:, 2:4], self.out["mean"], atol=1e-7)

    def test_an_earlier_round(self):
        out = os.path.join(self.dir, "round0.npz")
        proc = cohort("predict", REG_RUN, "--round", "0", "--store", f"{REG_RUN}/store",
                      "--table", "test", "-o", out)
        self.assertIn("of round 0", proc.stdout)
        own = np.stack([np.load(path) for _, path, _ in
                        finished_members(REG_RUN, 0, regression_loop_test.MEMBERS)])
        got = np.load(out)
        np.testing.assert_allclose(got["member_means"], own[:, :, 0], atol=1e-6)
        np.testing.assert_allclose(got["total"], numpy_regression(own)["total"], atol=1e-5,
                                   rtol=0)

    def test_bad_input(self):
        bad = os.path.join(self.dir, "wide.npy")
        np.save(bad, np.zeros((4, 5), dtype=np.float32))
        self.assertEqual(
            fail_line(cohort("predict", REG_RUN, "--input", bad, check=False)),
            f"{bad}: samples are float32 (5,), but the ensemble takes float32 (4,) (the run's "
            "train table)")
        self.assertIn("--calibrate, --calibrated and --temperature scale class probabilities, "
                      "and this is a regression run",
                      fail_line(cohort("predict", REG_RUN, "--store", f"{REG_RUN}/store",
                                       "--table", "test", "--temperature", "2", check=False)))


def cohort_store():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import cohort_store as module
    return module


def load_exported(directory):
    """The loader `cohort export` copied into `directory`, imported from there."""
    spec = importlib.util.spec_from_file_location("exported_loader",
                                                  os.path.join(directory, "cohort_ensemble.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Export(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(SCRATCH, "export")
        shutil.rmtree(cls.dir, ignore_errors=True)
        os.makedirs(cls.dir)
        cls.out = os.path.join(cls.dir, "ensemble")
        cls.proc = cohort("export", RUN, "-o", cls.out)
        cls.npz = os.path.join(cls.dir, "test.npz")
        cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test", "-o", cls.npz)
        cls.x = np.asarray(cohort_store().open(f"{RUN}/store").table("test").features)

    def test_manifest(self):
        with open(os.path.join(self.out, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["format"], "cohort-ensemble")
        self.assertEqual(m["run"], "ens")
        self.assertEqual(m["round"]["round"], 1)
        self.assertEqual(m["classes"], 10)
        self.assertEqual(m["feature_dtype"], "uint8")
        self.assertEqual(m["input_shape"], [28, 28])
        self.assertEqual([x["name"] for x in m["members"]], ["mlp", "norms", "cnn"])
        self.assertEqual([x["model"] for x in m["members"]], [x[1] for x in MEMBERS])
        ops = []
        for x in m["members"]:
            with open(os.path.join(self.out, x["dir"], "member.json")) as f:
                ops += [step["op"] for step in json.load(f)["layers"]]
        self.assertEqual(set(ops), {"dense", "relu", "gelu", "batchnorm", "dropout", "silu",
                                    "layernorm", "conv2d", "elu", "maxpool", "tanh", "avgpool",
                                    "flatten", "sigmoid"})

    def test_loader_equals_predict(self):
        loader = load_exported(self.out)
        ens = loader.load(self.out)
        want = np.load(self.npz)
        for backend in ("numpy", "torch"):
            got = ens.predict(self.x, backend=backend)
            for key in ("probabilities", "member_probabilities", "entropy",
                        "mutual_information", "variance", "agreement"):
                np.testing.assert_allclose(got[key], want[key], atol=1e-5,
                                           err_msg=f"{backend} {key}")
            np.testing.assert_array_equal(got["predicted"], want["predicted"])
        self.assertIsNone(ens.temperature)
        self.assertNotIn("calibrated_probabilities", got)

    def test_calibrated_export_equals_calibrated_predict(self):
        out = os.path.join(self.dir, "calibrated")
        shutil.rmtree(out, ignore_errors=True)
        cohort("export", RUN, "-o", out, "--temperature", "0.8")
        with open(os.path.join(out, "manifest.json")) as f:
            self.assertEqual(json.load(f)["temperature"], 0.8)
        npz = os.path.join(self.dir, "calibrated.npz")
        cohort("predict", RUN, "--store", f"{RUN}/store", "--table", "test", "--temperature",
               "0.8", "-o", npz)
        want = np.load(npz)
        ens = load_exported(out).load(out)
        for backend in ("numpy", "torch"):
            got = ens.predict(self.x, backend=backend)
            np.testing.assert_allclose(got["calibrated_probabilities"],
                                       want["calibrated_probabilities"], atol=1e-5,
                                       err_msg=backend)
            self.assertEqual(float(got["temperature"]), 0.8)
        # T < 1 sharpens: the top probability rises wherever it was below 1.
        self.assertTrue((got["calibrated_probabilities"].max(axis=1) >=
                         got["probabilities"].max(axis=1) - 1e-6).all())

    def test_loader_as_a_program_without_cohort(self):
        # Only the exported directory and numpy: a copy elsewhere, run as a script.
        elsewhere = os.path.join(self.dir, "copied")
        shutil.rmtree(elsewhere, ignore_errors=True)
        shutil.copytree(self.out, elsewhere)
        x = os.path.join(self.dir, "x.npy")
        np.save(x, self.x[:50])
        out = os.path.join(self.dir, "script.npz")
        subprocess.run([sys.executable, os.path.join(elsewhere, "cohort_ensemble.py"), elsewhere,
                        x, "-o", out], check=True, cwd=self.dir, capture_output=True)
        np.testing.assert_allclose(np.load(out)["probabilities"],
                                   np.load(self.npz)["probabilities"][:50], atol=1e-5)
        loader = load_exported(elsewhere)
        with self.assertRaisesRegex(ValueError, r"samples of shape \(784,\), it takes \(28, 28\)"):
            loader.load(elsewhere).predict(self.x.reshape(len(self.x), -1))

    def test_errors(self):
        self.assertIn("exists and is not empty",
                      fail_line(cohort("export", RUN, "-o", self.out, check=False)))
        self.assertEqual(fail_line(cohort("export", RUN, "--round", "4", "-o",
                                          os.path.join(self.dir, "r4"), check=False)),
                         "run ens has no round 4 (rounds 0 to 1)")
        self.assertEqual(fail_line(cohort("export", RUN, "-o", os.path.join(self.dir, "t0"),
                                          "--temperature", "0", check=False)),
                         "--temperature 0: must be a finite number > 0")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "t0")))


class RegressionExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(SCRATCH, "regression-export")
        shutil.rmtree(cls.dir, ignore_errors=True)
        os.makedirs(cls.dir)
        cls.out = os.path.join(cls.dir, "ensemble")
        cohort("export", REG_RUN, "-o", cls.out)
        cls.npz = os.path.join(cls.dir, "test.npz")
        cohort("predict", REG_RUN, "--store", f"{REG_RUN}/store", "--table", "test", "-o",
               cls.npz)
        cls.x = np.asarray(cohort_store().open(f"{REG_RUN}/store").table("test").features)

    def test_manifest_says_the_task(self):
        with open(os.path.join(self.out, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["task"], "regression")
        self.assertEqual(m["target_shape"], [2])
        self.assertNotIn("classes", m)
        self.assertEqual(m["feature_dtype"], "float32")
        self.assertEqual(m["input_shape"], [4])
        self.assertEqual([x["name"] for x in m["members"]], ["gauss-a", "gauss-b", "mse-c"])
        db = loop_test.journal(REG_RUN)
        r = db.execute("SELECT input_generation, test_rmse, test_mae, test_nll, "
                       "test_calibration FROM rounds WHERE round = 1").fetchone()
        db.close()
        self.assertEqual(m["round"], {"round": 1, "input_generation": r["input_generation"],
                                      "test_rmse": r["test_rmse"], "test_mae": r["test_mae"],
                                      "test_nll": r["test_nll"],
                                      "test_calibration": r["test_calibration"]})
        # A temperature scales class probabilities: a regression export refuses one before
        # it writes anything.
        refused = os.path.join(self.dir, "with-temperature")
        self.assertEqual(
            fail_line(cohort("export", REG_RUN, "-o", refused, "--temperature", "2",
                             check=False)),
            f"{REG_RUN}: --temperature and --calibrated scale class probabilities, and this is a "
            "regression run")
        self.assertEqual(
            fail_line(cohort("predict", REG_RUN, "--store", f"{REG_RUN}/store", "--table", "test",
                             "--calibrated", check=False)),
            f"{REG_RUN}: --calibrate, --calibrated and --temperature scale class probabilities, "
            "and this is a regression run")
        self.assertFalse(os.path.exists(refused))

    def test_loader_equals_predict(self):
        ens = load_exported(self.out).load(self.out)
        self.assertEqual((ens.task, ens.target_shape), ("regression", (2,)))
        want = np.load(self.npz)
        for backend in ("numpy", "torch"):
            got = ens.predict(self.x, backend=backend)
            self.assertEqual(sorted(got), sorted(REGRESSION_KEYS))
            for key in REGRESSION_KEYS:
                self.assertEqual(got[key].shape, want[key].shape, f"{backend} {key}")
                np.testing.assert_allclose(got[key], want[key], atol=1e-5, rtol=0,
                                           err_msg=f"{backend} {key}")

    def test_loader_as_a_program(self):
        x = os.path.join(self.dir, "x.npy")
        np.save(x, self.x[:50])
        out = os.path.join(self.dir, "script.npz")
        subprocess.run([sys.executable, os.path.join(self.out, "cohort_ensemble.py"), self.out,
                        x, "-o", out], check=True, cwd=self.dir, capture_output=True)
        got, want = np.load(out), np.load(self.npz)
        for key in ("mean", "total"):
            np.testing.assert_allclose(got[key], want[key][:50], atol=1e-5, rtol=0)

    def test_a_classification_export_has_no_regression_metrics(self):
        out = os.path.join(self.dir, "classification")
        cohort("export", RUN, "-o", out)
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(sorted(m["round"]), ["input_generation", "round", "test_accuracy",
                                              "test_ece_calibrated", "test_nll",
                                              "test_nll_calibrated", "test_temperature"])
        self.assertNotIn("temperature", m)  # the loader calibrates only when asked to
        self.assertNotIn("target_shape", m)


def main():
    global COHORT, SCRATCH, RUN, REG_RUN
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(SCRATCH, exist_ok=True)
    loop_test.COHORT = COHORT
    loop_test.SCRATCH = SCRATCH
    loop_test.SOURCE = os.path.join(SCRATCH, "source-store")
    loop_test.build_source(loop_test.SOURCE)
    run_parent = os.path.join(SCRATCH, "run")
    shutil.rmtree(run_parent, ignore_errors=True)
    config = loop_test.write_config(run_parent, name="ens", members=MEMBERS, rounds=2, epochs=3)
    cohort("run", config, "--plain")
    RUN = os.path.join(run_parent, "runs", "ens")
    # A regression run: two rounds of the regression loop test's three members.
    reg_source = os.path.join(SCRATCH, "regression-source")
    regression_loop_test.build_source(reg_source)
    reg_parent = os.path.join(SCRATCH, "regression-run")
    shutil.rmtree(reg_parent, ignore_errors=True)
    config = regression_loop_test.write_config(reg_parent, rounds=2, epochs=20,
                                               source=reg_source)
    cohort("run", config, "--plain")
    REG_RUN = os.path.join(reg_parent, "runs", "reg")
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)


if __name__ == "__main__":
    main()
