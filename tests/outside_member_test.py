#!/usr/bin/env python3
"""End-to-end tests of outside-script members (docs/outside-members.md) in `cohort run`:
a mixed ensemble with a python3-torch member, and scripts that crash, hang, print garbage,
forget their predictions, and check the environment they get.

Run by ctest as: /usr/bin/python3 tests/outside_member_test.py COHORT_BINARY SCRATCH_DIR
"""
import json
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_test  # noqa: E402  (the shared store and config helpers)
from loop_test import LoopCase, cohort, journal, write_config  # noqa: E402

TIME_SCALE = loop_test.TIME_SCALE  # scripts/sanitize stretches wall-clock limits under ASan

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "outside", "member.py")
TORCH_MEMBER = os.path.join(HERE, "..", "examples", "pytorch-member", "train.py")


def script_member(name, behaviour="ok", seed=1, command=None, extra=""):
    argv = json.dumps(command or ["/usr/bin/python3", SCRIPT])
    return (f'\n[[member]]\nname = "{name}"\ncommand = {argv}\nbehaviour = "{behaviour}"\n'
            f'seed = {seed}\n{extra}')


def read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def attempts(run_dir, member):
    db = journal(run_dir)
    rows = db.execute("SELECT round, attempt, status, exit, metrics_json FROM attempts "
                      "WHERE member = ? ORDER BY round, attempt", (member,)).fetchall()
    db.close()
    return [dict(r) for r in rows]


