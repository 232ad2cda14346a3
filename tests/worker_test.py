#!/usr/bin/env python3
"""End-to-end tests of `cohort worker`: a real worker process driven over pipes, as the loop
drives it (docs/protocol.md), on a small Fashion-MNIST store built with the CLI.

Run by ctest as: /usr/bin/python3 tests/worker_test.py COHORT_BINARY SCRATCH_DIR
"""
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cohort_store  # noqa: E402  (the numpy-only store reader)

COHORT = None
SCRATCH = None
STORE = None
GENERATION = None  # the generation holding both tables
FMNIST = "/usr/share/datasets/fashion-mnist"
MODEL = "dense 64 relu, dense 10"
PREFIX = b"@cohort "

# A preloaded library whose thread prints to stdout (printf and a raw write) once the worker
# has moved its stdout aside, as a chatty library would in the middle of a run.
NOISE_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static void* noise(void* arg) {
  struct stat before, now;
  fstat(1, &before);
  for (int i = 0; i < 500; i++) {  /* up to 5 s, then print anyway */
    usleep(10000);
    if (fstat(1, &now) == 0 && (now.st_ino != before.st_ino || now.st_dev != before.st_dev))
      break;
  }
  printf("library noise via printf\n");
  fflush(stdout);
  const char* raw = "library noise via write\n";
  if (write(1, raw, strlen(raw)) < 0) return 0;
  return 0;
}
__attribute__((constructor)) static void start_noise(void) {
  pthread_t t;
  if (pthread_create(&t, 0, noise, 0) == 0) pthread_detach(t);
}
"""


def cohort(*args):
    proc = subprocess.run([COHORT, *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"cohort {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def build_store():
    global STORE, GENERATION
    STORE = os.path.join(SCRATCH, "store")
    cohort("data", "init", STORE)
    for table, split, n in (("train", "train", 2000), ("test", "t10k", 500)):
        cohort("data", "import", STORE, "--table", table, "--idx",
               f"{FMNIST}/{split}-images-idx3-ubyte.gz", f"{FMNIST}/{split}-labels-idx1-ubyte.gz",
               "--limit", str(n))
    GENERATION = json.loads(cohort("data", "info", STORE, "--json"))["generation"]


class Worker:
    """A `cohort worker` process: commands in, parsed events out (with timeouts)."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([COHORT, "worker", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.events = queue.Queue()
        self.stdout_lines = []  # every raw stdout line, to check the framing
        self.stderr_lines = []
        self.stdout_done = threading.Event()
        self.stderr_done = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            if line.startswith(PREFIX):
                try:
                    self.events.put(json.loads(line[len(PREFIX):]))
                except ValueError:
                    self.events.put({"ev": "<unparsable>", "line": line})
            else:
                self.events.put({"ev": "<unframed>", "line": line})
        self.stdout_done.set()
        self.events.put(None)

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace"))
        self.stderr_done.set()

    def send(self, command):
        data = command if isinstance(command, (bytes, str)) else json.dumps(command)
        if isinstance(data, str):
            data = data.encode()
        if not data.endswith(b"\n"):
            data += b"\n"
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def next(self, timeout=120, heartbeats=False):
        """The next event (heartbeats skipped unless asked for); None at end of stdout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no event within {timeout} s; stderr: "
                                     f"{''.join(self.stderr_lines)[-2000:]}")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event is None:
                self.events.put(None)  # stays at the end
                return None
            if event["ev"] == "heartbeat" and not heartbeats:
                continue
            return event

    def until(self, *evs, timeout=120):
        """Events up to and including the first whose "ev" is in `evs` (others collected)."""
        seen = []
        while True:
            event = self.next(timeout=timeout)
            if event is None:
                raise AssertionError(f"stdout ended before {evs}; saw {seen}; stderr: "
                                     f"{''.join(self.stderr_lines)[-2000:]}")
            seen.append(event)
            if event["ev"] in evs:
                return seen

    def close_stdin(self):
        self.proc.stdin.close()

    def wait(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def kill(self):
        """Ends the process if it still runs and closes the pipes once both are drained."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stdout_done.wait(10)
        self.stderr_done.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass  # stdin of a dead process: the flush fails with EPIPE


