#!/usr/bin/python3
"""The plain-PyTorch baseline for the training benchmark (docs/benchmarks.md, "Training").

Trains one member the way a short PyTorch script would, on the same data as `cohort train`:

- the table is read from the same cohort store with python/cohort_store.py and turned into
  torch tensors once (uint8 features, int64 labels), before the clock starts;
- each step gathers a shuffled batch and converts it, ``x = X[idx].float() / 255`` (cohort also
  keeps uint8 batches and converts them to float per batch, scaling by 1/255 in that same
  conversion);
- the network is the same ``nn.Sequential`` (this parses the subset of cohort's spec the
  benchmark uses: ``dense N [act]``, ``dropout P``, ``flatten`` and stand-alone activations),
  Adam with lr 1e-3 and PyTorch's defaults, cross-entropy, ``torch.set_num_threads(T)``,
  ``torch.manual_seed(S)``;
- each step reads ``loss.item()`` as cohort does (to check the loss is finite).

Every step is timed with ``time.perf_counter`` in the same four parts as cohort's
``step_times``: data (gather, convert), forward (network and loss), backward (``zero_grad`` and
``backward``), optimizer (``step`` and ``loss.item()``). The run ends by printing one JSON line:
samples, seconds, samples_per_second, step_times (seconds summed over the run), parameters,
final loss, and the seconds spent importing torch and loading the table.

``--first-batch``: prints a line ``first-batch`` (flushed) right after the first trained step,
so a parent that timestamps the child's output can measure spawn -> first trained batch. With
``--spawn-time T`` (the parent's ``time.monotonic()`` just before spawning; CLOCK_MONOTONIC
is shared by all processes) the JSON also carries ``first_batch_s``, measured in the child.

``--out PATH`` saves the model and optimizer state with ``torch.save`` at the end, as cohort
writes a checkpoint (the start-up comparison measures until the process exits).

Run it with Debian's interpreter (it has numpy and torch): /usr/bin/python3.
"""

import time

_T_START = time.monotonic()  # before importing torch

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

_T_BEFORE_TORCH = time.monotonic()
import torch  # noqa: E402
from torch import nn  # noqa: E402

_T_AFTER_TORCH = time.monotonic()

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cohort_store  # noqa: E402

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}


def build_model(spec: str, input_shape: tuple[int, ...]) -> nn.Sequential:
    """The nn.Sequential cohort builds for `spec` (the subset: dense, dropout, flatten, acts)."""
    layers: list[nn.Module] = []
    width = int(np.prod(input_shape))
    flat = len(input_shape) == 1
    for item in spec.split(","):
        words = item.split()
        if not words:
            raise SystemExit(f"torch_baseline: empty layer in model spec '{spec}'")
        name, args = words[0].lower(), words[1:]
        if name == "dense":
            if not args or not args[0].isdigit() or len(args) > 2:
                raise SystemExit(f"torch_baseline: cannot parse '{item.strip()}'")
            if not flat:
                layers.append(nn.Flatten())
                flat = True
            units = int(args[0])
            layers.append(nn.Linear(width, units))
            width = units
            if len(args) == 2:
                if args[1] not in _ACTIVATIONS:
                    raise SystemExit(f"torch_baseline: unknown activation '{args[1]}'")
                layers.append(_ACTIVATIONS[args[1]]())
        elif name == "dropout" and len(args) == 1:
            layers.append(nn.Dropout(float(args[0])))
        elif name == "flatten" and not args:
            if not flat:
                layers.append(nn.Flatten())
                flat = True
        elif name in _ACTIVATIONS and not args:
            layers.append(_ACTIVATIONS[name]())
        else:
            raise SystemExit(
                f"torch_baseline: '{item.strip()}' is outside the subset this baseline "
                "parses (dense N [act], dropout P, flatten, activations)"
            )
    return nn.Sequential(*layers)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True)
    p.add_argument("--table", default="train")
    p.add_argument("--model", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--out", help="save model and optimizer state here at the end")
    p.add_argument("--first-batch", action="store_true",
                   help="print 'first-batch' after the first trained step")
    p.add_argument("--spawn-time", type=float,
                   help="parent's time.monotonic() just before spawning this process")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    t_load = time.monotonic()
    table = cohort_store.open(a.store).table(a.table)
    X = torch.from_numpy(np.array(table.features, copy=True, order="C"))
    if X.dtype != torch.uint8:
        raise SystemExit(f"torch_baseline: expects uint8 features, table has {X.dtype}")
    Y = torch.from_numpy(np.array(table.labels, dtype=np.int64, copy=True, order="C"))
    n = X.shape[0]
    load_s = time.monotonic() - t_load

    model = build_model(a.model, tuple(X.shape[1:]))
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    parameters = sum(q.numel() for q in model.parameters())

    data = forward = backward = opt = 0.0
    samples = 0
    loss_value = float("nan")
    first_batch_s = None
    first = True
    model.train()
    clock = time.perf_counter
    run_start = clock()
    for _ in range(a.epochs):
        perm = torch.randperm(n)
        for i in range(0, n, a.batch_size):
            t0 = clock()
            idx = perm[i:i + a.batch_size]
            x = X[idx].float() / 255
            y = Y[idx]
            t1 = clock()
            loss = loss_fn(model(x), y)
            t2 = clock()
            optimizer.zero_grad()
            loss.backward()
            t3 = clock()
            optimizer.step()
            loss_value = loss.item()
            t4 = clock()
            data += t1 - t0
            forward += t2 - t1
            backward += t3 - t2
            opt += t4 - t3
            samples += x.shape[0]
            if first:
                first = False
                if a.spawn_time is not None:
                    first_batch_s = time.monotonic() - a.spawn_time
                if a.first_batch:
                    print("first-batch", flush=True)
    seconds = clock() - run_start
    if a.out:
        tmp = a.out + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
        os.replace(tmp, a.out)

    result = {
        "samples": samples,
        "seconds": seconds,
        "samples_per_second": samples / seconds if seconds > 0 else 0.0,
        "step_times": {"data": data, "forward": forward, "backward": backward, "optimizer": opt},
        "parameters": parameters,
        "final_loss": loss_value,
        "import_torch_s": _T_AFTER_TORCH - _T_BEFORE_TORCH,
        "start_to_torch_s": _T_AFTER_TORCH - _T_START,
        "load_s": load_s,
        "rows": n,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if first_batch_s is not None:
        result["first_batch_s"] = first_batch_s
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
