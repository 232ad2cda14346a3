#!/usr/bin/env python3
"""End-to-end tests of `launcher = "slurm"` on a real single-node Slurm cluster (slurmctld,
slurmd and munge from Debian, fake GPUs as GRES), brought up by tests/slurm/slurm-up.sh as root
and torn down after: the same loop under Slurm and locally ends identically; GPU steps see
their own CUDA_VISIBLE_DEVICES, journalled; a step cancelled with scancel is retried; an
impossible request fails within queue_timeout_s; a `cohort sbatch` job cancelled mid-round and
submitted again ends exactly as an uninterrupted run.

Where Slurm cannot start (not root, packages not installable) the tests are skipped with the
reason; under CI=true a skip is a failure.

Run by ctest as: /usr/bin/python3 tests/slurm_test.py COHORT_BINARY SCRATCH_DIR
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loop_test  # noqa: E402  (its helpers: cohort(), build_source(), write_config(), outcome())
from loop_test import LoopCase, cohort, journal, outcome, write_config  # noqa: E402

SLURM_DIR = "/tmp/cohort-slurm-test"
SLURM_ENV = {}
SKIP_REASON = None


def slurm_up():
    """Starts the cluster (4 CPUs, 4 fake GPUs); returns None or why it cannot."""
    if os.geteuid() != 0:
        return "not root: the test cluster needs root (slurmd, munged)"
    env = dict(os.environ, SLURM_PROBE_DIR=SLURM_DIR, SLURM_NCPUS="4", SLURM_NGPUS="4",
               SLURM_INSTALL="1")
    proc = subprocess.run([f"{HERE}/slurm/slurm-up.sh"], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        return f"slurm-up.sh failed: {proc.stderr.strip()[-500:]}"
    SLURM_ENV["SLURM_CONF"] = f"{SLURM_DIR}/etc/slurm.conf"
    return None


def slurm_down():
    subprocess.run([f"{HERE}/slurm/slurm-down.sh"], env=dict(os.environ, SLURM_PROBE_DIR=SLURM_DIR),
                   capture_output=True, timeout=120)


def env():
    e = dict(os.environ, **SLURM_ENV)
    for k in list(e):
        if k.startswith("SLURM_JOB") or k == "SLURM_JOBID":
            del e[k]  # the tests' runs are outside any allocation
    return e


def slurm_config(dir, slots=2, slurm_extra="", queue_timeout=20, cpus=1, **kwargs):
    top = 'launcher = "slurm"\n'
    path = write_config(dir, top=top, **kwargs)
    with open(path) as f:
        text = f.read()
    # Slurm places the steps: no device list.
    text = text.replace('devices = ["cpu:0", "cpu:1"]', 'devices = "auto"')
    text += (f"\n[slurm]\nslots = {slots}\ncpus_per_member = {cpus}\nqueue_timeout_s = {queue_timeout}\n"
             f"{slurm_extra}\n")
    with open(path, "w") as f:
        f.write(text)
    return path


class SlurmCase(LoopCase):
    def setUp(self):
        if SKIP_REASON:
            if os.environ.get("CI") == "true":
                self.fail(f"Slurm is required under CI=true: {SKIP_REASON}")
            self.skipTest(SKIP_REASON)
        super().setUp()

    def tearDown(self):
        # Nothing a test left running may hold the cluster's CPUs or GPUs for the next one.
        subprocess.run(["scancel", "--full", "--user=root"], env=env(), capture_output=True,
                       timeout=30)
        for _ in range(100):
            if not self.squeue():
                break
            time.sleep(0.2)

    def run_slurm(self, config, expect=0, timeout=600):
        return self.run_loop(config, expect=expect, env=env(), timeout=timeout)

    def attempts(self, run_dir):
        """The journal's attempts; none while the run has not yet made its journal."""
        if not os.path.exists(f"{run_dir}/run.db"):
            return []
        db = journal(run_dir)
        try:
            return [dict(r) for r in
                    db.execute("SELECT * FROM attempts ORDER BY round, member, attempt")]
        except sqlite3.OperationalError as e:
            # The file exists a moment before the run's first transaction makes its tables.
            if "no such table" in str(e):
                return []
            raise
        finally:
            db.close()

    def wait_for_empty_cluster(self, timeout=300):
        """Waits for every job to leave the queue; on a timeout, says what is left and why."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.squeue():
                return
            time.sleep(0.2)
        jobs = subprocess.run(["scontrol", "show", "job"], env=env(), capture_output=True,
                              text=True, timeout=30).stdout
        procs = subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args"], capture_output=True,
                               text=True).stdout
        procs = "\n".join(l for l in procs.splitlines() if "cohort" in l or "slurmstepd" in l)
        self.fail(f"jobs still queued after {timeout} s:\n{jobs}\nprocesses:\n{procs}")

    def squeue(self):
        out = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=env(), capture_output=True,
                             text=True, timeout=30).stdout
        return [line.split() for line in out.splitlines() if line.strip()]


class SlurmLoop(SlurmCase):
    def test_slurm_run_equals_local_run(self):
        # 4 members on 2 slots, 2 rounds; one thread per device on both sides.
        members = loop_test.MEMBERS + [("mlp-d", "dense 16 relu, dense 10", 4)]
        local = write_config(os.path.join(self.dir, "local"), members=members, rounds=2, k=100)
        self.run_loop(local)
        slurm = slurm_config(os.path.join(self.dir, "slurm"), members=members, rounds=2, k=100)
        proc = self.run_slurm(slurm)
        self.assertIn("slurm: 2 worker step(s)", proc.stdout)
        a = outcome(os.path.join(self.dir, "local", "runs", "loop"))
        b = outcome(os.path.join(self.dir, "slurm", "runs", "loop"))
        self.assertEqual(a, b)  # metrics, picks, generations: bit for bit
        rows = self.attempts(os.path.join(self.dir, "slurm", "runs", "loop"))
        self.assertEqual({r["status"] for r in rows}, {"done"})
        self.assertEqual({r["node"] for r in rows}, {os.uname().nodename.split(".")[0]})

    def test_gpu_steps_see_their_own_gpu(self):
        script = os.path.join(HERE, "outside", "member.py")
        extra = ""
        for i in range(4):
            extra += (f'\n[[member]]\nname = "g{i}"\ncommand = ["/usr/bin/python3", "{script}"]\n'
                      f'behaviour = "env"\nsleep_s = 3\n')
        config = slurm_config(self.dir, slots=4, members=[], extra_member=extra, rounds=1,
                              slurm_extra="gpus_per_member = 1")
        self.run_slurm(config)
        rows = self.attempts(os.path.join(self.dir, "runs", "loop"))
        self.assertEqual(len(rows), 4)
        gpus = [r["gpus"] for r in rows]
        self.assertTrue(all(g not in (None, "") for g in gpus), gpus)
        self.assertEqual(len(set(gpus)), 4, gpus)  # four steps at once, four different GPUs

    def test_a_cancelled_step_is_retried(self):
        # The retry's step waits for the cancelled step's CPU, which a loaded cluster frees
        # slowly: a generous queue timeout.
        # 5,000 epochs: still training when cancelled, however fast the machine.
        config = slurm_config(self.dir, members=loop_test.MEMBERS[:1], slots=1, rounds=1,
                              epochs=5000, failure="retries = 1", strategy="entropy",
                              queue_timeout=120)
        proc = self.start(config, env=env())
        run_dir = os.path.join(self.dir, "runs", "loop")
        self.wait_for(lambda: self.running_attempt(run_dir), what="a running attempt")
        time.sleep(1)
        jobs = [j for j in self.squeue() if j[1].startswith("cohort-worker-")]
        self.assertEqual(len(jobs), 1, jobs)
        subprocess.run(["scancel", jobs[0][0]], env=env(), check=True, timeout=30)
        # The retry trains as long: stop it once it runs.
        self.wait_for(lambda: any(r["attempt"] == 2 and r["status"] == "running"
                                  for r in self.attempts(run_dir)), timeout=240,
                      what="the retry")
        first = [r for r in self.attempts(run_dir) if r["attempt"] == 1][0]
        self.assertEqual(first["status"], "failed", first)
        self.assertIn("slurm: cancelled (scancel)", first["exit"])
        self.interrupt_twice(proc)
        proc.communicate(timeout=120)
        # Nothing left behind on the cluster (a killed step takes a moment to be cleaned up).
        self.wait_for_empty_cluster()

    def test_interrupting_twice_leaves_no_job_behind(self):
        # A srun killed after its job was allocated and before its step launched leaves the
        # job to Slurm, which keeps it (InactiveLimit = 0) holding the node until its time
        # limit. srun's own prolog (run by srun in between) holds the worker's in that window.
        prolog = os.path.join(self.dir, "prolog.sh")
        os.makedirs(self.dir, exist_ok=True)
        with open(prolog, "w") as f:
            f.write('#!/bin/sh\ncase "$SLURM_JOB_NAME" in cohort-worker*) sleep 120;; esac\n')
        os.chmod(prolog, 0o755)
        config = slurm_config(self.dir, members=loop_test.MEMBERS[:1], slots=1, rounds=1,
                              strategy="entropy", queue_timeout=120,
                              slurm_extra=f'srun_args = ["--prolog={prolog}"]')
        proc = self.start(config, env=env())
        try:
            self.wait_for(lambda: any(j[1].startswith("cohort-worker-") and j[2] == "RUNNING"
                                      for j in self.squeue()), what="an allocated worker job")
            time.sleep(0.5)
        finally:
            self.interrupt_twice(proc)
            proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130)
        self.wait_for_empty_cluster(timeout=60)

    def worker_pids(self):
        """Pids of this test's `cohort-member worker` processes (the tasks slurmstepd started,
        not srun). Through Slurm a worker is given its log file (--log-file) under self.dir,
        which tells it from the workers of other runs on the machine."""
        out = subprocess.run(["pgrep", "-f", r"^\S*cohort-member worker"], capture_output=True,
                             text=True).stdout

        def ours(pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    return self.dir.encode() in f.read()
            except OSError:  # gone already
                return False

        return [int(p) for p in out.split() if ours(p)]

    def test_a_hung_worker_is_killed_through_slurm_and_retried(self):
        config = slurm_config(self.dir, members=loop_test.MEMBERS[:1], slots=1, rounds=1,
                              epochs=5000, failure="retries = 1", strategy="entropy",
                              heartbeat_timeout=3)
        proc = self.start(config, env=env())
        run_dir = os.path.join(self.dir, "runs", "loop")
        try:
            # Stopped once its hello is journalled: training, heartbeats flowing.
            self.wait_for(lambda: any(r["status"] == "running" and r["node"]
                                      for r in self.attempts(run_dir)), what="a running attempt")
            pids = self.wait_for(self.worker_pids, what="the worker process")
            self.assertEqual(len(pids), 1, pids)
            os.kill(pids[0], signal.SIGSTOP)  # alive, silent: only the heartbeat can tell
            self.wait_for(lambda: any(r["attempt"] == 2 and r["status"] == "running"
                                      for r in self.attempts(run_dir)),
                          timeout=120, what="the retry")
            first = [r for r in self.attempts(run_dir) if r["attempt"] == 1][0]
            self.assertEqual(first["status"], "killed", first)
            self.assertIn("heartbeat", first["exit"])
            self.assertNotIn(pids[0], self.worker_pids())  # the stopped task is gone
        finally:
            self.interrupt_twice(proc)
            proc.communicate(timeout=120)
        self.wait_for_empty_cluster()

    def test_an_impossible_request_fails_within_the_queue_timeout(self):
        config = slurm_config(self.dir, members=loop_test.MEMBERS[:1], slots=1, rounds=1,
                              failure="retries = 0", slurm_extra="gpus_per_member = 8",
                              strategy="entropy")
        t0 = time.monotonic()
        proc = self.run_slurm(config, expect=1)
        self.assertLess(time.monotonic() - t0, 60)
        self.assertIn("slurm: the step did not start within 20 s (default partition, 8 GPUs, "
                      "1 CPU)", proc.stderr)
        row = self.attempts(os.path.join(self.dir, "runs", "loop"))[0]
        self.assertEqual(row["status"], "failed")


    def test_a_cancelled_batch_job_submitted_again_ends_as_an_uninterrupted_run(self):
        kw = dict(members=loop_test.MEMBERS, rounds=3, k=100, epochs=15)
        reference = write_config(os.path.join(self.dir, "local"), **kw)
        self.run_loop(reference)
        config = slurm_config(os.path.join(self.dir, "batch"), **kw)
        run_dir = os.path.join(self.dir, "batch", "runs", "loop")
        script = os.path.join(self.dir, "job.sh")
        cohort("sbatch", config, "-o", script)

        def submit():
            return subprocess.run(["sbatch", "--parsable", script], env=env(), check=True,
                                  capture_output=True, text=True, timeout=30).stdout.strip()

        job = submit()
        # Cancel it in the middle of round 1.
        self.wait_for(lambda: any(r["round"] == 1 and r["status"] == "running"
                                  for r in self.attempts(run_dir)),
                      timeout=300, what="round 1 running")
        subprocess.run(["scancel", job.split(";")[0]], env=env(), check=True, timeout=30)
        self.wait_for_empty_cluster()
        self.assertNotEqual(self.status(run_dir)["status"], "finished")
        submit()
        self.wait_for(lambda: not self.squeue() and self.status(run_dir)["status"] == "finished",
                      timeout=600, what="the resubmitted job to finish the run")
        self.assertEqual(outcome(os.path.join(self.dir, "local", "runs", "loop")),
                         outcome(run_dir))


if __name__ == "__main__":
    loop_test.COHORT = os.path.abspath(sys.argv[1])
    loop_test.SCRATCH = os.path.abspath(sys.argv[2])
    shutil.rmtree(loop_test.SCRATCH, ignore_errors=True)
    os.makedirs(loop_test.SCRATCH)
    SKIP_REASON = slurm_up()
    if not SKIP_REASON:
        loop_test.SOURCE = os.path.join(loop_test.SCRATCH, "source")
        loop_test.build_source(loop_test.SOURCE)
    try:
        unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
    finally:
        if not SKIP_REASON:
            slurm_down()