class WorkerCase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(SCRATCH, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.kill()
            # Whatever happened, the channel carried nothing but framed events.
            for line in w.stdout_lines:
                self.assertTrue(line.startswith(PREFIX) and line.endswith(b"\n"),
                                f"unframed stdout line: {line[:200]!r}")
            self.assertFalse(any("terminate called" in l for l in w.stderr_lines))

    def worker(self, *args, env=None):
        w = Worker(*args, env=env)
        self.workers.append(w)
        hello = w.next(timeout=60)
        self.assertIsNotNone(hello, "".join(w.stderr_lines))
        self.assertEqual(hello["ev"], "hello")
        return w

    def train_command(self, member="m1", epochs=2, id="t1", **extra):
        command = {"op": "train", "id": id, "store": STORE, "generation": GENERATION,
                   "table": "train", "member": member,
                   "config": {"model": MODEL, "epochs": epochs, "batch_size": 64, "seed": 3},
                   "checkpoint": os.path.join(self.dir, f"{member}.ckpt")}
        command.update(extra)
        return command

    def train(self, w, member="m1", epochs=2):
        """Trains a member to completion; returns its done event."""
        w.send(self.train_command(member, epochs))
        done = w.until("done", "error")[-1]
        self.assertEqual(done["ev"], "done", done)
        return done

    def assertError(self, event, *mentions, id=None):
        self.assertEqual(event["ev"], "error", event)
        self.assertNotIn("\n", event["message"])
        for m in mentions:
            self.assertIn(m, event["message"])
        if id is not None:
            self.assertEqual(event.get("id"), id)

    def shutdown(self, w):
        w.send({"op": "shutdown"})
        self.assertEqual(w.next(timeout=60)["ev"], "bye")
        self.assertEqual(w.wait(), 0)


class Protocol(WorkerCase):
    def test_hello_comes_first(self):
        w = Worker("--device", "cpu", "--threads", "2")
        self.workers.append(w)
        hello = w.next(timeout=60)
        self.assertEqual(hello["ev"], "hello")
        self.assertEqual(hello["version"], 1)
        self.assertEqual(hello["pid"], w.proc.pid)
        self.assertEqual(hello["device"], "cpu")
        self.assertEqual(hello["threads"], 2)
        self.assertIsInstance(hello["torch"], str)
        self.assertIsInstance(hello["cuda_devices"], int)
        self.assertIsInstance(hello["hostname"], str)
        self.shutdown(w)

    def test_train_predict_evaluate(self):
        w = self.worker()
        w.send(self.train_command("m1", epochs=2, id="t1"))
        events = w.until("done", "error")
        done = events[-1]
        self.assertEqual(done["ev"], "done", done)
        progress = [e for e in events if e["ev"] == "progress"]
        self.assertGreaterEqual(len(progress), 1)
        for p in progress:
            self.assertEqual(p["id"], "t1")
            self.assertEqual(p["member"], "m1")
            self.assertEqual(p["epochs"], 2)
            self.assertTrue(1 <= p["epoch"] <= 2 and 1 <= p["step"] <= p["steps"])
            self.assertEqual(p["steps"], 32)  # ceil(2000 / 64)
            self.assertTrue(math.isfinite(p["loss"]) and p["samples_per_second"] > 0)
            self.assertGreater(p["lr"], 0)
        self.assertEqual(done["id"], "t1")
        self.assertEqual(done["op"], "train")
        self.assertEqual(done["member"], "m1")
        self.assertTrue(os.path.isfile(done["checkpoint"]), done)
        self.assertEqual(done["checkpoint"], os.path.join(self.dir, "m1.ckpt"))
        self.assertEqual(done["samples"], 4000)
        self.assertEqual(done["parameters"], 784 * 64 + 64 + 64 * 10 + 10)
        self.assertEqual([e["epoch"] for e in done["epochs"]], [1, 2])
        for e in done["epochs"]:
            self.assertTrue(math.isfinite(e["train_loss"]) and e["lr"] > 0 and e["seconds"] >= 0)
        self.assertLess(done["epochs"][1]["train_loss"], done["epochs"][0]["train_loss"])
        self.assertEqual(done["best_epoch"], 2)
        self.assertFalse(done["stopped_early"])
        self.assertGreater(done["seconds"], 0)
        self.assertEqual(set(done["step_times"]), {"data", "forward", "backward", "optimizer"})

        out = os.path.join(self.dir, "test-preds.npy")
        w.send({"op": "predict", "id": 2, "store": STORE, "generation": GENERATION,
                "table": "test", "checkpoint": done["checkpoint"], "out": out})
        preds = w.next()
        self.assertEqual(preds["ev"], "predictions", preds)
        self.assertEqual(preds["id"], 2)
        self.assertEqual(preds["path"], out)
        self.assertEqual(preds["rows"], 500)
        self.assertEqual(preds["shape"], [500, 10])
        self.assertEqual(preds["table"], "test")
        self.assertEqual(preds["generation"], GENERATION)
        self.assertGreater(preds["seconds"], 0)
        p = np.load(out)
        self.assertEqual(p.shape, (500, 10))
        self.assertEqual(p.dtype, np.float32)
        self.assertTrue(np.all(p >= 0))
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-4)

        w.send({"op": "evaluate", "id": "e3", "store": STORE, "generation": GENERATION,
                "table": "test", "checkpoint": done["checkpoint"]})
        ev = w.next()
        self.assertEqual(ev["ev"], "done", ev)
        self.assertEqual(ev["id"], "e3")
        self.assertEqual(ev["op"], "evaluate")
        metrics = ev["metrics"]
        self.assertGreater(metrics["accuracy"], 0.5)
        self.assertEqual(metrics["count"], 500)
        for key in ("nll", "brier", "ece"):
            self.assertIn(key, metrics)
        # The predictions agree with the accuracy the worker reported.
        labels = cohort_store.open(STORE, generation=GENERATION).table("test").labels
        self.assertAlmostEqual(float(np.mean(p.argmax(axis=1) == labels)), metrics["accuracy"],
                               places=6)
        self.shutdown(w)

    def test_config_device_and_member_override(self):
        w = self.worker("--threads", "2")
        command = self.train_command("m5", epochs=1)
        command["config"]["member"] = "ignored"
        command["config"]["device"] = {"threads": 1}
        w.send(command)
        done = w.until("done", "error")[-1]
        self.assertEqual(done["ev"], "done", done)
        self.assertEqual(done["member"], "m5")
        # A config error names the member and the path, with a suggestion.
        command = self.train_command("m6", epochs=1, id=9)
        command["config"]["optimizer"] = {"lr": 0.1}
        w.send(command)
        self.assertError(w.next(), "member m6: config.optimizer.lr: unknown field",
                         "did you mean learning_rate?", id=9)
        command = self.train_command("m6", epochs=1, id=10)
        command["config"]["epochs"] = "ten"
        w.send(command)
        self.assertError(w.next(), 'member m6: config.epochs: expected an integer, got "ten"',
                         id=10)
        self.shutdown(w)


