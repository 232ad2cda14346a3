"""Write a cohort ensemble member as an outside script (Keras, PyTorch, anything in Python).

``cohort run`` starts an outside member (a ``[[member]]`` with a ``command``) once per round
and attempt, with environment variables and a round spec JSON that say what to train on and
where to put the results (docs/outside-members.md has the whole contract). This module reads
them, gives the round's data as numpy arrays (through ``cohort_store``), prints the
``@cohort`` event lines the loop reads, and writes the predictions the loop needs. It needs
numpy alone; ``keras_callback()`` imports Keras only when called.

Usage::

    import cohort_member

    r = cohort_member.Round.from_env()         # exits 2 with one line if not run by cohort
    x, y = r.train()                           # features, labels at the round's generation
    x_pool, _ = r.pool()                       # the pool's labels stay hidden
    x_test, y_test = r.test()
    epochs = r.config.get("epochs", 5)         # the member's table from loop.toml
    for epoch in range(1, epochs + 1):
        loss = ...                              # train one epoch on r.torch_device
        r.progress(epoch, epochs, loss)
    r.write_predictions(pool_probs, test_probs)  # (rows, classes) float32 probabilities
    r.done({"test_accuracy": acc})

Events go to stdout, one ``@cohort {json}`` line each, written with one write and a flush;
everything else a script prints goes to the member's log.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cohort_store  # noqa: E402  (lives next to this file)

__all__ = ["Round", "RoundError", "SPEC_VERSION", "PREFIX", "format_event"]

SPEC_VERSION = 1
PREFIX = "@cohort "
EXIT_SETUP = 2  # the status from_env() exits with when the round cannot be read

# Environment variables the controller sets; COHORT_SPEC is the one this module needs, the
# rest duplicate the spec for scripts in other languages.
ENV_SPEC = "COHORT_SPEC"

_REQUIRED = {  # spec field -> type check, description
    "version": (int, "an integer"),
    "store": (str, "a string"),
    "generation": (int, "an integer"),
    "tables": (dict, "an object"),
    "member": (str, "a string"),
    "member_index": (int, "an integer"),
    "round": (int, "an integer"),
    "attempt": (int, "an integer"),
    "device": (str, "a string"),
    "torch_device": (str, "a string"),
    "threads": (int, "an integer"),
    "out_dir": (str, "a string"),
    "predictions": (dict, "an object"),
    "checkpoint": (str, "a string"),
    "config": (dict, "an object"),
}


class RoundError(Exception):
    """The round's environment or spec is missing or wrong; the message is one line."""


# --------------------------------------------------------------------------------------------
# Events


