"""Read a cohort store (docs/store-format.md, format version 1) with Python and numpy alone.

A store is a directory of immutable ``.npy`` segments plus one JSON manifest per generation;
``CURRENT`` names the newest committed generation. This module opens a generation, checks the
checksums of ``CURRENT`` and the manifest, and gives each table's features, labels and sample
ids without copying: segments are memory-mapped, and a table whose rows are spread over
several segments is served by a lazy ``RowView`` that gathers only the rows you index.

Usage::

    import numpy as np
    import cohort_store

    store = cohort_store.open("my-store")           # the generation CURRENT names
    old = cohort_store.open("my-store", generation=3)
    print(store.generation, store.note, store.tables, store.generations())

    train = store.table("train")
    len(train)                  # live rows
    train.ids                   # uint64 sample ids, in table order
    x = train.features          # np.memmap, or a RowView over several segments
    x[0]                        # one sample (a view into its segment)
    x[10:20], x[[5, 1, 5]], x[mask]   # gathered copies of just those rows
    X = np.asarray(x)           # the whole table in memory
    y = train.labels            # None for a table whose labels kind is "none"
    train.verify()              # CRC-32 of every file the table uses

Command line::

    /usr/bin/python3 cohort_store.py STORE [--generation G]

Every problem with the store raises ``StoreError`` with a one-line message naming the file at
fault. Readers take no lock and never write to the store.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["StoreError", "Store", "Table", "RowView", "open", "main"]

FORMAT = "cohort-store"
FORMAT_VERSION = 1

_MANIFEST_RE = re.compile(r"gen-(\d{6,})\.json")
_CURRENT_RE = re.compile(rb"(gen-(\d{6,})) ([0-9a-f]{8})\n")
_TRAILER_RE = re.compile(rb"#crc32=([0-9a-f]{8})")
_FEATURE_DTYPES = ("uint8", "float32")
_LABEL_DTYPES = {"class": "int64", "vector": "float32"}
_CHUNK = 1 << 20

_builtin_open = open


class StoreError(Exception):
    """A store, generation, table or file that is missing, damaged or inconsistent."""


def _crc32_file(path: str) -> int:
    crc = 0
    with _builtin_open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _manifest_name(generation: int) -> str:
    return f"gen-{generation:06d}.json"


def _disk_dtype(name: str) -> np.dtype:
    """The dtype a store file holds for a manifest dtype name (little-endian on disk)."""
    dt = np.dtype(name)
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


# --------------------------------------------------------------------------------------------
# Store


class Store:
    """One generation of a store. Create with ``cohort_store.open``."""

    def __init__(self, path: str, generation: int | None = None) -> None:
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise StoreError(f"{self.path}: no such store directory")
        self.current = self._read_current()
        if generation is None:
            generation = self.current
        generation = int(generation)
        mpath = os.path.join(self.path, _manifest_name(generation))
        if not os.path.exists(mpath):
            if generation == self.current:
                raise StoreError(f"{mpath}: missing; CURRENT names generation {generation}")
            raise StoreError(f"{mpath}: unknown generation {generation} "
                             f"(committed generations: {_ranges(self.generations())})")
        if generation > self.current:
            raise StoreError(f"{mpath}: generation {generation} is not committed "
                             f"(CURRENT names {self.current})")
        self.manifest: dict[str, Any] = _read_manifest(mpath, generation)
        self.generation: int = generation
        self.parent: int | None = self.manifest.get("parent")
        self.note: str = self.manifest.get("note", "")
        self.created: str = self.manifest.get("created", "")
        self.tables: list[str] = list(self.manifest["tables"])
        self._manifest_path = mpath
        self._open_tables: dict[str, Table] = {}

    def _read_current(self) -> int:
        cpath = os.path.join(self.path, "CURRENT")
        try:
            with _builtin_open(cpath, "rb") as f:
                raw = f.read(256)
        except FileNotFoundError:
            raise StoreError(f"{cpath}: missing; {self.path} is not a cohort store") from None
        except OSError as e:
            raise StoreError(f"{cpath}: cannot read: {e.strerror}") from None
        m = _CURRENT_RE.fullmatch(raw)
        if m is None:
            raise StoreError(f"{cpath}: damaged: expected 'gen-NNNNNN crc32hex', "
                             f"found {raw[:40]!r}")
        if zlib.crc32(m.group(1)) != int(m.group(3), 16):
            raise StoreError(f"{cpath}: damaged: checksum {m.group(3).decode()} does not match "
                             f"'{m.group(1).decode()}' (crc32 {zlib.crc32(m.group(1)):08x})")
        return int(m.group(2))

    def generations(self) -> list[int]:
        """Committed generations (a manifest in the directory, not newer than CURRENT), ascending.

        A manifest newer than CURRENT is left over from a crashed commit (docs/store-format.md,
        "Durability") and is not listed.
        """
        gens = []
        for name in os.listdir(self.path):
            m = _MANIFEST_RE.fullmatch(name)
            if m and int(m.group(1)) <= self.current:
                gens.append(int(m.group(1)))
        return sorted(gens)

    def table(self, name: str) -> Table:
        """The table ``name`` in this generation. Checks file sizes and .npy headers."""
        if name not in self._open_tables:
            if name not in self.manifest["tables"]:
                have = ", ".join(self.tables) or "none"
                raise StoreError(f"{self._manifest_path}: no table '{name}' in generation "
                                 f"{self.generation} (tables: {have})")
            self._open_tables[name] = Table(self, name, self.manifest["tables"][name])
        return self._open_tables[name]

    def verify(self) -> int:
        """CRC-32 checks every file of every table; returns the number of bytes read."""
        return sum(self.table(t).verify() for t in self.tables)

    def __contains__(self, name: object) -> bool:
        return name in self.manifest["tables"]

    def __repr__(self) -> str:
        return (f"<cohort_store.Store {self.path!r} generation={self.generation} "
                f"parent={self.parent} tables={self.tables} note={self.note!r}>")


def _ranges(gens: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0..2, 5'."""
    if not gens:
        return "none"
    parts, start, prev = [], gens[0], gens[0]
    for g in list(gens[1:]) + [None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        if g is not None:
            start = prev = g
    return ", ".join(parts)


def _read_manifest(path: str, generation: int) -> dict[str, Any]:
    try:
        with _builtin_open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise StoreError(f"{path}: cannot read: {e.strerror}") from None
    if not raw.endswith(b"\n"):
        raise StoreError(f"{path}: damaged: does not end with a '#crc32=' trailer line")
    cut = raw.rfind(b"\n", 0, len(raw) - 1) + 1  # start of the last line
    body, trailer = raw[:cut], raw[cut:-1]
    m = _TRAILER_RE.fullmatch(trailer)
    if m is None:
        raise StoreError(f"{path}: damaged: last line is {trailer[:40]!r}, not '#crc32=xxxxxxxx'")
    if zlib.crc32(body) != int(m.group(1), 16):
        raise StoreError(f"{path}: damaged: checksum mismatch (trailer {m.group(1).decode()}, "
                         f"contents {zlib.crc32(body):08x})")
    try:
        manifest = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise StoreError(f"{path}: damaged: not JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{path}: damaged: not a JSON object")
    if manifest.get("format") != FORMAT:
        raise StoreError(f"{path}: format is {manifest.get('format')!r}, not {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise StoreError(f"{path}: format_version {manifest.get('format_version')!r} is not "
                         f"supported (this reader knows {FORMAT_VERSION})")
    if manifest.get("generation") != generation:
        raise StoreError(f"{path}: says generation {manifest.get('generation')!r}, its name "
                         f"says {generation}")
    if not isinstance(manifest.get("tables"), dict):
        raise StoreError(f"{path}: damaged: no 'tables' object")
    return manifest


def open(path: str | os.PathLike[str], generation: int | None = None) -> Store:  # noqa: A001
    """Opens generation ``generation`` of the store at ``path`` (None: the one CURRENT names)."""
    return Store(os.fspath(path), generation)


# --------------------------------------------------------------------------------------------
# Table


class _Segment:
    """One segment's files, memory-mapped when its table is opened."""

    def __init__(self, table: Table, entry: dict[str, Any]) -> None:
        if not isinstance(entry["id"], int) or isinstance(entry["id"], bool):
            raise ValueError(f"segment id {entry['id']!r} is not a number")
        self.id = entry["id"]
        self.rows = int(entry["rows"])
        files = {"x": entry["x"], "y": entry.get("y"), "id": entry["ids"]}
        self.entries: dict[str, dict[str, Any]] = {k: v for k, v in files.items() if v is not None}
        self._table = table
        self._maps: dict[str, np.ndarray] = {}

    def array(self, kind: str) -> np.ndarray:
        if kind not in self._maps:
            path = self._table._path(self.entries[kind]["file"])
            try:
                # A zero-byte mapping is not allowed; such a segment is tiny anyway.
                arr = np.load(path, mmap_mode="r" if self.rows else None, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise StoreError(f"{path}: cannot load: {e}") from None
            self._table._check_array(path, arr, kind, self.rows)
            self._maps[kind] = arr
        return self._maps[kind]


class Table:
    """One table of one generation. Get it with ``Store.table(name)``."""

    def __init__(self, store: Store, name: str, entry: dict[str, Any]) -> None:
        self.store = store
        self.name = name
        self._where = f"{store._manifest_path}: table '{name}'"
        try:
            self.schema: dict[str, Any] = {"features": entry["features"],
                                           "labels": entry["labels"]}
            fdtype = entry["features"]["dtype"]
            self.feature_shape = tuple(int(d) for d in entry["features"]["shape"])
            self.label_kind: str = entry["labels"]["kind"]
            if self.label_kind == "vector":
                self.label_shape: tuple[int, ...] = tuple(int(d)
                                                          for d in entry["labels"]["shape"])
            else:
                self.label_shape = ()
            rows_entry = entry["rows"]
            self._count = int(rows_entry["count"])
            self._segments = [_Segment(self, s) for s in entry["segments"]]
            self._files = [rows_entry] + [e for s in self._segments for e in s.entries.values()]
            for fentry in self._files:
                file, _, _ = fentry["file"], int(fentry["bytes"]), int(fentry["crc32"])
                if not isinstance(file, str) or os.sep in file or file in ("", ".", ".."):
                    raise ValueError(f"bad file name {file!r}")
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"{self._where}: damaged entry ({type(e).__name__}: {e})") from None
        if fdtype not in _FEATURE_DTYPES:
            raise StoreError(f"{self._where}: unknown feature dtype {fdtype!r}")
        if self.label_kind not in ("class", "vector", "none"):
            raise StoreError(f"{self._where}: unknown label kind {self.label_kind!r}")
        self._dtypes = {"x": _disk_dtype(fdtype), "id": _disk_dtype("uint64")}
        if self.label_kind != "none":
            self._dtypes["y"] = _disk_dtype(_LABEL_DTYPES[self.label_kind])
        self._row_shapes = {"x": self.feature_shape, "y": self.label_shape, "id": ()}

        # Every file must be there at the size the manifest says, with the right .npy header.
        for fentry in self._files:
            self._check_size(fentry)
        for seg in self._segments:
            missing = {"x", "id"} | ({"y"} if self.has_labels else set())
            missing -= set(seg.entries)
            if missing:
                raise StoreError(f"{self._where}: segment {seg.id} lacks its "
                                 f"{', '.join(sorted(missing))} file")
            for kind, fentry in seg.entries.items():
                if kind in self._dtypes:
                    self._check_header(self._path(fentry["file"]), kind, seg.rows)
        # Map every segment now: a table once opened keeps reading its generation even if the
        # files are deleted afterwards (`cohort data prune`), as the C++ snapshot does.
        for seg in self._segments:
            for kind in seg.entries:
                seg.array(kind)

        rows_path = self._path(rows_entry["file"])
        try:
            refs = np.load(rows_path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise StoreError(f"{rows_path}: cannot load: {e}") from None
        if refs.dtype != _disk_dtype("uint64") or refs.shape != (self._count,):
            raise StoreError(f"{rows_path}: holds {refs.dtype}{list(refs.shape)}, manifest says "
                             f"uint64[{self._count}]")
        refs.flags.writeable = False
        self.refs: np.ndarray = refs
        self._locate(rows_path)
        self._ids: np.ndarray | None = None

    # -- opening --------------------------------------------------------------------------

    def _path(self, file: str) -> str:
        return os.path.join(self.store.path, file)

    def _check_size(self, fentry: dict[str, Any]) -> None:
        path = self._path(fentry["file"])
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise StoreError(f"{path}: missing (named by {self.store._manifest_path})") from None
        if size != int(fentry["bytes"]):
            raise StoreError(f"{path}: {size} bytes, manifest {self.store._manifest_path} "
                             f"says {fentry['bytes']}")

    def _expect(self, kind: str, rows: int) -> tuple[np.dtype, tuple[int, ...]]:
        return self._dtypes[kind], (rows, *self._row_shapes[kind])

    def _check_header(self, path: str, kind: str, rows: int) -> None:
        fmt = np.lib.format
        try:
            with _builtin_open(path, "rb") as f:
                version = fmt.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f".npy version {version[0]}.{version[1]} (store files are 1.0)")
                read_header = (fmt.read_array_header_1_0 if version == (1, 0)
                               else fmt.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                offset = f.tell()
        except (OSError, ValueError) as e:
            raise StoreError(f"{path}: bad .npy header: {e}") from None
        dt, want = self._expect(kind, rows)
        if dtype != dt or tuple(shape) != want or fortran:
            raise StoreError(f"{path}: holds {dtype}{list(shape)}"
                             f"{' (Fortran order)' if fortran else ''}, manifest says "
                             f"{dt.name}{list(want)}")
        size = os.stat(path).st_size
        if offset + int(np.prod(want, dtype=np.int64)) * dt.itemsize != size:
            raise StoreError(f"{path}: {size} bytes do not hold a {dt.name}{list(want)} array")

    def _check_array(self, path: str, arr: np.ndarray, kind: str, rows: int) -> None:
        dt, want = self._expect(kind, rows)
        if arr.dtype != dt or arr.shape != want:
            raise StoreError(f"{path}: holds {arr.dtype}{list(arr.shape)}, manifest says "
                             f"{dt.name}{list(want)}")

    def _locate(self, rows_path: str) -> None:
        """Turns row refs into (segment index, row in segment) and checks them."""
        seg_ids = np.array([s.id for s in self._segments], dtype=np.uint64)
        seg_rows = np.array([s.rows for s in self._segments], dtype=np.intp)
        if len(np.unique(seg_ids)) != len(seg_ids):
            raise StoreError(f"{self._where}: a segment is listed twice")
        ref_seg = self.refs >> np.uint64(32)
        row = (self.refs & np.uint64(0xFFFFFFFF)).astype(np.intp)
        seg = np.zeros(self._count, dtype=np.intp)
        if self._count:
            if not len(seg_ids):
                raise StoreError(f"{rows_path}: has {self._count} rows but the manifest lists "
                                 f"no segments for table '{self.name}'")
            order = np.argsort(seg_ids)
            pos = np.minimum(np.searchsorted(seg_ids[order], ref_seg), len(seg_ids) - 1)
            if np.any(seg_ids[order][pos] != ref_seg):
                raise StoreError(f"{rows_path}: refers to a segment the manifest does not list "
                                 f"for table '{self.name}'")
            seg = order[pos].astype(np.intp)
            if np.any(row >= seg_rows[seg]):
                raise StoreError(f"{rows_path}: refers to a row past the end of its segment")
        self._seg, self._row = seg, row
        # Zero-copy case: the live rows are exactly all rows of one segment, in order.
        self._whole_segment: _Segment | None = None
        if self._count and np.all(seg == seg[0]):
            s = self._segments[int(seg[0])]
            if s.rows == self._count and np.array_equal(row, np.arange(self._count)):
                self._whole_segment = s

    # -- public ---------------------------------------------------------------------------

    @property
    def has_labels(self) -> bool:
        return self.label_kind != "none"

    def __len__(self) -> int:
        return self._count

    def _column(self, kind: str) -> np.ndarray | RowView:
        if self._whole_segment is not None:
            return self._whole_segment.array(kind)
        return RowView(self, kind)

    @property
    def features(self) -> np.ndarray | RowView:
        """(len, *feature_shape): a memmap of the single segment, or a lazy RowView."""
        return self._column("x")

    @property
    def labels(self) -> np.ndarray | RowView | None:
        """(len,) int64 or (len, *label_shape) float32; None for labels kind "none"."""
        return self._column("y") if self.has_labels else None

    @property
    def ids(self) -> np.ndarray:
        """Sample ids (uint64) in table order; read once and kept (8 bytes a row)."""
        if self._ids is None:
            ids = np.array(RowView(self, "id"))
            ids.flags.writeable = False
            self._ids = ids
        return self._ids

    def verify(self) -> int:
        """Checks every file's size and CRC-32 against the manifest; returns the bytes read."""
        total = 0
        for fentry in self._files:
            self._check_size(fentry)
            path = self._path(fentry["file"])
            crc = _crc32_file(path)
            if crc != int(fentry["crc32"]):
                raise StoreError(f"{path}: damaged: crc32 {crc:08x}, manifest "
                                 f"{self.store._manifest_path} says {int(fentry['crc32']):08x}")
            total += int(fentry["bytes"])
        return total

    def __repr__(self) -> str:
        shape = list(self.feature_shape)
        return (f"<cohort_store.Table '{self.name}' generation={self.store.generation} "
                f"rows={self._count} features={self._dtypes['x'].name}{shape} "
                f"labels={self.label_kind} segments={len(self._segments)}>")


# --------------------------------------------------------------------------------------------
# RowView


class RowView:
    """A table column spread over several segments, read lazily.

    ``view[i]`` is one row (a view into its segment's memmap); a slice, an integer array or a
    boolean mask gathers just those rows into a new array, in the order asked for;
    ``np.asarray(view)`` reads the whole column.
    """

    def __init__(self, table: Table, kind: str) -> None:
        self._table = table
        self._kind = kind
        dt, shape = table._expect(kind, len(table))
        self.dtype: np.dtype = dt
        self.shape: tuple[int, ...] = shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def _segment_array(self, seg_index: int) -> np.ndarray:
        return self._table._segments[seg_index].array(self._kind)

    def _row(self, i: int) -> Any:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for table '{self._table.name}' "
                             f"with {n} rows")
        i %= n
        return self._segment_array(int(self._table._seg[i]))[int(self._table._row[i])]

    def _gather(self, positions: np.ndarray | None) -> np.ndarray:
        """Rows at `positions` (None: all rows), one preallocated output filled per segment."""
        seg, row = self._table._seg, self._table._row
        if positions is not None:
            seg, row = seg[positions], row[positions]
        out = np.empty((len(seg), *self.shape[1:]), dtype=self.dtype)
        if not len(seg):
            return out
        order = np.argsort(seg, kind="stable")
        sorted_seg = seg[order]
        starts = np.flatnonzero(np.diff(sorted_seg)) + 1
        for group in np.split(order, starts):
            src = self._segment_array(int(seg[group[0]]))
            rows = row[group]
            first, last = int(rows[0]), int(rows[-1])
            contiguous_out = group[-1] - group[0] + 1 == len(group)
            if last - first + 1 == len(rows) and np.all(np.diff(rows) == 1):
                block = src[first:last + 1]  # a contiguous run: plain copy, no fancy indexing
            else:
                block = src[rows]
            if contiguous_out:
                out[group[0]:group[-1] + 1] = block
            else:
                out[group] = block
        return out

    def _positions(self, key: Any) -> np.ndarray:
        n = len(self)
        if isinstance(key, slice):
            return np.arange(*key.indices(n), dtype=np.intp)
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            if idx.shape != (n,):
                raise IndexError(f"boolean index has shape {idx.shape}, table has {n} rows")
            return np.flatnonzero(idx)
        if idx.dtype.kind not in "iu" and not (idx.size == 0 and idx.dtype.kind == "f"):
            raise IndexError(f"rows must be given by int, slice, integer array or boolean "
                             f"mask, not {idx.dtype}")
        idx = idx.astype(np.intp).reshape(-1)
        bad = (idx < -n) | (idx >= n)
        if np.any(bad):
            raise IndexError(f"index {int(idx[bad][0])} is out of bounds for table "
                             f"'{self._table.name}' with {n} rows")
        return np.where(idx < 0, idx + n, idx)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if not key:
                return np.asarray(self)
            first, rest = key[0], key[1:]
            rows = self[first]
            if isinstance(first, (int, np.integer)):
                return rows[rest] if rest else rows
            return rows[(slice(None), *rest)]
        if isinstance(key, (int, np.integer)):
            return self._row(int(key))
        idx_shape = None
        if not isinstance(key, slice):
            arr = np.asarray(key)
            if arr.dtype != np.bool_ and arr.ndim > 1:
                idx_shape = arr.shape
        out = self._gather(self._positions(key))
        return out.reshape(*idx_shape, *self.shape[1:]) if idx_shape else out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a RowView cannot be turned into an array without a copy")
        out = self._gather(None)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self._row(i)

    def __repr__(self) -> str:
        return (f"<cohort_store.RowView table='{self._table.name}' "
                f"column={ {'x': 'features', 'y': 'labels', 'id': 'ids'}[self._kind] } "
                f"shape={self.shape} dtype={self.dtype.name} "
                f"segments={len(self._table._segments)}>")


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Describe one generation of a cohort store.")
    parser.add_argument("store", help="store directory")
    parser.add_argument("--generation", "-g", type=int, default=None,
                        help="generation to show (default: the one CURRENT names)")
    args = parser.parse_args(argv)
    try:
        store = open(args.store, args.generation)
        print(f"store {store.path}")
        print(f"generation {store.generation} (parent {store.parent}, created {store.created})"
              + ("" if store.generation == store.current else f"; CURRENT is {store.current}"))
        print(f"note: {store.note}")
        if not store.tables:
            print("no tables")
        for name in store.tables:
            t = store.table(name)
            labels = t.label_kind
            if t.label_kind == "vector":
                labels += f" float32{list(t.label_shape)}"
            elif t.label_kind == "class":
                labels += " int64"
            print(f"table {name}: {len(t)} rows, features {t.features.dtype.name}"
                  f"{list(t.feature_shape)}, labels {labels}, {len(t._segments)} segment(s)")
    except StoreError as e:
        print(f"cohort_store: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