class BadInput(WorkerCase):
    def test_errors_and_the_worker_keeps_serving(self):
        w = self.worker()
        done = self.train(w, "m1", epochs=1)
        checkpoint = done["checkpoint"]

        w.send("{not json")
        self.assertError(w.next(), "malformed command", "parse error")
        w.send("[1, 2, 3]")
        self.assertError(w.next(), "malformed command", "expected a JSON object")
        w.send('"train"')
        self.assertError(w.next(), "malformed command")
        # Hostile nesting: refused from the text (at most 64 levels), never a stack overflow.
        deep = "[" * 200000 + "]" * 200000
        w.send(deep)
        self.assertError(w.next(), "malformed command", "JSON nested deeper than 64 levels")
        command = self.train_command("m4", epochs="DEEP", id=4)
        w.send(json.dumps(command).replace('"DEEP"', deep))
        self.assertError(w.next(), "malformed command", "JSON nested deeper than 64 levels")
        w.send(json.dumps(command).replace('"DEEP"', "[" * 30 + "]" * 30))
        self.assertError(w.next(), "config.epochs: expected an integer", id=4)
        w.send(b'{"op": "\xff"}')
        self.assertError(w.next(), "malformed command", "UTF-8")
        w.send({"id": 5, "store": STORE})
        self.assertError(w.next(), 'missing field "op"', id=5)
        w.send({"op": "fly", "id": 6})
        event = w.next()
        self.assertError(event, 'unknown op "fly"', id=6)
        self.assertEqual(event["op"], "fly")
        w.send({"op": 7})
        self.assertError(w.next(), '"op" must be a string')
        w.send({"op": "evaluate", "id": {"x": 1}})
        self.assertError(w.next(), '"id" must be a string or a number')
        w.send({"op": "evaluate", "id": 8, "version": 2, "store": STORE,
                "generation": GENERATION, "table": "test", "checkpoint": checkpoint})
        self.assertError(w.next(), "protocol version 2 is not supported", "speaks 1", id=8)

        # The generation is required: CURRENT is never implied.
        command = self.train_command("m2", epochs=1, id="nogen")
        del command["generation"]
        w.send(command)
        self.assertError(w.next(), 'missing field "generation"', id="nogen")
        w.send({"op": "evaluate", "id": 11, "store": STORE, "generation": "latest",
                "table": "test", "checkpoint": checkpoint})
        self.assertError(w.next(), '"generation"', "non-negative integer", id=11)
        w.send({"op": "evaluate", "id": 12, "store": STORE, "generation": 999,
                "table": "test", "checkpoint": checkpoint})
        self.assertError(w.next(), "generation 999", id=12)
        w.send({"op": "predict", "id": 13, "store": STORE, "generation": GENERATION,
                "table": "test", "checkpoint": checkpoint})
        self.assertError(w.next(), 'missing field "out"', id=13)
        w.send({"op": "evaluate", "id": 14, "store": os.path.join(self.dir, "no-store"),
                "generation": 1, "table": "test", "checkpoint": checkpoint})
        self.assertError(w.next(), "no-store", id=14)
        w.send({"op": "evaluate", "id": 15, "store": STORE, "generation": GENERATION,
                "table": "nope", "checkpoint": checkpoint})
        self.assertError(w.next(), "nope", id=15)
        w.send({"op": "evaluate", "id": 16, "store": STORE, "generation": GENERATION,
                "table": "test", "checkpoint": os.path.join(self.dir, "missing.ckpt")})
        self.assertError(w.next(), "missing.ckpt", id=16)
        # A diverging run: the loss becomes NaN; one error, then business as usual.
        command = self.train_command("m3", epochs=3, id="nan")
        command["config"]["optimizer"] = {"name": "sgd", "learning_rate": 1e10}
        w.send(command)
        event = w.until("error", "done")[-1]
        self.assertError(event, "member m3", "loss became", id="nan")
        self.assertEqual(event["member"], "m3")

        # Extra fields are ignored, and the worker still does real work.
        w.send({"op": "evaluate", "id": "ok", "store": STORE, "generation": GENERATION,
                "table": "test", "checkpoint": checkpoint, "colour": "blue", "version": 1})
        event = w.next()
        self.assertEqual(event["ev"], "done", event)
        self.assertEqual(event["id"], "ok")
        self.assertGreater(event["metrics"]["accuracy"], 0.5)
        self.shutdown(w)

    def test_full_disk_writing_a_checkpoint_is_an_error_event(self):
        """Issue 14: libtorch aborted the worker (exit 134) on a full disk, so the loop lost
        the cause; now the command fails with one line and the worker serves on."""
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        mnt = os.path.join(self.dir, "full")
        os.makedirs(mnt)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt]).returncode:
            self.skipTest("cannot mount a tmpfs")
        try:
            w = self.worker()
            checkpoint = os.path.join(mnt, "checkpoint.pt")
            w.send(self.train_command("m1", epochs=1, id="full", checkpoint=checkpoint))
            event = w.until("done", "error")[-1]
            self.assertError(event, id="full")
            self.assertEqual(event["message"],
                             "no space left on device writing checkpoint " + checkpoint)
            self.assertEqual(os.listdir(mnt), [])
            self.train(w, "m2", epochs=1)
            self.shutdown(w)
        finally:
            subprocess.run(["umount", "-l", mnt])

    def test_crlf_blank_and_very_long_lines(self):
        w = self.worker()
        checkpoint = self.train(w, "m1", epochs=1)["checkpoint"]
        evaluate = {"op": "evaluate", "store": STORE, "generation": GENERATION,
                    "table": "test", "checkpoint": checkpoint}
        w.send(b"\n\n   \r\n" + json.dumps({**evaluate, "id": "crlf"}).encode() + b"\r\n\n")
        event = w.next()
        self.assertEqual((event["ev"], event.get("id")), ("done", "crlf"), event)
        # A 3 MB command (an unknown field) arrives in many pieces and still works.
        w.send({**evaluate, "id": "long", "padding": "x" * (3 << 20)})
        event = w.next()
        self.assertEqual((event["ev"], event.get("id")), ("done", "long"), event)
        # Over 64 MiB: refused with an error, and the next line is read as a new command.
        w.send(b'{"op": "evaluate", "padding": "' + b"y" * (65 << 20) + b'"}')
        self.assertError(w.next(), "malformed command", "longer than 64 MiB")
        # Two commands in one write run in order.
        w.send(json.dumps({**evaluate, "id": "a"}) + "\n" + json.dumps({**evaluate, "id": "b"}))
        self.assertEqual(w.next()["id"], "a")
        self.assertEqual(w.next()["id"], "b")
        self.shutdown(w)

    def test_commands_sent_while_busy_wait_their_turn(self):
        w = self.worker()
        w.send(self.train_command("m1", epochs=20, id="long"))
        w.send({"op": "nonsense", "id": "queued"})
        w.send({"op": "shutdown", "id": "bye"})
        events = w.until("bye")
        kinds = [(e["ev"], e.get("id")) for e in events if e["ev"] != "progress"]
        self.assertEqual(kinds, [("done", "long"), ("error", "queued"), ("bye", "bye")])
        self.assertEqual(w.wait(), 0)