def _plain(value: Any) -> Any:
    """JSON-ready copy of value: numpy scalars and arrays to Python, non-finite floats to None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # a torch or tensorflow scalar
        return _plain(value.item())
    raise TypeError(f"cannot report a {type(value).__name__} in an event")


def format_event(ev: str, **fields: Any) -> str:
    """The line for one event: '@cohort {"ev":...}' plus a newline; None fields left out."""
    obj = {"ev": ev}
    obj.update({k: v for k, v in fields.items() if v is not None})
    return PREFIX + json.dumps(_plain(obj), separators=(",", ":"), allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------
# Round


class Round:
    """One attempt of one member in one round. Create with ``Round.from_env()``."""

    def __init__(self, spec: Mapping[str, Any], spec_path: str = "<spec>",
                 stream: Any = None) -> None:
        self._spec_path = spec_path
        self._check(spec)
        self.spec: dict[str, Any] = dict(spec)
        self._stream = stream  # None: sys.stdout at the time of each write
        self._lock = threading.Lock()
        self._store: cohort_store.Store | None = None
        self._last_progress = 0.0
        self._epoch_started = time.monotonic()
        self._epochs: dict[int, dict[str, Any]] = {}
        self._written = False

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 exit_on_error: bool = True) -> Round:
        """Reads the round spec that ``$COHORT_SPEC`` names.

        A missing variable, an unreadable spec or a missing field is reported in one line on
        stderr (and as an ``error`` event), and the script exits with status 2; with
        ``exit_on_error=False`` a ``RoundError`` is raised instead.
        """
        env = os.environ if environ is None else environ
        try:
            path = env.get(ENV_SPEC)
            if not path:
                raise RoundError(f"{ENV_SPEC} is not set: this script is a cohort outside "
                                 f"member and reads its round from `cohort run` "
                                 f"(docs/outside-members.md)")
            return cls.from_spec(path)
        except RoundError as e:
            if not exit_on_error:
                raise
            sys.stdout.write(format_event("error", message=str(e)))
            sys.stdout.flush()
            sys.stderr.write(f"cohort_member: {e}\n")
            sys.stderr.flush()
            raise SystemExit(EXIT_SETUP) from None

    @classmethod
    def from_spec(cls, path: str | os.PathLike[str]) -> Round:
        """Reads a round spec file; raises ``RoundError`` (one line) when it is unusable."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise RoundError(f"{ENV_SPEC}={path}: cannot read the round spec: "
                             f"{e.strerror}") from None
        try:
            spec = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise RoundError(f"{path}: the round spec is not JSON: {e}") from None
        return cls(spec, spec_path=path)

    def _check(self, spec: Any) -> None:
        where = self._spec_path
        if not isinstance(spec, Mapping):
            raise RoundError(f"{where}: the round spec is not a JSON object")
        version = spec.get("version")
        if "version" in spec and version != SPEC_VERSION:
            raise RoundError(f"{where}: round spec version {version!r}, this cohort_member.py "
                             f"reads version {SPEC_VERSION} (use the one of your cohort)")
        for field, (kind, what) in _REQUIRED.items():
            if field not in spec:
                raise RoundError(f"{where}: the round spec has no field \"{field}\"")
            value = spec[field]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise RoundError(f"{where}: field \"{field}\": expected {what}, "
                                 f"got {json.dumps(value)}")
        for sub, keys in (("tables", ("train", "pool", "test")),
                          ("predictions", ("pool", "test"))):
            for key in keys:
                if not isinstance(spec[sub].get(key), str):
                    raise RoundError(f"{where}: field \"{sub}.{key}\": expected a string, "
                                     f"got {json.dumps(spec[sub].get(key))}")
        wsf = spec.get("warm_start_from")
        if wsf is not None and not isinstance(wsf, str):
            raise RoundError(f"{where}: field \"warm_start_from\": expected a string or null, "
                             f"got {json.dumps(wsf)}")

    # -- what the round is -----------------------------------------------------------------

    @property
    def store(self) -> str:
        """The store directory (absolute)."""
        return self.spec["store"]

    @property
    def generation(self) -> int:
        """The store generation every member of this round reads."""
        return self.spec["generation"]

    @property
    def tables(self) -> dict[str, str]:
        """Table names by role: ``{"train": ..., "pool": ..., "test": ...}``."""
        return dict(self.spec["tables"])

    @property
    def member(self) -> str:
        return self.spec["member"]

    @property
    def member_index(self) -> int:
        return self.spec["member_index"]

    @property
    def round(self) -> int:
        """0-based round number."""
        return self.spec["round"]

    @property
    def attempt(self) -> int:
        """1-based attempt number within the round (2 and up are retries)."""
        return self.spec["attempt"]

    @property
    def device(self) -> str:
        """The cohort device, e.g. ``cpu:0`` or ``cuda:1``."""
        return self.spec["device"]

    @property
    def torch_device(self) -> str:
        """What to give torch: ``cpu`` or ``cuda:0`` (CUDA_VISIBLE_DEVICES names the GPU)."""
        return self.spec["torch_device"]

    @property
    def is_cuda(self) -> bool:
        return self.torch_device.startswith("cuda")

    @property
    def threads(self) -> int:
        """Intra-op threads to use (``torch.set_num_threads``); OMP_NUM_THREADS is set too."""
        return self.spec["threads"]

    @property
    def config(self) -> dict[str, Any]:
        """The member's table from loop.toml ([defaults] merged in), as JSON values."""
        return self.spec["config"]

    @property
    def out_dir(self) -> str:
        """This attempt's output directory (exists; a retry gets a fresh one)."""
        return self.spec["out_dir"]

    @property
    def checkpoint(self) -> str:
        """Where to save the model (a file or a directory, the script's choice)."""
        return self.spec["checkpoint"]

    @property
    def warm_start_from(self) -> str | None:
        """The previous round's checkpoint when the member has ``warm_start = true``, else None."""
        return self.spec.get("warm_start_from")

    @property
    def prediction_paths(self) -> dict[str, str]:
        return dict(self.spec["predictions"])

    @property
    def heartbeat_interval(self) -> float:
        """A safe interval for ``heartbeat()``: a quarter of the loop's heartbeat timeout."""
        timeout = self.spec.get("heartbeat_timeout_s")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
            return max(0.1, min(10.0, timeout / 4))
        return 10.0

    def __repr__(self) -> str:
        return (f"<cohort_member.Round member={self.member!r} round={self.round} "
                f"attempt={self.attempt} generation={self.generation} device={self.device}>")

    # -- data ------------------------------------------------------------------------------

    def open_store(self) -> cohort_store.Store:
        """The store at the round's generation (opened once)."""
        if self._store is None:
            self._store = cohort_store.open(self.store, self.generation)
        return self._store

    def table(self, role: str) -> cohort_store.Table:
        """The ``cohort_store.Table`` for a role (``train``, ``pool``, ``test``): ids, schema."""
        if role not in self.spec["tables"]:
            raise KeyError(f"no table role {role!r} (train, pool, test)")
        return self.open_store().table(self.spec["tables"][role])

    def _arrays(self, role: str, labels: bool) -> tuple[np.ndarray, np.ndarray | None]:
        t = self.table(role)
        x = np.array(t.features)  # in memory and writable (torch.from_numpy wants that)
        y = np.array(t.labels) if labels and t.has_labels else None
        return x, y

    def train(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(features, labels) of the training table: every labelled sample so far.

        Features keep the store's dtype (``uint8`` images are not scaled) and shape; labels
        are ``int64`` classes or ``float32`` vectors. The arrays are in-memory copies; for a
        table too large for that, ``table(role).features`` reads rows lazily.
        """
        return self._arrays("train", True)

    def pool(self, with_labels: bool = False) -> tuple[np.ndarray, None]:
        """(features, None) of the pool, the rows ``predictions.pool`` must cover in order.

        The pool's labels are the oracle's (with ``kind = "hidden_labels"`` they are in the
        store until acquired); a member must not see them, so they are not returned unless
        ``with_labels=True`` (for a diagnostic, never for training).
        """
        return self._arrays("pool", with_labels)

    def test(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(features, labels) of the test table."""
        return self._arrays("test", True)

    @property
    def task(self) -> str:
        """``classification`` or ``regression``, from the training table's labels."""
        kind = self.table("train").label_kind
        if kind == "class":
            return "classification"
        if kind == "vector":
            return "regression"
        raise RoundError(f"table '{self.tables['train']}' has no labels to train on")

    @property
    def classes(self) -> int:
        """Classes: ``config["classes"]`` when set, else 1 + the largest train or test label."""
        configured = self.config.get("classes")
        if isinstance(configured, int) and configured > 0:
            return configured
        top = -1
        for role in ("train", "test"):
            t = self.table(role)
            if t.label_kind == "class" and len(t):
                top = max(top, int(np.asarray(t.labels).max()))
        if top < 0:
            raise RoundError("cannot tell the number of classes: no labels; set classes "
                             "in the member's table")
        return top + 1

    # -- events ----------------------------------------------------------------------------

    def emit(self, ev: str, **fields: Any) -> None:
        """Prints one ``@cohort`` event line (one write and a flush, under a lock)."""
        line = format_event(ev, **fields)
        with self._lock:
            stream = self._stream if self._stream is not None else sys.stdout
            stream.write(line)
            stream.flush()

    def progress(self, epoch: int, epochs: int, loss: float | None = None, step: int | None = None,
                 steps: int | None = None, samples_per_second: float | None = None, *,
                 min_interval: float = 0.5, **extra: Any) -> bool:
        """Reports training progress; also proves the script is alive.

        Call it per epoch (without ``step``) or per step; a mid-epoch call (``step < steps``)
        within ``min_interval`` seconds of the last printed one is skipped, so it can be
        called every batch. Returns whether a line was printed. An end-of-epoch call
        (no ``step``, or ``step == steps``) is recorded for ``done()``'s epoch table.
        """
        now = time.monotonic()
        end_of_epoch = step is None or (steps is not None and step >= steps)
        if not end_of_epoch and now - self._last_progress < min_interval:
            return False
        if end_of_epoch and epoch not in self._epochs:
            self._epochs[epoch] = {"epoch": epoch, "train_loss": loss,
                                   "seconds": now - self._epoch_started}
            self._epoch_started = now
        self._last_progress = now
        self.emit("progress", epoch=epoch, epochs=epochs, step=step, steps=steps, loss=loss,
                  samples_per_second=samples_per_second, **extra)
        return True

    @contextlib.contextmanager
    def heartbeat(self, interval: float | None = None, busy: str = "train") -> Iterator[None]:
        """Prints a ``heartbeat`` event every ``interval`` seconds from a thread while inside.

        For steps that print nothing for longer than the loop's heartbeat timeout (a long
        first epoch, loading, predicting on a big pool). Default interval:
        ``heartbeat_interval``.
        """
        interval = self.heartbeat_interval if interval is None else float(interval)
        if not interval > 0:
            raise ValueError(f"heartbeat interval must be positive, got {interval}")
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    self.emit("heartbeat", busy=busy, member=self.member)
                except (OSError, ValueError):  # stdout closed: the loop is gone
                    return

        thread = threading.Thread(target=beat, name="cohort-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def done(self, metrics: Mapping[str, Any] | None = None,
             epochs: list[Mapping[str, Any]] | None = None, **extra: Any) -> None:
        """Prints the ``done`` event: metrics (numbers) and the per-epoch table.

        ``epochs`` defaults to what the end-of-epoch ``progress()`` calls recorded. Call it
        last, after ``write_predictions()``.
        """
        if not self._written and not all(os.path.exists(p)
                                         for p in self.prediction_paths.values()):
            sys.stderr.write("cohort_member: done() before write_predictions(): the attempt "
                             "fails unless both prediction files exist when the script exits\n")
            sys.stderr.flush()
        if epochs is None:
            epochs = [self._epochs[e] for e in sorted(self._epochs)]
        self.emit("done", metrics=dict(metrics or {}), epochs=list(epochs), **extra)

    def isolate_stdout(self) -> None:
        """Keeps the event channel clean of other output (progress bars, C libraries).

        Moves this process's stdout aside for events only and points file descriptor 1 (and
        ``sys.stdout``) at stderr, so whatever else is printed lands in the member's log
        whole instead of splicing into an event line. Call it first thing; child processes
        started afterwards write to the log too.
        """
        if self._stream is not None:
            return
        sys.stdout.flush()
        channel = os.dup(1)
        os.dup2(2, 1)
        self._stream = os.fdopen(channel, "w", buffering=1, encoding="utf-8")
        sys.stdout = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")

    # -- outputs ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, path: str) -> Iterator[str]:
        """Yields a temporary path next to ``path`` and renames it into place on success.

        ``with r.writing(r.checkpoint) as tmp: torch.save(state, tmp)``: a killed attempt
        leaves no half-written file behind.
        """
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            yield tmp
            if os.path.isfile(tmp):
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                if os.path.isfile(tmp):
                    os.unlink(tmp)
            raise

    def check_predictions(self, role: str, values: Any) -> np.ndarray:
        """The float32 array ``write_predictions`` would write for a role; ValueError if wrong."""
        arr = np.asarray(values)
        name = f"{role} predictions"
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name}: dtype {arr.dtype} is not a number type")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        rows = len(self.table(role))
        task = self.task
        if task == "classification":
            configured = self.config.get("classes")
            if isinstance(configured, int) and configured > 0:  # else any width >= 1
                want = f"({rows}, {configured})"
                ok = arr.shape == (rows, configured)
            else:
                want = f"({rows}, classes)"
                ok = arr.ndim == 2 and arr.shape[0] == rows and arr.shape[1] >= 1
        else:
            target = self.table("train").label_shape
            want = f"({rows}, 2{''.join(f', {d}' for d in target)})"
            ok = arr.shape == (rows, 2, *target)
        if not ok:
            raise ValueError(f"{name}: shape {tuple(arr.shape)}, expected {want} for the "
                             f"{rows} rows of table '{self.tables[role]}' at generation "
                             f"{self.generation} ({task}"
                             f"{': mean and variance' if task == 'regression' else ''})")
        bad = ~np.isfinite(arr)
        if bad.any():
            where = np.argwhere(bad)[0]
            raise ValueError(f"{name}: non-finite value {arr[tuple(where)]} at "
                             f"{tuple(int(i) for i in where)}")
        if task == "classification" and rows:
            if arr.min() < 0 or arr.max() > 1:
                raise ValueError(f"{name}: values must be probabilities in [0, 1], found "
                                 f"{arr.min():g}..{arr.max():g} (logits? apply softmax)")
            sums = arr.sum(axis=1, dtype=np.float64)
            worst = int(np.argmax(np.abs(sums - 1)))
            if abs(sums[worst] - 1) > 1e-3:
                raise ValueError(f"{name}: row {worst} sums to {sums[worst]:.6g}, not 1 "
                                 f"(each row is a probability distribution over the classes)")
        if task == "regression" and rows and arr[:, 1].min() < 0:
            raise ValueError(f"{name}: negative variance {arr[:, 1].min():g} in [:, 1]")
        return arr

    @property
    def predicts_train(self) -> bool:
        """True when this round's update steps also read the train table's predictions
        (``predictions.train`` in the spec, ``COHORT_PREDICT_TRAIN=1``): pass ``train=``."""
        return "train" in self.spec["predictions"]

    def write_predictions(self, pool: Any, test: Any, train: Any = None) -> None:
        """Checks and writes the prediction files where the spec says (atomically).

        Classification: ``(rows, classes)`` probabilities; regression: ``(rows, 2, *target)``
        with the mean in ``[:, 0]`` and the variance in ``[:, 1]``; rows in table order, every
        row of the table at the round's generation. Written as float32; a wrong shape, a
        non-finite value, or rows that are not probabilities raise ValueError and write
        nothing. ``train`` is required exactly when ``predicts_train``.
        """
        if self.predicts_train and train is None:
            raise ValueError("this round's update steps read the train table's predictions "
                             "(spec predictions.train): pass train=")
        arrays = {"pool": self.check_predictions("pool", pool),
                  "test": self.check_predictions("test", test)}
        if self.predicts_train:
            arrays["train"] = self.check_predictions("train", train)
        if arrays["pool"].shape[1:] != arrays["test"].shape[1:]:
            raise ValueError(f"pool predictions {arrays['pool'].shape[1:]} and test predictions "
                             f"{arrays['test'].shape[1:]} differ past the row count")
        for role, arr in arrays.items():
            path = self.prediction_paths[role]
            with self.writing(path) as tmp:
                with open(tmp, "wb") as f:
                    np.save(f, arr, allow_pickle=False)
        self._written = True

    # -- Keras -----------------------------------------------------------------------------

    def keras_callback(self, batches: bool = True) -> Any:
        """A Keras ``Callback`` that reports each epoch (and, throttled, each batch) as progress.

        ``model.fit(..., callbacks=[r.keras_callback()], verbose=2)``. Imports Keras here
        (``keras``, else ``tensorflow.keras``); raises ImportError saying so without it.
        """
        return _keras_callback_class()(self, batches)


