#!/usr/bin/env python3
"""A DP-GEN-flavoured example for cohort: learn the energy and forces of a small Morse cluster
(3 atoms in the plane) with an ensemble, where the candidates come from exploration and the
members' disagreement (model deviation) decides which ones the exact labeller computes.

One script, three roles (examples/potential/README.md):
  morse.py make COHORT STORE   builds the source store: `train` (30 labelled structures near
                               equilibrium), `pool` (300 unlabelled candidates), `test` (400
                               labelled structures from the exploration distribution)
  morse.py label               the loop's command oracle: reads COHORT_ORACLE_FEATURES, writes
                               the exact energy and forces to COHORT_ORACLE_LABELS
  morse.py explore             an [[update]] command step: proposes new candidates by
                               perturbing the structures the ensemble trains on, and adds them
                               to the pool (a change set in COHORT_CHANGES_DIR)

A sample's features are the 6 coordinates (x0, y0, x1, y1, x2, y2); its target is the energy
followed by the 6 force components: 7 float32 values, the exact values of the potential
E = sum over pairs of D (1 - exp(-a (r - r0)))^2 - D.
"""
import json
import os
import subprocess
import sys

import numpy as np

D, A, R0 = 1.0, 1.5, 1.0
ATOMS = 3
HERE = os.path.dirname(os.path.abspath(__file__))
EXPLORE_PER_ROUND = 120  # candidates the explore step adds each round
EXPLORE_SCALE = 0.08     # standard deviation of an exploration displacement


def energy_and_forces(x):
    """x: (n, 6) coordinates; returns (n, 7): the energy, then minus its gradient."""
    pos = x.reshape(-1, ATOMS, 2).astype(np.float64)
    energy = np.zeros(len(pos))
    forces = np.zeros_like(pos)
    for i in range(ATOMS):
        for j in range(i + 1, ATOMS):
            d = pos[:, i] - pos[:, j]
            r = np.linalg.norm(d, axis=1)
            e = np.exp(-A * (r - R0))
            energy += D * (1 - e) ** 2 - D
            # dE/dr = 2 D a e (1 - e); the force on i is -dE/dr * d / r, on j the opposite.
            f = (-2 * D * A * e * (1 - e) / r)[:, None] * d
            forces[:, i] += f
            forces[:, j] -= f
    return np.concatenate([energy[:, None], forces.reshape(-1, 2 * ATOMS)], axis=1)


def equilibrium():
    """The equilateral triangle of side r0, centred on the origin."""
    angles = np.array([90, 210, 330]) * np.pi / 180
    radius = R0 / np.sqrt(3)
    return np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1).reshape(-1)


def perturbed(base, n, scale, rng):
    """n structures: rows of `base` drawn at random, each atom displaced by N(0, scale^2)."""
    rows = base[rng.integers(0, len(base), size=n)]
    return (rows + rng.normal(0, scale, size=rows.shape)).astype(np.float32)


def make(cohort, store):
    rng = np.random.default_rng(2026)
    eq = equilibrium()[None, :]
    train = perturbed(eq, 30, 0.04, rng)
    pool = perturbed(eq, 300, 0.08, rng)
    # The test set: two generations of exploration from equilibrium, the distribution the
    # loop explores.
    test = perturbed(perturbed(eq, 400, EXPLORE_SCALE, rng), 400, EXPLORE_SCALE, rng)
    files = {}
    for name, x in (("train", train), ("pool", pool), ("test", test)):
        files[name] = [f"{store}.{name}-x.npy"]
        np.save(files[name][0], x)
        if name != "pool":
            files[name].append(f"{store}.{name}-y.npy")
            np.save(files[name][1], energy_and_forces(x).astype(np.float32))
    subprocess.run([cohort, "data", "init", store], check=True)
    for name, paths in files.items():
        subprocess.run([cohort, "data", "import", store, "--table", name, "--npy", *paths,
                        "--label-type", "vector", "--note", f"morse {name}"], check=True)


def label():
    x = np.load(os.environ["COHORT_ORACLE_FEATURES"])
    np.save(os.environ["COHORT_ORACLE_LABELS"], energy_and_forces(x).astype(np.float32))
    print(f"labelled {len(x)} structures exactly", flush=True)


def explore():
    # cohort's numpy-only store reader: on PYTHONPATH, or beside this example in the repo.
    sys.path.append(os.path.join(HERE, "..", "..", "python"))
    import cohort_store  # noqa: E402

    store = cohort_store.open(os.environ["COHORT_STORE"],
                              generation=int(os.environ["COHORT_GENERATION"]))
    train = np.asarray(store.table("train").features)
    # Seeded by the round: a resumed step proposes exactly what it proposed before.
    rng = np.random.default_rng(1000 + int(os.environ["COHORT_ROUND"]))
    candidates = perturbed(train, EXPLORE_PER_ROUND, EXPLORE_SCALE, rng)
    out = os.environ["COHORT_CHANGES_DIR"]
    np.save(os.path.join(out, "candidates.npy"), candidates)
    with open(os.path.join(out, "changes.json"), "w") as f:
        json.dump({"add": [{"table": "pool", "features": "candidates.npy"}]}, f)
    print(f"proposed {len(candidates)} candidates from {len(train)} train structures",
          flush=True)


def main():
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "make" and len(sys.argv) == 4:
        make(sys.argv[2], sys.argv[3])
    elif role == "label":
        label()
    elif role == "explore":
        explore()
    else:
        sys.exit("usage: morse.py make COHORT STORE | label | explore")


if __name__ == "__main__":
    main()
