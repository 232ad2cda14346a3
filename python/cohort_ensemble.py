"""Use an ensemble that `cohort export` wrote, with numpy alone (torch only if asked for).

    import numpy as np
    import cohort_ensemble

    ens = cohort_ensemble.load("exported/")     # the directory `cohort export -o` wrote
    out = ens.predict(x)                         # x: (n, *ens.input_shape), uint8 or float32
    out["probabilities"]       # (n, classes) mean of the members' probabilities
    out["predicted"]           # (n,) argmax of the mean
    out["entropy"]             # (n,) predictive entropy of the mean, nats
    out["mutual_information"]  # (n,) BALD: entropy minus the members' mean entropy
    out["variance"]            # (n,) mean over classes of the members' variance
    out["agreement"]           # (n,) fraction of members whose argmax is `predicted`
    out["member_probabilities"]  # (members, n, classes)
    out["calibrated_probabilities"]  # (n, classes) softmax(log p / T), only when exported
                                     # with `--temperature T` (ens.temperature; else None)
    ens.predict(x, backend="torch")              # the same through torch.nn modules

A regression ensemble (ens.task == "regression", targets of shape ens.target_shape) predicts
instead, each float64 of shape (n, *target_shape):
    out["mean"]        # mean over members of their means
    out["aleatoric"]   # mean over members of their variances (the noise they predict)
    out["epistemic"]   # population variance over members of their means (their disagreement)
    out["total"]       # aleatoric + epistemic: the variance of the members' mixture
    out["member_means"], out["member_variances"]  # (members, n, *target_shape) float32

The numbers are those of `cohort predict RUN_DIR` (to float32 rounding). As a program:
    python3 cohort_ensemble.py DIR X.npy [-o predictions.npz]

Files (docs/cli.md, `cohort export`): DIR/manifest.json names the members; each member's
DIR/members/NAME/member.json holds its checkpoint's description, its input scaling and
standardisation, and its layers in order, naming the .npy weights beside it.
"""
import json
import math
import os
import sys

import numpy as np