class OutsideMembers(LoopCase):
    def test_mixed_ensemble_with_a_pytorch_member_runs_two_rounds(self):
        extra = script_member("torch-mlp", command=["/usr/bin/python3", TORCH_MEMBER],
                              extra="arch = \"mlp\"\nhidden = [32]\nepochs = 2\n")
        extra += script_member("centroids", seed=2)
        config = write_config(self.dir, rounds=2, k=100, members=loop_test.MEMBERS[:1],
                              extra_member=extra)
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        s = self.status(run_dir)
        self.assertEqual([r["status"] for r in s["rounds"]], ["done", "done"])
        for r in s["rounds"]:
            self.assertEqual([m["status"] for m in r["members"]], ["done"] * 3)
            torch = next(m for m in r["members"] if m["name"] == "torch-mlp")
            self.assertGreater(torch["test"]["accuracy"], 0.3)
        db = journal(run_dir)
        # The torch member's epochs were journalled from its `done` event.
        n = db.execute("SELECT count(*) FROM epochs JOIN attempts ON attempts.id = attempt_id "
                       "WHERE member = 'torch-mlp'").fetchone()[0]
        self.assertEqual(n, 4)
        db.close()
        spec = json.loads(read(run_dir, "members", "torch-mlp", "round-0001", "attempt-1",
                               "spec.json"))
        self.assertEqual(spec["round"], 1)
        self.assertEqual(spec["config"]["hidden"], [32])
        self.assertEqual(spec["config"]["classes"], 10)  # [defaults] merged in

    def test_an_update_step_that_reads_train_predictions_gets_them_from_every_member(self):
        steps = ('[[update]]\nkind = "acquire"\n\n[[update]]\nkind = "relabel_or_drop"\n'
                 'threshold = 0.02\nmax_per_round = 5\n')
        config = write_config(self.dir, rounds=2, k=50, members=loop_test.MEMBERS[:1],
                              extra_member=script_member("centroids", seed=2), oracle=steps)
        self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")
        db = journal(run_dir)
        rows = db.execute("SELECT member, round, json_extract(predictions_json, '$.train') "
                          "FROM attempts WHERE status = 'done' ORDER BY round, member").fetchall()
        db.close()
        # Round 0 runs the steps, so every member predicted the train table; the last round
        # runs none, so none did.
        self.assertEqual([(m, r, f is not None) for m, r, f in rows],
                         [("centroids", 0, True), ("mlp-a", 0, True),
                          ("centroids", 1, False), ("mlp-a", 1, False)])
        spec = json.loads(read(run_dir, "members", "centroids", "round-0000", "attempt-1",
                               "spec.json"))
        self.assertIn("train", spec["predictions"])
        for member, rnd, path in rows:
            if path is None:
                continue
            probs = np.load(os.path.join(run_dir, path))
            self.assertEqual(probs.shape, (300, 10), member)  # the round's 300 train rows
        self.assertTrue(spec["predictions"]["train"].endswith("predictions-train.npy"))

    def test_misbehaving_scripts(self):
        extra = (script_member("crashes-once", "crash-first", 2)
                 + script_member("hangs", "hang", 3)
                 + script_member("garbage", "garbage", 4)
                 + script_member("forgets", "no-predictions", 5)
                 + script_member("env", "env", 6))
        config = write_config(
            self.dir, rounds=1, members=loop_test.MEMBERS[:1], extra_member=extra,
            failure=f"retries = 1\nmin_members = 4\nattempt_timeout_s = {3 * TIME_SCALE:g}")
        proc = self.run_loop(config)
        run_dir = os.path.join(self.dir, "runs", "loop")

        a = attempts(run_dir, "crashes-once")
        self.assertEqual([x["status"] for x in a], ["failed", "done"])
        # The exit quotes the last non-empty line of member.log, not only its path.
        self.assertIn("exited with status 3: crashing on purpose (log: ", a[0]["exit"])

        a = attempts(run_dir, "hangs")
        self.assertEqual([x["status"] for x in a], ["killed", "killed"])
        self.assertIn("attempt_timeout_s", a[0]["exit"])

        a = attempts(run_dir, "garbage")
        self.assertEqual([x["status"] for x in a], ["done"])
        log = read(run_dir, "members", "garbage", "round-0000", "attempt-1", "member.log")
        self.assertIn("some library chatter", log)
        self.assertIn("@cohort {not json", log)
        self.assertIn("[cohort: not an event: JSON nested deeper than 64 levels]", log)

        a = attempts(run_dir, "forgets")
        self.assertEqual([x["status"] for x in a], ["failed", "failed"])
        self.assertIn("exited 0 without writing predictions-pool.npy", a[0]["exit"])
        self.assertIn("forgets", proc.stdout)

        # Its `done` epochs carry no lr: the journal says NULL, not 0.0.
        db = journal(run_dir)
        lrs = db.execute("SELECT lr FROM epochs JOIN attempts ON attempts.id = attempt_id "
                         "WHERE member = 'env'").fetchall()
        db.close()
        self.assertEqual([tuple(r) for r in lrs], [(None,)])
        env = json.loads(read(run_dir, "members", "env", "round-0000", "attempt-1", "env.json"))
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"], "")
        self.assertEqual(env["OMP_NUM_THREADS"], "1")
        self.assertEqual(env["COHORT_THREADS"], "1")
        self.assertIn(env["COHORT_DEVICE"], ("cpu:0", "cpu:1"))
        self.assertEqual(env["COHORT_TORCH_DEVICE"], "cpu")
        self.assertEqual(env["COHORT_MEMBER"], "env")
        self.assertEqual(env["COHORT_MEMBER_INDEX"], "5")
        self.assertEqual(env["COHORT_ROUND"], "0")
        self.assertTrue(os.path.isfile(env["COHORT_SPEC"]))
        self.assertEqual(self.status(run_dir)["status"], "finished")

    def test_cuda_device_binding_reaches_the_script(self):
        # No GPU here: the controller still binds cuda:N exactly as for native workers.
        extra = script_member("env", "env", 1)
        config = write_config(self.dir, rounds=1, members=[], extra_member=extra,
                              strategy="entropy", devices=1)
        with open(config) as f:
            text = f.read().replace('devices = ["cpu:0"]', 'devices = ["cuda:3"]')
        with open(config, "w") as f:
            f.write(text)
        self.run_loop(config)
        env = json.loads(read(self.dir, "runs", "loop", "members", "env", "round-0000",
                              "attempt-1", "env.json"))
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"], "3")
        self.assertEqual(env["COHORT_TORCH_DEVICE"], "cuda:0")
        self.assertEqual(env["COHORT_DEVICE"], "cuda:3")


def main():
    loop_test.COHORT = os.path.abspath(sys.argv[1])
    loop_test.SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(loop_test.SCRATCH, exist_ok=True)
    loop_test.SOURCE = os.path.join(loop_test.SCRATCH, "source-store")
    loop_test.build_source(loop_test.SOURCE)
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)


if __name__ == "__main__":
    main()
