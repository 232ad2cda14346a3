#!/usr/bin/python3
"""A cohort ensemble member written in plain PyTorch (Debian's python3-torch).

`cohort run loop.toml` starts this script once per round (docs/outside-members.md) with the
round in $COHORT_SPEC. It trains a small MLP or CNN on the round's training table, reports
each epoch as `@cohort` progress, writes softmax probabilities for the pool and the test
table, saves its checkpoint, and prints `done` with test metrics.

Settings, from the member's table in loop.toml ([defaults] merged in):

  arch          "mlp" (default) or "cnn"
  hidden        MLP hidden widths: 256 or [256, 128] (default 256); CNN: its dense width
  channels      CNN conv channels: 16 or [16, 32] (default [16, 32])
  dropout       after each hidden layer (default 0.0)
  epochs        default 5
  batch_size    default 128
  lr            learning rate; else optimizer.learning_rate; else 1e-3
  weight_decay  AdamW weight decay; else optimizer.weight_decay; else 0
  seed          default 0
  standardize   scale features to zero mean, unit variance over the training table
  classes       number of classes (default: from the labels)

With `warm_start = true` in loop.toml, rounds after the first start from the previous
round's checkpoint (`warm_start_from`) instead of fresh weights.

Run by hand against a round spec: COHORT_SPEC=path/to/spec.json /usr/bin/python3 train.py
"""

import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import cohort_member  # noqa: E402


def setting(cfg, key, default, nested=None):
    """cfg[key], else cfg[nested[0]][nested[1]] (the native members' name), else default."""
    if key in cfg:
        return cfg[key]
    if nested and isinstance(cfg.get(nested[0]), dict) and nested[1] in cfg[nested[0]]:
        return cfg[nested[0]][nested[1]]
    return default


def as_list(value):
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def build_model(arch, input_shape, classes, cfg):
    dropout = float(cfg.get("dropout", 0.0))
    if arch == "mlp":
        layers, width = [nn.Flatten()], int(np.prod(input_shape))
        for h in as_list(cfg.get("hidden", 256)):
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, classes))
        return nn.Sequential(*layers)
    if arch == "cnn":
        if len(input_shape) not in (2, 3):
            raise SystemExit(f"arch cnn needs image features (H, W) or (C, H, W), "
                             f"the table has {list(input_shape)}")
        c, h, w = (1, *input_shape) if len(input_shape) == 2 else input_shape
        layers = []
        for ch in as_list(cfg.get("channels", [16, 32])):
            layers += [nn.Conv2d(c, ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            c, h, w = ch, h // 2, w // 2
        dense = as_list(cfg.get("hidden", 64))[0]
        layers += [nn.Flatten(), nn.Dropout(dropout), nn.Linear(c * h * w, dense), nn.ReLU(),
                   nn.Linear(dense, classes)]
        return nn.Sequential(*layers)
    raise SystemExit(f"unknown arch {arch!r} (mlp, cnn)")


class Inputs:
    """Turns store features (uint8 images or float32) into model inputs, batch by batch."""

    def __init__(self, x_train, arch, standardize):
        self.scale = 1 / 255 if x_train.dtype == np.uint8 else 1.0
        self.channel = arch == "cnn" and x_train.ndim == 3  # (n, H, W) -> (n, 1, H, W)
        self.mean = self.std = None
        if standardize and len(x_train):
            x = x_train.astype(np.float32) * self.scale
            self.mean = float(x.mean())
            self.std = float(x.std()) or 1.0

    def __call__(self, x, device):
        t = torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=torch.float32)
        t = t * self.scale
        if self.mean is not None:
            t = (t - self.mean) / self.std
        return t.unsqueeze(1) if self.channel else t


def predict(model, inputs, x, device, batch=1024):
    """Softmax probabilities for every row of x, in order, as float32 numpy."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(torch.softmax(model(inputs(x[i:i + batch], device)), dim=1).cpu())
    if not out:
        return np.zeros((0, model[-1].out_features), dtype=np.float32)
    return torch.cat(out).numpy().astype(np.float32)


def main():
    r = cohort_member.Round.from_env()
    cfg = r.config
    torch.set_num_threads(r.threads)
    device = torch.device(r.torch_device)
    seed = int(cfg.get("seed", 0))
    torch.manual_seed(seed)
    arch = cfg.get("arch", "mlp")
    epochs = int(cfg.get("epochs", 5))
    batch_size = int(cfg.get("batch_size", 128))
    lr = float(setting(cfg, "lr", 1e-3, ("optimizer", "learning_rate")))
    weight_decay = float(setting(cfg, "weight_decay", 0.0, ("optimizer", "weight_decay")))

    x_train, y_train = r.train()
    x_pool, _ = r.pool()
    x_test, y_test = r.test()
    classes = r.classes
    print(f"{r.member}: round {r.round} attempt {r.attempt}, generation {r.generation}, "
          f"{len(x_train)} train / {len(x_pool)} pool / {len(x_test)} test, {classes} classes, "
          f"{arch} on {r.torch_device} ({r.device}) with {r.threads} threads", flush=True)

    inputs = Inputs(x_train, arch, bool(cfg.get("standardize", False)))
    model = build_model(arch, x_train.shape[1:], classes, cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    if r.warm_start_from:
        state = torch.load(r.warm_start_from, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if state.get("inputs"):
            inputs.mean, inputs.std = state["inputs"]
        print(f"{r.member}: warm start from {r.warm_start_from}", flush=True)

    y = torch.from_numpy(np.asarray(y_train, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    steps = max(1, math.ceil(len(x_train) / batch_size))
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(x_train), generator=gen).numpy()
        total, seen, start = 0.0, 0, time.monotonic()
        for step in range(1, steps + 1):
            idx = np.sort(order[(step - 1) * batch_size:step * batch_size])
            xb, yb = inputs(x_train[idx], device), y[idx].to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            value = loss.item()
            if not math.isfinite(value):
                # A failed attempt: cohort retries it and journals this line from the log.
                print(f"{r.member}: loss became {value} at epoch {epoch} step {step} "
                      f"(lower lr)", file=sys.stderr)
                sys.exit(1)
            total += value * len(idx)
            seen += len(idx)
            r.progress(epoch, epochs, total / seen, step=step, steps=steps,
                       samples_per_second=seen / max(time.monotonic() - start, 1e-9))

    with r.writing(r.checkpoint) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "inputs": (inputs.mean, inputs.std) if inputs.mean is not None else None,
                    "arch": arch, "classes": classes}, tmp)

    with r.heartbeat(busy="predict"):  # a large pool can take a while
        pool_probs = predict(model, inputs, x_pool, device)
        test_probs = predict(model, inputs, x_test, device)
    r.write_predictions(pool_probs, test_probs)

    metrics = {}
    if y_test is not None and len(y_test):
        p = test_probs[np.arange(len(y_test)), y_test]
        metrics = {"test_accuracy": float((test_probs.argmax(1) == y_test).mean()),
                   "test_nll": float(-np.log(np.maximum(p, 1e-12)).mean())}
    r.done(metrics)


if __name__ == "__main__":
    main()