class Channel(WorkerCase):
    def test_heartbeats(self):
        w = self.worker("--heartbeat", "0.2")
        start = time.monotonic()
        idle = []
        while len(idle) < 3:
            event = w.next(timeout=10, heartbeats=True)
            if event["ev"] == "heartbeat":
                idle.append(event)
        self.assertLess(time.monotonic() - start, 5)
        for h in idle:
            self.assertIsNone(h["busy"])
            self.assertNotIn("id", h)
        # While training, heartbeats say so and name the command.
        w.send(self.train_command("m1", epochs=300, id="hb"))
        busy = []
        while True:
            event = w.next(timeout=120, heartbeats=True)
            if event["ev"] == "heartbeat":
                busy.append(event)
            if event["ev"] in ("done", "error"):
                break
        self.assertEqual(event["ev"], "done", event)
        self.assertTrue(any(h["busy"] == "train" and h.get("id") == "hb" for h in busy), busy)
        self.shutdown(w)

    def test_library_prints_do_not_break_the_channel(self):
        compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang")
                         if c and shutil.which(c)), None)
        if compiler is None:
            self.skipTest("no C compiler to build the noisy library")
        source = os.path.join(self.dir, "noise.c")
        library = os.path.join(self.dir, "libnoise.so")
        with open(source, "w") as f:
            f.write(NOISE_C)
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", library, source, "-lpthread"],
                       check=True, timeout=120)
        env = dict(os.environ, LD_PRELOAD=library)
        w = self.worker(env=env)
        deadline = time.monotonic() + 30
        while sum("library noise" in l for l in w.stderr_lines) < 2:
            self.assertLess(time.monotonic(), deadline, "the noisy library never printed")
            time.sleep(0.05)
        done = self.train(w, "m1", epochs=1)
        self.assertTrue(os.path.isfile(done["checkpoint"]))
        self.shutdown(w)
        w.stdout_done.wait(10)
        self.assertFalse(any(b"noise" in l for l in w.stdout_lines))
        for line in w.stdout_lines:
            self.assertTrue(line.startswith(PREFIX), line)


