#!/usr/bin/python3
"""Ensemble quality on Fashion-MNIST (docs/benchmarks.md, "Quality"), with `cohort run`.

1. Full labels: the 8 members of examples/fashion-mnist/loop.toml (or of --config) trained on
   all 60,000 training images (one round, nothing to acquire), evaluated on the 10,000 test
   images, once per seed: each member's and the ensemble's accuracy, NLL and ECE, next to the
   benchmark table of the dataset's README, and whether the ensemble's NLL and ECE are below
   every member's. Beside each ECE, what the test table can resolve: the range a perfectly
   calibrated model with the same confidences would read (ece_resolution). Then the ensemble calibrated by `cohort predict --calibrate`: a temperature
   fitted on half the test images (seeded split), every metric on the other half.
2. Active learning: test accuracy of the ensemble against labels used, for `random`, `bald`,
   `variance` and `entropy`, three seeds each (acquisition seed and member seeds), starting
   from 1,000 labels and adding 1,000 per round; the labels at which each curve first reaches
   85%, and where the line between its points either side of 85% crosses it (interpolated).

  bench/quality.py [--part full,al] [--rounds 6] [--epochs-full 15] [--scratch DIR]
  bench/quality.py --part al --start 500 --k 250 --rounds 8 \
      --variants random,bald,bald:selection=softrank,bald:cold_start_rounds=2
  bench/quality.py --part al --patience 3 --epochs 30 ...   # early stopping per round
  bench/quality.py --part full --config examples/fashion-mnist/cnn-ensemble.toml \
      --epochs-full 10 --seeds 3  # 8 small CNNs that differ
  bench/quality.py --part al --first-seed 3 ...   # fresh seeds for a variant chosen on 0-2
  bench/quality.py --quick        # smoke: tiny store, 2 members, 1 seed, 2 rounds

A variant is a strategy with optional [acquisition] settings after a colon, comma-separated
(`bald:selection=power,temperature=2`); each is run with every seed. `dropout_passes=T` is a
member setting: every member whose model has a dropout layer predicts the pool with T
MC-dropout passes (`bald:dropout_passes=8`). Beside each curve the
mean acquisition time per round (the journal's acquire_s). With --patience every member holds
out 10% of the round's train table and stops after that many epochs without a better
validation loss (keeping its best epoch), --epochs being the most it trains: members fit to
the table they have instead of a fixed 5 epochs for 500 and 5,000 labels alike.

Each run is named after its settings (not --rounds) and lives in the scratch directory: running
the same command again resumes the runs, and a larger --rounds extends them (a stop rule is
a change a resume allows, docs/config.md).

Prints tables (and writes them as JSON with --json); asserts nothing.
"""
import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_config import (EXAMPLE, FMNIST, BenchError, bench_main,  # noqa: E402
                            build_store, config_text, executable, run)

PROG = "quality"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = ["random", "bald", "variance", "entropy"]


def parse_variant(text):
    """'bald:selection=softrank,temperature=0.5' -> ('bald', {'selection': '"softrank"', ...})."""
    strategy, _, rest = text.partition(":")
    settings = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[a-z_]+", key):
            raise BenchError(f"variant {text!r}: expected key=value, got {item!r}")
        try:
            float(value)
        except ValueError:
            value = f'"{value}"'
        settings[key] = value
    return strategy, settings