FORMAT = "cohort-ensemble"
VERSION = 1


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _softplus(x):
    """torch's softplus (beta 1, threshold 20): the identity above 20, where it is exact in
    float32 and exp would overflow soon after."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _conv2d(x, w, b, stride, padding):
    if padding:
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    f, c, k, _ = w.shape
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    n, _, ho, wo = win.shape[:4]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * k * k)
    out = cols @ w.reshape(f, -1).T + b
    return out.reshape(n, ho, wo, f).transpose(0, 3, 1, 2)


def _pool(x, k, reduce):
    n, c, h, w = x.shape
    h2, w2 = h // k, w // k
    x = x[:, :, :h2 * k, :w2 * k].reshape(n, c, h2, k, w2, k)
    return reduce(x, axis=(3, 5))


class Member:
    """One exported member: its description (`meta`) and a forward pass."""

    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "member.json")) as f:
            self.meta = json.load(f)
        self.name = self.meta["member"]
        self.input_shape = tuple(self.meta["input_shape"])
        self.classification = self.meta["task"] == "classification"
        self.target_shape = tuple(self.meta["target_shape"])
        self._arrays = {}

    def _array(self, name):
        if name not in self._arrays:
            self._arrays[name] = np.load(os.path.join(self.dir, name)).astype(np.float64)
        return self._arrays[name]

    def _check(self, x):
        x = np.asarray(x)
        if x.shape[1:] != self.input_shape:
            raise ValueError(f"member {self.name}: samples of shape {x.shape[1:]}, it takes "
                             f"{self.input_shape}")
        return x

    def outputs(self, x):
        """The network's raw outputs (logits, or regression outputs) for x, with numpy."""
        x = self._check(x)
        inp = self.meta["input"]
        h = x.astype(np.float32) * np.float32(inp["scale"])
        h = h.astype(np.float64)
        if inp["standardize"]:
            h = (h - self._array(inp["mean"])) * self._array(inp["inv_std"])
        if inp["add_channel"]:
            h = h[:, None]
        for step in self.meta["layers"]:
            op = step["op"]
            if op == "dense":
                if h.ndim > 2:
                    h = h.reshape(h.shape[0], -1)
                h = h @ self._array(step["weight"]).T + self._array(step["bias"])
            elif op == "conv2d":
                h = _conv2d(h, self._array(step["weight"]), self._array(step["bias"]),
                            step["stride"], step["padding"])
            elif op == "maxpool":
                h = _pool(h, step["kernel"], np.max)
            elif op == "avgpool":
                h = _pool(h, step["kernel"], np.mean)
            elif op == "flatten":
                h = h.reshape(h.shape[0], -1)
            elif op == "dropout":
                pass
            elif op == "batchnorm":
                shape = (1, -1) + (1,) * (h.ndim - 2)
                mean = self._array(step["running_mean"]).reshape(shape)
                var = self._array(step["running_var"]).reshape(shape)
                w = self._array(step["weight"]).reshape(shape)
                b = self._array(step["bias"]).reshape(shape)
                h = (h - mean) / np.sqrt(var + step["eps"]) * w + b
            elif op == "layernorm":
                axes = tuple(range(h.ndim - len(step["shape"]), h.ndim))
                mean = h.mean(axis=axes, keepdims=True)
                var = h.var(axis=axes, keepdims=True)
                h = (h - mean) / np.sqrt(var + step["eps"]) * self._array(step["weight"]) + \
                    self._array(step["bias"])
            elif op == "relu":
                h = np.maximum(h, 0)
            elif op == "gelu":
                h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            elif op == "tanh":
                h = np.tanh(h)
            elif op == "sigmoid":
                h = _sigmoid(h)
            elif op == "elu":
                h = np.where(h > 0, h, step.get("alpha", 1.0) * np.expm1(np.minimum(h, 0)))
            elif op == "silu":
                h = h * _sigmoid(h)
            else:
                raise ValueError(f"member {self.name}: unknown layer op {op!r}")
        return h

    def predict_proba(self, x):
        """Class probabilities (n, classes), float32, with numpy."""
        if not self.classification:
            raise ValueError(f"member {self.name} is a regression member: use outputs()")
        return _softmax(self.outputs(x)).astype(np.float32)

    def _moments(self, raw):
        """A regression member's (mean, variance), each (n, *target_shape), from its raw
        outputs, as `cohort-member predict` makes them: a gaussian_nll member's last layer
        holds the means, then the variances before softplus (plus 1e-6); an mse member's holds
        the means, and its variance is the residual variance of its training data."""
        if self.classification:
            raise ValueError(f"member {self.name} is a classification member: use "
                             "predict_proba()")
        raw = np.asarray(raw, dtype=np.float64)
        n, size = raw.shape[0], int(np.prod(self.target_shape, dtype=np.int64))
        if self.meta["loss"] == "gaussian_nll":
            mean, variance = raw[:, :size], _softplus(raw[:, size:2 * size]) + 1e-6
        else:
            mean = raw
            variance = np.broadcast_to(np.asarray(self.meta["residual_variance"]), raw.shape)
        shape = (n,) + self.target_shape
        return mean.reshape(shape), np.array(variance).reshape(shape)

    def predict_moments(self, x):
        """A regression member's predictive mean and variance, each (n, *target_shape), with
        numpy."""
        return self._moments(self.outputs(x))

    def predict_moments_torch(self, x, module=None):
        import torch
        module = module or self.to_torch()
        with torch.no_grad():
            return self._moments(module(self.preprocess_torch(x)).numpy())

    def to_torch(self):
        """The member as a torch.nn.Module (eval mode) mapping preprocessed float32 input
        (see preprocess_torch) to raw outputs."""
        import torch
        from torch import nn

        def t(name):
            return torch.from_numpy(np.load(os.path.join(self.dir, name)).astype(np.float32))

        mods = []
        for step in self.meta["layers"]:
            op = step["op"]
            if op in ("dense", "conv2d"):
                w, b = t(step["weight"]), t(step["bias"])
                if op == "dense":
                    m = nn.Linear(w.shape[1], w.shape[0])
                else:
                    m = nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], stride=step["stride"],
                                  padding=step["padding"])
                m.weight.data.copy_(w)
                m.bias.data.copy_(b)
                if op == "dense":
                    mods.append(nn.Flatten())  # a no-op on (n, features)
            elif op in ("maxpool", "avgpool"):
                m = (nn.MaxPool2d if op == "maxpool" else nn.AvgPool2d)(step["kernel"])
            elif op == "flatten":
                m = nn.Flatten()
            elif op == "dropout":
                m = nn.Identity()
            elif op == "batchnorm":
                m = _BatchNormAnyDim(t(step["weight"]), t(step["bias"]), t(step["running_mean"]),
                                     t(step["running_var"]), step["eps"])
            elif op == "layernorm":
                m = nn.LayerNorm(step["shape"], eps=step["eps"])
                m.weight.data.copy_(t(step["weight"]))
                m.bias.data.copy_(t(step["bias"]))
            else:
                m = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
                     "silu": nn.SiLU}.get(op, None)
                if op == "elu":
                    m = nn.ELU(alpha=step.get("alpha", 1.0))
                elif m is None:
                    raise ValueError(f"member {self.name}: unknown layer op {op!r}")
                else:
                    m = m()
            mods.append(m)
        return nn.Sequential(*mods).eval()

    def preprocess_torch(self, x):
        """x as the float32 tensor the torch module takes (scaled, standardised, channel)."""
        import torch
        x = self._check(x)
        inp = self.meta["input"]
        h = torch.from_numpy(np.array(x)).to(torch.float32) * inp["scale"]
        if inp["standardize"]:
            mean = torch.from_numpy(np.load(os.path.join(self.dir, inp["mean"])))
            inv = torch.from_numpy(np.load(os.path.join(self.dir, inp["inv_std"])))
            h = (h - mean) * inv
        if inp["add_channel"]:
            h = h.unsqueeze(1)
        return h

    def predict_proba_torch(self, x, module=None):
        import torch
        module = module or self.to_torch()
        with torch.no_grad():
            return torch.softmax(module(self.preprocess_torch(x)), dim=1).numpy()


