#!/usr/bin/env python3
"""End-to-end tests of [[update]] steps of kind `command` (docs/updates.md) in `cohort run`: a
program that drops and adds train rows each round, a bad change set, a failing program, an
empty change set, and the controller SIGKILLed right before and right after a step's commit.

Run by ctest as: /usr/bin/python3 tests/update_step_test.py COHORT_BINARY SCRATCH_DIR
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_test  # noqa: E402  (the shared store and config helpers)
from loop_test import LoopCase, cohort, journal, write_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "updates", "drop_and_add.py")
CURATION = os.path.join(HERE, "..", "examples", "curation", "curation.py")
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import cohort_store  # noqa: E402

TRAIN = 300  # loop_test.build_source's train rows


def update_config(dir, rounds=3, timeout="", steps=1):
    step = "".join(
        f'[[update]]\nkind = "command"\ncommand = ["/usr/bin/python3", "{PROGRAM}"]\n'
        f'{timeout}\n' + (f'name = "step-{i + 1}"\n' if steps > 1 else "")
        for i in range(steps))
    return write_config(dir, rounds=rounds, k=20, members=loop_test.MEMBERS[:1], devices=1,
                        strategy="entropy", epochs=1, oracle=step)


def rounds_of(run_dir):
    db = journal(run_dir)
    rows = [dict(r) for r in db.execute(
        "SELECT round, input_generation, output_generation, status, labels_total FROM rounds "
        "ORDER BY round")]
    db.close()
    return rows


def runs_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def error_line(proc):
    err = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
    assert len(err) == 1, proc.stderr
    return err[0]


class UpdateSteps(LoopCase):
    def env(self, mode="ok", **extra):
        env = dict(os.environ, UPDATE_MODE=mode, UPDATE_RUNS=os.path.join(self.dir, "runs.txt"))
        env.update(extra)
        return env

    def run_dir(self):
        return os.path.join(self.dir, "runs", "loop")

    def test_drop_and_add_each_round(self):
        config = update_config(self.dir)
        proc = self.run_loop(config, env=self.env())
        self.assertIn("step 1 (drop_and_add.py): train: 2 added, 3 removed", proc.stdout)
        rounds = rounds_of(self.run_dir())
        self.assertEqual([r["status"] for r in rounds], ["done"] * 3)
        # Rounds 0 and 1 go on: each commits one generation; the last one stops.
        self.assertEqual(rounds[0]["output_generation"], rounds[0]["input_generation"] + 1)
        self.assertEqual(rounds[1]["input_generation"], rounds[0]["output_generation"])
        self.assertEqual(rounds[1]["output_generation"], rounds[1]["input_generation"] + 1)
        self.assertEqual([r["labels_total"] for r in rounds[:2]], [TRAIN - 1, TRAIN - 2])
        self.assertEqual(len(runs_of(os.path.join(self.dir, "runs.txt"))), 2)
        store = cohort_store.open(os.path.join(self.run_dir(), "store"))
        self.assertEqual(len(store.table("train")), TRAIN - 2)
        self.assertIn("round 1: update step 1 (command drop_and_add.py): train: 2 added, "
                      "3 removed", store.note)
        before = cohort_store.open(os.path.join(self.run_dir(), "store"),
                                   generation=rounds[0]["input_generation"])
        gone = set(before.table("train").ids[:3].tolist())
        self.assertFalse(gone & set(store.table("train").ids.tolist()))
        step_dir = os.path.join(self.run_dir(), "updates", "round-0000", "step-1")
        with open(os.path.join(step_dir, "step.log")) as f:
            self.assertIn("step 1 (drop_and_add.py) of round 0: 1 members", f.read())
        with open(os.path.join(step_dir, "predictions.json")) as f:
            predictions = json.load(f)
        self.assertEqual([m["name"] for m in predictions["members"]], ["mlp-a"])
        self.assertIn("ok", cohort("data", "verify", os.path.join(self.run_dir(), "store")).stdout)

    def test_a_bad_change_set_fails_the_round_and_commits_nothing(self):
        config = update_config(self.dir)
        proc = self.run_loop(config, expect=1, env=self.env("unknown-id"))
        err = error_line(proc)
        self.assertIn("update step 1 (command drop_and_add.py)", err)
        self.assertIn("changes.json: remove[0] (table train)", err)
        self.assertIn("999999999", err)
        s = self.status(self.run_dir())
        self.assertEqual(s["rounds"][0]["status"], "failed")
        self.assertEqual(s["store_generation"], s["rounds"][0]["input_generation"])
        # Fixed, the same run resumes: round 0 is not retrained and the step runs again.
        self.run_loop(config, env=self.env())
        self.assertEqual(self.status(self.run_dir())["status"], "finished")
        self.assertEqual(len(runs_of(os.path.join(self.dir, "runs.txt"))), 3)
        db = journal(self.run_dir())
        n = db.execute("SELECT count(*) FROM attempts WHERE round = 0").fetchone()[0]
        db.close()
        self.assertEqual(n, 1)

    def test_a_failing_program_and_an_empty_change_set(self):
        config = update_config(self.dir, rounds=2)
        proc = self.run_loop(config, expect=1, env=self.env("fail"))
        err = error_line(proc)
        self.assertIn("update step 1 (command drop_and_add.py)", err)
        self.assertIn("exited with status 3", err)
        self.assertIn("step.log", err)
        proc = self.run_loop(config, env=self.env("empty"))
        self.assertIn("no changes", proc.stdout)
        rounds = rounds_of(self.run_dir())
        self.assertEqual(rounds[0]["output_generation"], rounds[0]["input_generation"])
        self.assertEqual(rounds[1]["input_generation"], rounds[0]["input_generation"])

    def test_a_hanging_program_is_killed_at_its_timeout(self):
        config = update_config(self.dir, rounds=2, timeout="timeout_s = 2")
        proc = self.run_loop(config, expect=1, env=self.env("hang"))
        err = error_line(proc)
        self.assertIn("update step 1 (command drop_and_add.py) did not finish within 2 s", err)
        s = self.status(self.run_dir())
        self.assertEqual(s["rounds"][0]["status"], "failed")
        self.assertEqual(s["store_generation"], s["rounds"][0]["input_generation"])

    def test_sigkill_after_the_commit_does_not_run_the_program_again(self):
        config = update_config(self.dir, rounds=2)
        runs = os.path.join(self.dir, "runs.txt")
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=self.env(COHORT_CRASH_AT="update-committed"))
        self.assertEqual(len(runs_of(runs)), 1)
        proc = self.run_loop(config, env=self.env())
        self.assertIn("committed before the restart", proc.stdout)
        self.assertEqual(len(runs_of(runs)), 1)
        rounds = rounds_of(self.run_dir())
        self.assertEqual(rounds[0]["output_generation"], rounds[0]["input_generation"] + 1)
        self.assertEqual(rounds[0]["labels_total"], TRAIN - 1)

    def test_two_steps_killed_between_their_commits(self):
        config = update_config(self.dir, rounds=2, steps=2)
        runs = os.path.join(self.dir, "runs.txt")
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=self.env(COHORT_CRASH_AT="update-committed"))
        g = rounds_of(self.run_dir())[0]["input_generation"]
        self.assertEqual(runs_of(runs), [f"round 0 generation {g}"])
        proc = self.run_loop(config, env=self.env())
        self.assertIn("step 1 (step-1): train: 2 added, 3 removed (committed before the restart)",
                      proc.stdout)
        # Only the second step ran again, on the first one's output.
        self.assertEqual(runs_of(runs), [f"round 0 generation {g}", f"round 0 generation {g + 1}"])
        rounds = rounds_of(self.run_dir())
        self.assertEqual(rounds[0]["output_generation"], g + 2)
        self.assertEqual(rounds[0]["labels_total"], TRAIN - 2)
        store = cohort_store.open(os.path.join(self.run_dir(), "store"), generation=g + 2)
        self.assertIn("update step 2 (command step-2)", store.note)

    def test_sigkill_before_the_commit_runs_the_program_again(self):
        config = update_config(self.dir, rounds=2)
        runs = os.path.join(self.dir, "runs.txt")
        self.run_loop(config, expect=-signal.SIGKILL, env=self.env(COHORT_CRASH_AT="update-ran"))
        input_generation = rounds_of(self.run_dir())[0]["input_generation"]
        store = cohort_store.open(os.path.join(self.run_dir(), "store"))
        self.assertEqual(store.generation, input_generation)
        self.run_loop(config, env=self.env())
        self.assertEqual(len(runs_of(runs)), 2)
        rounds = rounds_of(self.run_dir())
        self.assertEqual(rounds[0]["output_generation"], input_generation + 1)
        self.assertEqual(rounds[0]["labels_total"], TRAIN - 1)

    def acquire_then_command(self, d):
        steps = ('[[update]]\nkind = "acquire"\n\n[[update]]\nkind = "command"\n'
                 f'command = ["/usr/bin/python3", "{PROGRAM}"]\n')
        return write_config(d, rounds=2, k=20, members=loop_test.MEMBERS[:1], devices=1,
                            strategy="entropy", epochs=1, oracle=steps)

    def picks_and_rounds(self, run_dir):
        db = journal(run_dir)
        picks = [tuple(r) for r in db.execute(
            "SELECT round, rank, sample_id FROM acquisitions ORDER BY round, rank")]
        db.close()
        return picks, [(r["input_generation"], r["output_generation"], r["labels_total"])
                       for r in rounds_of(run_dir)]

    def test_an_acquire_step_then_a_command_step_and_sigkill_between_them(self):
        ref = os.path.join(self.dir, "ref")
        proc = self.run_loop(self.acquire_then_command(ref),
                             env=self.env(UPDATE_RUNS=os.path.join(ref, "runs.txt")))
        self.assertIn("step 1 (acquire): acquired 20 by entropy; step 2 (drop_and_add.py): "
                      "train: 2 added, 3 removed", proc.stdout)
        picks, rounds = self.picks_and_rounds(os.path.join(ref, "runs", "loop"))
        self.assertEqual(len(picks), 20)
        g = rounds[0][0]
        # Round 0 commits twice: the picks (g + 1), then the program's change set (g + 2).
        self.assertEqual(rounds[0], (g, g + 2, TRAIN + 20 - 1))
        store = cohort_store.open(os.path.join(ref, "runs", "loop", "store"), generation=g + 1)
        self.assertIn("20 samples by entropy", store.note)
        # Killed right after the acquire step's commit, or after the command step's: the resume
        # recognises what was committed, runs the program only if it had not committed (once in
        # all: round 1 is the last and updates nothing), and
        # ends exactly as the run never killed.
        for point, program_runs in (("committed", 1), ("update-committed", 1)):
            with self.subTest(point=point):
                d = os.path.join(self.dir, point)
                config = self.acquire_then_command(d)
                runs = os.path.join(d, "runs.txt")
                self.run_loop(config, expect=-signal.SIGKILL,
                              env=self.env(UPDATE_RUNS=runs, COHORT_CRASH_AT=point))
                self.run_loop(config, env=self.env(UPDATE_RUNS=runs))
                self.assertEqual(self.picks_and_rounds(os.path.join(d, "runs", "loop")),
                                 (picks, rounds))
                self.assertEqual(len(runs_of(runs)), program_runs)

    def test_an_acquire_step_after_a_command_step_is_refused(self):
        steps = (f'[[update]]\nkind = "command"\ncommand = ["/usr/bin/python3", "{PROGRAM}"]\n'
                 '\n[[update]]\nkind = "acquire"\n')
        config = write_config(self.dir, rounds=2, members=loop_test.MEMBERS[:1], devices=1,
                              strategy="entropy", epochs=1, oracle=steps)
        proc = self.run_loop(config, expect=1, env=self.env())
        self.assertIn("update: the acquire step must be the first [[update]] step", error_line(proc))
        self.assertFalse(os.path.exists(os.path.join(self.run_dir(), "run.db")))

    def pseudo_label_config(self, d):
        steps = ('[[update]]\nkind = "acquire"\n\n[[update]]\nkind = "pseudo_label"\n'
                 'threshold = 0.8\nagreement = true\nmax_per_round = 30\nmax_per_class = 5\n')
        return write_config(d, rounds=2, k=20, members=loop_test.MEMBERS[:2], devices=2,
                            strategy="entropy", epochs=6, oracle=steps)

    def test_pseudo_label_moves_confident_pool_samples_with_the_ensemble_class(self):
        ref = os.path.join(self.dir, "ref")
        proc = self.run_loop(self.pseudo_label_config(ref), env=self.env())
        self.assertIn("step 2 (pseudo_label): ", proc.stdout)
        run_dir = os.path.join(ref, "runs", "loop")
        rounds = rounds_of(run_dir)
        g = rounds[0]["input_generation"]
        self.assertEqual(rounds[0]["output_generation"], g + 2)
        before = cohort_store.open(os.path.join(run_dir, "store"), generation=g + 1)
        after = cohort_store.open(os.path.join(run_dir, "store"), generation=g + 2)
        self.assertIn("update step 2 (pseudo_label): pool: ", after.note)
        moved = sorted(set(after.table("train").ids.tolist()) -
                       set(before.table("train").ids.tolist()))
        self.assertTrue(0 < len(moved) <= 30, len(moved))
        # What the members predicted for the pool of the round's generation, recomputed here.
        db = journal(run_dir)
        files = [r[0] for r in db.execute(
            "SELECT json_extract(predictions_json, '$.pool') FROM attempts WHERE round = 0 "
            "AND status = 'done' ORDER BY member")]
        picked = {r[0] for r in db.execute("SELECT sample_id FROM acquisitions WHERE round = 0")}
        db.close()
        probs = np.stack([np.load(os.path.join(run_dir, f)) for f in files])
        pool_ids = cohort_store.open(os.path.join(run_dir, "store"), generation=g).table(
            "pool").ids.tolist()
        mean = probs.mean(axis=0)
        train = after.table("train")
        label_of = dict(zip(train.ids.tolist(), np.asarray(train.labels).tolist()))
        per_class = {}
        for sample_id in moved:
            row = pool_ids.index(sample_id)
            cls = int(mean[row].argmax())
            self.assertGreaterEqual(mean[row].max(), 0.8 - 1e-6)
            self.assertTrue(all(int(p[row].argmax()) == cls for p in probs))
            self.assertEqual(label_of[sample_id], cls)
            self.assertNotIn(sample_id, picked)
            per_class[cls] = per_class.get(cls, 0) + 1
        self.assertLessEqual(max(per_class.values()), 5)
        # Killed right after the step's commit, the run resumes to the same store.
        d = os.path.join(self.dir, "killed")
        config = self.pseudo_label_config(d)
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=self.env(COHORT_CRASH_AT="update-committed"))
        self.run_loop(config, env=self.env())
        got = cohort_store.open(os.path.join(d, "runs", "loop", "store"), generation=g + 2)
        self.assertEqual(got.table("train").ids.tolist(), train.ids.tolist())
        self.assertEqual(np.asarray(got.table("train").labels).tolist(),
                         np.asarray(train.labels).tolist())

    def test_pseudo_label_settings_are_checked(self):
        for step, message in [
                ('kind = "pseudo_label"\n', "update[1].threshold: missing"),
                ('kind = "pseudo_label"\nthreshold = 1.5\n', "update[1].threshold: must be in"),
                ('kind = "command"\ncommand = ["x"]\nthreshold = 0.9\n',
                 "update[1].threshold: only for kind = \"pseudo_label\""),
                ('kind = "pseudo_label"\nthreshold = 0.9\nmax_per_class = -1\n',
                 "update[1].max_per_class")]:
            with self.subTest(step=step):
                config = write_config(self.dir, oracle="[[update]]\n" + step)
                proc = cohort("run", config, check=False)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn(message, error_line(proc))

    def import_config(self, rounds):
        step = '[[update]]\nkind = "import_new"\ndirectory = "incoming"\n'
        return write_config(self.dir, rounds=rounds, k=20, members=loop_test.MEMBERS[:1],
                            devices=1, strategy="entropy", epochs=1, oracle=step)

    def drop_files(self, name, rows, seed):
        incoming = os.path.join(self.dir, "incoming")
        os.makedirs(incoming, exist_ok=True)
        rng = np.random.default_rng(seed)
        np.save(os.path.join(incoming, f"{name}.npy"),
                rng.integers(0, 256, size=(rows, 28, 28), dtype=np.uint8))
        np.save(os.path.join(incoming, f"{name}.labels.npy"), rng.integers(0, 10, size=rows))

    def train_rows(self, generation=None):
        store = cohort_store.open(os.path.join(self.run_dir(), "store"), generation=generation)
        return len(store.table("train"))

    def test_import_new_takes_each_new_file_once(self):
        self.drop_files("a", 5, 1)
        self.drop_files(".partial", 7, 2)  # still being written: hidden names are left alone
        config = self.import_config(rounds=2)
        # Killed right after the step's commit: the resume must not import a.npy again.
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=self.env(COHORT_CRASH_AT="update-committed"))
        proc = self.run_loop(config, env=self.env())
        self.assertIn("train: 5 added; files: a.npy (5) (committed before the restart)",
                      proc.stdout)
        self.assertEqual(self.train_rows(), TRAIN + 5)
        store = cohort_store.open(os.path.join(self.run_dir(), "store"))
        self.assertIn("update step 1 (import_new): train: 5 added; files: a.npy (5)", store.note)
        # A new file arrives; the run goes on (a larger max_rounds is a safe change) and takes
        # only the new one.
        self.drop_files("c", 3, 3)
        config = self.import_config(rounds=3)
        proc = self.run_loop(config, env=self.env())
        self.assertIn("files: c.npy (3)", proc.stdout)
        self.assertEqual(self.train_rows(), TRAIN + 8)
        labels = np.load(os.path.join(self.dir, "incoming", "c.labels.npy"))
        train = cohort_store.open(os.path.join(self.run_dir(), "store")).table("train")
        self.assertEqual(np.asarray(train.labels)[-3:].tolist(), labels.tolist())
        # Nothing new: the step says so and commits nothing.
        config = self.import_config(rounds=4)
        proc = self.run_loop(config, env=self.env())
        self.assertIn("no new files in", proc.stdout)
        self.assertEqual(self.train_rows(), TRAIN + 8)

    def test_import_new_refuses_what_the_table_cannot_take(self):
        incoming = os.path.join(self.dir, "incoming")
        os.makedirs(incoming)
        np.save(os.path.join(incoming, "x.npy"), np.zeros((2, 28, 28), dtype=np.uint8))
        config = self.import_config(rounds=2)
        proc = self.run_loop(config, expect=1, env=self.env())
        self.assertIn("update step 1 (import_new): import_new: ", error_line(proc))
        self.assertIn("x.npy: table 'train' has labels: put them in x.labels.npy",
                      error_line(proc))
        self.assertEqual(self.status(self.run_dir())["rounds"][0]["status"], "failed")
        os.remove(os.path.join(incoming, "x.npy"))
        with open(os.path.join(incoming, "y.csv"), "w") as f:
            f.write("a,b,label\n1,2,3\n")
        proc = self.run_loop(config, expect=1, env=self.env())
        self.assertIn("y.csv: features are float32 but table 'train' stores uint8",
                      error_line(proc))
        os.remove(os.path.join(incoming, "y.csv"))
        self.drop_files("z", 2, 5)
        np.save(os.path.join(incoming, "z.labels.npy"), np.array([3, 12]))
        proc = self.run_loop(config, expect=1, env=self.env())
        self.assertIn("outside [0, 10)", error_line(proc))
        # Fixed, the same run goes on.
        self.drop_files("z", 2, 5)
        self.run_loop(config, env=self.env())
        self.assertEqual(self.train_rows(), TRAIN + 2)


    def test_ctrl_c_twice_while_a_step_program_runs(self):
        config = update_config(self.dir, rounds=2)
        proc = self.start(config, env=self.env("hang"))
        runs = os.path.join(self.dir, "runs.txt")
        try:
            self.wait_for(lambda: len(runs_of(runs)) == 1, what="the step's program")
            time.sleep(0.5)
        finally:
            self.interrupt_twice(proc)
        proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130)  # as docs/cli.md says
        s = self.status(self.run_dir())
        self.assertEqual(s["status"], "stopped")
        self.assertEqual(s["store_generation"], s["rounds"][0]["input_generation"])
        # Resumed, the round runs its step again (nothing was committed) and the run ends.
        self.run_loop(config, env=self.env())
        self.assertEqual(len(runs_of(runs)), 2)
        self.assertEqual(self.status(self.run_dir())["status"], "finished")

    def test_sigkill_anywhere_in_a_run_of_every_step_kind_then_resume_is_identical(self):
        """acquire, pseudo_label, relabel_or_drop and a command step in each round; the
        controller killed at random moments (or at the steps' crash points) and resumed ends
        exactly where a run never killed does."""
        steps = ('[[update]]\nkind = "acquire"\n\n[[update]]\nkind = "pseudo_label"\n'
                 'threshold = 0.8\nmax_per_round = 20\n\n[[update]]\nkind = "relabel_or_drop"\n'
                 'threshold = 0.05\nmax_per_round = 10\n\n[[update]]\nkind = "command"\n'
                 f'command = ["/usr/bin/python3", "{PROGRAM}"]\n')

        def config(d):
            return write_config(d, rounds=3, k=20, members=loop_test.MEMBERS[:2], devices=2,
                                strategy="entropy", epochs=2, oracle=steps)

        def result(run_dir):
            got = loop_test.outcome(run_dir)
            db = journal(run_dir)
            got["steps"] = [tuple(r) for r in db.execute(
                "SELECT round, step, kind, output_generation, summary, counts_json "
                "FROM update_steps ORDER BY round, step")]
            db.close()
            train = cohort_store.open(os.path.join(run_dir, "store")).table("train")
            got["train"] = (train.ids.tolist(), np.asarray(train.labels).tolist())
            return got

        ref = os.path.join(self.dir, "ref")
        t0 = time.monotonic()
        self.run_loop(config(ref), env=self.env())
        ref_seconds = time.monotonic() - t0
        reference = result(os.path.join(ref, "runs", "loop"))
        self.assertEqual(len(reference["steps"]), 2 * 4)  # the last round runs no steps
        points = ["update-ran", "update-committed", "update-ran:2", "committed:2"]
        rng = random.Random(2026)
        for trial in range(int(os.environ.get("COHORT_CRASH_TRIALS", "8"))):
            with self.subTest(trial=trial):
                d = os.path.join(self.dir, f"trial-{trial}")
                path = config(d)
                if trial < len(points):
                    self.run_loop(path, expect=-signal.SIGKILL,
                                  env=self.env(COHORT_CRASH_AT=points[trial]))
                else:
                    proc = self.start(path, env=self.env())
                    try:
                        proc.wait(timeout=rng.uniform(0.05, ref_seconds))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    proc.communicate()
                self.run_loop(path, env=self.env())
                self.assertEqual(result(os.path.join(d, "runs", "loop")), reference)

    # ---- relabel_or_drop (curation) on a store whose train labels were flipped on purpose

    def flipped_store(self):
        """examples/curation's store, small: 600 train images, 60 of them flipped."""
        store = os.path.join(self.dir, "store")
        subprocess.run(["/usr/bin/python3", CURATION, "make", loop_test.COHORT, store, "--train",
                        "600", "--flip", "60"], check=True, stdout=subprocess.DEVNULL)
        return store

    def curation_config(self, d, store, action="drop", rounds=2):
        oracle = (f'[oracle]\nkind = "command"\ncommand = ["/usr/bin/python3", "{CURATION}", '
                  '"label"]\n\n' if action == "relabel" else "")
        steps = (f'{oracle}[[update]]\nkind = "relabel_or_drop"\nthreshold = 0.1\n'
                 f'max_per_round = 40\naction = "{action}"\n')
        path = write_config(d, rounds=rounds, members=loop_test.MEMBERS[:2], devices=2,
                            strategy="entropy", epochs=4, oracle=steps, source=store)
        # A run without an acquire step needs no [acquisition] table.
        with open(path) as f:
            text = f.read()
        text = re.sub(r"\[acquisition\]\n(.+\n)+", "", text)
        self.assertNotIn("[acquisition]", text)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_relabel_or_drop_drops_the_labels_the_ensemble_contradicts(self):
        store = self.flipped_store()
        truth = np.load(store + ".truth.npz")
        flipped = set(truth["flipped"].tolist())
        ref = os.path.join(self.dir, "ref")
        proc = self.run_loop(self.curation_config(ref, store), env=self.env())
        self.assertIn("step 1 (relabel_or_drop): train: ", proc.stdout)
        run_dir = os.path.join(ref, "runs", "loop")
        rounds = rounds_of(run_dir)
        g = rounds[0]["input_generation"]
        self.assertEqual(rounds[0]["output_generation"], g + 1)
        before = cohort_store.open(os.path.join(run_dir, "store"), generation=g)
        after = cohort_store.open(os.path.join(run_dir, "store"), generation=g + 1)
        self.assertIn("update step 1 (relabel_or_drop): train: ", after.note)
        dropped = set(before.table("train").ids.tolist()) - set(after.table("train").ids.tolist())
        # Recomputed from the members' predictions of the train table: the 40 least probable
        # stored labels below 0.1.
        db = journal(run_dir)
        files = [r[0] for r in db.execute(
            "SELECT json_extract(predictions_json, '$.train') FROM attempts WHERE round = 0 "
            "AND status = 'done' ORDER BY member")]
        steps = [dict(r) for r in db.execute(
            "SELECT round, step, kind, output_generation, summary, counts_json FROM update_steps "
            "ORDER BY round, step")]
        db.close()
        self.assertEqual(len(files), 2)
        probs = np.stack([np.load(os.path.join(run_dir, f)) for f in files])
        train = before.table("train")
        self.assertEqual(probs.shape, (2, len(train), 10))
        labels = np.asarray(train.labels)
        p = probs.mean(axis=0)[np.arange(len(train)), labels]
        order = [i for i in np.argsort(p, kind="stable") if p[i] < 0.1][:40]
        self.assertEqual(dropped, {int(train.ids[i]) for i in order})
        self.assertTrue(0 < len(dropped) <= 40)
        # Most of what the ensemble contradicts was flipped on purpose.
        self.assertGreater(len(dropped & flipped) / len(dropped), 0.5, dropped)
        # The journal says what each step did.
        self.assertEqual([(s["round"], s["step"], s["kind"]) for s in steps],
                         [(0, 1, "relabel_or_drop")])
        self.assertEqual(steps[0]["output_generation"], g + 1)
        self.assertEqual(json.loads(steps[0]["counts_json"])["train"]["removed"], len(dropped))
        s = self.status(run_dir)
        self.assertEqual(s["rounds"][0]["updates"][0]["counts"]["train"]["removed"], len(dropped))
        self.assertIn("round 0 step 1 (relabel_or_drop): train: ",
                      cohort("status", run_dir).stdout)
        # Killed right after the step's commit, the run resumes to the same store.
        d = os.path.join(self.dir, "killed")
        config = self.curation_config(d, store)
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=self.env(COHORT_CRASH_AT="update-committed"))
        proc = self.run_loop(config, env=self.env())
        self.assertIn("committed before the restart", proc.stdout)
        got = cohort_store.open(os.path.join(d, "runs", "loop", "store"), generation=g + 1)
        self.assertEqual(got.table("train").ids.tolist(), after.table("train").ids.tolist())
        db = journal(os.path.join(d, "runs", "loop"))
        counts = [json.loads(r[0]) for r in db.execute(
            "SELECT counts_json FROM update_steps WHERE round = 0")]
        db.close()
        self.assertEqual(counts[0]["train"]["removed"], len(dropped))

    def test_relabel_or_drop_asks_the_oracle_and_relabels(self):
        store = self.flipped_store()
        truth = np.load(store + ".truth.npz")
        true_of = dict(zip(truth["ids"].tolist(), truth["true"].tolist()))
        flipped = set(truth["flipped"].tolist())
        d = os.path.join(self.dir, "relabel")
        config = self.curation_config(d, store, action="relabel", rounds=3)
        env = self.env(CURATION_TRUTH=store + ".truth.npz")
        # Killed after the first round's commit: resumed, the same labels.
        self.run_loop(config, expect=-signal.SIGKILL,
                      env=dict(env, COHORT_CRASH_AT="update-committed"))
        proc = self.run_loop(config, env=env)
        self.assertIn("the oracle kept", proc.stdout)
        run_dir = os.path.join(d, "runs", "loop")
        asked = set()
        for rnd in (0, 1):
            ids = np.load(os.path.join(run_dir, "updates", f"round-{rnd:04d}", "step-1", "oracle",
                                       "ids.npy"))
            self.assertTrue(0 < len(ids) <= 40)
            asked |= set(ids.tolist())
        final = cohort_store.open(os.path.join(run_dir, "store")).table("train")
        self.assertEqual(len(final), 600)  # relabelled, none dropped
        label_of = dict(zip(final.ids.tolist(), np.asarray(final.labels).tolist()))
        for sample_id in asked:
            self.assertEqual(label_of[sample_id], true_of[sample_id])
        fixed = sum(1 for i in flipped if label_of[i] == true_of[i])
        self.assertEqual(fixed, len(asked & flipped))
        self.assertGreater(fixed, 0)
        # The example's scorer reports the same precision and recall.
        score = subprocess.run(["/usr/bin/python3", CURATION, "score", run_dir, "--json"],
                               check=True, capture_output=True, text=True, env=env)
        rows = json.loads(score.stdout)
        self.assertEqual(rows[-1]["flagged_total"], len(asked))
        self.assertAlmostEqual(rows[-1]["recall"], len(asked & flipped) / len(flipped))

    def test_relabel_or_drop_settings_are_checked(self):
        for step, message in [
                ('kind = "relabel_or_drop"\n', "update[1].threshold: missing"),
                ('kind = "relabel_or_drop"\nthreshold = 1\n', "update[1].threshold: must be in"),
                ('kind = "relabel_or_drop"\nthreshold = 0.1\naction = "fix"\n',
                 "update[1].action: unknown action 'fix'"),
                ('kind = "relabel_or_drop"\nthreshold = 0.1\naction = "relabel"\n',
                 "update[1].action: \"relabel\" asks the oracle"),
                ('kind = "relabel_or_drop"\nthreshold = 0.1\nagreement = true\n',
                 "update[1].agreement: only for kind = \"pseudo_label\""),
                ('kind = "command"\ncommand = ["x"]\npredict = ["train", "candidates"]\n',
                 "update[1].predict: expected a list of the tables")]:
            with self.subTest(step=step):
                config = write_config(self.dir, oracle="[[update]]\n" + step)
                proc = cohort("run", config, check=False)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn(message, error_line(proc))


def main():
    loop_test.COHORT = os.path.abspath(sys.argv[1])
    loop_test.SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(loop_test.SCRATCH, exist_ok=True)
    loop_test.SOURCE = os.path.join(loop_test.SCRATCH, "source-store")
    loop_test.build_source(loop_test.SOURCE)
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)


if __name__ == "__main__":
    main()