class Exit(WorkerCase):
    def test_cpu_set_binds_every_thread(self):
        env = dict(os.environ, COHORT_CPU_SET="0")
        w = self.worker("--heartbeat", "0.2", env=env)
        self.train(w, epochs=1)
        tasks = os.listdir(f"/proc/{w.proc.pid}/task")
        self.assertGreater(len(tasks), 1)  # the heartbeat and stdin threads at least
        for task in tasks:
            with open(f"/proc/{w.proc.pid}/task/{task}/status") as f:
                allowed = [l.split()[1] for l in f if l.startswith("Cpus_allowed_list")]
            self.assertEqual(allowed, ["0"], f"thread {task}")
        self.shutdown(w)
        bad = Worker(env=dict(os.environ, COHORT_CPU_SET="4096"))
        self.workers.append(bad)
        self.assertEqual(bad.wait(), 1)
        self.assertTrue(any("COHORT_CPU_SET" in l for l in bad.stderr_lines), bad.stderr_lines)

    def test_shutdown_exits_zero(self):
        w = self.worker()
        w.send({"op": "shutdown", "id": "s"})
        bye = w.next()
        self.assertEqual(bye, {"ev": "bye", "id": "s"})
        self.assertEqual(w.wait(), 0)
        self.assertIsNone(w.next(timeout=10))

    def test_eof_while_idle_exits_zero(self):
        w = self.worker()
        w.close_stdin()
        self.assertEqual(w.wait(timeout=10), 0)
        self.assertIsNone(w.next(timeout=10))

    def test_stdin_closed_mid_training_cancels(self):
        w = self.worker()
        w.send(self.train_command("m1", epochs=100000, id="forever"))
        first = w.next(timeout=120)
        self.assertEqual(first["ev"], "progress", first)
        closed = time.monotonic()
        w.close_stdin()
        self.assertEqual(w.wait(timeout=20), 0)
        self.assertLess(time.monotonic() - closed, 10)
        rest = []
        while (event := w.next(timeout=10)) is not None:
            rest.append(event)
        self.assertFalse(any(e["ev"] == "done" for e in rest), rest)
        self.assertError(rest[-1], "cancelled: stdin closed", id="forever")
        self.assertEqual(rest[-1]["op"], "train")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "m1.ckpt")))

    def test_controller_gone_exits_quietly(self):
        proc = subprocess.Popen([COHORT, "worker", "--heartbeat", "0.2"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            proc.stdin.write(json.dumps(self.train_command("m1", epochs=100000)).encode() + b"\n")
            proc.stdin.flush()
            seen = threading.Event()

            def read_until_progress():
                for line in proc.stdout:
                    if b'"ev":"progress"' in line:
                        seen.set()
                        return

            reader = threading.Thread(target=read_until_progress, daemon=True)
            reader.start()
            reader.join(timeout=120)
            self.assertTrue(seen.is_set(), "no progress event")
            # The controller stops reading (stdin stays open): the next event's write fails
            # with EPIPE and the worker leaves on its own.
            proc.stdout.close()
            self.assertEqual(proc.wait(timeout=20), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            try:
                proc.stdin.close()
            except OSError:
                pass


def main():
    global COHORT, SCRATCH
    if len(sys.argv) < 3:
        sys.exit("usage: worker_test.py COHORT_BINARY SCRATCH_DIR [unittest arguments]")
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    build_store()
    unittest.main(argv=[sys.argv[0], "-v", *sys.argv[3:]])


if __name__ == "__main__":
    main()