class _BatchNormAnyDim:
    """Inference batch norm over axis 1 for (n, c) or (n, c, h, w) (built lazily as a module)."""

    def __new__(cls, weight, bias, mean, var, eps):
        import torch
        from torch import nn

        class BN(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("w", weight)
                self.register_buffer("b", bias)
                self.register_buffer("m", mean)
                self.register_buffer("v", var)

            def forward(self, x):
                shape = (1, -1) + (1,) * (x.dim() - 2)
                return (x - self.m.view(shape)) / torch.sqrt(self.v.view(shape) + eps) * \
                    self.w.view(shape) + self.b.view(shape)

        return BN()


def uncertainty(member_probabilities):
    """The ensemble's numbers from its members' probabilities (members, n, classes), as
    `cohort predict RUN_DIR` computes them (docs/acquisition.md gives the formulas)."""
    p = np.asarray(member_probabilities, dtype=np.float64)
    mean = p.mean(axis=0)

    def entropy(q):
        return -np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0.0), axis=-1)

    predicted = mean.argmax(axis=1)
    h = entropy(mean)
    return {
        "probabilities": mean.astype(np.float32),
        "predicted": predicted.astype(np.int64),
        "entropy": h,
        "mutual_information": h - entropy(p).mean(axis=0),
        "variance": ((p - mean) ** 2).mean(axis=0).mean(axis=1),
        "agreement": (p.argmax(axis=2) == predicted).mean(axis=0),
        "member_probabilities": p.astype(np.float32),
    }


def calibrate(probabilities, temperature):
    """softmax(log p / T), p floored at float32's smallest normal number: what `cohort predict
    --calibrate` / `--temperature` writes as calibrated_probabilities."""
    z = np.log(np.maximum(np.asarray(probabilities, dtype=np.float64), 1.1754943508222875e-38))
    z = z / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def regression_uncertainty(member_means, member_variances):
    """A regression ensemble's numbers from its members' means and variances (members, n,
    *target_shape), as `cohort predict RUN_DIR` computes them."""
    mu = np.asarray(member_means, dtype=np.float64)
    var = np.asarray(member_variances, dtype=np.float64)
    mean = mu.mean(axis=0)
    aleatoric = var.mean(axis=0)
    epistemic = ((mu - mean) ** 2).mean(axis=0)
    return {
        "mean": mean,
        "aleatoric": aleatoric,
        "epistemic": epistemic,
        "total": aleatoric + epistemic,
        "member_means": mu.astype(np.float32),
        "member_variances": var.astype(np.float32),
    }


class Ensemble:
    def __init__(self, directory):
        with open(os.path.join(directory, "manifest.json")) as f:
            self.manifest = json.load(f)
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{directory}: not a cohort ensemble export")
        if self.manifest.get("version") != VERSION:
            raise ValueError(f"{directory}: export version {self.manifest.get('version')}, this "
                             f"loader reads version {VERSION}")
        self.members = [Member(os.path.join(directory, m["dir"]))
                        for m in self.manifest["members"]]
        self.input_shape = tuple(self.manifest["input_shape"])
        # Exports before regression ensembles existed say no task: they are classifiers.
        self.task = self.manifest.get("task", "classification")
        self.classes = self.manifest.get("classes", 0)
        self.target_shape = tuple(self.manifest.get("target_shape", ()))
        # `cohort export --temperature T`: predict also gives the calibrated probabilities.
        self.temperature = self.manifest.get("temperature")
        self._torch = None

    def predict(self, x, backend="numpy"):
        if backend not in ("numpy", "torch"):
            raise ValueError(f"backend {backend!r}: numpy or torch")
        if backend == "torch" and self._torch is None:
            self._torch = [m.to_torch() for m in self.members]
        if self.task == "regression":
            if backend == "numpy":
                moments = [m.predict_moments(x) for m in self.members]
            else:
                moments = [m.predict_moments_torch(x, t)
                           for m, t in zip(self.members, self._torch)]
            return regression_uncertainty(np.stack([mu for mu, _ in moments]),
                                          np.stack([v for _, v in moments]))
        if backend == "numpy":
            probs = [m.predict_proba(x) for m in self.members]
        else:
            probs = [m.predict_proba_torch(x, t) for m, t in zip(self.members, self._torch)]
        out = uncertainty(np.stack(probs))
        if self.temperature is not None:
            out["calibrated_probabilities"] = calibrate(out["probabilities"], self.temperature)
            out["temperature"] = np.float64(self.temperature)
        return out


def load(directory):
    return Ensemble(directory)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Predict with an ensemble `cohort export` wrote.")
    ap.add_argument("directory")
    ap.add_argument("input", help=".npy of samples")
    ap.add_argument("-o", "--out", default="predictions.npz")
    ap.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    a = ap.parse_args(argv)
    out = load(a.directory).predict(np.load(a.input), backend=a.backend)
    np.savez(a.out, **out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
