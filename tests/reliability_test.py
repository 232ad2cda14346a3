#!/usr/bin/env python3
"""End-to-end regression tests for issue 14's store and data defects (docs/reliability.md):
bad data refused at the door, damage never carried forward, CURRENT set back never silently
undone, and one clear line instead of a crash.

Run by ctest as: /usr/bin/python3 tests/reliability_test.py COHORT_BINARY SCRATCH_DIR
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import unittest
import zlib

import numpy as np

COHORT = None
SCRATCH = None


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(SCRATCH, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.store = os.path.join(self.dir, "store")

    def cohort(self, *args, ok=True):
        proc = subprocess.run([COHORT, *args], capture_output=True, text=True, timeout=120)
        if ok:
            self.assertEqual(proc.returncode, 0, f"cohort {' '.join(args)}: {proc.stderr}")
        return proc

    def fails(self, *args, mentions=(), status=1):
        """Exits with `status` and one error line naming what is at fault; never a crash."""
        proc = self.cohort(*args, ok=False)
        self.assertEqual(proc.returncode, status, f"cohort {' '.join(args)}: {proc.stderr}")
        lines = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
        self.assertEqual(len(lines), 1, proc.stderr)
        for m in mentions:
            self.assertIn(m, lines[0])
        return lines[0]

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, name, array):
        np.save(self.path(name), array)
        return self.path(name)

    def small_store(self, n=20):
        """A store with a train table of n float samples, labels i % 3 (generation 1)."""
        self.cohort("data", "init", self.store)
        x = self.save("x.npy", np.arange(n * 4, dtype=np.float32).reshape(n, 4))
        y = self.save("y.npy", np.arange(n) % 3)
        self.cohort("data", "import", self.store, "-t", "train", "--npy", x, y)
        return x, y

    def set_current(self, generation):
        name = b"gen-%06d" % generation
        with open(os.path.join(self.store, "CURRENT"), "wb") as f:
            f.write(name + b" %08x\n" % zlib.crc32(name))

    def flip(self, name, offset):
        with open(os.path.join(self.store, name), "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 1]))

    def generation(self):
        return json.loads(self.cohort("data", "info", self.store, "--json").stdout)["generation"]


class BadDataAtTheDoor(Case):
    """Defects 1 and 3: labels a member cannot train on, and NaN features, are refused."""

    def test_npy_labels_outside_the_classes_name_their_rows(self):
        self.cohort("data", "init", self.store)
        x = self.save("x.npy", np.zeros((6, 2), dtype=np.float32))
        bad = np.array([0, 1, -1, 2, 2**40, 1])
        y = self.save("bad.npy", bad)
        self.fails("data", "import", self.store, "-t", "train", "--npy", x, y,
                   mentions=["bad.npy", "class labels must be in [0, 100000)", "row 2: -1",
                             "row 4: 1099511627776"])
        good = self.save("good.npy", np.array([0, 1, 9, 2, 3, 1]))
        self.fails("data", "import", self.store, "-t", "train", "--npy", x, good, "--classes",
                   "9", mentions=["good.npy", "[0, 9)", "row 2: 9"])
        self.fails("data", "import", self.store, "-t", "train", "--npy", x, good, "--classes",
                   "1", mentions=["at least 2 classes"])
        self.assertEqual(self.generation(), 0)  # nothing committed
        self.cohort("data", "import", self.store, "-t", "train", "--npy", x, good, "--classes",
                    "10")
        # Integral float labels go into the existing class table as classes, checked as such.
        floats = self.save("floats.npy", np.array([0, 1, 2, 3, -1.0, 4]))
        self.fails("data", "import", self.store, "-t", "train", "--npy", x, floats,
                   mentions=["floats.npy", "row 4: -1"])

    def test_idx_labels_outside_the_class_count(self):
        self.cohort("data", "init", self.store)
        images = self.path("images.idx")
        labels = self.path("labels.idx.gz")
        with open(images, "wb") as f:
            f.write(bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2]) + bytes(12))
        with gzip.open(labels, "wb") as f:
            f.write(bytes([0, 0, 8, 1, 0, 0, 0, 3, 0, 7, 11]))
        self.fails("data", "import", self.store, "-t", "t", "--idx", images, labels, "--classes",
                   "10", mentions=["labels.idx.gz", "[0, 10)", "row 2: 11"])
        self.cohort("data", "import", self.store, "-t", "t", "--idx", images, labels)

    def test_csv_label_1e23_does_not_turn_classes_into_regression(self):
        self.cohort("data", "init", self.store)
        csv = self.path("d.csv")
        with open(csv, "w") as f:
            f.write("a,label\n1,2\n2,1e23\n3,-1\n4,1\n")
        self.fails("data", "import", self.store, "-t", "train", "--csv", csv, "--label-column",
                   "label", mentions=["d.csv", "line 3: 1e+23", "line 4: -1"])
        with open(csv, "w") as f:
            f.write("a,label\n1,2\n2,1\n")
        self.cohort("data", "import", self.store, "-t", "train", "--csv", csv, "--label-column",
                    "label")
        with open(csv, "w") as f:
            f.write("a,label\n1,2\n2,1e23\n")
        self.fails("data", "import", self.store, "-t", "train", "--csv", csv, "--label-column",
                   "label", mentions=["line 3: 1e+23"])
        info = json.loads(self.cohort("data", "info", self.store, "--json").stdout)
        self.assertEqual(info["tables"]["train"]["labels"]["kind"], "class")

    def test_nan_features_only_with_allow_non_finite(self):
        self.cohort("data", "init", self.store)
        x = np.ones((5, 3), dtype=np.float64)
        x[1, 2] = np.nan
        x[3, 0] = -np.inf
        xs = self.save("nan.npy", x)
        y = self.save("y.npy", np.array([0, 1, 0, 1, 0]))
        self.fails("data", "import", self.store, "-t", "train", "--npy", xs, y,
                   mentions=["nan.npy", "features must be finite", "row 1 (nan)", "row 3 (-inf)",
                             "--allow-non-finite"])
        targets = self.save("t.npy", np.array([0.5, np.nan, 1, 2, 3], dtype=np.float32))
        self.fails("data", "import", self.store, "-t", "reg", "--npy",
                   self.save("ok.npy", np.ones((5, 3), dtype=np.float32)), targets,
                   mentions=["t.npy", "labels must be finite", "row 1 (nan)"])
        self.cohort("data", "import", self.store, "-t", "train", "--npy", xs, y,
                    "--allow-non-finite")


class DamageIsNotCarriedForward(Case):
    """Defect 5: writers that copy rows refuse damaged segments; prune keeps what is sound."""

    def test_split_compact_prune_refuse_a_damaged_segment(self):
        self.small_store()
        self.cohort("data", "remove", self.store, "-t", "train", "--ids", "1,2,3,4,5,6,7,8")
        self.flip("train-seg-000000.x.npy", 140)
        before = self.generation()
        for args in (["split", self.store, "--from", "train", "--to", "pool", "--count", "2"],
                     ["compact", self.store, "--threshold", "0.1"]):
            self.fails("data", *args, mentions=["damaged segment", "train-seg-000000.x.npy",
                                                "checksum mismatch"])
        self.fails("data", "prune", self.store, "--keep", "1",
                   mentions=["refusing to prune", "train-seg-000000.x.npy"])
        self.assertEqual(self.generation(), before)
        verify = self.cohort("data", "verify", self.store, ok=False)
        self.assertEqual(verify.returncode, 1)
        self.assertIn("train-seg-000000.x.npy: checksum mismatch", verify.stderr)
        # Removing rows copies nothing: still allowed.
        self.cohort("data", "remove", self.store, "-t", "train", "--ids", "9")


class StoreMetadata(Case):
    """Defect 12, store side."""

    def test_current_set_back_is_warned_and_never_undone_silently(self):
        self.small_store()
        for i in range(3):
            self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                        "--count", "1", "--seed", str(i))
        self.assertEqual(self.generation(), 4)
        self.set_current(2)
        verify = self.cohort("data", "verify", self.store)
        self.assertIn("warning:", verify.stderr)
        self.assertIn("generations 3..4 have manifests", verify.stderr)
        self.fails("data", "split", self.store, "--from", "train", "--to", "pool", "--count",
                   "1", mentions=["generations 3..4 were committed after it"])
        self.assertTrue(os.path.exists(os.path.join(self.store, "gen-000004.json")))
        self.set_current(4)
        self.cohort("data", "verify", self.store)
        # Set back by one: the next writer removes it, and says so.
        self.set_current(3)
        proc = self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                           "--count", "1")
        self.assertIn("cohort: warning: removed generation 4", proc.stderr)

    def test_damaged_current_is_listed_once(self):
        self.small_store()
        self.cohort("data", "split", self.store, "--from", "train", "--to", "pool", "--count",
                    "2")
        with open(os.path.join(self.store, "CURRENT"), "w") as f:
            f.write("gen-000002 00000000\n")
        proc = self.cohort("data", "verify", self.store, ok=False)
        self.assertEqual(proc.returncode, 1)
        damaged = [l for l in proc.stderr.splitlines() if l.startswith("damaged:")]
        self.assertEqual(damaged, [f"damaged: {self.store}/CURRENT: checksum mismatch"])

    def test_log_marks_a_damaged_old_manifest(self):
        self.small_store()
        self.cohort("data", "split", self.store, "--from", "train", "--to", "pool", "--count",
                    "2")
        self.flip("gen-000001.json", 30)
        proc = self.cohort("data", "log", self.store, ok=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("generation 2 ", proc.stdout)
        self.assertIn("generation 0 ", proc.stdout)
        self.assertRegex(proc.stdout, r"generation 1 +DAMAGED: .*gen-000001.json")
        self.assertIn("1 damaged manifest(s)", proc.stderr)
        entries = json.loads(self.cohort("data", "log", self.store, "--json", ok=False).stdout)
        self.assertEqual([e["generation"] for e in entries], [2, 1, 0])
        self.assertIn("damaged", entries[1])

    def test_negative_numbers_are_refused_not_wrapped(self):
        self.small_store()
        for args in (["split", self.store, "--from", "train", "--to", "pool", "--count", "-3"],
                     ["prune", self.store, "--keep", "-1"],
                     ["info", self.store, "--generation", "-1"],
                     ["import", self.store, "-t", "train", "--npy", "x.npy", "--limit", "-2"]):
            line = self.fails("data", *args, status=2, mentions=["must be a whole number"])
            self.assertNotIn("18446744073709551613", line)
        self.fails("data", "split", self.store, "--from", "train", "--to", "pool", "--fraction",
                   "-0.5", mentions=["--fraction"])


class MemberCommands(Case):
    """Defect 3: `cohort eval` on a table holding NaN features exits 1 with one line."""

    def test_eval_on_nan_features_names_the_samples(self):
        self.cohort("data", "init", self.store)
        rng = np.random.default_rng(0)
        x = rng.random((200, 4)).astype(np.float32)
        y = (x[:, 0] > 0.5).astype(np.int64)
        self.cohort("data", "import", self.store, "-t", "train", "--npy",
                    self.save("x.npy", x), self.save("y.npy", y))
        xt = x[:10].copy()
        xt[4, 1] = np.nan
        self.cohort("data", "import", self.store, "-t", "test", "--npy",
                    self.save("xt.npy", xt), self.save("yt.npy", y[:10]), "--allow-non-finite")
        ckpt = self.path("m.ckpt")
        self.cohort("train", "--store", self.store, "--table", "train", "--model",
                    "dense 8 relu, dense 2", "--epochs", "1", "--out", ckpt)
        self.fails("eval", "--store", self.store, "--table", "test", "--checkpoint", ckpt,
                   mentions=["NaN", "table test", "sample id 204"])


if __name__ == "__main__":
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(SCRATCH, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
