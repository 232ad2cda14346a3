#!/usr/bin/python3
"""The fault matrix (docs/reliability.md): a real `cohort run` whose worker misbehaves once,
in every way a worker can, in the train and in the predict phase (COHORT_TEST_FAULT,
src/worker/fault_injection.h), against the same run with no fault.

Each cell must end as the uninterrupted run ends (metrics, picks, generations, tables: bit
for bit, since a retried member trains with the same seed), with the fault journalled on the
attempt it hit in words a user can act on, and `cohort data verify` passing. The matrix is
printed at the end.

  tests/fault_matrix_test.py COHORT SCRATCH [unittest args]
"""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_test  # noqa: E402  (cohort(), build_source(), write_config(), outcome(), journal())
from loop_test import LoopCase, cohort, journal, outcome, write_config  # noqa: E402

# kind -> (attempt status, words its exit must hold); garbage ends no attempt.
FAULTS = {
    "kill": ("failed", "signal 9"),
    "segv": ("failed", "signal 11"),
    "exit": ("failed", "exited with status 3"),
    "hang": ("killed", "heartbeat timeout"),
    "close_stdout": ("killed", "worker killed"),
    "garbage": (None, None),
}
PHASES = ("train", "predict")
MATRIX = {}  # (phase, kind) -> "recovered" or what went wrong


def config_in(dir):
    return write_config(dir, rounds=2, k=50, members=loop_test.MEMBERS[:2], heartbeat_timeout=10,
                        failure="retries = 1")


class FaultMatrix(LoopCase):
    reference = None

    @classmethod
    def setUpClass(cls):
        d = os.path.join(loop_test.SCRATCH, "reference")
        shutil.rmtree(d, ignore_errors=True)
        proc = cohort("run", config_in(d), check=False)
        assert proc.returncode == 0, proc.stderr
        cls.reference = outcome(os.path.join(d, "runs", "loop"))

    def check_cell(self, phase, kind):
        status, words = FAULTS[kind]
        env = dict(os.environ, COHORT_TEST_FAULT=f"{phase}:{kind}",
                   COHORT_TEST_FAULT_ONCE=os.path.join(self.dir, "fault-done"))
        MATRIX[(phase, kind)] = "failed the test"
        self.run_loop(config_in(self.dir), env=env)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "fault-done")), "no fault happened")
        run_dir = os.path.join(self.dir, "runs", "loop")
        db = journal(run_dir)
        bad = [dict(r) for r in db.execute(
            "SELECT member, round, attempt, status, exit FROM attempts WHERE status != 'done'")]
        db.close()
        if status is None:
            self.assertEqual(bad, [])
        else:
            self.assertEqual(len(bad), 1, bad)
            self.assertEqual(bad[0]["status"], status, bad[0])
            self.assertIn(words, bad[0]["exit"])
        self.assertEqual(outcome(run_dir), self.reference)
        verify = cohort("data", "verify", os.path.join(run_dir, "store"))
        self.assertIn("ok", verify.stdout.lower())
        MATRIX[(phase, kind)] = "recovered" + (f" ({bad[0]['status']}: {words})" if bad else "")


class DiskFull(LoopCase):
    """The run directory on a tmpfs too small for the run: it stops with a clear error wherever
    the space ran out (the store's clone, a segment, a manifest, the journal, a checkpoint,
    predictions), and once the space is there again, rerunning ends as the run without it."""

    # Just above the source store's clone, then closer and closer to what the run needs.
    SIZES_K = (1200, 2450, 2600, 2900, 3100, 3300, 3500, 3700)

    def mount(self, path, size_k):
        os.makedirs(path, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_k}k", "tmpfs", path],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs (not root?): {proc.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", path], capture_output=True)

    def test_a_full_disk_anywhere_stops_the_run_clearly_and_it_continues_once_fixed(self):
        reference = FaultMatrix.reference or FaultMatrix.setUpClass() or FaultMatrix.reference
        failed_at = []
        for size_k in self.SIZES_K:
            with self.subTest(size_k=size_k):
                d = os.path.join(self.dir, f"k{size_k}")
                config = config_in(d)
                runs = os.path.join(d, "runs")
                self.mount(runs, size_k)
                proc = cohort("run", config, check=False, timeout=300)
                self.assertNotIn("terminate called", proc.stderr)
                if proc.returncode != 0:
                    self.assertEqual(proc.returncode, 1, proc.stderr)
                    err = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
                    self.assertEqual(len(err), 1, proc.stderr)
                    failed_at.append(err[0])
                subprocess.run(["mount", "-o", "remount,size=65536k", runs], check=True)
                proc = cohort("run", config, check=False, timeout=300)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                run_dir = os.path.join(runs, "loop")
                self.assertEqual(outcome(run_dir), reference)
                verify = cohort("data", "verify", os.path.join(run_dir, "store"))
                self.assertIn("ok", verify.stdout.lower())
        MATRIX[("disk full", "errors")] = failed_at
        self.assertTrue(failed_at, "no size was too small: the test no longer tests anything")


