"""Checks python/cohort_store.py against a store, using the IDX files the store was built from.

    /usr/bin/python3 python/cohort_store_test.py --store DIR --images IMAGES.gz --labels LABELS.gz --count N
    /usr/bin/python3 python/cohort_store_test.py --self-test --images IMAGES.gz --labels LABELS.gz --count N

With --store, DIR was written by the C++ side:

    cohort data init DIR
    cohort data import DIR --table train --idx IMAGES LABELS --limit N
    cohort data split DIR --from train --to pool --count N/5 --seed 7
    cohort data remove DIR --table train --ids 3,4
    (maybe more commits)

With --self-test, a store written by this file's own fixture writer (`_write_fixture_store`,
straight from docs/store-format.md) is checked instead, so the reader can be tested without
the C++ side. Every generation and table is checked against the first N samples of the IDX
files: ids, features, labels, row counts, generation chain, RowView indexing and checksums;
then copies of the store are damaged in several ways and the reader must refuse them with a
StoreError that names the file at fault. Exits 0 when every check passes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cohort_store  # noqa: E402
from cohort_store import StoreError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------------------------
# IDX files


def read_idx(path: str, count: int) -> np.ndarray:
    """The first `count` items of a (gzipped) IDX file of unsigned bytes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        zero, dtype_code, ndim = struct.unpack(">HBB", f.read(4))
        assert zero == 0 and dtype_code == 0x08, f"{path}: not an IDX file of unsigned bytes"
        dims = struct.unpack(f">{ndim}I", f.read(4 * ndim))
        assert dims[0] >= count, f"{path}: holds {dims[0]} items, --count asks for {count}"
        item = int(np.prod(dims[1:], dtype=np.int64))
        data = f.read(item * count)
    assert len(data) == item * count, f"{path}: truncated"
    return np.frombuffer(data, dtype=np.uint8).reshape(count, *dims[1:])


# --------------------------------------------------------------------------------------------
# Fixture writer: a store made straight from docs/store-format.md, independent of the reader.


