#!/usr/bin/python3
"""The seed's design, written by a careful user: the closed active-learning loop in plain Python.

This is the baseline of issue #6 (docs/benchmarks.md): the first sketch of
../shared/MISSION.md, with PyTorch instead of Keras. Each round the main process starts one
fresh ``multiprocessing`` process per ensemble member (at most one per device at a time); each
process maps the shared dataset file (``numpy.memmap``), builds its model from the member's
spec, trains on the labelled rows, predicts the pool and the test rows, and puts its class
probabilities and timings on a queue. The main process waits for every member, scores the pool
with the same acquisition function cohort uses (docs/acquisition.md), marks the k best pool
samples labelled *in place in the memory-mapped file*, and starts the next round.

It reads cohort's own loop config (members, devices, acquisition, stop.max_rounds) and cohort's
store (python/cohort_store.py, once, at start), so both systems run the same experiment:

    /usr/bin/python3 bench/seed_baseline/seed_loop.py [--config examples/fashion-mnist/loop.toml]
        [--store STORE] [--work DIR] [--rounds N] [--k N] [--epochs N] [--members N]
        [--devices N] [--start-method spawn|fork|forkserver] [--json OUT] [--quick]

Run it with Debian's interpreter (it has numpy and torch): /usr/bin/python3.
bench/seed_baseline/README.md says what it measures and where it differs from cohort.
"""

import time

_T_MODULE = time.monotonic()  # a spawned child re-imports this module: its start

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import queue as queue_lib  # noqa: E402
import sys  # noqa: E402
import tomllib  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

_T_TORCH = time.monotonic()

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "python"))

PROG = "seed_loop"

# Row roles in the memory-mapped dataset (roles.npy, int8).
POOL, LABELLED, TEST = 0, 1, 2


class LoopError(Exception):
    """A one-line problem with the config, the store or a member."""


# ---------------------------------------------------------------------------------------------
# Model specs (docs/models.md): "conv2d 16 3 1 1 relu, maxpool 2, flatten, dense 10"

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}
_ARITY = {"dense": (1, 1), "conv2d": (2, 4), "maxpool": (1, 1), "avgpool": (1, 1),
          "flatten": (0, 0), "dropout": (1, 1), "batchnorm": (0, 0), "layernorm": (0, 0)}
_IMAGE_LAYERS = ("conv2d", "maxpool", "avgpool")


def parse_spec(spec: str) -> list[tuple[str, list[str]]]:
    """[(layer, args)] with a trailing activation split into its own layer, as cohort does."""
    layers = []
    for n, item in enumerate(spec.split(","), start=1):
        words = item.split()
        if not words:
            raise LoopError(f"model '{spec}': layer {n} is empty")
        name, args = words[0], words[1:]
        if name in _ACTIVATIONS:
            if args:
                raise LoopError(f"model '{spec}': activation '{name}' takes no arguments")
            layers.append((name, []))
            continue
        if name not in _ARITY:
            raise LoopError(f"model '{spec}': unknown layer '{name}'")
        trailing = args.pop() if args and args[-1] in _ACTIVATIONS else None
        lo, hi = _ARITY[name]
        if not lo <= len(args) <= hi:
            raise LoopError(f"model '{spec}': layer {n} '{item.strip()}' takes {lo} to {hi} "
                            f"arguments, got {len(args)}")
        layers.append((name, args))
        if trailing:
            layers.append((trailing, []))
    if not layers or layers[-1][0] != "dense":
        raise LoopError(f"model '{spec}': the last layer must be 'dense N'")
    return layers


def _int(word: str, spec: str, low: int = 1) -> int:
    if not word.isdigit() or int(word) < low:
        raise LoopError(f"model '{spec}': '{word}' is not an integer >= {low}")
    return int(word)