class RunDirectory(LoopCase):
    def test_a_run_directory_deleted_under_a_running_loop_ends_it_with_one_clear_line(self):
        config = write_config(self.dir, rounds=2, members=loop_test.MEMBERS[:1], devices=1,
                              strategy="entropy", epochs=300)
        run_dir = os.path.join(self.dir, "runs", "loop")
        proc = self.start(config)
        self.wait_for(lambda: self.running_attempt(run_dir), what="a running attempt")
        shutil.rmtree(run_dir)
        _, err = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 1, err)
        lines = [l for l in err.splitlines() if l.startswith("cohort: error:")]
        self.assertEqual(len(lines), 1, err)
        self.assertNotIn("terminate called", err)
        MATRIX[("run directory", "deleted")] = lines[0]

    def test_a_read_only_run_directory_is_refused_clearly_and_nothing_changes(self):
        config = write_config(self.dir, rounds=2, k=50, members=loop_test.MEMBERS[:1],
                              devices=1, strategy="entropy")
        run_dir = os.path.join(self.dir, "runs", "loop")
        self.run_loop(write_config(self.dir, rounds=1, k=50, members=loop_test.MEMBERS[:1],
                                   devices=1, strategy="entropy"))
        before = outcome(run_dir)
        if subprocess.run(["mount", "--bind", run_dir, run_dir], capture_output=True).returncode:
            self.skipTest("cannot bind-mount (not root)")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", run_dir], check=True)
            proc = cohort("run", config, check=False)  # one more round: needs to write
            self.assertEqual(proc.returncode, 1, proc.stderr)
            lines = [l for l in proc.stderr.splitlines() if l.startswith("cohort: error:")]
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn("Read-only file system", lines[0])
            MATRIX[("run directory", "read-only")] = lines[0]
        finally:
            subprocess.run(["umount", run_dir], check=True)
        self.assertEqual(outcome(run_dir), before)
        self.run_loop(config)  # writable again: the run goes on
        self.assertEqual(self.status(run_dir)["status"], "finished")


def add_cells():
    for phase in PHASES:
        for kind in FAULTS:
            def test(self, phase=phase, kind=kind):
                self.check_cell(phase, kind)
            setattr(FaultMatrix, f"test_{phase}_{kind}", test)


add_cells()


def print_matrix():
    print("\nfault matrix: one fault per run, 2 rounds, 2 members, retries = 1")
    print(f"{'fault':<14}" + "".join(f"{p:<44}" for p in PHASES))
    for kind in FAULTS:
        print(f"{kind:<14}" + "".join(f"{MATRIX.get((p, kind), 'not run'):<44}" for p in PHASES))
    for what in ("deleted", "read-only"):
        if ("run directory", what) in MATRIX:
            print(f"run directory {what}: {MATRIX[('run directory', what)]}")
    errors = MATRIX.get(("disk full", "errors"), [])
    print(f"\ndisk full: {len(errors)} of {len(DiskFull.SIZES_K)} sizes stopped the run; each "
          "continued to the reference end once the space was back:")
    for e in errors:
        print(f"  {e}")


if __name__ == "__main__":
    loop_test.COHORT = os.path.abspath(sys.argv[1])
    loop_test.SCRATCH = os.path.abspath(sys.argv[2])
    shutil.rmtree(loop_test.SCRATCH, ignore_errors=True)
    os.makedirs(loop_test.SCRATCH)
    loop_test.SOURCE = os.path.join(loop_test.SCRATCH, "source")
    loop_test.build_source(loop_test.SOURCE)
    try:
        unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
    finally:
        print_matrix()