class _FixtureWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self.generation: int | None = None
        self.next_segment = 0
        self.next_sample_id = 0
        # table -> {"features", "labels" (schema), "segments": {id: entry}, "refs", "rows"}
        self.tables: dict[str, dict[str, Any]] = {}
        self.arrays: dict[int, dict[str, np.ndarray]] = {}  # segment id -> "x"/"y"/"id"
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "LOCK"), "w") as f:
            f.write(f"{os.getpid()}\n")

    def _write_npy(self, name: str, arr: np.ndarray) -> dict[str, Any]:
        path = os.path.join(self.path, name)
        assert not os.path.exists(path), f"fixture writer would overwrite {name}"
        with open(path + ".tmp", "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(arr), version=(1, 0),
                                      allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.rename(path + ".tmp", path)
        with open(path, "rb") as f:
            raw = f.read()
        return {"file": name, "bytes": len(raw), "crc32": zlib.crc32(raw)}

    def new_segment(self, table: str, x: np.ndarray, y: np.ndarray | None,
                    ids: np.ndarray) -> int:
        seg = self.next_segment
        self.next_segment += 1
        entry: dict[str, Any] = {"id": seg, "rows": len(ids)}
        entry["x"] = self._write_npy(f"{table}-seg-{seg:06d}.x.npy", x)
        if y is not None:
            entry["y"] = self._write_npy(f"{table}-seg-{seg:06d}.y.npy", y)
        entry["ids"] = self._write_npy(f"{table}-seg-{seg:06d}.id.npy", ids.astype("<u8"))
        self.tables[table]["segments"][seg] = entry
        self.arrays[seg] = {"x": x, "y": y, "id": ids}
        return seg

    def set_rows(self, table: str, refs: np.ndarray, generation: int) -> None:
        t = self.tables[table]
        t["refs"] = refs.astype("<u8")
        t["rows"] = self._write_npy(f"{table}-gen-{generation:06d}.rows.npy", t["refs"])
        t["rows"]["count"] = len(refs)

    def gather(self, table: str, positions: np.ndarray) -> dict[str, Any]:
        refs = self.tables[table]["refs"][positions]
        out: dict[str, list[Any]] = {"x": [], "y": [], "id": []}
        for ref in refs:
            arrays = self.arrays[int(ref >> np.uint64(32))]
            row = int(ref & np.uint64(0xFFFFFFFF))
            for k in out:
                out[k].append(None if arrays[k] is None else arrays[k][row])
        return {k: (None if not v or v[0] is None else np.stack(v)) for k, v in out.items()}

    def commit(self, note: str, changed: list[str]) -> int:
        """Writes new rows files for `changed` tables, the manifest, then CURRENT."""
        gen = 0 if self.generation is None else self.generation + 1
        tables = {}
        for name in sorted(self.tables):
            t = self.tables[name]
            if name in changed:
                self.set_rows(name, t["refs"], gen)
            live = {int(r >> np.uint64(32)) for r in t["refs"]}
            tables[name] = {
                "features": t["features"], "labels": t["labels"],
                "rows": t["rows"],
                "segments": [t["segments"][s] for s in sorted(t["segments"]) if s in live],
            }
        manifest = {
            "format": "cohort-store", "format_version": 1, "generation": gen,
            "parent": self.generation, "created": "2026-12-02T12:00:00.%03dZ" % gen,
            "note": note, "next_segment": self.next_segment,
            "next_sample_id": self.next_sample_id, "tables": tables,
        }
        body = (json.dumps(manifest, indent=1) + "\n").encode()
        mname = f"gen-{gen:06d}.json"
        self._atomic_write(mname, body + b"#crc32=%08x\n" % zlib.crc32(body))
        current = f"gen-{gen:06d}".encode()
        self._atomic_write("CURRENT", current + b" %08x\n" % zlib.crc32(current))
        self.generation = gen
        return gen

    def _atomic_write(self, name: str, data: bytes) -> None:
        path = os.path.join(self.path, name)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(path + ".tmp", path)


def _move(w: _FixtureWriter, src: str, dst: str, positions: np.ndarray, drop_labels: bool,
          gen: int) -> None:
    """Copies the rows at `positions` of `src` into a new segment of `dst`, drops them from src."""
    if not len(positions):
        return
    rows = w.gather(src, positions)
    seg = w.new_segment(dst, rows["x"], None if drop_labels else rows["y"], rows["id"])
    new_refs = (np.uint64(seg) << np.uint64(32)) | np.arange(len(positions), dtype=np.uint64)
    w.tables[dst]["refs"] = np.concatenate([w.tables[dst]["refs"], new_refs])
    w.tables[src]["refs"] = np.delete(w.tables[src]["refs"], positions)


def _write_fixture_store(path: str, images: np.ndarray, labels: np.ndarray, n: int) -> None:
    """A valid store per docs/store-format.md, generations 0..5:

    0 init (no tables); 1 import n samples into train (one segment, ids 0..n-1);
    2 split n//5 random samples (seed 7) into a new table pool (new segment);
    3 remove ids 3 and 4 from train if still there (new rows file only);
    4 move up to 10 pool samples back to train (train now spans two segments);
    5 move a few train samples from both segments to a new table "unlabeled" (labels kind
      none).
    A crashed commit's leftovers (gen-000006.json, a .tmp file) are left behind too.
    """
    w = _FixtureWriter(path)
    w.commit("init", [])

    features = {"dtype": "uint8", "shape": list(images.shape[1:])}
    class_labels = {"kind": "class", "dtype": "int64", "shape": []}
    empty = np.zeros(0, dtype=np.uint64)
    w.tables["train"] = {"features": features, "labels": class_labels, "segments": {},
                         "refs": empty}
    seg = w.new_segment("train", images[:n], labels[:n].astype("<i8"),
                        np.arange(n, dtype=np.uint64))
    w.next_sample_id = n
    w.tables["train"]["refs"] = (np.uint64(seg) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    w.commit(f"import {n} samples", ["train"])

    rng = np.random.default_rng(7)
    gen = w.generation + 1
    w.tables["pool"] = {"features": features, "labels": class_labels, "segments": {},
                        "refs": empty}
    _move(w, "train", "pool", rng.choice(len(w.tables["train"]["refs"]), n // 5, replace=False),
          False, gen)
    w.commit(f"split: {n // 5} train -> pool (seed 7)", ["train", "pool"])

    train_ids = w.gather("train", np.arange(len(w.tables["train"]["refs"])))["id"]
    gone = np.flatnonzero(np.isin(train_ids, [3, 4]))
    w.tables["train"]["refs"] = np.delete(w.tables["train"]["refs"], gone)
    w.commit("remove 3,4 from train", ["train"])

    gen = w.generation + 1
    back = min(10, len(w.tables["pool"]["refs"]))
    _move(w, "pool", "train", rng.choice(len(w.tables["pool"]["refs"]), back, replace=False),
          False, gen)
    w.commit(f"move {back} pool -> train", ["train", "pool"])

    gen = w.generation + 1
    w.tables["unlabeled"] = {"features": features, "labels": {"kind": "none"}, "segments": {},
                             "refs": empty}
    old = len(w.tables["train"]["refs"]) - back  # rows from segment 0, then `back` moved ones
    picks = np.unique(np.concatenate([rng.choice(old, min(5, old), replace=False),
                                      len(w.tables["train"]["refs"]) - np.arange(1, back, 3)]))
    rng.shuffle(picks)
    _move(w, "train", "unlabeled", picks, True, gen)
    w.commit(f"move {len(picks)} train -> unlabeled, dropping labels", ["train", "unlabeled"])

    # Leftovers of a commit that crashed before CURRENT moved: readers must ignore them.
    with open(os.path.join(path, "gen-000006.json"), "w") as f:
        f.write("{\n \"format\": \"cohort-store\"\n")
    with open(os.path.join(path, "train-seg-000099.x.npy.tmp"), "wb") as f:
        f.write(b"partial")


# --------------------------------------------------------------------------------------------
# Checks


class Ctx:
    def __init__(self, store: str, images: np.ndarray, labels: np.ndarray, count: int,
                 self_test: bool, tmp: str | None = None) -> None:
        self.store, self.images, self.labels, self.count = store, images, labels, count
        self.self_test = self_test
        self.tmp = tmp or tempfile.mkdtemp(prefix="cohort_store_test-")
        self.rng = np.random.default_rng(1234)

    def copy_store(self, name: str) -> str:
        dst = os.path.join(self.tmp, name)
        shutil.copytree(self.store, dst, ignore=shutil.ignore_patterns("LOCK"))
        return dst


def expect_error(fn: Callable[[], Any], *needles: str) -> StoreError:
    """Runs fn, which must raise a one-line StoreError whose message holds every needle."""
    try:
        fn()
    except StoreError as e:
        msg = str(e)
        assert "\n" not in msg, f"StoreError message is not one line: {msg!r}"
        for needle in needles:
            assert needle in msg, f"StoreError {msg!r} does not mention {needle!r}"
        print(f"    refused as expected: {msg}")
        return e
    raise AssertionError(f"expected a StoreError mentioning {needles}, got none")


def check_generation_chain(ctx: Ctx) -> None:
    store = cohort_store.open(ctx.store)
    gens = store.generations()
    assert gens, "no generations"
    assert gens == list(range(gens[0], gens[-1] + 1)), f"generations not consecutive: {gens}"
    assert gens[0] == 0, f"first generation is {gens[0]}, init makes generation 0"
    assert gens[-1] == store.generation, \
        f"CURRENT names {store.generation}, newest committed manifest is {gens[-1]}"
    for g in gens:
        s = cohort_store.open(ctx.store, g)
        assert s.generation == g == s.manifest["generation"]
        want_parent = None if g == gens[0] else g - 1
        assert s.parent == want_parent, f"generation {g}: parent {s.parent}, want {want_parent}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s.created), \
            f"generation {g}: created {s.created!r} is not ISO 8601 UTC with milliseconds"
        assert isinstance(s.note, str)
        assert repr(s).startswith("<cohort_store.Store")
    print(f"    generations {gens[0]}..{gens[-1]}, each parent the one before; CURRENT={gens[-1]}")


def check_every_table(ctx: Ctx) -> None:
    """Ids, features, labels, counts and file naming in every table of every generation."""
    gens = cohort_store.open(ctx.store).generations()
    segments_seen: dict[int, tuple[str, str]] = {}  # segment id -> (table, x file + crc)
    total_rows = 0
    for g in gens:
        s = cohort_store.open(ctx.store, g)
        m = s.manifest
        assert s.tables == list(m["tables"]), f"generation {g}: tables {s.tables}"
        seg_ids_this_gen: set[int] = set()
        for name in s.tables:
            t = s.table(name)
            entry = m["tables"][name]
            where = f"generation {g} table {name}"
            assert re.fullmatch(r"[A-Za-z0-9_]{1,64}", name), f"bad table name {name!r}"
            assert t.name == name
            assert len(t) == entry["rows"]["count"], f"{where}: len {len(t)} != manifest count"
            assert t.schema == {"features": entry["features"], "labels": entry["labels"]}
            ids = t.ids
            assert isinstance(ids, np.ndarray) and ids.dtype == np.uint64, f"{where}: ids dtype"
            assert ids.shape == (len(t),), f"{where}: ids shape {ids.shape}"
            assert len(np.unique(ids)) == len(ids), f"{where}: duplicate sample ids"
            assert np.all(ids < ctx.count), f"{where}: ids outside range({ctx.count})"
            assert np.all(ids < m["next_sample_id"]), f"{where}: id >= next_sample_id"
            assert t.refs.dtype == np.uint64 and t.refs.shape == (len(t),)

            # File names per the spec, and segments immutable across generations.
            rm = re.fullmatch(rf"{name}-gen-(\d{{6,}})\.rows\.npy", entry["rows"]["file"])
            assert rm and int(rm.group(1)) <= g, f"{where}: rows file {entry['rows']['file']}"
            live_segments = set((t.refs >> np.uint64(32)).tolist())
            listed = [seg["id"] for seg in entry["segments"]]
            assert set(listed) == live_segments, \
                f"{where}: segments listed {listed}, rows point into {sorted(live_segments)}"
            for seg in entry["segments"]:
                sid = seg["id"]
                assert sid < m["next_segment"], f"{where}: segment {sid} >= next_segment"
                assert sid not in seg_ids_this_gen, f"generation {g}: segment {sid} in 2 tables"
                seg_ids_this_gen.add(sid)
                for kind in ("x", "y", "id"):
                    if kind == "y" and entry["labels"]["kind"] == "none":
                        assert seg.get("y") is None, f"{where}: kind none has a .y.npy"
                        continue
                    file = seg["ids" if kind == "id" else kind]["file"]
                    assert file == f"{name}-seg-{sid:06d}.{kind}.npy", \
                        f"{where}: segment file name {file}"
                key = (name, f"{seg['x']['file']}:{seg['x']['crc32']}")
                assert segments_seen.setdefault(sid, key) == key, \
                    f"segment {sid} changed between generations: {segments_seen[sid]} vs {key}"

            # Contents against the IDX files.
            fshape = tuple(entry["features"]["shape"])
            x = np.asarray(t.features)
            assert x.shape == (len(t), *fshape) and x.dtype == np.dtype(entry["features"]["dtype"])
            assert fshape == ctx.images.shape[1:], f"{where}: feature shape {fshape}"
            assert np.array_equal(x, ctx.images[ids.astype(np.intp)]), f"{where}: features differ"
            if entry["labels"]["kind"] == "none":
                assert t.labels is None, f"{where}: labels of kind none should be None"
            else:
                assert entry["labels"]["kind"] == "class", f"{where}: labels {entry['labels']}"
                y = np.asarray(t.labels)
                assert y.shape == (len(t),) and y.dtype == np.int64, f"{where}: labels {y.shape}"
                assert np.array_equal(y, ctx.labels[ids.astype(np.intp)]), f"{where}: labels differ"

            # Zero copy when the rows are exactly one whole segment, in order.
            whole = (len(entry["segments"]) == 1 and len(t) == entry["segments"][0]["rows"]
                     and np.array_equal(t.refs & np.uint64(0xFFFFFFFF), np.arange(len(t))))
            if whole:
                assert isinstance(t.features, np.memmap), f"{where}: expected the segment memmap"
            else:
                assert isinstance(t.features, cohort_store.RowView), f"{where}: expected RowView"
            total_rows += len(t)
            t.verify()
        print(f"    generation {g}: " + ", ".join(f"{n}={len(s.table(n))}" for n in s.tables)
              + f"  ({s.note})")
    print(f"    {total_rows} rows checked against the IDX files; verify() passed everywhere")


def check_import_and_split(ctx: Ctx) -> None:
    gens = cohort_store.open(ctx.store).generations()
    first_train = next((g for g in gens if "train" in cohort_store.open(ctx.store, g)), None)
    assert first_train is not None, "no generation has a table 'train'"
    t = cohort_store.open(ctx.store, first_train).table("train")
    assert len(t) == ctx.count, f"import generation {first_train}: train has {len(t)} rows"
    assert np.array_equal(t.ids, np.arange(ctx.count)), \
        f"import generation {first_train}: train ids are not 0..{ctx.count - 1} in order"
    print(f"    generation {first_train} (import): train = ids 0..{ctx.count - 1} in order")
    first_pool = next((g for g in gens if "pool" in cohort_store.open(ctx.store, g)), None)
    if first_pool is None:
        print("    no table 'pool' in any generation; split not checked")
        return
    before = cohort_store.open(ctx.store, first_pool - 1).table("train").ids
    after = cohort_store.open(ctx.store, first_pool)
    train, pool = after.table("train").ids, after.table("pool").ids
    assert not np.intersect1d(train, pool).size, "split: a sample is in both train and pool"
    assert np.array_equal(np.sort(np.concatenate([train, pool])), np.sort(before)), \
        "split: train + pool is not the train of the generation before"
    assert len(pool) > 0 or ctx.count < 5, "split moved nothing"
    print(f"    generation {first_pool} (split): {len(before)} train -> {len(train)} train "
          f"+ {len(pool)} pool, no sample lost or duplicated")


def _check_view(ctx: Ctx, view: Any, where: str) -> int:
    full = np.asarray(view)
    n = len(view)
    assert full.shape == tuple(view.shape) and full.dtype == view.dtype, where
    assert view.ndim == full.ndim and len(full) == n, where
    keys: list[Any] = [slice(None), slice(2, 17, 3), slice(None, None, -1), slice(-5, None),
                       slice(3, 3), slice(n + 10, None), slice(None, None, 7),
                       ctx.rng.integers(0, max(n, 1), size=min(n, 37)),
                       -ctx.rng.integers(1, n + 1, size=min(n, 11)) if n else np.zeros(0, int),
                       ctx.rng.random(n) < 0.3, np.zeros(n, dtype=bool), [], ]
    if n:
        keys += [0, -1, n // 2, -n, np.int64(n - 1), [n - 1, 0, n - 1],
                 ctx.rng.integers(0, n, size=(2, 3))]
    if full.ndim > 1 and n > 5:
        keys += [(slice(1, 5), 3), (2, slice(None), 4), (np.array([4, 0]), Ellipsis)]
    for key in keys:
        got, want = view[key], full[key]
        assert np.shape(got) == np.shape(want) and np.array_equal(got, want), \
            f"{where}: view[{key!r}] differs from np.asarray(view)[...]"
        if isinstance(view, cohort_store.RowView) and isinstance(key, int) and full.ndim > 1:
            assert not got.flags.owndata, f"{where}: view[{key}] copied instead of viewing"
    for bad in ([n], n, -n - 1):
        try:
            view[bad]
        except IndexError:
            pass
        else:
            raise AssertionError(f"{where}: view[{bad!r}] did not raise IndexError")
    rows = 0
    for i, row in enumerate(view):
        if i < 64:
            assert np.array_equal(row, full[i]), f"{where}: iteration row {i} differs"
        rows += 1
    assert rows == n, f"{where}: iteration gave {rows} rows, want {n}"
    assert np.asarray(view, dtype=np.float64).dtype == np.float64
    return len(keys)


def check_rowview_indexing(ctx: Ctx) -> None:
    views = 0
    for g in cohort_store.open(ctx.store).generations():
        s = cohort_store.open(ctx.store, g)
        for name in s.tables:
            t = s.table(name)
            for col in ("features", "labels"):
                view = getattr(t, col)
                if view is not None:
                    _check_view(ctx, view, f"generation {g} {name}.{col}")
                    views += isinstance(view, cohort_store.RowView)
    assert views or not ctx.self_test, "the fixture should produce multi-segment tables"
    print(f"    int, negative, slice, int array, bool mask, tuple, iteration indexing agree "
          f"with np.asarray on every column ({views} RowViews)")


def _first_segment(ctx: Ctx, store_dir: str) -> tuple[str, str, dict[str, Any]]:
    s = cohort_store.open(store_dir)
    for name in s.tables:
        segs = s.manifest["tables"][name]["segments"]
        if segs:
            return name, segs[0]["x"]["file"], segs[0]
    raise AssertionError("no table with a segment in the CURRENT generation")


def check_flipped_byte(ctx: Ctx) -> None:
    d = ctx.copy_store("flipped")
    name, xfile, _ = _first_segment(ctx, d)
    path = os.path.join(d, xfile)
    with open(path, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        offset = f.tell()
    size = os.path.getsize(path)
    pos = offset + (size - offset) // 2
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))
    t = cohort_store.open(d).table(name)  # same size: opening works
    len(t)
    expect_error(t.verify, xfile, "crc32")
    print(f"    flipped byte {pos} of {xfile}: verify() refused it")


def check_truncated_segment(ctx: Ctx) -> None:
    d = ctx.copy_store("truncated")
    name, xfile, _ = _first_segment(ctx, d)
    path = os.path.join(d, xfile)
    os.truncate(path, os.path.getsize(path) - 100)
    expect_error(lambda: cohort_store.open(d).table(name), xfile)
    os.truncate(path, 0)
    expect_error(lambda: cohort_store.open(d).table(name), xfile)
    os.remove(path)
    expect_error(lambda: cohort_store.open(d).table(name), xfile)


def check_wrong_header(ctx: Ctx) -> None:
    """A segment rewritten at the same size with another dtype or shape must be refused."""
    for label, change in (("dtype", lambda a: a.view(np.int8 if a.dtype == np.uint8 else np.int32)),
                          ("shape", lambda a: a.reshape(len(a), -1))):
        d = ctx.copy_store(f"header-{label}")
        name, xfile, seg = _first_segment(ctx, d)
        path = os.path.join(d, xfile)
        arr = np.load(path)
        size = os.path.getsize(path)
        with open(path, "wb") as f:
            np.lib.format.write_array(f, change(arr), version=(1, 0))
        if os.path.getsize(path) != size:
            print(f"    {label} change altered the file size; not a header-only check, skipped")
            continue
        expect_error(lambda: np.asarray(cohort_store.open(d).table(name).features), xfile)


def check_bad_current(ctx: Ctx) -> None:
    d = ctx.copy_store("current")
    cur = os.path.join(d, "CURRENT")
    good = open(cur, "rb").read()
    for bad in (b"garbage\n", b"\x00\xff" * 10, b"", good[:-1], good.replace(b" ", b"  "),
                good[:11] + (b"0" if good[11:12] != b"0" else b"1") + good[12:]):
        with open(cur, "wb") as f:
            f.write(bad)
        expect_error(lambda: cohort_store.open(d), "CURRENT")
    os.remove(cur)
    expect_error(lambda: cohort_store.open(d), "CURRENT")
    expect_error(lambda: cohort_store.open(os.path.join(ctx.tmp, "no-such-store")),
                 "no-such-store")


def check_bad_manifest(ctx: Ctx) -> None:
    d = ctx.copy_store("manifest")
    g = cohort_store.open(d).generation
    mname = f"gen-{g:06d}.json"
    path = os.path.join(d, mname)
    raw = open(path, "rb").read()
    i = raw.index(b'"note"')
    with open(path, "wb") as f:
        f.write(raw[:i + 2] + bytes([raw[i + 2] ^ 0x20]) + raw[i + 3:])
    expect_error(lambda: cohort_store.open(d), mname)
    with open(path, "wb") as f:
        f.write(raw.rpartition(b"#crc32=")[0])
    expect_error(lambda: cohort_store.open(d), mname)
    body = raw.rpartition(b"#crc32=")[0].replace(b'"format_version": 1', b'"format_version": 2')
    with open(path, "wb") as f:
        f.write(body + b"#crc32=%08x\n" % zlib.crc32(body))
    expect_error(lambda: cohort_store.open(d), mname, "format_version")
    os.remove(path)
    expect_error(lambda: cohort_store.open(d), mname)


def check_unknown_generation_and_table(ctx: Ctx) -> None:
    expect_error(lambda: cohort_store.open(ctx.store, 999999), "999999")
    s = cohort_store.open(ctx.store)
    e = expect_error(lambda: s.table("no_such_table"), "no_such_table")
    for name in s.tables:
        assert name in str(e), f"unknown-table error does not list table {name}: {e}"
    if ctx.self_test:  # the fixture leaves an uncommitted gen-000006.json behind
        assert 6 not in s.generations(), "an uncommitted manifest is listed"
        expect_error(lambda: cohort_store.open(ctx.store, 6), "gen-000006.json")


def check_cli(ctx: Ctx) -> None:
    script = os.path.join(HERE, "cohort_store.py")
    s = cohort_store.open(ctx.store)
    r = subprocess.run([sys.executable, script, ctx.store], capture_output=True, text=True)
    assert r.returncode == 0, f"CLI failed: {r.stderr}"
    assert f"generation {s.generation}" in r.stdout, r.stdout
    for name in s.tables:
        assert f"table {name}: {len(s.table(name))} rows" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, script, ctx.store, "--generation", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "generation 0" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, script, ctx.store, "--generation", "999999"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "999999" in r.stderr, r.stdout + r.stderr
    print("    " + r.stderr.strip())
    first = next(iter(subprocess.run([sys.executable, script, ctx.store], capture_output=True,
                                     text=True).stdout.splitlines()[1:2]), "")
    print(f"    CLI: {first} ...")


CHECKS = [check_generation_chain, check_every_table, check_import_and_split,
          check_rowview_indexing, check_flipped_byte, check_truncated_segment,
          check_wrong_header, check_bad_current, check_bad_manifest,
          check_unknown_generation_and_table, check_cli]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--store", help="store written by the C++ side")
    src.add_argument("--self-test", action="store_true",
                     help="check a store written by this file's fixture writer")
    p.add_argument("--images", required=True, help="IDX images file (gzipped) the store holds")
    p.add_argument("--labels", required=True, help="IDX labels file (gzipped)")
    p.add_argument("--count", type=int, required=True, help="samples imported (first N)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # keep prints and tracebacks in order

    images = read_idx(args.images, args.count)
    labels = read_idx(args.labels, args.count)
    ctx = Ctx(args.store or "", images, labels, args.count, args.self_test)
    failed = []
    try:
        if args.self_test:
            ctx.store = os.path.join(ctx.tmp, "fixture")
            _write_fixture_store(ctx.store, images, labels, args.count)
            print(f"fixture store written to {ctx.store}")
        for check in CHECKS:
            print(f"{check.__name__} ...")
            try:
                check(ctx)
            except Exception as e:  # noqa: BLE001 - report every failing check
                failed.append(check.__name__)
                traceback.print_exc()
                print(f"FAIL {check.__name__}: {type(e).__name__}: {e}")
            else:
                print(f"ok   {check.__name__}")
    finally:
        if args.keep:
            print(f"kept {ctx.tmp}")
        else:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
    if failed:
        print(f"{len(failed)} of {len(CHECKS)} checks FAILED: {', '.join(failed)}")
        return 1
    print(f"all {len(CHECKS)} checks passed on {ctx.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
