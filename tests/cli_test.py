#!/usr/bin/env python3
"""End-to-end tests of `cohort data ...`: real processes, real files, numpy to check them.

Run by ctest as: /usr/bin/python3 tests/cli_test.py COHORT_BINARY SCRATCH_DIR
"""
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import unittest

import numpy as np

COHORT = None
SCRATCH = None
FMNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path, n):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    return data[:n]


class CohortCase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(SCRATCH, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.store = os.path.join(self.dir, "store")

    def cohort(self, *args, ok=True):
        proc = subprocess.run([COHORT, *args], capture_output=True, text=True, timeout=120)
        if ok:
            self.assertEqual(proc.returncode, 0,
                             f"cohort {' '.join(args)} failed: {proc.stderr}")
        return proc

    def fails(self, *args, mentions=()):
        """The command exits non-zero with one error line naming what is at fault."""
        proc = self.cohort(*args, ok=False)
        self.assertNotEqual(proc.returncode, 0, f"cohort {' '.join(args)} should fail")
        lines = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
        self.assertEqual(len(lines), 1, proc.stderr)
        for m in mentions:
            self.assertIn(m, lines[0])
        self.assertNotIn("terminate called", proc.stderr)
        return lines[0]

    def info(self, *extra):
        return json.loads(self.cohort("data", "info", self.store, "--json", *extra).stdout)

    def import_fmnist(self, n=500, table="train", split="train"):
        self.cohort("data", "import", self.store, "--table", table, "--limit", str(n), "--idx",
                    f"{FMNIST}/{split}-images-idx3-ubyte.gz",
                    f"{FMNIST}/{split}-labels-idx1-ubyte.gz")

    def export(self, table, generation=None):
        prefix = os.path.join(self.dir, f"export-{table}-{generation}")
        args = ["data", "export", self.store, "--table", table, "--out", prefix]
        if generation is not None:
            args += ["--generation", str(generation)]
        self.cohort(*args)
        y = f"{prefix}.y.npy"
        return (np.load(f"{prefix}.x.npy"), np.load(y) if os.path.exists(y) else None,
                np.load(f"{prefix}.ids.npy"))


class StoreLifecycle(CohortCase):
    def test_import_split_remove_diff_log_export(self):
        self.cohort("data", "init", self.store)
        self.import_fmnist(500)
        info = self.info()
        self.assertEqual(info["generation"], 1)
        train = info["tables"]["train"]
        self.assertEqual(train["rows"], 500)
        self.assertEqual(train["features"], {"dtype": "uint8", "shape": [28, 28]})
        self.assertEqual(train["labels"]["kind"], "class")

        self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                    "--count", "100", "--seed", "3")
        info = self.info()
        self.assertEqual(info["tables"]["train"]["rows"], 400)
        self.assertEqual(info["tables"]["pool"]["rows"], 100)

        x, y, ids = self.export("pool")
        images = read_idx(f"{FMNIST}/train-images-idx3-ubyte.gz", 500)
        labels = read_idx(f"{FMNIST}/train-labels-idx1-ubyte.gz", 500)
        self.assertEqual(len(set(ids.tolist())), 100)
        np.testing.assert_array_equal(x, images[ids.astype(np.int64)])
        np.testing.assert_array_equal(y, labels[ids.astype(np.int64)].astype(np.int64))

        remove = ",".join(str(i) for i in ids[:5])
        self.cohort("data", "remove", self.store, "--table", "pool", "--ids", remove)
        self.assertEqual(self.info()["tables"]["pool"]["rows"], 95)
        self.assertEqual(self.info()["tables"]["pool"]["dead_rows"], 5)
        # In text, those rows are named for what they are, not "dead".
        text = self.cohort("data", "info", self.store).stdout
        pool = next(l for l in text.splitlines() if l.startswith("pool "))
        self.assertEqual(pool.split()[-4:-2], ["1", "5"])  # segments, old-gen rows
        self.assertIn("old-gen rows: rows in the table's segment files that this generation no "
                      "longer holds", text)
        self.assertNotIn("dead", text)

        diff = json.loads(self.cohort("data", "diff", self.store, "1", "3", "--json").stdout)
        self.assertEqual(sorted(diff["tables"]["pool"]["added"]), sorted(ids[5:].tolist()))
        self.assertEqual(len(diff["tables"]["train"]["removed"]), 100)
        human = self.cohort("data", "diff", self.store, "1", "3").stdout
        self.assertIn("pool", human)
        self.assertIn("+95", human)

        log = json.loads(self.cohort("data", "log", self.store, "--json").stdout)
        self.assertEqual([g["generation"] for g in log], [3, 2, 1, 0])
        self.assertIn("split 100 samples train -> pool (seed 3)", log[1]["note"])
        self.assertIn("generation 3", self.cohort("data", "log", self.store).stdout)

        # Old generations stay readable exactly as they were.
        x1, _, ids1 = self.export("train", generation=1)
        self.assertEqual(ids1.tolist(), list(range(500)))
        np.testing.assert_array_equal(x1, images)
        self.cohort("data", "verify", self.store)

    def test_split_is_deterministic_in_its_seed(self):
        pools = {}
        for name, seed in (("a", 5), ("b", 5), ("c", 6)):
            self.store = os.path.join(self.dir, name)
            self.cohort("data", "init", self.store)
            self.import_fmnist(300)
            self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                        "--count", "50", "--seed", str(seed))
            pools[name] = self.export("pool")[2].tolist()
        self.assertEqual(pools["a"], pools["b"])
        self.assertNotEqual(pools["a"], pools["c"])

    def test_clone_starts_at_the_given_generation_and_leaves_source_alone(self):
        self.cohort("data", "init", self.store)
        self.import_fmnist(200)
        self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                    "--fraction", "0.5", "--seed", "1")
        clone = os.path.join(self.dir, "clone")
        self.cohort("data", "clone", self.store, clone, "--generation", "1")
        cinfo = json.loads(self.cohort("data", "info", clone, "--json").stdout)
        self.assertEqual(cinfo["generation"], 1)
        self.assertEqual(cinfo["origin"]["generation"], 1)
        self.assertEqual(list(cinfo["tables"]), ["train"])
        self.cohort("data", "remove", clone, "--table", "train", "--ids", "0")
        self.assertEqual(self.info()["tables"]["train"]["rows"], 100)
        self.cohort("data", "verify", clone)
        self.cohort("data", "verify", self.store)

    def test_compact_rewrites_a_table_with_many_dead_rows(self):
        self.cohort("data", "init", self.store)
        self.import_fmnist(200)
        before = self.export("train")
        self.cohort("data", "remove", self.store, "--table", "train", "--ids",
                    ",".join(str(i) for i in range(0, 200, 2)))
        out = self.cohort("data", "compact", self.store, "--threshold", "0.3").stdout
        self.assertIn("compacted train", out)
        info = self.info()
        self.assertEqual(info["tables"]["train"]["dead_rows"], 0)
        x, y, ids = self.export("train")
        np.testing.assert_array_equal(ids, before[2][1::2])
        np.testing.assert_array_equal(x, before[0][1::2])
        self.assertIn("nothing to compact", self.cohort("data", "compact", self.store).stdout)

    def test_prune_keeps_the_newest_generations_and_open_readers(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import cohort_store
        self.cohort("data", "init", self.store)
        self.import_fmnist(300)
        for seed in (1, 2, 3):
            self.cohort("data", "split", self.store, "--from", "train", "--to", "pool",
                        "--count", "10", "--seed", str(seed))
        self.cohort("data", "compact", self.store, "--threshold", "0.01")
        reader = cohort_store.open(self.store, generation=1).table("train")  # opened before
        out = self.cohort("data", "prune", self.store, "--keep", "2").stdout
        self.assertIn("pruned generations 0..3", out)
        log = json.loads(self.cohort("data", "log", self.store, "--json").stdout)
        self.assertEqual([g["generation"] for g in log], [5, 4])
        self.cohort("data", "verify", self.store)
        self.fails("data", "info", self.store, "--generation", "1", mentions=["generation 1"])
        images = read_idx(f"{FMNIST}/train-images-idx3-ubyte.gz", 300)
        np.testing.assert_array_equal(np.asarray(reader.features), images)
        self.assertIn("nothing to prune", self.cohort("data", "prune", self.store, "--keep",
                                                      "5").stdout)
        self.cohort("data", "remove", self.store, "--table", "pool", "--ids",
                    str(int(self.export("pool")[2][0])))
        self.assertEqual(self.info()["generation"], 6)

    def test_npy_and_csv_imports(self):
        self.cohort("data", "init", self.store)
        x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
        y = np.arange(20, dtype=np.float64).reshape(20, 1) / 3
        np.save(os.path.join(self.dir, "x.npy"), x)
        np.save(os.path.join(self.dir, "y.npy"), y)
        self.cohort("data", "import", self.store, "--table", "reg", "--npy",
                    os.path.join(self.dir, "x.npy"), os.path.join(self.dir, "y.npy"))
        info = self.info()["tables"]["reg"]
        self.assertEqual(info["labels"], {"kind": "vector", "dtype": "float32", "shape": [1]})
        ex, ey, _ = self.export("reg")
        np.testing.assert_array_equal(ex, x)
        np.testing.assert_allclose(ey, y.astype(np.float32))

        csv = os.path.join(self.dir, "d.csv")
        with open(csv, "w") as f:
            f.write("a,label,b\n1.5,2,3\n4,0,5.25\n")
        self.cohort("data", "import", self.store, "--table", "tab", "--csv", csv,
                    "--label-column", "label")
        cx, cy, _ = self.export("tab")
        np.testing.assert_array_equal(cx, np.array([[1.5, 3], [4, 5.25]], dtype=np.float32))
        np.testing.assert_array_equal(cy, np.array([2, 0]))

        # Unlabelled features make a table without labels.
        self.cohort("data", "import", self.store, "--table", "unlabelled", "--npy",
                    os.path.join(self.dir, "x.npy"))
        self.assertEqual(self.info()["tables"]["unlabelled"]["labels"], {"kind": "none"})


class BadInput(CohortCase):
    def setUp(self):
        super().setUp()
        self.cohort("data", "init", self.store)

    def test_command_line_errors_are_one_line_with_status_2(self):
        for args in (("data", "info"), ("data", "split", self.store, "--from", "train"),
                     ("data", "compact", self.store, "--threshold", "abc"), ("nonsense",)):
            proc = self.cohort(*args, ok=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertTrue(proc.stderr.startswith("cohort: error:"), proc.stderr)
        self.assertEqual(self.cohort("--help").returncode, 0)
        # predict has two forms: the ensemble's help names the one-checkpoint form's options,
        # and that form has its own help.
        ensemble = self.cohort("predict", "--help").stdout
        self.assertIn("cohort predict --checkpoint C --store S --table T -o out.npy", ensemble)
        single = self.cohort("predict", "--checkpoint", "c.pt", "--help").stdout
        self.assertIn("--precision", single)
        self.assertNotIn("run_dir", single)

    def test_store_and_generation_errors(self):
        self.fails("data", "info", os.path.join(self.dir, "missing"), mentions=["missing does not exist"])
        self.fails("data", "info", self.store, "--generation", "42", mentions=["generation 42"])
        self.fails("data", "init", self.store, mentions=["already"])
        self.fails("data", "export", self.store, "--table", "nope", "--out",
                   os.path.join(self.dir, "o"), mentions=["nope"])

    def test_unknown_ids_and_schema_mismatch(self):
        self.import_fmnist(50)
        self.fails("data", "remove", self.store, "--table", "train", "--ids", "3,999",
                   mentions=["999", "train"])
        self.fails("data", "remove", self.store, "--table", "train", "--ids", "3,x",
                   mentions=["'x'"])
        self.fails("data", "split", self.store, "--from", "train", "--to", "pool",
                   "--count", "51", mentions=["51"])
        self.fails("data", "split", self.store, "--from", "trian", "--to", "pool",
                   "--count", "5", mentions=["(tables: train)", "did you mean 'train'?"])
        np.save(os.path.join(self.dir, "f.npy"), np.zeros((3, 10), np.float32))
        np.save(os.path.join(self.dir, "l.npy"), np.zeros(3, np.int64))
        self.fails("data", "import", self.store, "--table", "train", "--npy",
                   os.path.join(self.dir, "f.npy"), os.path.join(self.dir, "l.npy"),
                   mentions=["schema mismatch", "train"])
        self.assertEqual(self.info()["generation"], 1)  # nothing was committed

    def test_malformed_inputs_name_the_file(self):
        truncated = os.path.join(self.dir, "trunc-idx3.gz")
        with gzip.open(f"{FMNIST}/t10k-images-idx3-ubyte.gz") as src:
            head = src.read(5000)
        with gzip.open(truncated, "wb") as f:
            f.write(head)
        self.fails("data", "import", self.store, "--table", "t", "--idx", truncated,
                   f"{FMNIST}/t10k-labels-idx1-ubyte.gz", mentions=[truncated])
        self.fails("data", "import", self.store, "--table", "t", "--idx",
                   f"{FMNIST}/t10k-images-idx3-ubyte.gz", f"{FMNIST}/train-labels-idx1-ubyte.gz",
                   mentions=["10000", "60000"])
        missing = os.path.join(self.dir, "nope.gz")
        self.fails("data", "import", self.store, "--table", "t", "--idx", missing, missing,
                   mentions=[missing])
        bad_npy = os.path.join(self.dir, "bad.npy")
        with open(bad_npy, "wb") as f:
            f.write(b"not numpy at all")
        self.fails("data", "import", self.store, "--table", "t", "--npy", bad_npy,
                   mentions=[bad_npy])
        csv = os.path.join(self.dir, "ragged.csv")
        with open(csv, "w") as f:
            f.write("a,label\n1,2\n3\n")
        self.fails("data", "import", self.store, "--table", "t", "--csv", csv,
                   "--label-column", "label", mentions=[csv + ":3"])
        self.fails("data", "import", self.store, "--table", "t", "--csv", csv,
                   "--label-column", "target", mentions=["target"])
        self.fails("data", "import", self.store, "--table", "bad-name", "--npy",
                   os.path.join(self.dir, "bad.npy"), mentions=[])
        self.assertEqual(self.info()["generation"], 0)
        self.cohort("data", "verify", self.store)

    def test_second_writer_is_refused_naming_the_holder(self):
        self.import_fmnist(20)
        # Another process's writer lock: POSIX record locks, as cohort takes them.
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import fcntl, os, sys, time\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())\n"
             "print('locked', flush=True)\n"
             "sys.stdin.read()\n",
             os.path.join(self.store, "LOCK")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "locked")
            self.fails("data", "remove", self.store, "--table", "train", "--ids", "1",
                       mentions=["LOCK", "another writer", f"pid {holder.pid}"])
            # Readers take no lock.
            self.assertEqual(self.info()["tables"]["train"]["rows"], 20)
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
        self.cohort("data", "remove", self.store, "--table", "train", "--ids", "1")
        self.assertEqual(self.info()["tables"]["train"]["rows"], 19)

    def test_verify_reports_damage_and_exits_non_zero(self):
        self.import_fmnist(100)
        seg = os.path.join(self.store, "train-seg-000000.x.npy")
        with open(seg, "r+b") as f:
            f.seek(5000)
            b = f.read(1)
            f.seek(5000)
            f.write(bytes([b[0] ^ 1]))
        proc = self.cohort("data", "verify", self.store, ok=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("train-seg-000000.x.npy", proc.stderr)
        self.assertIn("checksum", proc.stderr)
        # Generation 0 does not name the damaged file.
        self.cohort("data", "verify", self.store, "--generation", "0")
        with open(os.path.join(self.store, "CURRENT"), "w") as f:
            f.write("gen-000001 00000000\n")
        self.fails("data", "info", self.store, mentions=["CURRENT"])

    def test_sbatch_prints_a_script_bash_accepts(self):
        exp = os.path.join(self.dir, "my exp")  # a space, to be quoted
        os.makedirs(exp)
        config = os.path.join(exp, "loop.toml")

        def write_config(launcher, devices, slurm=""):
            with open(config, "w") as f:
                f.write(f'name = "sb"\nlauncher = "{launcher}"\ndevices = {devices}\n'
                        f'[store]\nsource = "{self.store}"\n[[member]]\nname = "a"\n'
                        'model = "dense 10"\n[acquisition]\nstrategy = "random"\n'
                        f'batch_size = 1\n[stop]\nmax_rounds = 1\n{slurm}')

        write_config("slurm", '"auto"', "[slurm]\ngpus_per_member = 1\n")
        script = self.cohort("sbatch", config, "--time", "1:00:00").stdout
        self.assertTrue(script.startswith("#!/bin/bash\n"), script)
        for line in ("#SBATCH --requeue", "#SBATCH --signal=B:TERM@120", "#SBATCH --gres=gpu:1",
                     "#SBATCH --job-name=sb", "#SBATCH --time=1:00:00"):
            self.assertIn(line + "\n", script)
        syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        self.assertEqual(syntax.returncode, 0, syntax.stderr + script)
        exec_line = [l for l in script.splitlines() if l.startswith("exec ")]
        self.assertEqual(shlex.split(exec_line[0]), ["exec", os.path.realpath(COHORT), "run", config])
        # Slurm opens the output file in the run directory before the script starts.
        self.assertTrue(os.path.isdir(os.path.join(exp, "runs", "sb", "workers")))
        write_config("local", '["cpu:0"]')
        self.fails("sbatch", config, mentions=['launcher = "slurm"'])
        self.fails("sbatch", os.path.join(exp, "missing.toml"), mentions=["missing.toml"])


class MemberCommands(CohortCase):
    """`cohort train` and `cohort eval` in the forms the docs give."""

    def setUp(self):
        super().setUp()
        self.cohort("data", "init", self.store)
        self.import_fmnist(2000)
        self.import_fmnist(1000, table="test", split="t10k")

    def test_train_then_eval_then_predict(self):
        ckpt = os.path.join(self.dir, "m.ckpt")
        out = self.cohort("train", "--store", self.store, "--table", "train", "--model",
                          "dense 256 relu, dropout 0.1, dense 10", "--epochs", "3", "--seed",
                          "4", "--out", ckpt).stdout
        self.assertIn("epoch   3/3", out)
        self.assertIn("wrote " + ckpt, out)
        metrics = json.loads(self.cohort("eval", "--store", self.store, "--table", "test",
                                         "--checkpoint", ckpt, "--json").stdout)
        self.assertEqual(metrics["count"], 1000)
        self.assertGreater(metrics["accuracy"], 0.6)
        self.assertGreater(metrics["nll"], 0)
        for key in ("brier", "ece"):
            self.assertIn(key, metrics)
        pred = os.path.join(self.dir, "p.npy")
        self.cohort("predict", "--store", self.store, "--table", "test", "--checkpoint", ckpt,
                    "--out", pred)
        p = np.load(pred)
        self.assertEqual(p.shape, (1000, 10))
        np.testing.assert_allclose(p.sum(1), 1, atol=1e-4)
        labels = read_idx(f"{FMNIST}/t10k-labels-idx1-ubyte.gz", 1000)
        self.assertAlmostEqual((p.argmax(1) == labels).mean(), metrics["accuracy"], places=9)

    def test_member_errors_are_one_line(self):
        ckpt = os.path.join(self.dir, "m.ckpt")
        self.fails("train", "--store", self.store, "--table", "train", "--model",
                   "dense 64 relu, maxpool 2, dense 10", "--member", "m4", "--out", ckpt,
                   mentions=["member m4", "maxpool 2"])
        self.fails("train", "--store", self.store, "--table", "nope", "--model", "dense 10",
                   "--out", ckpt, mentions=["nope"])
        self.fails("eval", "--store", self.store, "--table", "test", "--checkpoint", ckpt,
                   mentions=[ckpt])
        self.assertFalse(os.path.exists(ckpt))


if __name__ == "__main__":
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(SCRATCH, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