def run_loop(cohort, work, name, text):
    path = os.path.join(work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(text)
    run_dir = os.path.join(work, "runs", name)
    run([cohort, "run", "--plain", path])  # an earlier run of the same name is resumed
    return sqlite3.connect(f"file:{run_dir}/run.db?mode=ro", uri=True)


ECE_BINS = 15  # as loop/ensemble/metrics.h


def metrics(p, y):
    """Accuracy, NLL and ECE (15 bins) of probabilities p (n, C) against labels y, as cohort
    computes them."""
    confidence = p.max(1)
    correct = p.argmax(1) == y
    bins = np.minimum((confidence * ECE_BINS).astype(int), ECE_BINS - 1)
    ece = sum((bins == b).mean() * abs(correct[bins == b].mean() - confidence[bins == b].mean())
              for b in range(ECE_BINS) if (bins == b).any())
    nll = -np.log(np.maximum(p[np.arange(len(y)), y].astype(np.float64), 1.1754944e-38)).mean()
    return {"accuracy": float(correct.mean()), "nll": float(nll), "ece": float(ece)}


def ece_resolution(p, draws=50, seed=0):
    """The ECE a perfectly calibrated model with the confidences of p (n, C) would read on n
    samples: labels drawn from p itself, `draws` times (seeded). Returns the mean and the 5% and
    95% points. Two ECEs that both fall in such a range are not told apart by the test table."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(p.astype(np.float64), axis=1)
    values = []
    for _ in range(draws):
        u = rng.random((len(p), 1)) * cumulative[:, -1:]
        y = np.minimum((u > cumulative).sum(1), p.shape[1] - 1)
        values.append(metrics(p, y)["ece"])
    return float(np.mean(values)), float(np.percentile(values, 5)), float(np.percentile(values, 95))


def temperature_scaled(p, temperature):
    """softmax(log p / T), as loop/ensemble/calibration.h applies it."""
    z = np.log(np.maximum(p.astype(np.float64), 1.1754944e-38)) / temperature
    z -= z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def calibrated(cohort, scratch, run_dir, test):
    """`cohort predict --calibrate` on a run: the first `test` test images split in two (seed
    2), a temperature fitted on one half, each member's, the ensemble's and the calibrated
    ensemble's metrics on the other half."""
    store = os.path.join(scratch, f"store-calibrate-{test}")
    eval_prefix = os.path.join(scratch, f"calibrate-{test}-eval")
    if not os.path.exists(os.path.join(store, "CURRENT")):
        shutil.rmtree(store, ignore_errors=True)
        run([cohort, "data", "init", store])
        run([cohort, "data", "import", store, "--table", "test", "--limit", str(test), "--idx",
             f"{FMNIST}/t10k-images-idx3-ubyte.gz", f"{FMNIST}/t10k-labels-idx1-ubyte.gz"])
        run([cohort, "data", "split", store, "--from", "test", "--to", "cal", "--count",
             str(test // 2), "--seed", "2"])
        run([cohort, "data", "export", store, "--table", "test", "-o", eval_prefix])
    out = os.path.join(scratch, "calibrated.npz")
    run([cohort, "predict", run_dir, "--store", store, "--table", "test", "--calibrate", "cal",
         "--calibrate-store", store, "-o", out])
    y = np.load(eval_prefix + ".y.npy").astype(np.int64)
    with np.load(out) as d:
        if not (d["ids"] == np.load(eval_prefix + ".ids.npy")).all():
            raise BenchError(f"{out}: its rows are not the exported table's")
        members = [metrics(p, y) for p in d["member_probabilities"]]
        return {"temperature": float(d["temperature"]), "eval_samples": len(y),
                "members": members, "ensemble": metrics(d["probabilities"], y),
                "calibrated": metrics(d["calibrated_probabilities"], y)}


def full_labels(cohort, scratch, epochs, seeds, quick, base, first_seed=0):
    store = os.path.join(scratch, "store-full")
    if quick:
        build_store(cohort, store, 600, 0, 500, reuse=True)
    else:
        build_store(cohort, store, 60000, 0, 10000, reuse=True)
    stem = os.path.splitext(os.path.basename(base))[0]
    runs = []
    for seed in range(first_seed, first_seed + seeds):
        name = f"full-{stem}-{epochs}-{seed}"
        text = config_text(name, store, 1, epochs=epochs, seed=seed,
                           members=2 if quick else None, base=base)
        text = re.sub(r'^strategy = "\w+"', 'strategy = "entropy"', text, count=1, flags=re.M)
        t0 = time.perf_counter()
        db = run_loop(cohort, scratch, name, text)
        seconds = time.perf_counter() - t0
        members = {}
        for member, metric, value in db.execute(
                "SELECT member, metric, value FROM member_metrics WHERE round = 0"):
            members.setdefault(member, {})[metric] = value
        for member, metrics_json in db.execute(
                "SELECT member, metrics_json FROM attempts WHERE round = 0 AND status = 'done'"):
            if member in members and metrics_json:
                members[member]["parameters"] = json.loads(metrics_json).get("parameters")
        ens = db.execute("SELECT test_accuracy, test_nll, test_ece, test_brier, test_temperature, "
                         "test_nll_calibrated, test_ece_calibrated FROM rounds "
                         "WHERE round = 0").fetchone()
        ensemble = {"accuracy": ens[0], "nll": ens[1], "ece": ens[2], "brier": ens[3],
                    "temperature": ens[4], "nll_calibrated": ens[5], "ece_calibrated": ens[6]}
        # What each ECE can resolve on this test table: the range a perfectly calibrated model
        # with the same confidences would read (ece_resolution).
        run_dir = os.path.join(scratch, "runs", name)
        probabilities = {}
        for member, predictions_json in db.execute(
                "SELECT member, predictions_json FROM attempts WHERE round = 0 AND "
                "status = 'done'"):
            if member in members and predictions_json:
                path = json.loads(predictions_json)["test"]
                probabilities[member] = np.load(os.path.join(run_dir, path))
                members[member]["ece_resolution"] = ece_resolution(probabilities[member])
        db.close()
        if len(probabilities) == len(members):
            mean = np.mean([probabilities[m] for m in sorted(probabilities)], axis=0)
            ensemble["ece_resolution"] = ece_resolution(mean)
            if ensemble["temperature"] is not None:
                ensemble["ece_calibrated_resolution"] = ece_resolution(
                    temperature_scaled(mean, ensemble["temperature"]))

        def resolution(m, key="ece_resolution"):
            r = m.get(key)
            return f"{r[0]:.4f} ({r[1]:.4f}-{r[2]:.4f})" if r else "-"
        print(f"\nFull labels, seed {seed} ({'600' if quick else '60,000'} training images, "
              f"{epochs} epochs, test {'500' if quick else '10,000'}, {stem}; {seconds:.0f} s)")
        print(f"{'model':<22} {'params':>7} {'accuracy':>8} {'nll':>7} {'ece':>7} {'brier':>7}  "
              f"ece if calibrated (5-95%)")
        for member, m in sorted(members.items(), key=lambda kv: -kv[1]["accuracy"]):
            print(f"{member:<22} {m.get('parameters') or '-':>7} {m['accuracy']:>8.4f} "
                  f"{m['nll']:>7.4f} {m['ece']:>7.4f} {m['brier']:>7.4f}  {resolution(m)}")
        print(f"{'ensemble (mean)':<22} {'':>7} {ensemble['accuracy']:>8.4f} "
              f"{ensemble['nll']:>7.4f} {ensemble['ece']:>7.4f} {ensemble['brier']:>7.4f}  "
              f"{resolution(ensemble)}")
        for metric in ("nll", "ece"):
            best = min(m[metric] for m in members.values())
            verdict = "below" if ensemble[metric] < best else "NOT below"
            print(f"  ensemble {metric} {ensemble[metric]:.4f} is {verdict} every member's "
                  f"(best {best:.4f})")
        # The loop's own calibration (docs/acquisition.md, "Calibration"): every test image
        # scored at a temperature fitted on the other half of the table.
        if ensemble["temperature"] is None:
            print("  the loop's calibration: not in the journal (a run an older cohort finished)")
        else:
            print(f"  the loop's calibration: temperature {ensemble['temperature']:.4f}, "
                  f"cross-fitted nll {ensemble['nll_calibrated']:.4f}, "
                  f"ece {ensemble['ece_calibrated']:.4f} (if calibrated: "
                  f"{resolution(ensemble, 'ece_calibrated_resolution')})")
        for metric in ("nll", "ece") if ensemble["temperature"] is not None else ():
            best_name = min(members, key=lambda n: members[n][metric])
            best = members[best_name][metric]
            value = ensemble[f"{metric}_calibrated"]
            verdict = "below" if value < best else "NOT below"
            print(f"  calibrated ensemble {metric} {value:.4f} is {verdict} every member's "
                  f"(best {best:.4f}" +
                  (f", {best_name}, which a perfectly calibrated model with its confidences "
                   f"would read as {resolution(members[best_name])}" if metric == "ece" and
                   "ece_resolution" in members[best_name] else "") + ")")
        cal = calibrated(cohort, scratch, os.path.join(scratch, "runs", name),
                         500 if quick else 10000)
        print(f"\nCalibrated: temperature {cal['temperature']:.4f} fitted on "
              f"{cal['eval_samples']:,} test images, metrics on the other {cal['eval_samples']:,}")
        print(f"{'model':<22} {'accuracy':>8} {'nll':>7} {'ece':>7}")
        # member_probabilities are in config order.
        names = re.findall(r'^\[\[member\]\]\s*\nname = "([^"]+)"', text, flags=re.M)
        if len(names) != len(cal["members"]):
            raise BenchError(f"{name}: {len(names)} members in its config, "
                             f"{len(cal['members'])} in cohort predict's output")
        cal["member_names"] = names
        for label, m in (list(zip(names, cal["members"])) +
                         [("ensemble (mean)", cal["ensemble"]),
                          (f"ensemble, T={cal['temperature']:.3f}", cal["calibrated"])]):
            print(f"{label:<22} {m['accuracy']:>8.4f} {m['nll']:>7.4f} {m['ece']:>7.4f}")
        for metric in ("nll", "ece"):
            best = min(m[metric] for m in cal["members"])
            verdict = "below" if cal["calibrated"][metric] < best else "NOT below"
            print(f"  calibrated ensemble {metric} {cal['calibrated'][metric]:.4f} is {verdict} "
                  f"every member's (best {best:.4f})")
        runs.append({"members": members, "ensemble": ensemble, "seconds": seconds,
                     "calibrated": cal})
    if seeds > 1:
        print(f"\nFull labels, mean of {seeds} seeds")
        print(f"{'model':<22} {'accuracy':>8} {'nll':>7} {'ece':>7} {'brier':>7}")
        rows = {name: {k: sum(r["members"][name][k] for r in runs) / seeds
                       for k in ("accuracy", "nll", "ece", "brier")}
                for name in runs[0]["members"]}
        rows["ensemble (mean)"] = {k: sum(r["ensemble"][k] for r in runs) / seeds
                                   for k in ("accuracy", "nll", "ece", "brier")}
        for name, m in sorted(rows.items(), key=lambda kv: -kv[1]["accuracy"]):
            print(f"{name:<22} {m['accuracy']:>8.4f} {m['nll']:>7.4f} {m['ece']:>7.4f} "
                  f"{m['brier']:>7.4f}")
        print(f"\nCalibrated, mean of {seeds} seeds (metrics on the held-out half)")
        for label, key in (("ensemble (mean)", "ensemble"), ("ensemble, calibrated", "calibrated")):
            m = {k: sum(r["calibrated"][key][k] for r in runs) / seeds
                 for k in ("accuracy", "nll", "ece")}
            print(f"{label:<22} {m['accuracy']:>8.4f} {m['nll']:>7.4f} {m['ece']:>7.4f}")
    return {"config": base, "epochs": epochs, "seeds": runs}


def active_learning(cohort, scratch, rounds, seeds, quick, variants, start, k, members=None,
                    epochs=None, patience=None, base=EXAMPLE, first_seed=0):
    start, k = (300, 200) if quick else (start, k)
    store = os.path.join(scratch, f"store-al-{start}")
    if quick:
        build_store(cohort, store, 300, 1500, 500, reuse=True)
    else:
        build_store(cohort, store, start, 60000 - start, 10000, reuse=True)
    curves, acquire_s = {}, {}
    stem = os.path.splitext(os.path.basename(base))[0]
    # Interleaved: every variant's seed s runs before any variant's seed s + 1.
    for seed in range(first_seed, first_seed + seeds):
        for variant in variants:
            strategy, settings = parse_variant(variant)
            # The name holds everything that changes the run: an earlier run of it is resumed.
            name = ("al-" + ("" if base == EXAMPLE else stem + "-") +
                    re.sub(r"[^a-z0-9_.-]+", "-", variant) + f"-{start}-{k}" +
                    (f"-e{epochs}" if epochs else "") + (f"-p{patience}" if patience else "") +
                    (f"-m{members}" if members else "") + f"-{seed}")
            defaults = ({"validation_fraction": 0.1, "patience": patience}
                        if patience is not None else None)
            text = config_text(name, store, rounds, strategy=strategy, seed=seed,
                               epochs=1 if quick else epochs, members=2 if quick else members,
                               k=k, defaults=defaults, base=base)
            passes = settings.pop("dropout_passes", None)
            if passes is not None:
                text = re.sub(r'^(model = ".*dropout.*"\n)', lambda m: m.group(1) +
                              f"dropout_passes = {passes}\n", text, flags=re.M)
            extra = "".join(f"{key} = {value}\n" for key, value in settings.items())
            text = re.sub(r"^(\[acquisition\]\n)", lambda m: m.group(1) + extra, text,
                          count=1, flags=re.M)
            t0 = time.perf_counter()
            db = run_loop(cohort, scratch, name, text)
            rows = db.execute("SELECT r.round, r.test_accuracy, r.test_nll, "
                              "(SELECT count(*) FROM acquisitions a WHERE a.run_id = r.run_id "
                              " AND a.round < r.round), r.acquire_s FROM rounds r "
                              "ORDER BY r.round").fetchall()
            db.close()
            print(f"{PROG}: {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
            curves.setdefault(variant, []).append(
                [(start + acquired, acc, nll) for _, acc, nll, acquired, _ in rows])
            acquire_s.setdefault(variant, []).extend(a for *_, a in rows[:-1] if a is not None)
    labels = [p[0] for p in curves[variants[0]][0]]
    print(f"\nActive learning: ensemble test accuracy by labels used (mean of {seeds} seed(s))")
    print(f"{'labels':>7} " + " ".join(f"{s:>10}" for s in variants))
    for i, n in enumerate(labels):
        cells = []
        for s in variants:
            accs = [c[i][1] for c in curves[s] if i < len(c)]
            cells.append(f"{sum(accs) / len(accs):>10.4f}" if accs else f"{'-':>10}")
        print(f"{n:>7} " + " ".join(cells))
    print("\nLabels at which the mean curve first reaches 85%:")
    reach = {}
    reach_interpolated = {}
    reach_per_seed = {}
    for s in variants:
        hit = None
        below = None  # the mean curve's last point under 85% before it reaches 85%
        for i, n in enumerate(labels):
            accs = [c[i][1] for c in curves[s] if i < len(c)]
            if not accs:
                continue
            mean = sum(accs) / len(accs)
            if mean >= 0.85:
                hit = n
                # Where the straight line between the points either side of 85% crosses it: a
                # finer reading than the step the curve first reaches it at, which is up to a
                # whole round's labels late.
                if below is not None:
                    n0, a0 = below
                    reach_interpolated[s] = n0 + (n - n0) * (0.85 - a0) / (mean - a0)
                break
            below = (n, mean)
        reach[s] = hit
        times = acquire_s.get(s, [])
        mean_time = f"{sum(times) / len(times):.3f} s" if times else "-"
        # Each seed's own curve too: noisier than the mean curve, and the mean curve's crossing
        # is not the mean of the seeds' (docs/benchmarks.md, "Quality").
        per_seed = [next((n for n, acc, _ in c if acc >= 0.85), None) for c in curves[s]]
        between = (f", interpolated {reach_interpolated[s]:,.0f}" if s in reach_interpolated
                   else "")
        print(f"  {s:<10} {hit if hit is not None else 'not within ' + str(labels[-1])}"
              f"{between}  (per seed {' / '.join(str(n) if n else '-' for n in per_seed)};"
              f" acquisition {mean_time} per round)")
        reach_per_seed[s] = per_seed
    return {"curves": curves, "reach_85": reach, "reach_85_interpolated": reach_interpolated,
            "reach_85_per_seed": reach_per_seed,
            "acquire_s": acquire_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", default="full,al", help="full, al or both")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds run are FIRST_SEED .. FIRST_SEED + SEEDS - 1: fresh seeds check "
                         "a variant chosen on the first ones")
    ap.add_argument("--epochs-full", type=int, default=15)
    ap.add_argument("--config", default=EXAMPLE,
                    help="the members and defaults to use, a loop.toml laid out like the "
                         "example's (default examples/fashion-mnist/loop.toml)")
    ap.add_argument("--cohort", default=os.path.join(REPO, "build", "src", "cli", "cohort"))
    ap.add_argument("--scratch", default=os.path.join(REPO, "build", "quality"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variants", default=",".join(STRATEGIES),
                    help="strategies, each with optional [acquisition] settings (see above)")
    ap.add_argument("--start", type=int, default=1000, help="labels the loop starts with")
    ap.add_argument("--k", type=int, default=1000, help="labels added per round")
    ap.add_argument("--members", type=int, help="the config's first N members only (AL part)")
    ap.add_argument("--epochs", type=int, help="epochs per round in the AL part (default 5)")
    ap.add_argument("--patience", type=int,
                    help="AL part: early stopping on a 10%% validation split with this patience")
    a = ap.parse_args()
    cohort = executable(a.cohort)
    if not os.path.isfile(a.config):
        raise BenchError(f"{a.config}: no such config (--config)")
    scratch = os.path.abspath(a.scratch)
    os.makedirs(scratch, exist_ok=True)
    parts = [p for p in a.part.split(",") if p]
    results = {}
    if a.quick:
        a.rounds, a.seeds, a.epochs_full = 2, 1, 1
    if "full" in parts:
        results["full"] = full_labels(cohort, scratch, a.epochs_full, a.seeds, a.quick,
                                      os.path.abspath(a.config), a.first_seed)
    if "al" in parts:
        variants = [v for v in a.variants.split(",") if v]
        # "bald:selection=softrank,temperature=2" holds commas: a setting joins its variant.
        joined = []
        for v in variants:
            if joined and ":" in joined[-1] and "=" in v and ":" not in v:
                joined[-1] += "," + v
            else:
                joined.append(v)
        results["al"] = active_learning(cohort, scratch, a.rounds, a.seeds, a.quick, joined,
                                        a.start, a.k, a.members, a.epochs, a.patience,
                                        os.path.abspath(a.config), a.first_seed)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    bench_main(PROG, main)