def build_model(spec: str, input_shape: tuple[int, ...]) -> tuple[nn.Sequential, bool]:
    """cohort's network for `spec` (src/model/network.cc), with PyTorch's default init.

    Returns the model and whether an (H, W) input must gain a channel axis: (H, W) images feed
    2-D layers as one channel, (C, H, W) as C channels.
    """
    layers = parse_spec(spec)
    add_channel = len(input_shape) == 2 and any(n in _IMAGE_LAYERS for n, _ in layers)
    shape = (1, *input_shape) if add_channel else tuple(input_shape)
    mods: list[nn.Module] = []
    for name, args in layers:
        if name == "dense":
            units = _int(args[0], spec)
            if len(shape) > 1:
                mods.append(nn.Flatten())
            mods.append(nn.Linear(math.prod(shape), units))
            shape = (units,)
        elif name == "conv2d":
            if len(shape) != 3:
                raise LoopError(f"model '{spec}': conv2d needs an image input, got {shape}")
            filters, kernel = _int(args[0], spec), _int(args[1], spec)
            stride = _int(args[2], spec) if len(args) >= 3 else 1
            if len(args) >= 4:
                padding = kernel // 2 if args[3] == "same" else _int(args[3], spec, 0)
            else:
                padding = 0
            mods.append(nn.Conv2d(shape[0], filters, kernel, stride=stride, padding=padding))
            h = (shape[1] + 2 * padding - kernel) // stride + 1
            w = (shape[2] + 2 * padding - kernel) // stride + 1
            shape = (filters, h, w)
        elif name in ("maxpool", "avgpool"):
            k = _int(args[0], spec)
            mods.append(nn.MaxPool2d(k) if name == "maxpool" else nn.AvgPool2d(k))
            shape = (shape[0], shape[1] // k, shape[2] // k)
        elif name == "flatten":
            mods.append(nn.Flatten())
            shape = (math.prod(shape),)
        elif name == "dropout":
            mods.append(nn.Dropout(float(args[0])))
        elif name == "batchnorm":
            mods.append(nn.BatchNorm2d(shape[0]) if len(shape) == 3 else nn.BatchNorm1d(shape[0]))
        elif name == "layernorm":
            mods.append(nn.LayerNorm(list(shape)))
        else:
            mods.append(_ACTIVATIONS[name]())
        if any(d <= 0 for d in shape):
            raise LoopError(f"model '{spec}': layer '{name} {' '.join(args)}' leaves shape {shape}")
    return nn.Sequential(*mods), add_channel


# ---------------------------------------------------------------------------------------------
# The loop config (docs/config.md): the subset this baseline needs

_OPTIMIZER = {"name": "adam", "learning_rate": 1e-3, "weight_decay": 0.0, "momentum": 0.9,
              "beta1": 0.9, "beta2": 0.999}
_SCHEDULE = {"name": "constant", "warmup_epochs": 0, "step_epochs": 10, "gamma": 0.1,
             "min_learning_rate": 0.0}
_MEMBER = {"epochs": 10, "batch_size": 64, "seed": 0, "classes": 0, "standardize": False,
           "warm_start": False, "loss": "auto", "label_smoothing": 0.0, "grad_clip_norm": 0.0,
           "validation_fraction": 0.0, "patience": 0}


def member_configs(cfg: dict) -> list[dict]:
    """Each [[member]] over [defaults] over cohort's defaults; nested tables merge by field."""
    defaults = cfg.get("defaults", {})
    out = []
    for i, m in enumerate(cfg.get("member", []), start=1):
        c = dict(_MEMBER)
        c["optimizer"] = dict(_OPTIMIZER)
        c["schedule"] = dict(_SCHEDULE)
        for layer in (defaults, m):
            for key, value in layer.items():
                if key in ("optimizer", "schedule"):
                    c[key].update(value)
                else:
                    c[key] = value
        if "name" not in c or "model" not in c:
            raise LoopError(f"member[{i}]: needs a name and a model")
        if c["validation_fraction"] or c["patience"]:
            raise LoopError(f"member {c['name']}: validation_fraction/patience are not "
                            "implemented by the baseline")
        if c["loss"] not in ("auto", "cross_entropy"):
            raise LoopError(f"member {c['name']}: loss {c['loss']} is not implemented by the "
                            "baseline (classification only)")
        if c["optimizer"]["name"] not in ("adam", "adamw", "sgd"):
            raise LoopError(f"member {c['name']}: unknown optimizer {c['optimizer']['name']}")
        if c["schedule"]["name"] not in ("constant", "step", "cosine"):
            raise LoopError(f"member {c['name']}: unknown schedule {c['schedule']['name']}")
        parse_spec(c["model"])
        out.append(c)
    if not out:
        raise LoopError("the config has no [[member]]")
    return out


def device_list(cfg: dict) -> list[str]:
    devices = cfg.get("devices", ["cpu:0"])
    threads = int(cfg.get("threads_per_cpu_device", 1))
    if devices == "auto":
        if torch.cuda.is_available():
            devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        else:
            devices = [f"cpu:{i}" for i in range(max(1, (os.cpu_count() or 1) // threads))]
    slots = []
    for _ in range(int(cfg.get("members_per_device", 1))):
        slots.extend(devices)
    return slots


# ---------------------------------------------------------------------------------------------
# The member process

def learning_rate(c: dict, epoch_pos: float) -> float:
    """cohort's LearningRate (src/model/trainer.cc) at a fractional 0-based epoch."""
    base, s = c["optimizer"]["learning_rate"], c["schedule"]
    warm = s["warmup_epochs"]
    if warm > 0 and epoch_pos < warm:
        return base * epoch_pos / warm
    if s["name"] == "step":
        return base * s["gamma"] ** math.floor(epoch_pos / s["step_epochs"])
    if s["name"] == "cosine":
        span = c["epochs"] - warm
        t = (epoch_pos - warm) / span if span > 0 else 1.0
        t = min(max(t, 0.0), 1.0)
        lo = s["min_learning_rate"]
        return lo + (base - lo) * 0.5 * (1.0 + math.cos(math.pi * t))
    return base


def make_optimizer(o: dict, params):
    if o["name"] == "adam":
        return torch.optim.Adam(params, lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                                weight_decay=o["weight_decay"])
    if o["name"] == "adamw":
        return torch.optim.AdamW(params, lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                                 weight_decay=o["weight_decay"])
    return torch.optim.SGD(params, lr=o["learning_rate"], momentum=o["momentum"],
                           weight_decay=o["weight_decay"])


def open_dataset(work: str):
    """The memory-mapped dataset: features, labels and the per-row role (pool/labelled/test)."""
    features = np.load(os.path.join(work, "features.npy"), mmap_mode="r")
    labels = np.load(os.path.join(work, "labels.npy"), mmap_mode="r")
    roles = np.load(os.path.join(work, "roles.npy"), mmap_mode="r")
    return features, labels, roles


def to_float(x: np.ndarray) -> torch.Tensor:
    x = np.ascontiguousarray(x)
    if not x.flags.writeable:
        x = x.copy()
    t = torch.from_numpy(x)
    return t.float().mul_(1.0 / 255.0) if t.dtype == torch.uint8 else t.float()


def predict(model, add_channel, mean, inv_std, features, rows, device, classes, batch=256):
    """Softmax probabilities (len(rows), classes), float32, written into one preallocated array
    (appending each batch's small output between large temporaries fragments glibc's heap:
    the RSS of a CNN member grew by ~25 MB per batch that way)."""
    probs = np.empty((len(rows), classes), np.float32)
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            x = to_float(features[rows[i:i + batch]]).to(device)
            if mean is not None:
                x = (x - mean) * inv_std
            if add_channel:
                x = x.unsqueeze(1)
            probs[i:i + len(x)] = torch.softmax(model(x), dim=1).cpu().numpy()
    return probs


def member_process(job: dict, results) -> None:
    """One member, one round: train on the labelled rows, predict pool and test, report."""
    t_enter = time.monotonic()
    try:
        c = job["member"]
        device = torch.device("cpu" if job["device"].startswith("cpu") else job["device"])
        torch.set_num_threads(job["threads"])
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        torch.manual_seed(c["seed"])

        features, labels, roles = open_dataset(job["work"])
        roles_now = np.array(roles)  # the round's view of the file
        train_rows = np.flatnonzero(roles_now == LABELLED)
        pool_rows = np.flatnonzero(roles_now == POOL)
        test_rows = np.flatnonzero(roles_now == TEST)
        X = to_float(features[train_rows])
        Y = torch.from_numpy(np.asarray(labels[train_rows], dtype=np.int64))
        input_shape = tuple(features.shape[1:])
        mean = inv_std = None
        if c["standardize"]:
            # Per-feature mean and population std of the scaled training rows; a feature with
            # std < 1e-3 keeps scale 1 (cohort's FeatureMoments and SetStandardization).
            xd = X.double()
            m = xd.mean(0)
            sd = (xd.mul(xd).mean(0) - m * m).clamp_min(0).sqrt().float()
            mean = m.float().to(device)
            inv_std = torch.where(sd < 1e-3, torch.ones_like(sd), sd.reciprocal()).to(device)
            X = (X - m.float()) * inv_std.cpu()

        classes = int(c["classes"]) or int(job["classes"])
        model, add_channel = build_model(c["model"], input_shape)
        if model[-1].out_features != classes:
            raise LoopError(f"member {c['name']}: last layer has {model[-1].out_features} "
                            f"units, the task has {classes} classes")
        model.to(device)
        optimizer = make_optimizer(c["optimizer"], model.parameters())
        state_path = os.path.join(job["work"], f"member-{c['name']}.pt")
        if c["warm_start"] and os.path.exists(state_path):
            state = torch.load(state_path, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        loss_fn = nn.CrossEntropyLoss(label_smoothing=float(c["label_smoothing"]))
        has_bn = any(isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)) for mod in model)
        n, bs = len(train_rows), int(c["batch_size"])
        steps = (n + bs - 1) // bs
        if has_bn and steps > 1 and n % bs == 1:
            steps -= 1  # batchnorm cannot train on a last batch of one sample
        t_ready = time.monotonic()

        t_first = None
        loss_value = float("nan")
        train_start = time.perf_counter()
        model.train()
        for epoch in range(c["epochs"]):
            perm = torch.randperm(n)
            for step in range(steps):
                idx = perm[step * bs:(step + 1) * bs]
                x, y = X[idx].to(device), Y[idx].to(device)
                if add_channel:
                    x = x.unsqueeze(1)
                lr = learning_rate(c, epoch + (step + 1) / steps)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                if c["grad_clip_norm"] > 0:
                    nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip_norm"])
                optimizer.step()
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    raise LoopError(f"member {c['name']}: loss became {loss_value} at epoch "
                                    f"{epoch + 1} step {step + 1}")
                if t_first is None:
                    t_first = time.monotonic()
        train_s = time.perf_counter() - train_start
        if c["warm_start"]:
            tmp = state_path + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
            os.replace(tmp, state_path)

        predict_start = time.perf_counter()
        model.eval()
        pb = job["predict_batch"]
        p_pool = (predict(model, add_channel, mean, inv_std, features, pool_rows, device,
                          classes, pb) if job["predict_pool"] else None)
        p_test = predict(model, add_channel, mean, inv_std, features, test_rows, device, classes,
                         pb)
        predict_s = time.perf_counter() - predict_start
        t_done = time.monotonic()
        results.put({
            "member": c["name"], "ok": True, "pool": p_pool, "test": p_test,
            "pool_rows": len(pool_rows), "train_rows": n, "final_loss": loss_value,
            "train_s": train_s, "predict_s": predict_s,
            "t_spawn": job["t_spawn"], "t_module": _T_MODULE, "t_torch": _T_TORCH,
            "t_enter": t_enter, "t_ready": t_ready, "t_first_batch": t_first, "t_done": t_done,
        })
    except Exception as e:  # noqa: BLE001 - reported to the main process, one line
        msg = str(e) if isinstance(e, LoopError) else \
            f"{type(e).__name__}: {e} ({traceback.format_exc().splitlines()[-3].strip()})"
        results.put({"member": job["member"]["name"], "ok": False, "error": msg})


# ---------------------------------------------------------------------------------------------
# Acquisition (docs/acquisition.md) and ensemble metrics

def _entropy(q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0)
    return -t.sum(axis=-1)


def acquisition_scores(strategy: str, p: np.ndarray) -> np.ndarray:
    """Scores (higher = more useful) for p of shape (M, N, C), in float64."""
    p = p.astype(np.float64)
    m, n, c = p.shape
    pbar = p.mean(axis=0)
    if strategy == "random":
        return np.zeros(n)
    if strategy == "entropy":
        return _entropy(pbar)
    if strategy == "margin":
        top2 = np.sort(pbar, axis=1)[:, -2:] if c >= 2 else np.zeros((n, 2))
        return -(top2[:, 1] - top2[:, 0])
    if strategy == "least_confident":
        return 1.0 - pbar.max(axis=1)
    if strategy == "variance":
        return ((p - pbar) ** 2).mean(axis=0).mean(axis=1)
    if strategy == "bald":
        return np.maximum(_entropy(pbar) - _entropy(p).mean(axis=0), 0.0)
    if strategy == "vote_entropy":
        votes = p.argmax(axis=2)  # first maximum on ties
        v = np.zeros((n, c))
        for k in range(m):
            v[np.arange(n), votes[k]] += 1.0 / m
        return _entropy(v)
    raise LoopError(f"unknown acquisition strategy '{strategy}' (random, entropy, margin, "
                    "least_confident, variance, bald, vote_entropy)")


def splitmix_keys(n: int, seed: int) -> np.ndarray:
    """The (i+1)-th splitmix64 output from state `seed`, for i in [0, n) (cohort's tie keys)."""
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def acquire(strategy: str, p: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The k most useful samples, best first: score desc, then splitmix key asc, then index."""
    scores = acquisition_scores(strategy, p)
    keys = splitmix_keys(len(scores), seed)
    order = np.lexsort((np.arange(len(scores)), keys, -scores))
    return order[:k]


def ensemble_metrics(p: np.ndarray, labels: np.ndarray) -> dict:
    pbar = p.astype(np.float64).mean(axis=0)
    n = len(labels)
    if n == 0:
        return {"accuracy": 0.0, "nll": 0.0}
    acc = float((pbar.argmax(axis=1) == labels).mean())
    py = np.maximum(pbar[np.arange(n), labels], np.finfo(np.float32).tiny)
    return {"accuracy": acc, "nll": float(-np.log(py).mean())}


# ---------------------------------------------------------------------------------------------
# The main process

def prepare_dataset(store_path: str, tables: dict, work: str, pool_limit: int | None,
                    test_limit: int | None) -> dict:
    """Reads the store once and writes the memory-mapped dataset file into `work`."""
    import cohort_store
    try:
        store = cohort_store.open(store_path)
        parts = [(store.table(tables["train"]), LABELLED, None),
                 (store.table(tables["pool"]), POOL, pool_limit),
                 (store.table(tables["test"]), TEST, test_limit)]
    except cohort_store.StoreError as e:
        raise LoopError(f"store: {e}") from None
    rng = np.random.default_rng(0)
    chosen = []
    for table, role, limit in parts:
        if table.labels is None:
            raise LoopError(f"store: table has no labels (the baseline needs class labels)")
        rows = np.arange(len(table))
        if limit is not None and limit < len(rows):
            rows = np.sort(rng.choice(len(rows), size=limit, replace=False))
        chosen.append((table, role, rows))
    n = sum(len(r) for _, _, r in chosen)
    shape = tuple(chosen[0][0].features.shape[1:])
    dtype = chosen[0][0].features.dtype
    os.makedirs(work, exist_ok=True)
    features = np.lib.format.open_memmap(os.path.join(work, "features.npy"), mode="w+",
                                         dtype=dtype, shape=(n, *shape))
    labels = np.lib.format.open_memmap(os.path.join(work, "labels.npy"), mode="w+",
                                       dtype=np.int64, shape=(n,))
    roles = np.lib.format.open_memmap(os.path.join(work, "roles.npy"), mode="w+",
                                      dtype=np.int8, shape=(n,))
    at = 0
    counts = {}
    for table, role, rows in chosen:
        feats = table.features
        for i in range(0, len(rows), 8192):
            r = rows[i:i + 8192]
            features[at + i:at + i + len(r)] = feats[r]
        labels[at:at + len(rows)] = np.asarray(table.labels[rows], dtype=np.int64)
        roles[at:at + len(rows)] = role
        counts[{LABELLED: "train", POOL: "pool", TEST: "test"}[role]] = len(rows)
        at += len(rows)
    classes = int(labels.max()) + 1
    for a in (features, labels, roles):
        a.flush()
    del features, labels, roles
    return {"rows": n, "shape": shape, "dtype": str(dtype), "classes": classes, **counts}


def run_round(members, slots, threads, work, classes, ctx, round_no, timeout_s, predict_pool,
              predict_batch):
    """Starts one process per member, at most len(slots) at once; returns their reports."""
    results = ctx.Queue()
    pending = list(enumerate(members))
    running: dict[str, tuple] = {}  # member name -> (process, slot)
    free = list(range(len(slots)))
    reports = {}
    last_seen = time.monotonic()
    while pending or running:
        while pending and free:
            _, c = pending.pop(0)
            slot = free.pop(0)
            job = {"member": c, "device": slots[slot], "threads": threads, "work": work,
                   "classes": classes, "round": round_no, "predict_pool": predict_pool,
                   "predict_batch": predict_batch,
                   "t_spawn": time.monotonic()}
            p = ctx.Process(target=member_process, args=(job, results),
                            name=f"member-{c['name']}")
            p.start()
            running[c["name"]] = (p, slot)
        try:
            r = results.get(timeout=1.0)
        except queue_lib.Empty:
            # A careful user's one guard: a member that died without reporting ends the run
            # instead of blocking it forever.
            for name, (p, _) in running.items():
                if not p.is_alive() and p.exitcode not in (0, None):
                    raise LoopError(f"round {round_no}: member {name} died (exit code "
                                    f"{p.exitcode}) without reporting")
            if timeout_s and time.monotonic() - last_seen > timeout_s:
                raise LoopError(f"round {round_no}: no member reported for {timeout_s:.0f} s")
            continue
        last_seen = time.monotonic()
        p, slot = running.pop(r["member"])
        p.join()
        free.append(slot)
        if not r["ok"]:
            raise LoopError(f"round {round_no}: {r['error']}")
        r["slot"] = slot
        reports[r["member"]] = r
    results.close()
    return [reports[c["name"]] for c in members]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(_REPO, "examples", "fashion-mnist",
                                                     "loop.toml"))
    ap.add_argument("--store", help="the cohort store (default: the config's store.source)")
    ap.add_argument("--work", help="directory for the memmap dataset (default: a temp dir)")
    ap.add_argument("--rounds", type=int, help="override stop.max_rounds")
    ap.add_argument("--k", type=int, help="override acquisition.batch_size")
    ap.add_argument("--epochs", type=int, help="override every member's epochs")
    ap.add_argument("--members", type=int, help="use the first N members")
    ap.add_argument("--devices", type=int, help="run at most N members at once")
    ap.add_argument("--strategy", help="override acquisition.strategy")
    ap.add_argument("--seed", type=int, help="override acquisition.seed")
    ap.add_argument("--pool-limit", type=int, help="use a seeded subset of N pool rows")
    ap.add_argument("--test-limit", type=int, help="use a seeded subset of N test rows")
    ap.add_argument("--start-method", choices=["auto", "spawn", "fork", "forkserver"],
                    default="auto", help="auto: fork when every device is a CPU, else spawn "
                    "(CUDA cannot be used in a forked child once initialised)")
    ap.add_argument("--predict-batch", type=int, default=256,
                    help="rows per forward pass when predicting pool and test")
    ap.add_argument("--timeout", type=float, default=0,
                    help="give up when no member reports for this many seconds (0: never)")
    ap.add_argument("--json", help="write machine-readable results here")
    ap.add_argument("--quick", action="store_true",
                    help="smoke setting: 2 members, 2 rounds, 1 epoch, pool 2000, test 1000, "
                    "k 200")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    a = ap.parse_args(argv)
    if a.quick:
        a.members = a.members or 2
        a.rounds = a.rounds or 2
        a.epochs = a.epochs or 1
        a.pool_limit = a.pool_limit or 2000
        a.test_limit = a.test_limit or 1000
        a.k = a.k or 200

    try:
        return run(a)
    except LoopError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1


def run(a) -> int:
    t_start = time.perf_counter()
    try:
        with open(a.config, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise LoopError(f"config {a.config}: {e}") from None
    config_dir = os.path.dirname(os.path.abspath(a.config))
    store_cfg = cfg.get("store", {})
    store_path = a.store or os.path.join(config_dir, store_cfg.get("source", "store"))
    if not os.path.isdir(store_path):
        raise LoopError(f"store {store_path}: no such directory (build it with scripts/demo "
                        "or cohort data import, or pass --store)")
    tables = {t: store_cfg.get(t, t) for t in ("train", "pool", "test")}
    members = member_configs(cfg)
    if a.members:
        members = members[:a.members]
    if a.epochs:
        for c in members:
            c["epochs"] = a.epochs
    slots = device_list(cfg)
    if a.devices:
        slots = [slots[i % len(slots)] for i in range(a.devices)]
    threads = int(cfg.get("threads_per_cpu_device", 1))
    acq = cfg.get("acquisition", {})
    strategy = a.strategy or acq.get("strategy", "bald")
    k = a.k if a.k is not None else int(acq.get("batch_size", 100))
    acq_seed = a.seed if a.seed is not None else int(acq.get("seed", 0))
    stop = cfg.get("stop", {})
    max_rounds = a.rounds or stop.get("max_rounds")
    if not max_rounds:
        raise LoopError("no stop.max_rounds in the config: pass --rounds")
    label_budget = stop.get("label_budget")
    stop_when_exhausted = stop.get("stop_when_pool_exhausted", True)
    acquisition_scores(strategy, np.full((1, 1, 2), 0.5))  # an unknown strategy fails now

    work = a.work
    if work is None:
        import tempfile
        work = tempfile.mkdtemp(prefix="seed_loop-")
    t_prep = time.perf_counter()
    info = prepare_dataset(store_path, tables, work, a.pool_limit, a.test_limit)
    prepare_s = time.perf_counter() - t_prep
    if a.start_method == "auto":
        a.start_method = "fork" if all(d.startswith("cpu") for d in slots) else "spawn"
    ctx = mp.get_context(a.start_method)
    say = (lambda *x: None) if a.quiet else (lambda *x: print(*x, flush=True))
    say(f"{PROG}: {len(members)} members on {len(slots)} devices ({', '.join(slots)}), "
        f"{threads} thread(s) each, start method {a.start_method}; strategy {strategy}, k {k}, "
        f"{max_rounds} rounds; train {info['train']}, pool {info['pool']}, test "
        f"{info['test']} rows in {work} (prepared in {prepare_s:.2f} s)")
    say(f"{'round':>5} {'labels':>7} {'seconds':>8} {'accuracy':>8} {'nll':>7} {'acquire_s':>9}")

    roles = np.load(os.path.join(work, "roles.npy"), mmap_mode="r+")
    labels = np.load(os.path.join(work, "labels.npy"), mmap_mode="r")
    test_labels = np.asarray(labels[roles == TEST])
    rounds = []
    prev_done = None
    labels_given = 0
    t_loop = time.perf_counter()
    for r in range(1, max_rounds + 1):
        t_round = time.perf_counter()
        n_labelled = int((roles == LABELLED).sum())
        last = r == max_rounds  # the last round trains and evaluates but does not acquire
        reports = run_round(members, slots, threads, work, info["classes"], ctx, r, a.timeout,
                            predict_pool=not last, predict_batch=a.predict_batch)
        t_trained = time.perf_counter()
        p_test = np.stack([x["test"] for x in reports])
        metrics = ensemble_metrics(p_test, test_labels)
        acquired = 0
        pool_rows = np.flatnonzero(np.asarray(roles) == POOL)
        k_now = min(k, len(pool_rows))
        if label_budget is not None:
            k_now = min(k_now, int(label_budget) - labels_given)
        t_acq = time.perf_counter()
        if not last and k_now > 0:
            p_pool = np.stack([x["pool"] for x in reports])
            picked = acquire(strategy, p_pool, k_now, acq_seed)
            roles[pool_rows[picked]] = LABELLED  # the in-place update of the mapped file
            roles.flush()
            acquired = len(picked)
            labels_given += acquired
        acquire_s = time.perf_counter() - t_acq
        seconds = time.perf_counter() - t_round
        # Round transition: the last member of the previous round done -> every device running
        # a member of this round past its first batch.
        firsts = sorted(x["t_first_batch"] for x in reports if x["t_first_batch"] is not None)
        transition = None
        if prev_done is not None and firsts:
            transition = firsts[min(len(slots), len(firsts)) - 1] - prev_done
        prev_done = max(x["t_done"] for x in reports)
        rec = {
            "round": r, "labels": n_labelled, "seconds": seconds,
            "train_predict_seconds": t_trained - t_round, "acquire_seconds": acquire_s,
            "acquired": acquired,
            "train_s_per_member": {x["member"]: x["train_s"] for x in reports},
            "predict_s_per_member": {x["member"]: x["predict_s"] for x in reports},
            "start_to_first_batch_s_per_member": {
                x["member"]: (x["t_first_batch"] - x["t_spawn"])
                if x["t_first_batch"] is not None else None for x in reports},
            "start_to_ready_s_per_member": {x["member"]: x["t_ready"] - x["t_spawn"]
                                            for x in reports},
            "transition_s": transition,
            "test_accuracy": metrics["accuracy"], "test_nll": metrics["nll"],
        }
        rounds.append(rec)
        say(f"{r:>5} {n_labelled:>7} {seconds:>8.2f} {metrics['accuracy']:>8.4f} "
            f"{metrics['nll']:>7.4f} {acquire_s:>9.3f}")
        if stop_when_exhausted and not last and acquired > 0 and acquired == len(pool_rows):
            break
        if label_budget is not None and labels_given >= int(label_budget):
            break
    total = time.perf_counter() - t_loop
    compute = sum(sum(x["train_s_per_member"].values()) + sum(x["predict_s_per_member"].values())
                  for x in rounds)
    lower = compute / len(slots)
    transitions = [x["transition_s"] for x in rounds if x["transition_s"] is not None]
    summary = {
        "system": "seed_baseline", "config": os.path.abspath(a.config),
        "store": os.path.abspath(store_path), "work": work, "start_method": a.start_method,
        "predict_batch": a.predict_batch,
        "members": [c["name"] for c in members], "devices": slots, "threads": threads,
        "strategy": strategy, "k": k, "max_rounds": max_rounds,
        "epochs": {c["name"]: c["epochs"] for c in members},
        "data": info, "prepare_seconds": prepare_s, "rounds": rounds,
        "total_seconds": total, "end_to_end_seconds": time.perf_counter() - t_start,
        "compute_seconds": compute, "lower_bound_seconds": lower,
        "overhead_fraction": (total - lower) / lower if lower > 0 else None,
        "mean_transition_s": sum(transitions) / len(transitions) if transitions else None,
        "final_test_accuracy": rounds[-1]["test_accuracy"],
        "final_test_nll": rounds[-1]["test_nll"],
        "torch": torch.__version__, "python": sys.version.split()[0],
    }
    tr = f"{summary['mean_transition_s']:.2f} s" if transitions else "n/a"
    print(f"{PROG}: {len(rounds)} rounds in {total:.2f} s (+{prepare_s:.2f} s preparing the "
          f"memmap); compute lower bound {lower:.2f} s (overhead {100 * (total - lower) / lower:.0f}"
          f"%), mean round transition {tr}; final test accuracy "
          f"{summary['final_test_accuracy']:.4f}, NLL {summary['final_test_nll']:.4f}",
          flush=True)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