_KERAS_CLASS: Any = None


def _keras_callback_class() -> Any:
    global _KERAS_CLASS
    if _KERAS_CLASS is not None:
        return _KERAS_CLASS
    try:
        from keras.callbacks import Callback
    except ImportError:
        try:
            from tensorflow.keras.callbacks import Callback
        except ImportError:
            raise ImportError("cohort_member.keras_callback() needs Keras: neither 'keras' "
                              "nor 'tensorflow.keras' can be imported in this Python "
                              f"({sys.executable}); install keras or tensorflow") from None

    class CohortKerasCallback(Callback):  # type: ignore[misc, valid-type]
        """Reports Keras training to cohort as ``progress`` events."""

        def __init__(self, rnd: Round, batches: bool = True) -> None:
            super().__init__()
            self.round = rnd
            self.batches = batches
            self.epochs = 0
            self.steps: int | None = None
            self.epoch = 0
            self._epoch_start = 0.0
            self._samples = 0

        def on_train_begin(self, logs: Any = None) -> None:
            params = getattr(self, "params", None) or {}
            self.epochs = int(params.get("epochs") or 0)
            self.steps = params.get("steps")

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch + 1
            self._epoch_start = time.monotonic()
            self._samples = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not self.batches:
                return
            logs = logs or {}
            size = logs.get("size")
            self._samples += int(size) if size is not None else 0
            elapsed = time.monotonic() - self._epoch_start
            rate = self._samples / elapsed if self._samples and elapsed > 0 else None
            steps = int(self.steps) if self.steps else None
            step = batch + 1
            if steps is not None and step >= steps:
                return  # the epoch's end is reported by on_epoch_end, with the final loss
            self.round.progress(self.epoch, self.epochs, logs.get("loss"), step=step,
                                steps=steps, samples_per_second=rate)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = dict(logs or {})
            elapsed = time.monotonic() - self._epoch_start
            rate = self._samples / elapsed if self._samples and elapsed > 0 else None
            extra = {k: v for k, v in logs.items() if k != "loss" and _is_number(v)}
            self.round.progress(epoch + 1, self.epochs, logs.get("loss"),
                                samples_per_second=rate, **extra)

    _KERAS_CLASS = CohortKerasCallback
    return _KERAS_CLASS


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, (str, bool))


def keras_callback(rnd: Round | None = None, batches: bool = True) -> Any:
    """``Round.keras_callback`` for the round of the environment (or ``rnd``)."""
    return (rnd or Round.from_env()).keras_callback(batches)
