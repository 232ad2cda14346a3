#!/usr/bin/env python3
"""End-to-end tests of `cohort run` and `cohort status`: the closed loop on small real data,
with real worker processes that are killed, stopped and interrupted, and a controller that is
SIGKILLed at random moments and at named crash points, then resumed.

Run by ctest as: /usr/bin/python3 tests/loop_test.py COHORT_BINARY SCRATCH_DIR
"""
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

import numpy as np

COHORT = None
SCRATCH = None
# Stretches the wall-clock limits a native member must beat (heartbeat and attempt timeouts);
# scripts/sanitize sets 4: a worker under AddressSanitizer starts and trains 2-3x slower.
TIME_SCALE = float(os.environ.get("COHORT_TEST_TIME_SCALE", "1"))
FMNIST = "/usr/share/datasets/fashion-mnist"
SOURCE = None  # the shared source store, built once


def cohort(*args, check=True, timeout=300, env=None):
    proc = subprocess.run([COHORT, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"cohort {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def build_source(path, train=300, pool=1200, test=300):
    shutil.rmtree(path, ignore_errors=True)
    cohort("data", "init", path)
    cohort("data", "import", path, "--table", "train", "--limit", str(train + pool), "--idx",
           f"{FMNIST}/train-images-idx3-ubyte.gz", f"{FMNIST}/train-labels-idx1-ubyte.gz")
    cohort("data", "import", path, "--table", "test", "--limit", str(test), "--idx",
           f"{FMNIST}/t10k-images-idx3-ubyte.gz", f"{FMNIST}/t10k-labels-idx1-ubyte.gz")
    cohort("data", "split", path, "--from", "train", "--to", "pool", "--count", str(pool),
           "--seed", "1")


MEMBERS = [
    ("mlp-a", "dense 32 relu, dense 10", 1),
    ("mlp-b", "dense 24 tanh, dropout 0.1, dense 10", 2),
    ("cnn-c", "conv2d 4 3 1 1 relu, maxpool 2, flatten, dense 10", 3),
]


def write_config(dir, name="loop", members=MEMBERS, devices=2, rounds=3, k=100, strategy="bald",
                 epochs=2, extra_member="", failure="", stop="", source=None, top="", oracle="",
                 heartbeat_timeout=20, acquisition=""):
    os.makedirs(dir, exist_ok=True)
    devs = ", ".join(f'"cpu:{i}"' for i in range(devices))
    text = f'''name = "{name}"
devices = [{devs}]
threads_per_cpu_device = 1
{top}
[store]
source = "{source or SOURCE}"

[defaults]
epochs = {epochs}
batch_size = 32
classes = 10
standardize = true
'''
    for mname, model, seed in members:
        text += f'\n[[member]]\nname = "{mname}"\nmodel = "{model}"\nseed = {seed}\n'
    text += extra_member
    text += f'''
[acquisition]
strategy = "{strategy}"
batch_size = {k}
seed = 7
{acquisition}
{oracle}
[stop]
max_rounds = {rounds}
{stop}
[failure]
heartbeat_timeout_s = {heartbeat_timeout * TIME_SCALE:g}
{failure}
'''
    path = os.path.join(dir, "loop.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def edit_config(path, *edits):
    """Applies (old, new) replacements to the config at `path`. Each `old` must be there: a
    replacement that matched nothing would leave a test testing something else."""
    with open(path) as f:
        text = f.read()
    for old, new in edits:
        if old not in text:
            raise AssertionError(f"{path}: {old!r} is not in the config")
        text = text.replace(old, new)
    with open(path, "w") as f:
        f.write(text)
    return path


def journal(run_dir):
    db = sqlite3.connect(f"file:{run_dir}/run.db?mode=ro", uri=True, timeout=10)
    db.row_factory = sqlite3.Row
    return db


def outcome(run_dir):
    """Everything a resumed run must reproduce exactly: per round the generations, labels,
    ensemble and member metrics and picks; the final store's tables and ids."""
    db = journal(run_dir)
    rounds = [tuple(r) for r in db.execute(
        "SELECT round, input_generation, output_generation, status, labels_total, test_accuracy,"
        " test_nll, test_brier, test_ece, test_temperature, test_nll_calibrated,"
        " test_ece_calibrated FROM rounds ORDER BY round")]
    members = [tuple(r) for r in db.execute(
        "SELECT round, member, metric, value FROM member_metrics ORDER BY round, member, metric")]
    picks = [tuple(r) for r in db.execute(
        "SELECT round, rank, sample_id, score FROM acquisitions ORDER BY round, rank")]
    db.close()
    store = f"{run_dir}/store"
    info = json.loads(cohort("data", "info", store, "--json").stdout)
    tables = {name: t["rows"] for name, t in info["tables"].items()}
    return {"rounds": rounds, "members": members, "picks": picks,
            "generation": info["generation"], "tables": tables}


class LoopCase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(SCRATCH, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def start(self, config, env=None):
        return subprocess.Popen([COHORT, "run", config], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    def run_loop(self, config, expect=0, env=None, timeout=300):
        # A wall-clock limit like the others: stretched under the sanitizers (TIME_SCALE),
        # where a resumed three-member run took 280-300 s of the 300 on a loaded machine.
        proc = cohort("run", config, check=False, env=env, timeout=timeout * TIME_SCALE)
        self.assertEqual(proc.returncode, expect, f"{proc.stdout}\n{proc.stderr}")
        self.assertNotIn("terminate called", proc.stderr)
        return proc

    def status(self, run_dir):
        return json.loads(cohort("status", run_dir, "--json").stdout)

    def interrupt_twice(self, proc):
        """Ctrl-C twice, as a person does: two signals sent at once may arrive as one."""
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)

    def wait_for(self, predicate, timeout=120, what="condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        self.fail(f"timed out waiting for {what}")

    def running_attempt(self, run_dir, member=None):
        if not os.path.exists(f"{run_dir}/run.db"):
            return None
        try:
            db = journal(run_dir)
            q = "SELECT * FROM attempts WHERE status = 'running' AND pid IS NOT NULL"
            args = ()
            if member:
                q += " AND member = ?"
                args = (member,)
            row = db.execute(q, args).fetchone()
            db.close()
            return dict(row) if row else None
        except sqlite3.Error:
            return None


class ClosedLoop(LoopCase):
    def test_three_rounds_complete_every_generation_verifies(self):
        config = write_config(self.dir, rounds=3, k=100)
        before = json.loads(cohort("data", "info", SOURCE, "--json").stdout)
        proc = self.run_loop(config)
        self.assertIn("finished", proc.stdout)
        run_dir = os.path.join(self.dir, "runs", "loop")

        s = self.status(run_dir)
        self.assertEqual(s["status"], "finished")
        self.assertIsNone(s["controller_pid"])
        rounds = s["rounds"]
        self.assertEqual([r["round"] for r in rounds], [0, 1, 2])
        self.assertTrue(all(r["status"] == "done" for r in rounds))
        self.assertEqual([r["labels"] for r in rounds], [300, 400, 500])
        # Each round trains on what the previous one committed; the last does not acquire.
        self.assertEqual(rounds[1]["input_generation"], rounds[0]["output_generation"])
        self.assertEqual(rounds[2]["input_generation"], rounds[1]["output_generation"])
        self.assertEqual(rounds[2]["output_generation"], rounds[2]["input_generation"])
        for r in rounds:
            self.assertGreater(r["test_accuracy"], 0.3)  # 10 classes: chance is 0.1
            self.assertGreater(r["test_nll"], 0)
            self.assertEqual([m["status"] for m in r["members"]], ["done"] * 3)
            for m in r["members"]:
                self.assertIn("accuracy", m["test"])

        store = os.path.join(run_dir, "store")
        verify = cohort("data", "verify", store)
        self.assertIn("ok", verify.stdout.lower())
        log = json.loads(cohort("data", "log", store, "--json").stdout)
        self.assertEqual(len(log), 3)  # the clone and two commits
        info = json.loads(cohort("data", "info", store, "--json").stdout)
        self.assertEqual(info["tables"]["train"]["rows"], 500)
        self.assertEqual(info["tables"]["pool"]["rows"], 1000)
        # The source store is untouched.
        after = json.loads(cohort("data", "info", SOURCE, "--json").stdout)
        self.assertEqual(before, after)

        db = journal(run_dir)
        picks = db.execute("SELECT round, count(*), count(DISTINCT sample_id) FROM acquisitions "
                           "GROUP BY round ORDER BY round").fetchall()
        self.assertEqual([tuple(p) for p in picks], [(0, 100, 100), (1, 100, 100)])
        # The picked ids are exactly the ones the commits moved.
        moved = json.loads(cohort("data", "diff", store, str(rounds[0]["input_generation"]),
                                  str(rounds[0]["output_generation"]), "--json").stdout)
        round0 = sorted(r[0] for r in db.execute(
            "SELECT sample_id FROM acquisitions WHERE round = 0"))
        self.assertEqual(sorted(moved["tables"]["train"]["added"]), round0)
        epochs = db.execute("SELECT count(*) FROM epochs").fetchone()[0]
        self.assertEqual(epochs, 3 * 3 * 2)  # rounds x members x epochs
        # Two devices really trained at once: some attempts on different devices overlap.
        rows = db.execute("SELECT device, julianday(started_at) AS a, julianday(ended_at) AS b "
                          "FROM attempts WHERE round = 0").fetchall()
        overlap = any(x["device"] != y["device"] and x["a"] < y["b"] and y["a"] < x["b"]
                      for x in rows for y in rows)
        self.assertTrue(overlap, [tuple(r) for r in rows])
        self.assertEqual({r["device"] for r in rows}, {"cpu:0", "cpu:1"})
        db.close()
        # Member outputs and logs live in the run directory.
        attempt = os.path.join(run_dir, "members", "mlp-a", "round-0000", "attempt-1")
        for f in ("checkpoint.pt", "predictions-pool.npy", "predictions-test.npy", "worker.log"):
            self.assertTrue(os.path.exists(os.path.join(attempt, f)), f)

        # The last round does not predict the pool: nothing is acquired after it.
        db = journal(run_dir)
        last = [json.loads(r[0]) for r in db.execute(
            "SELECT predictions_json FROM attempts WHERE round = 2")]
        db.close()
        self.assertEqual([sorted(p) for p in last], [["test"]] * 3)

        # Rerunning a finished run changes nothing; more rounds continue it (round 2's members
        # train again, identically, to predict the pool it now acquires from).
        first = outcome(run_dir)
        self.run_loop(config)
        self.assertEqual(outcome(run_dir), first)
        write_config(self.dir, rounds=4, k=100)
        proc = self.run_loop(config)
        # The header of the round that trains again names its labels and the last accuracy.
        self.assertRegex(proc.stdout, r"round 2  generation \d+  labels 500  last test accuracy ")
        self.assertNotIn("labels 0", proc.stdout)
        s = self.status(run_dir)
        self.assertEqual([r["labels"] for r in s["rounds"]], [300, 400, 500, 600])
        self.assertEqual(s["status"], "finished")
        self.assertEqual([m["attempts"] for m in s["rounds"][2]["members"]], [2, 2, 2])
        self.assertEqual(s["rounds"][2]["test_accuracy"], first["rounds"][2][5])

    def test_members_per_device_packs_members_on_one_device(self):
        config = write_config(self.dir, rounds=1, devices=1, top="members_per_device = 2",
                              epochs=100)
        self.run_loop(config)
        db = journal(os.path.join(self.dir, "runs", "loop"))
        rows = db.execute("SELECT member, device, pid, julianday(started_at) AS a, "
                          "julianday(ended_at) AS b FROM attempts").fetchall()
        db.close()
        self.assertEqual({r["device"] for r in rows}, {"cpu:0"})
        self.assertEqual(len({r["pid"] for r in rows}), 2)  # two workers on the device
        overlap = any(x["a"] < y["b"] and y["a"] < x["b"] and x["pid"] != y["pid"]
                      for x in rows for y in rows)
        self.assertTrue(overlap, [tuple(r) for r in rows])

    def test_label_budget_and_text_status(self):
        config = write_config(self.dir, rounds=10, k=150, strategy="entropy",
                              stop="label_budget = 200", members=MEMBERS[:1], devices=1)
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        s = self.status(run_dir)
        # 150, then the 50 left of the budget, then a round that trains on them and stops.
        self.assertEqual([r["labels"] for r in s["rounds"]], [300, 450, 500])
        text = cohort("status", run_dir).stdout
        self.assertIn("run loop: finished", text)
        self.assertIn("mlp-a", text)


ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outside", "oracle.py")


class CommandOracle(LoopCase):
    def oracle_config(self):
        return write_config(self.dir, rounds=2, k=50, members=MEMBERS[:2],
                            oracle=f'[oracle]\nkind = "command"\n'
                                   f'command = ["/usr/bin/python3", "{ORACLE}"]\n')

    def test_labels_come_from_the_program(self):
        config = self.oracle_config()
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        oracle_dir = os.path.join(run_dir, "oracle", "round-0000")
        ids = np.load(os.path.join(oracle_dir, "ids.npy"))
        self.assertEqual(len(ids), 50)
        self.assertEqual(np.load(os.path.join(oracle_dir, "features.npy")).shape, (50, 28, 28))
        with open(os.path.join(oracle_dir, "oracle.log")) as f:
            self.assertIn("labelling 50 samples of round 0", f.read())
        prefix = os.path.join(self.dir, "export")
        cohort("data", "export", os.path.join(run_dir, "store"), "--table", "train",
               "--out", prefix)
        train_ids, train_y = np.load(prefix + ".ids.npy"), np.load(prefix + ".y.npy")
        given = dict(zip(train_ids.tolist(), train_y.tolist()))
        self.assertEqual([given[i] for i in ids.tolist()], [i % 10 for i in ids.tolist()])

    def test_a_failing_or_short_answer_fails_the_round_clearly(self):
        for mode, mention in (("fail", "exited with status 1"), ("short", "49 labels for 50")):
            with self.subTest(mode):
                shutil.rmtree(self.dir, ignore_errors=True)
                config = self.oracle_config()
                proc = self.run_loop(config, expect=1, env=dict(os.environ, ORACLE_MODE=mode))
                err = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
                self.assertEqual(len(err), 1, proc.stderr)
                self.assertIn("oracle", err[0])
                self.assertIn(mention, err[0])
                run_dir = os.path.join(self.dir, "runs", "loop")
                self.assertFalse(os.path.exists(os.path.join(run_dir, "oracle", "round-0000",
                                                             "labels.npy")))
                # Fixed, the same run resumes: round 0 is not retrained.
                self.run_loop(config)
                db = journal(run_dir)
                n = db.execute("SELECT count(*) FROM attempts WHERE round = 0").fetchone()[0]
                db.close()
                self.assertEqual(n, 2)


    def test_an_answer_outside_the_classes_is_never_committed(self):
        config = self.oracle_config()
        proc = self.run_loop(config, expect=1, env=dict(os.environ, ORACLE_MODE="range"))
        err = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
        self.assertEqual(len(err), 1, proc.stderr)
        self.assertIn("2 label(s) outside [0, 10) at sample id", err[0])
        self.assertIn("(label 99)", err[0])
        run_dir = os.path.join(self.dir, "runs", "loop")
        s = self.status(run_dir)
        self.assertEqual(s["rounds"][0]["status"], "failed")
        self.assertEqual(s["store_generation"], s["rounds"][0]["input_generation"])
        self.assertIn("ok", cohort("data", "verify", os.path.join(run_dir, "store")).stdout)
        # Fixed, the run goes on and finishes.
        self.run_loop(config)
        self.assertEqual(self.status(run_dir)["status"], "finished")

    def test_a_hanging_oracle_is_killed_at_its_timeout(self):
        config = write_config(self.dir, rounds=2, k=50, members=MEMBERS[:1], strategy="entropy",
                              oracle=f'[oracle]\nkind = "command"\ntimeout_s = 2\n'
                                     f'command = ["/usr/bin/python3", "{ORACLE}"]\n')
        t0 = time.monotonic()
        proc = self.run_loop(config, expect=1, env=dict(os.environ, ORACLE_MODE="hang"))
        self.assertIn("did not answer within 2 s (oracle.timeout_s)", proc.stderr)
        self.assertLess(time.monotonic() - t0, 120)

    def test_ctrl_c_twice_while_the_oracle_runs_stops_resumably(self):
        config = self.oracle_config()
        proc = self.start(config, env=dict(os.environ, ORACLE_MODE="hang"))
        run_dir = os.path.join(self.dir, "runs", "loop")
        self.wait_for(lambda: os.path.exists(os.path.join(run_dir, "oracle", "round-0000",
                                                          "oracle.log")), what="the oracle")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130)  # as docs/cli.md says
        self.assertEqual(self.status(run_dir)["status"], "stopped")
        self.run_loop(config)
        self.assertEqual(self.status(run_dir)["status"], "finished")


class StoreLock(LoopCase):
    def test_a_writer_outside_the_run_is_refused_while_it_runs(self):
        config = write_config(self.dir, rounds=1, members=MEMBERS[:1], devices=1,
                              strategy="entropy", epochs=200)
        proc = self.start(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        try:
            self.wait_for(lambda: self.running_attempt(run_dir), what="a running attempt")
            remove = cohort("data", "remove", os.path.join(run_dir, "store"), "--table", "pool",
                            "--ids", "0", check=False)
            self.assertEqual(remove.returncode, 1, remove.stderr)
            self.assertIn("held by another writer (pid", remove.stderr)
        finally:
            self.interrupt_twice(proc)
            proc.communicate(timeout=120)
        # The other way round: a run whose store another writer holds does not start.
        locker = subprocess.Popen(
            ["/usr/bin/python3", "-c",
             "import fcntl, sys, time; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_EX)"
             "; print('locked', flush=True); time.sleep(120)",
             os.path.join(run_dir, "store", "LOCK")], stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(locker.stdout.readline().strip(), "locked")
            blocked = self.run_loop(config, expect=1)
            self.assertIn("a run keeps its store to itself while it runs", blocked.stderr)
        finally:
            locker.kill()
            locker.wait()
        # Once the other writer is gone, the run goes on from where it was stopped.
        self.run_loop(config)
        self.assertEqual(self.status(run_dir)["status"], "finished")


class JournalCare(LoopCase):
    """`cohort status` writes nothing; a damaged journal is found and can be recovered."""

    def finished_run(self):
        config = write_config(self.dir, rounds=2, k=50, members=MEMBERS[:2])
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        # Fold the WAL into run.db, as a controller's last close does.
        db = sqlite3.connect(os.path.join(run_dir, "run.db"))
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        for suffix in ("-wal", "-shm"):
            if os.path.exists(os.path.join(run_dir, "run.db" + suffix)):
                os.remove(os.path.join(run_dir, "run.db" + suffix))
        return config, run_dir

    def test_status_on_a_read_only_run_directory_and_on_an_empty_journal(self):
        config, run_dir = self.finished_run()
        before = self.status(run_dir)
        mount = os.path.join(self.dir, "ro")
        os.makedirs(mount)
        if subprocess.run(["mount", "--bind", run_dir, mount], capture_output=True).returncode:
            self.skipTest("cannot bind-mount (not root)")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", mount], check=True)
            after = self.status(mount)
            # The same rounds, seen through the mount's path.
            self.assertEqual(json.dumps(after["rounds"]).replace(mount, run_dir),
                             json.dumps(before["rounds"]))
        finally:
            subprocess.run(["umount", mount], check=True)
        with open(os.path.join(run_dir, "run.db"), "w"):
            pass  # 0 bytes
        proc = cohort("status", run_dir, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("the journal is an empty file", proc.stderr)
        self.assertEqual(os.path.getsize(os.path.join(run_dir, "run.db")), 0)

    def test_a_damaged_journal_is_refused_and_the_documented_recovery_works(self):
        config, run_dir = self.finished_run()
        before = self.status(run_dir)
        path = os.path.join(run_dir, "run.db")
        with open(path, "r+b") as f:  # one damaged page (a cell offset out of range)
            f.seek(7 * 4096 + 8)
            f.write(b"\x05" * 4)
        for args in (["status", run_dir], ["run", config]):
            proc = cohort(*args, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertIn("the journal is damaged (SQLite quick_check:", proc.stderr)
            self.assertIn("A damaged journal", proc.stderr)
        # docs/journal.md, "A damaged journal", step by step.
        damaged = os.path.join(self.dir, "damaged-run.db")
        os.rename(path, damaged)
        dump = subprocess.run(["sqlite3", damaged, ".dump"], capture_output=True,
                              check=True).stdout
        subprocess.run(["sqlite3", path], input=dump, capture_output=True)
        # The version the document says to set, so the two cannot drift apart.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                               "journal.md")) as f:
            version = re.search(r"PRAGMA user_version = (\d+)'", f.read()).group(1)
        subprocess.run(["sqlite3", path, f"PRAGMA user_version = {version}"], check=True)
        after = self.status(run_dir)
        self.assertEqual(after["status"], "finished")
        self.assertEqual(len(after["rounds"]), len(before["rounds"]))
        proc = self.run_loop(config)
        self.assertIn("finished", proc.stdout)


class BatchAcquisition(LoopCase):
    """Cold start, a stochastic batch and augmented members (docs/acquisition.md)."""

    def config(self, d, augment="augment = { shift = 2, flip = true, erase = 0.25 }"):
        path = write_config(d, rounds=3, k=100, strategy="bald", epochs=1, devices=2,
                            acquisition='selection = "softrank"\ncold_start_rounds = 1\n')
        return edit_config(path, ('name = "cnn-c"\n', f'name = "cnn-c"\n{augment}\n'))

    def picks(self, run_dir):
        db = journal(run_dir)
        rows = db.execute("SELECT round, sample_id, score FROM acquisitions "
                          "ORDER BY round, rank").fetchall()
        db.close()
        return rows

    def test_cold_start_then_a_softrank_batch_is_seeded_and_reproducible(self):
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        self.run_loop(self.config(a))
        self.run_loop(self.config(b))
        run_a = os.path.join(a, "runs", "loop")
        picks = self.picks(run_a)
        # Augmentation and the draw are seeded: a second run picks the same samples.
        self.assertEqual(picks, self.picks(os.path.join(b, "runs", "loop")))
        log = cohort("data", "log", os.path.join(run_a, "store")).stdout
        self.assertIn("round 0: 100 samples by random", log)
        self.assertIn("round 1: 100 samples by bald", log)
        round1 = [score for r, _, score in picks if r == 1]
        self.assertEqual(len(round1), 100)
        # Drawn, not the top 100: the scores do not come in falling order.
        self.assertNotEqual(round1, sorted(round1, reverse=True))
        self.assertTrue(all(score == 0 for r, _, score in picks if r == 0))

    def test_augmenting_what_is_not_an_image_of_that_size_is_refused(self):
        proc = self.run_loop(self.config(self.dir, augment="augment = { shift = 28 }"), expect=1)
        self.assertIn("member[3].augment: augment.shift 28 is not smaller than the image's side "
                      "(features [28, 28])", proc.stderr)


class BatchBaldAndDropoutPasses(LoopCase):
    """strategy = "batchbald" over members and a member's MC-dropout passes (docs/acquisition.md
    "BatchBALD", docs/config.md dropout_passes)."""

    def config(self, d, passes=4):
        path = write_config(d, rounds=2, k=20, strategy="batchbald", epochs=1, devices=2,
                            acquisition="batchbald_samples = 200\nbatchbald_candidates = 300\n")
        return edit_config(path,
                           ('name = "mlp-b"\n', f'name = "mlp-b"\ndropout_passes = {passes}\n'))

    def test_picks_start_at_bald_over_every_pass_and_repeat_exactly(self):
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        self.run_loop(self.config(a))
        self.run_loop(self.config(b))
        run = os.path.join(a, "runs", "loop")
        members = os.path.join(run, "members")
        attempt = "round-0000/attempt-1"
        passes = np.load(os.path.join(members, "mlp-b", attempt, "predictions-pool-passes.npy"))
        self.assertEqual(passes.shape, (4, 1200, 10))
        self.assertEqual(passes.dtype, np.float32)
        np.testing.assert_allclose(passes.sum(axis=2), 1.0, atol=1e-4)
        # Dropout is on: the passes differ from each other and from the deterministic pass.
        plain = np.load(os.path.join(members, "mlp-b", attempt, "predictions-pool.npy"))
        self.assertGreater(np.abs(passes[0] - passes[1]).max(), 1e-3)
        self.assertGreater(np.abs(passes[0] - plain).max(), 1e-3)
        # Members without passes write none.
        self.assertFalse(os.path.exists(
            os.path.join(members, "mlp-a", attempt, "predictions-pool-passes.npy")))

        # The first pick is BALD's best over the 6 samples: mlp-a, 4 passes of mlp-b, cnn-c.
        samples = np.concatenate([
            np.load(os.path.join(members, "mlp-a", attempt, "predictions-pool.npy"))[None],
            passes,
            np.load(os.path.join(members, "cnn-c", attempt, "predictions-pool.npy"))[None],
        ]).astype(np.float64)

        def entropy(p):
            return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(axis=-1)

        bald = entropy(samples.mean(axis=0)) - entropy(samples).mean(axis=0)
        db = journal(run)
        picks = db.execute("SELECT rank, sample_id, score FROM acquisitions WHERE round = 0 "
                           "ORDER BY rank").fetchall()
        predict_s, generation = db.execute(
            "SELECT predict_s, input_generation FROM rounds WHERE round = 0").fetchone()
        db.close()
        self.assertEqual(len(picks), 20)
        self.assertEqual(len({p["sample_id"] for p in picks}), 20)
        prefix = os.path.join(self.dir, "pool0")
        cohort("data", "export", os.path.join(run, "store"), "--table", "pool", "--out", prefix,
               "--generation", str(generation))
        pool_ids = np.load(prefix + ".ids.npy")
        self.assertEqual(len(pool_ids), 1200)
        best = int(np.argmax(bald))
        self.assertEqual(picks[0]["sample_id"], pool_ids[best])
        self.assertAlmostEqual(picks[0]["score"], bald[best], places=5)
        # Each later pick's score is its BatchBALD gain given those before: below BALD's.
        later = [p["score"] for p in picks[1:]]
        self.assertTrue(all(0 <= g <= bald.max() + 1e-9 for g in later))
        self.assertGreater(predict_s, 0)
        # Seeded masks and label draws: a second run picks the same samples in the same order.
        other = journal(os.path.join(b, "runs", "loop"))
        again = other.execute("SELECT rank, sample_id, score FROM acquisitions "
                              "ORDER BY round, rank").fetchall()
        other.close()
        db = journal(run)
        first = db.execute("SELECT rank, sample_id, score FROM acquisitions "
                           "ORDER BY round, rank").fetchall()
        db.close()
        self.assertEqual([tuple(r) for r in first], [tuple(r) for r in again])

    def test_passes_of_a_member_without_dropout_are_refused(self):
        path = edit_config(self.config(self.dir), ("dropout_passes = 4", ""),
                           ('name = "mlp-a"\n', 'name = "mlp-a"\ndropout_passes = 3\n'))
        proc = self.run_loop(path, expect=1)
        self.assertIn("member[1].dropout_passes: mlp-a's model 'dense 32 relu, dense 10' has no "
                      "dropout layer", proc.stderr)


MASK64 = (1 << 64) - 1


def splitmix64(state):
    """(next state, output) of splitmix64, as src/common/splitmix.h."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def round_seed(seed, rnd):
    z = (seed + 0x9E3779B97F4A7C15 * (rnd + 1)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def pool_sample(total, n, acquisition_seed, rnd):
    """The pool rows round `rnd` scores with acquisition.pool_sample = n: an independent
    implementation of PoolSampleOfRound (selection sampling from splitmix64)."""
    state = round_seed(acquisition_seed ^ 0x6A09E667F3BCC908, rnd)
    rows = []
    for i in range(total):
        if len(rows) == n:
            break
        state, out = splitmix64(state)
        if (out >> 11) * 2.0 ** -53 * (total - i) < n - len(rows):
            rows.append(i)
    return rows


class PoolSample(LoopCase):
    """acquisition.pool_sample: the members predict, and acquisition scores, a seeded sample of
    the pool each round (docs/acquisition.md)."""

    def test_members_predict_only_the_sample_and_the_picks_come_from_it(self):
        path = write_config(self.dir, rounds=2, k=30, strategy="bald", epochs=1, devices=2,
                            acquisition="pool_sample = 200\n")
        self.run_loop(path)
        run = os.path.join(self.dir, "runs", "loop")
        db = journal(run)
        generation = db.execute(
            "SELECT input_generation FROM rounds WHERE round = 0").fetchone()[0]
        picks = [r["sample_id"] for r in db.execute(
            "SELECT sample_id FROM acquisitions WHERE round = 0 ORDER BY rank")]
        db.close()
        prefix = os.path.join(self.dir, "pool0")
        cohort("data", "export", os.path.join(run, "store"), "--table", "pool", "--out", prefix,
               "--generation", str(generation))
        pool_ids = np.load(prefix + ".ids.npy")
        rows = pool_sample(len(pool_ids), 200, 7, 0)
        self.assertEqual(len(rows), 200)
        sample_ids = pool_ids[rows]
        stacked = []
        for member in ("mlp-a", "mlp-b", "cnn-c"):
            p = np.load(os.path.join(run, "members", member, "round-0000", "attempt-1",
                                     "predictions-pool.npy"))
            self.assertEqual(p.shape, (200, 10))
            stacked.append(p.astype(np.float64))
        stacked = np.array(stacked)
        self.assertEqual(len(picks), 30)
        self.assertTrue(set(picks) <= set(sample_ids.tolist()))

        def entropy(p):
            return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(axis=-1)

        bald = entropy(stacked.mean(axis=0)) - entropy(stacked).mean(axis=0)
        self.assertEqual(picks[0], sample_ids[int(np.argmax(bald))])

    def test_pool_sample_below_the_batch_is_refused(self):
        path = write_config(self.dir, rounds=2, k=30, strategy="bald", epochs=1, devices=2,
                            acquisition="pool_sample = 20\n")
        proc = self.run_loop(path, expect=1)
        self.assertIn("acquisition.pool_sample: 20 is below batch_size 30", proc.stderr)


class Precision(LoopCase):
    """precision and pool_precision (docs/models.md): a bf16 member computes in bfloat16 and
    its checkpoint says so; pool_precision = "bf16" scores only the pool in bfloat16."""

    def test_members_predict_in_the_precision_they_are_given(self):
        path = edit_config(
            write_config(self.dir, rounds=2, k=30, strategy="bald", epochs=1, devices=2),
            ('seed = 2\n', 'seed = 2\npool_precision = "bf16"\n'),
            ('seed = 3\n', 'seed = 3\nprecision = "bf16"\n'))
        proc = self.run_loop(path)
        # On a CPU without oneDNN's bf16 instructions the run says at start that bf16 is
        # emulated there, naming both members; on one with them it says nothing.
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split())
        warning = ("warning: members mlp-b, cnn-c compute in bf16 (precision or pool_precision) "
                   "on CPU devices, but this CPU lacks")
        if {"avx512bw", "avx512vl", "avx512dq"} <= flags:
            self.assertNotIn("compute in bf16", proc.stdout + proc.stderr)
        else:
            self.assertIn(warning, proc.stdout + proc.stderr)
        run = os.path.join(self.dir, "runs", "loop")
        db = journal(run)
        generation = db.execute(
            "SELECT input_generation FROM rounds WHERE round = 0").fetchone()[0]
        db.close()

        def predict(member, table, precision=None):
            attempt = os.path.join(run, "members", member, "round-0000", "attempt-1")
            out = os.path.join(self.dir, f"{member}-{table}-{precision}.npy")
            args = ["predict", "--checkpoint", os.path.join(attempt, "checkpoint.pt"),
                    "--store", os.path.join(run, "store"), "--generation", str(generation),
                    "--table", table, "--out", out]
            cohort(*args, *(["--precision", precision] if precision else []))
            return np.load(out), np.load(os.path.join(attempt, f"predictions-{table}.npy"))

        # mlp-b trains in fp32 and scores the pool in bf16; its test predictions stay fp32.
        again, pool = predict("mlp-b", "pool", "bf16")
        self.assertTrue(np.array_equal(again, pool))
        fp32, _ = predict("mlp-b", "pool", "fp32")
        self.assertFalse(np.array_equal(fp32, pool), "the pool was not scored in bf16")
        self.assertGreater((fp32.argmax(1) == pool.argmax(1)).mean(), 0.95)
        own, test = predict("mlp-b", "test")
        self.assertTrue(np.array_equal(own, test))
        fp32, _ = predict("mlp-b", "test", "fp32")
        self.assertTrue(np.array_equal(fp32, test))
        # cnn-c trains in bf16 and predicts in bf16 everywhere by default.
        own, test = predict("cnn-c", "test")
        self.assertTrue(np.array_equal(own, test))
        fp32, _ = predict("cnn-c", "test", "fp32")
        self.assertFalse(np.array_equal(fp32, test), "cnn-c did not predict in bf16")


class Failures(LoopCase):
    def signal_a_training_worker(self, member, sig, after_s, **config_args):
        """Runs a one-round loop, sends `sig` to the worker training `member` once it has been
        at it `after_s` seconds, waits for the run to finish, and returns the member's attempts
        and the run's stdout."""
        config = write_config(self.dir, rounds=1, epochs=300, members=MEMBERS[:2], **config_args)
        run_dir = os.path.join(self.dir, "runs", "loop")
        proc = self.start(config)
        attempt = self.wait_for(lambda: self.running_attempt(run_dir, member), what="attempt")
        time.sleep(after_s)
        os.kill(attempt["pid"], sig)
        out, err = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 0, out + err)
        db = journal(run_dir)
        rows = db.execute("SELECT attempt, status, exit FROM attempts WHERE member = ? "
                          "ORDER BY attempt", (member,)).fetchall()
        self.assertEqual(db.execute("SELECT status FROM rounds").fetchone()[0], "done")
        db.close()
        return rows, out

    def test_killed_worker_is_retried(self):
        rows, out = self.signal_a_training_worker("mlp-a", signal.SIGKILL, 0.5)
        self.assertEqual(len(rows), 2, [tuple(r) for r in rows])
        self.assertEqual(rows[0]["status"], "failed")
        self.assertIn("signal 9", rows[0]["exit"])
        self.assertEqual(rows[1]["status"], "done")
        self.assertIn("retrying", out)

    def test_stopped_worker_is_killed_by_heartbeat_timeout(self):
        rows, _ = self.signal_a_training_worker("mlp-b", signal.SIGSTOP, 0.3,
                                                heartbeat_timeout=3)
        self.assertGreaterEqual(len(rows), 2, [tuple(r) for r in rows])
        self.assertEqual(rows[0]["status"], "killed")
        self.assertIn("heartbeat", rows[0]["exit"])
        self.assertEqual(rows[-1]["status"], "done")

    def test_a_member_past_the_memory_limit_fails_clearly_and_the_others_go_on(self):
        if os.environ.get("COHORT_ASAN") == "1":
            # The limit is RLIMIT_AS, and AddressSanitizer reserves terabytes of address space
            # for its shadow memory at start: under ASan no worker could start at all.
            self.skipTest("an address-space limit cannot bound an AddressSanitizer process")
        huge = '\n[[member]]\nname = "huge"\nmodel = "dense 1000000, dense 10"\nseed = 5\n'
        config = write_config(self.dir, rounds=1, members=MEMBERS[:1], extra_member=huge,
                              strategy="entropy",
                              failure="retries = 0\nmin_members = 1\nmemory_limit_gb = 2")
        t0 = time.monotonic()
        self.run_loop(config)
        self.assertLess(time.monotonic() - t0, 120)
        rows = {r["member"]: r for r in journal(os.path.join(self.dir, "runs", "loop")).execute(
            "SELECT member, status, exit FROM attempts").fetchall()}
        self.assertEqual(rows["mlp-a"]["status"], "done")  # a normal member fits
        self.assertEqual(rows["huge"]["status"], "failed")
        self.assertIn("exceeded its memory limit of 2 GB (failure.memory_limit_gb)",
                      rows["huge"]["exit"])

    def test_member_out_of_retries_fails_the_round(self):
        bad = '\n[[member]]\nname = "diverges"\nmodel = "dense 10"\nseed = 4\n' \
              'optimizer = { name = "sgd", learning_rate = 1e38 }\n'
        config = write_config(self.dir, rounds=2, members=MEMBERS[:1], extra_member=bad,
                              failure="retries = 1")
        proc = self.run_loop(config, expect=1)
        err = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
        self.assertEqual(len(err), 1, proc.stderr)
        self.assertIn("round 0 failed", err[0])
        self.assertIn("diverges", err[0])
        run_dir = os.path.join(self.dir, "runs", "loop")
        s = self.status(run_dir)
        self.assertEqual(s["status"], "failed")
        members = {m["name"]: m for m in s["rounds"][0]["members"]}
        self.assertEqual(members["diverges"]["attempts"], 2)
        self.assertEqual(members["diverges"]["status"], "failed")
        self.assertEqual(members["mlp-a"]["status"], "done")
        # With min_members = 1 the same run proceeds on the member that works; mlp-a keeps
        # its finished attempt.
        write_config(self.dir, rounds=2, members=MEMBERS[:1], extra_member=bad,
                     failure="retries = 1\nmin_members = 1")
        self.run_loop(config)
        db = journal(run_dir)
        a = db.execute("SELECT count(*) FROM attempts WHERE member = 'mlp-a' AND round = 0")
        self.assertEqual(a.fetchone()[0], 1)
        self.assertEqual(self.status(run_dir)["status"], "finished")

    def test_a_member_out_of_retries_stays_out_after_a_crash(self):
        bad = '\n[[member]]\nname = "diverges"\nmodel = "dense 10"\nseed = 4\n' \
              'optimizer = { name = "sgd", learning_rate = 1e38 }\n'
        config = write_config(self.dir, rounds=2, members=MEMBERS[:1], extra_member=bad,
                              failure="retries = 1\nmin_members = 1")
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=dict(os.environ, COHORT_CRASH_AT="acquired"))
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        db = journal(run_dir)
        n = db.execute("SELECT count(*) FROM attempts WHERE round = 0 AND member = 'diverges'")
        self.assertEqual(n.fetchone()[0], 2)  # 1 + retries, not one more after the resume
        db.close()
        self.assertEqual(self.status(run_dir)["status"], "finished")

    def test_malformed_configs(self):
        cases = [
            ("stratgy", lambda t: t.replace('strategy = "bald"', 'stratgy = "bald"'),
             ["loop.toml:", "acquisition.stratgy", "strategy"]),
            ("device", lambda t: t.replace('"cpu:1"', '"gpu:1"'), ["loop.toml:", "devices"]),
            ("shape", lambda t: t.replace('"dense 32 relu, dense 10"', '"dense 32 relu, dense 7"'),
             ["loop.toml:", "member[1]", "mlp-a"]),
            ("table", lambda t: t.replace('[store]', '[store]\npool = "unlabelled"'),
             ["unlabelled", "pool"]),
            ("source", lambda t: t.replace(SOURCE, SOURCE + "-missing"), ["store"]),
            ("syntax", lambda t: t.replace("[defaults]", "[defaults"), ["loop.toml:"]),
        ]
        for label, edit, mentions in cases:
            with self.subTest(label):
                d = os.path.join(self.dir, label)
                config = write_config(d)
                with open(config) as f:
                    text = edit(f.read())
                with open(config, "w") as f:
                    f.write(text)
                proc = cohort("run", config, check=False)
                self.assertNotEqual(proc.returncode, 0)
                lines = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
                self.assertEqual(len(lines), 1, proc.stderr)
                for m in mentions:
                    self.assertIn(m, lines[0])
                self.assertFalse(os.path.exists(os.path.join(d, "runs")), "a run was created")
        # A run directory that holds someone else's files is refused.
        d = os.path.join(self.dir, "foreign")
        config = write_config(d)
        os.makedirs(os.path.join(d, "runs", "loop"))
        open(os.path.join(d, "runs", "loop", "thesis.tex"), "w").close()
        proc = cohort("run", config, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("thesis.tex", proc.stderr)
        # An unsafe change on resume is refused, naming the field.
        d = os.path.join(self.dir, "resume")
        config = write_config(d, rounds=1, members=MEMBERS[:1], devices=1, strategy="entropy")
        self.run_loop(config)
        write_config(d, rounds=1, members=MEMBERS[:1], devices=1, strategy="entropy", k=50)
        proc = cohort("run", config, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("acquisition.batch_size", proc.stderr)


class Interrupts(LoopCase):
    def test_ctrl_c_once_finishes_the_round_twice_stops_now(self):
        config = write_config(self.dir, rounds=3, epochs=300)
        run_dir = os.path.join(self.dir, "runs", "loop")
        proc = self.start(config)
        self.wait_for(lambda: self.running_attempt(run_dir), what="attempt")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 130, out + err)
        s = self.status(run_dir)
        self.assertEqual(s["status"], "stopped")
        self.assertEqual([r["status"] for r in s["rounds"]], ["done"])  # round 0 was finished

        proc = self.start(config)
        self.wait_for(lambda: self.running_attempt(run_dir), what="attempt")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, out + err)
        s = self.status(run_dir)
        self.assertEqual(s["status"], "stopped")
        self.assertEqual(s["rounds"][1]["status"], "training")
        self.assertIsNone(self.running_attempt(run_dir))  # every attempt got its end
        db = journal(run_dir)
        exits = {r[0] for r in db.execute("SELECT exit FROM attempts WHERE round = 1")}
        db.close()
        self.assertEqual(exits, {"interrupted (Ctrl-C)"})  # not the members' fault: no retry
        self.assertNotIn("retrying", out)

        proc = self.run_loop(config)
        # The resume says where it goes on: round 1, every member on a fresh attempt that
        # counts no failure (an interrupted attempt is not the member's fault).
        self.assertRegex(proc.stdout, r"round 1 resumes on generation \d+: .*\(attempt 2, 3 "
                                      r"tries left\).* run again")
        self.assertNotIn("after 1 failure", proc.stdout)
        s = self.status(run_dir)
        self.assertEqual([r["status"] for r in s["rounds"]], ["done"] * 3)

    def test_status_of_a_running_run(self):
        config = write_config(self.dir, rounds=1, epochs=1000, members=MEMBERS[:1], devices=1,
                              strategy="entropy")
        run_dir = os.path.join(self.dir, "runs", "loop")
        proc = self.start(config)
        self.wait_for(lambda: self.running_attempt(run_dir), what="attempt")
        s = self.status(run_dir)
        self.assertEqual(s["status"], "running")
        self.assertEqual(s["controller_pid"], proc.pid)
        self.assertEqual(s["rounds"][0]["members"][0]["status"], "running")
        # A second controller on the same run is refused.
        second = cohort("run", config, check=False)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn("already running", second.stderr)
        proc.kill()
        proc.communicate()
        self.assertEqual(self.status(run_dir)["status"], "interrupted")


class CrashResume(LoopCase):
    """The controller SIGKILLed anywhere, then resumed, ends exactly as a run never killed."""

    TRIALS = int(os.environ.get("COHORT_CRASH_TRIALS", "20"))

    def test_sigkill_anywhere_then_resume_is_identical(self):
        kwargs = dict(rounds=3, k=100, epochs=2, members=MEMBERS[:2])
        ref_config = write_config(os.path.join(self.dir, "ref"), **kwargs)
        t0 = time.monotonic()
        self.run_loop(ref_config)
        ref_seconds = time.monotonic() - t0
        reference = outcome(os.path.join(self.dir, "ref", "runs", "loop"))
        self.assertEqual(len(reference["rounds"]), 3)

        # Named points hit the windows random kills rarely do: inside the first store commit
        # (its file steps 1..~30 here; at 30 CURRENT has switched but the journal does not
        # know), between a commit and its journal record, after the picks.
        points = ["store:%d" % i for i in (1, 6, 12, 18, 24, 28, 29, 30)] + [
            "committed", "committed:2", "acquired", "round-begun:2"]
        rng = random.Random(1234)
        repaired = []  # trials whose resume said it removed an interrupted commit's manifest
        for trial in range(self.TRIALS):
            with self.subTest(trial=trial):
                d = os.path.join(self.dir, f"trial-{trial}")
                config = write_config(d, **kwargs)
                run_dir = os.path.join(d, "runs", "loop")
                kills = 0
                if trial < len(points):
                    env = dict(os.environ, COHORT_CRASH_AT=points[trial])
                    proc = self.run_loop(config, expect=-signal.SIGKILL, env=env)
                    kills += 1
                else:
                    # One or two kills at random instants of the run.
                    for _ in range(1 + trial % 2):
                        proc = self.start(config)
                        try:
                            proc.wait(timeout=rng.uniform(0.05, ref_seconds))
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            kills += 1
                        proc.communicate()
                resumed = self.run_loop(config)
                if "warning: removed generation" in resumed.stdout:
                    repaired.append(trial)
                got = outcome(run_dir)
                self.assertEqual(got, reference, f"trial {trial} ({kills} kills) differs")
                verify = cohort("data", "verify", os.path.join(run_dir, "store"))
                self.assertIn("ok", verify.stdout.lower())
        # store:28 and store:29 die with the new manifest written and CURRENT not yet switched:
        # the resume removes it and says so.
        if self.TRIALS >= 8:
            self.assertTrue({5, 6} <= set(repaired), repaired)


def main():
    global COHORT, SCRATCH, SOURCE
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(SCRATCH, exist_ok=True)
    SOURCE = os.path.join(SCRATCH, "source-store")
    build_source(SOURCE)
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)


if __name__ == "__main__":
    main()
