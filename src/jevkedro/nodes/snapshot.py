"""Snapshots: the one writer (:func:`commit_dataset`), the loader and the verifier.

A snapshot of a view is ``<root>/<view>.tsv`` (one row per shared request) plus
``<root>/<view>.manifest.json`` (source pins with sha256, counts by type, TSV sha256, scoring
protocol). Columns: ``request_id``, ``request`` (exactly what a model may see), ``candidates``,
``targets``, ``slices``, ``source``. Each JSON cell is :func:`jevkedro.protocol.dumps` of its
value (the standard library's compact JSON: never a raw tab or newline); a line is read back only
by :class:`_RowReader`. Nothing else is written beside a snapshot: the scorer's layout is built
from the verified rows each time, so only the pinned TSV decides labels.

Every byte of a snapshot is deterministic for a given source and mapping, so the family's
``manifest.json`` can pin the TSV hash and a changed mapping or source is caught at preparation.

The manifest carries ``manifest_sha256``, the sha256 of its own other fields (canonical JSON,
:func:`manifest_digest`): a manifest whose view, family, data kind, counts, sources or snapshot
hash were edited after it was written is refused when it is read. (It guards against edits, not
forgery: what makes a forged snapshot fail is the family's pin, looked up by the data kind the
run's settings ask for — see :func:`jevkedro.family.check_snapshot_kind`.)
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from jevkedro import __version__
from jevkedro.errors import UserError
from jevkedro.files import check_file, present
from jevkedro.nodes.jsonparse import JSONTextError, dumps_utf8, parse_json
from jevkedro.nodes.layout import QuestionLayout, RowCells, layout_of_cells, question_layout
from jevkedro.protocol import DATA_KINDS, ProtocolError, SnapshotRow, Target, check_row, dumps

COLUMNS = ("request_id", "request", "candidates", "targets", "slices", "source")


class SnapshotError(UserError, RuntimeError):
    """A snapshot or its source does not match what is pinned."""


class SourceFormatError(UserError, ValueError):
    """A malformed line in an upstream file; the message names file and line."""


# ---------------------------------------------------------------------------------------------
# files and hashes


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` only when the block ends without error (temp file in
    the same folder, fsync, rename), so readers never see half a file; for writes streamed in parts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; snapshots and reports are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    with atomic_writer(path) as fh:
        fh.write(data)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_bytes(path, dumps_utf8(obj, indent=2) + b"\n")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a stage builds what it keeps (records, rows, the TSV,
    a layout), then restored as it was; nothing is frozen. Running, it would walk every kept
    container again at each full collection (the cost at scale: docs/benchmarks.md, "Simplification")."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class SourceFile:
    """One upstream file as read, with its pin (if the family pins one)."""

    path: Path
    sha256: str
    bytes: int
    info: dict[str, Any] = field(default_factory=dict)  # repo, upstream path, commit, licence

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path.name, "sha256": self.sha256, "bytes": self.bytes, **self.info}


# ---------------------------------------------------------------------------------------------
# the writer


@dataclass
class PreparedView:
    """A view mapped from its source, ready to be committed.

    ``expected`` holds what the family's manifest pins for this data kind: ``counts`` and
    ``snapshot_sha256`` (either may be absent for data the manifest does not pin).
    """

    view: str
    family: str
    data: str  # official | sample | synthetic
    rows: list[SnapshotRow]
    sources: list[SourceFile]
    scoring: dict[str, Any]
    expected: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


def count_rows(rows: Sequence[SnapshotRow]) -> dict[str, Any]:
    inputs = len(rows)
    by_type = Counter([q["type"] for row in rows for q in row.request["questions"].values()])
    return {"inputs": inputs, "questions": sum(by_type.values()), "by_type": dict(sorted(by_type.items()))}


def _diff_counts(found: dict[str, Any], expected: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, want in expected.items():
        have = found.get(key, 0 if not isinstance(want, dict) else {})
        if isinstance(want, dict):
            out += _diff_counts(have, want, f"{prefix}{key}.")
        elif have != want:
            out.append(f"{prefix}{key}: found {have}, expected {want}")
    return out


TSV_BLOCK_ROWS = 4096  # lines encoded, hashed and written at a time


def tsv_blocks(rows: Iterable[SnapshotRow]) -> Iterator[bytes]:
    """The snapshot TSV as UTF-8 blocks (header first, then ``TSV_BLOCK_ROWS`` lines at a time):
    each row checked (its shape; a unique request id without tabs or newlines), each cell
    :func:`~jevkedro.protocol.dumps` of its value, each line ending in a newline. A row that fails
    a check or an encoding raises its own error."""
    seen: set[str] = set()
    yield ("\t".join(COLUMNS) + "\n").encode("utf-8")
    lines: list[str] = []
    for row in rows:
        row.check()
        rid = row.request_id
        if rid in seen:
            raise SnapshotError(f"duplicate request_id {rid!r}")
        if "\t" in rid or "\n" in rid or "\r" in rid:
            raise SnapshotError(f"request_id {rid!r} contains a tab or newline")
        seen.add(rid)
        targets = {q: t.to_json() for q, t in row.targets.items()}
        lines.append("\t".join((rid, dumps(row.request), dumps(row.candidates), dumps(targets), dumps(row.slices),
                                dumps(row.source))) + "\n")
        if len(lines) == TSV_BLOCK_ROWS:
            yield "".join(lines).encode("utf-8")
            lines = []
    if lines:
        yield "".join(lines).encode("utf-8")


def render_tsv(rows: Iterable[SnapshotRow]) -> bytes:
    """The whole snapshot TSV (header, one line per row, each line ending in a newline)."""
    return b"".join(tsv_blocks(rows))


MANIFEST_DIGEST = "manifest_sha256"


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of a snapshot manifest's fields other than :data:`MANIFEST_DIGEST`, as canonical JSON
    (keys sorted, no spaces, UTF-8): recorded in the manifest and checked when it is read."""
    fields = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    # as it reads back from the file: integer keys become strings (and then sort as strings), tuples lists
    fields = json.loads(json.dumps(fields, ensure_ascii=False))
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def snapshot_paths(root: str | Path, view: str) -> tuple[Path, Path]:
    root = Path(root)
    return root / f"{view}.tsv", root / f"{view}.manifest.json"


@collector_paused()
def commit_dataset(prepared: PreparedView, root: str | Path) -> dict[str, Any]:
    """Check a prepared view against its pins and write its TSV and manifest atomically.

    The only snapshot writer. Refuses (writing nothing) when the counts or the TSV hash differ
    from what the family's manifest pins; the error names the file and both values.
    Returns the written manifest.
    """
    if prepared.data not in DATA_KINDS:
        raise SnapshotError(f"data kind {prepared.data!r} is not one of {DATA_KINDS}")
    tsv_path, manifest_path = snapshot_paths(root, prepared.view)
    counts = count_rows(prepared.rows)
    want_counts = prepared.expected.get("counts")
    if want_counts:
        diffs = _diff_counts(counts, want_counts)
        if diffs:
            files = ", ".join(str(s.path) for s in prepared.sources)
            raise SnapshotError(f"{prepared.view} from {files}: counts differ from the manifest: " + "; ".join(diffs))
    want_sha = prepared.expected.get("snapshot_sha256")
    digest = hashlib.sha256()
    size = 0
    # Streamed: each block is hashed and written as it is rendered; the file replaces the old one
    # only if every row renders and the hash matches its pin (otherwise the temp file is removed).
    with atomic_writer(tsv_path) as fh:
        for block in tsv_blocks(prepared.rows):
            digest.update(block)
            fh.write(block)
            size += len(block)
        sha = digest.hexdigest()
        if want_sha and want_sha != sha:
            raise SnapshotError(
                f"{tsv_path}: prepared snapshot sha256 {sha} does not match the pinned {want_sha} "
                "(the source or the mapping changed)"
            )
    manifest = {
        "view": prepared.view,
        "family": prepared.family,
        "data": prepared.data,
        "sources": [s.to_json() for s in prepared.sources],
        "counts": counts,
        "snapshot": {"file": tsv_path.name, "sha256": sha, "bytes": size, "rows": counts["inputs"]},
        "scoring": prepared.scoring,
        "notes": prepared.notes,
        "writer": f"jevkedro {__version__}",
    }
    manifest[MANIFEST_DIGEST] = manifest_digest(manifest)
    atomic_write_json(manifest_path, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------
# loading and verification


@dataclass
class Snapshot:
    """A view's snapshot as read from disk: rows plus the manifest written beside it.

    ``rows`` behaves as a list of :class:`~jevkedro.protocol.SnapshotRow`; for a loaded snapshot
    it is a :class:`SnapshotRows`, which decodes each row when it is first used.
    """

    view: str
    path: Path
    manifest: dict[str, Any]
    rows: Sequence[SnapshotRow]
    sha256: str
    verified: bool = False

    @property
    def data(self) -> str:
        return self.manifest.get("data", "official")

    def requests(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """What the model may see, and nothing else."""
        if isinstance(self.rows, SnapshotRows):
            # LazyRequest: read-only, decoded on first use; adapters only read a request
            yield from self.rows.requests()  # type: ignore[misc]
            return
        for row in self.rows:
            yield row.request_id, row.request

    @property
    def request_ids(self) -> list[str]:
        return self.layout.request_ids

    @property
    def layout(self) -> QuestionLayout:
        """The per-question layout of the rows (:mod:`jevkedro.nodes.layout`), built once and kept
        while ``rows`` is the same sequence of the same length."""
        if isinstance(self.rows, SnapshotRows):
            return self.rows.layout
        key = (id(self.rows), len(self.rows))
        cached = self.__dict__.get("_layout")
        if cached is None or cached[0] != key:
            cached = (key, question_layout(self.rows))
            self.__dict__["_layout"] = cached
        return cached[1]


# Typed decoders of the TSV's JSON cells: the shape is checked while decoding (a cell of the
# wrong shape is refused naming file, line and column).
_CELL_DECODERS = {
    "request": msgspec.json.Decoder(dict[str, Any]),
    "candidates": msgspec.json.Decoder(dict[str, list[str]]),
    "targets": msgspec.json.Decoder(dict[str, dict[str, Any]]),
    "slices": msgspec.json.Decoder(dict[str, Any]),
    "source": msgspec.json.Decoder(dict[str, Any]),
}
_CELL_SHAPES = {"request": "an object", "candidates": "an object of lists of strings",
                "targets": "an object of objects", "slices": "an object", "source": "an object"}
_TARGET_FIELDS = frozenset({"label", "probabilities", "unscored"})


class _RowReader:
    """The one decoder of snapshot TSV lines into rows. ``Target`` objects for the common
    ``{"label": k}`` cell are shared (they are frozen), which saves one object per question."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._plain_targets: dict[int, Target] = {}

    def cell_error(self, lineno: int, column: str, text: bytes, exc: Exception) -> SnapshotError:
        where = f"{self.path}:{lineno}: column {column} (TSV field {COLUMNS.index(column) + 1})"
        try:
            parse_json(text)
        except JSONTextError as bad:  # the exact parser locates the fault within the cell
            return SnapshotError(f"{where} is not valid JSON: {bad.msg} at character {bad.column} of the field")
        return SnapshotError(f"{where} must be {_CELL_SHAPES[column]} ({exc})")

    def target(self, t: dict[str, Any]) -> Target:
        label = t.get("label")
        if len(t) == 1 and type(label) is int:
            shared = self._plain_targets.get(label)
            if shared is None:
                shared = self._plain_targets[label] = Target(label=label)
            return shared
        probs, unscored = t.get("probabilities"), t.get("unscored", False)
        if label is not None and type(label) is not int:
            raise ValueError(f"label must be an integer, got {label!r}")
        if probs is not None and (not isinstance(probs, list)
                                  or not all(type(p) in (int, float) for p in probs)):
            raise ValueError("probabilities must be a list of numbers")
        if type(unscored) is not bool:
            raise ValueError(f"unscored must be true or false, got {unscored!r}")
        return Target(label=label, probabilities=tuple(probs) if probs is not None else None, unscored=unscored,
                      extra={k: v for k, v in t.items() if k not in _TARGET_FIELDS})

    def cells(self, lineno: int, line: bytes) -> RowCells:
        """One TSV line (without its newline) as its checked parts, in :data:`COLUMNS` order (the
        targets as :class:`Target` objects); a fault names file, line and column."""
        cells = line.split(b"\t")
        if len(cells) != len(COLUMNS):
            raise SnapshotError(f"{self.path}:{lineno}: expected {len(COLUMNS)} tab-separated columns "
                                f"({', '.join(COLUMNS)}), found {len(cells)}")
        decoded = []
        for column, text in zip(COLUMNS[1:], cells[1:]):
            try:
                decoded.append(_CELL_DECODERS[column].decode(text))
            except (msgspec.DecodeError, RecursionError) as exc:
                raise self.cell_error(lineno, column, text, exc) from None
        request, candidates, target_cells, slices, source = decoded
        questions = request.get("questions")
        if not isinstance(questions, dict):
            raise SnapshotError(f"{self.path}:{lineno}: column request has no questions object")
        try:
            rid = cells[0].decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotError(f"{self.path}:{lineno}: column request_id is not UTF-8") from None
        try:
            targets = {q: self.target(t) for q, t in target_cells.items()}
        except ValueError as exc:
            raise SnapshotError(f"{self.path}:{lineno}: column targets: {exc}") from None
        for qid, q in questions.items():
            if not isinstance(q, dict) or not isinstance(q.get("type"), str):
                raise SnapshotError(f"{self.path}:{lineno}: question {qid!r} is not an object with a type")
        try:
            check_row(rid, request, candidates, targets)
        except ProtocolError as exc:
            raise SnapshotError(f"{self.path}:{lineno}: {exc}") from None
        return rid, request, candidates, targets, slices, source

    def row(self, lineno: int, line: bytes) -> SnapshotRow:
        """One TSV line (without its newline) as a checked row (:meth:`cells`)."""
        return SnapshotRow(*self.cells(lineno, line))


class LazyRequest(Mapping[str, Any]):
    """A request (``{"state", "questions", ...}``) decoded from its TSV cell on first read, then
    kept. Read-only like the dict it stands for; pickles (Dask) and compares as that dict."""

    __slots__ = ("_cell", "_value")

    def __init__(self, cell: bytes) -> None:
        self._cell: bytes | None = cell
        self._value: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._value is None:
            assert self._cell is not None  # dropped only once decoded
            self._value = _CELL_DECODERS["request"].decode(self._cell)
            self._cell = None
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __eq__(self, other: object) -> bool:
        return self._decoded() == (other._decoded() if isinstance(other, LazyRequest) else other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return dict, (self._decoded(),)

    def __repr__(self) -> str:
        return repr(self._decoded())


class SnapshotRows(Sequence[SnapshotRow]):
    """The rows of a loaded TSV, each decoded (:class:`_RowReader`) when first used and kept.

    Loading decodes and checks every line once to build the question layout, keeping none of the
    rows; inference decodes only the ``request`` cells (:meth:`requests`), a single pass over the
    view (:meth:`passing`) holds one row at a time.
    """

    def __init__(self, path: Path, raw: bytes, starts: list[int], ends: list[int], linenos: list[int]) -> None:
        self.path, self._raw, self._starts, self._ends = path, raw, starts, ends
        self._rows: list[SnapshotRow | None] = [None] * len(starts)
        self._reader = _RowReader(path)
        self._linenos = linenos
        reader, line = self._reader, self.line
        # every line decoded and checked once, its parts laid out and dropped (no row is built)
        self.layout = layout_of_cells(reader.cells(lineno, line(i)) for i, lineno in enumerate(linenos))

    def line(self, i: int) -> bytes:
        return self._raw[self._starts[i]: self._ends[i]]

    def lineno(self, i: int) -> int:
        return self._linenos[i]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self._rows[i]
        if row is None:
            j = i + len(self) if i < 0 else i
            row = self._rows[j] = self._reader.row(self._linenos[j], self.line(j))
        return row

    def __iter__(self) -> Iterator[SnapshotRow]:
        for i in range(len(self)):
            yield self[i]

    def passing(self) -> Iterator[SnapshotRow]:
        """Every row in order, like iterating, but a row not decoded yet is decoded for the caller
        only and not kept: a single pass over a view (the official scorer) then holds one row at
        a time instead of all of them for the rest of the run."""
        reader, rows = self._reader, self._rows
        for i in range(len(rows)):
            row = rows[i]
            yield row if row is not None else reader.row(self._linenos[i], self.line(i))

    def cells(self, *columns: str) -> Iterator[tuple[Any, ...]]:
        """The values of ``columns`` (not ``targets``: its cells are not rows' values) of every
        row, in order; a row not decoded yet has only those cells decoded (by the typed decoders
        of :class:`_RowReader`; every line was checked at load) and nothing is kept."""
        index = [COLUMNS.index(c) for c in columns]
        if "targets" in columns or 0 in index:
            raise ValueError(f"cells of {columns} are not row values")
        width = len(COLUMNS)
        plan = [(_CELL_DECODERS[c], width - i, width - 1 - i) for c, i in zip(columns, index)]
        tabs = range(width - min(index, default=width))  # tabs to find, from the line's end
        raw, view, starts, ends = self._raw, memoryview(self._raw), self._starts, self._ends
        for i, row in enumerate(self._rows):
            if row is not None:
                yield tuple([getattr(row, c) for c in columns])
                continue
            start = starts[i]
            cut = [ends[i]]  # cut[k]: where the k-th cell from the line's end stops
            for _ in tabs:
                cut.append(raw.rfind(b"\t", start, cut[-1]))
            yield tuple([dec.decode(view[cut[a] + 1: cut[b]]) for dec, a, b in plan])  # in place, not copied

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Iterable[SnapshotRow]) -> list[SnapshotRow]:
        return list(self) + list(other)

    def __radd__(self, other: Iterable[SnapshotRow]) -> list[SnapshotRow]:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return f"SnapshotRows({self.path}, {len(self)} rows)"

    def requests(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(request id, request)`` of every row; the request cell of a row not decoded yet is
        decoded when the request is first read (:class:`LazyRequest`): a replay run never
        decodes one."""
        for i, row in enumerate(self._rows):
            if row is not None:
                yield row.request_id, row.request
            else:
                rid, cell = self.line(i).split(b"\t", 2)[:2]
                yield rid.decode("utf-8"), LazyRequest(cell)


def each_cell(rows: Iterable[SnapshotRow], *columns: str) -> Iterator[tuple[Any, ...]]:
    """The values of ``columns`` (of ``request``, ``candidates``, ``slices``, ``source``) of every
    row, in order, as tuples: a loaded snapshot's :meth:`SnapshotRows.cells`, the attributes of
    any other sequence's rows."""
    if isinstance(rows, SnapshotRows):
        return rows.cells(*columns)
    return (tuple(getattr(row, c) for c in columns) for row in rows)


def each_row(rows: Iterable[SnapshotRow]) -> Iterator[SnapshotRow]:
    """The rows for one pass: a loaded snapshot's :meth:`SnapshotRows.passing` (rows decoded for
    the pass are not kept), any other sequence as it is."""
    return rows.passing() if isinstance(rows, SnapshotRows) else iter(rows)


def read_manifest(path: Path, view: str | None = None) -> dict[str, Any]:
    """A snapshot manifest (of ``view``, when given); a damaged, truncated or edited one, or one of
    another view, is refused naming the file and the fix."""
    fix = "prepare the snapshot again (its prepare_snapshot node) to rewrite it"
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: damaged or truncated (not valid JSON: {exc.msg} at line {exc.lineno} "
                            f"column {exc.colno}); {fix}") from None
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{path}: not UTF-8 (byte {exc.start}); {fix}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("snapshot", {}), dict):
        raise SnapshotError(f"{path}: not a snapshot manifest (expected an object with a snapshot object); {fix}")
    recorded = manifest.get(MANIFEST_DIGEST)
    if recorded is None:
        raise SnapshotError(f"{path}: has no {MANIFEST_DIGEST} (written by hand or by an older jevkedro), so its "
                            f"fields cannot be trusted; {fix}")
    if recorded != manifest_digest(manifest):
        raise SnapshotError(f"{path}: its fields were edited after it was written ({MANIFEST_DIGEST} {recorded} does not "
                            f"match {manifest_digest(manifest)}); refusing a changed manifest — {fix}")
    if view is not None and manifest.get("view") != view:
        raise SnapshotError(f"{path}: is the manifest of view {manifest.get('view')!r}, not of {view!r}; {fix}")
    return manifest


@collector_paused()  # the layout it builds lives as long as the snapshot
def load_snapshot(root: str | Path, view: str) -> Snapshot:
    """Read ``<root>/<view>.tsv`` and its manifest, refusing bytes that differ from the manifest.

    The TSV is hashed first (an edited file is "changed", not "malformed"); then every line is
    decoded and checked once and the question layout built from its cells (nothing is written
    beside the snapshot). Rows are decoded again when used (:class:`SnapshotRows`).
    """
    tsv_path, manifest_path = snapshot_paths(root, view)
    for path in (tsv_path, manifest_path):  # a folder or FIFO there is named, not "no snapshot"
        if present(path):
            check_file(path, "snapshot file", SnapshotError, "; prepare the snapshot again")
    if not tsv_path.is_file() or not manifest_path.is_file():
        raise SnapshotError(f"no snapshot for {view} in {Path(root)}: run its prepare_snapshot node first")
    manifest = read_manifest(manifest_path, view)
    raw = tsv_path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    recorded = manifest.get("snapshot", {}).get("sha256")
    if recorded and digest != recorded:
        raise SnapshotError(f"{tsv_path}: sha256 {digest} does not match its manifest ({recorded}); "
                            "refusing to use a changed snapshot — prepare it again")
    header_end = raw.find(b"\n")
    header = raw[: header_end if header_end >= 0 else len(raw)]
    if header.split(b"\t") != [c.encode() for c in COLUMNS]:
        raise SnapshotError(f"{tsv_path}:1: header is not {COLUMNS}")
    newlines = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    if not len(newlines) or newlines[-1] != len(raw) - 1:
        newlines = np.append(newlines, len(raw))  # a last line without its newline
    starts, ends = newlines[:-1] + 1, newlines[1:]
    keep = ends > starts  # blank lines are skipped
    rows = SnapshotRows(tsv_path, raw, starts[keep].tolist(), ends[keep].tolist(), (np.flatnonzero(keep) + 2).tolist())
    return Snapshot(view, tsv_path, manifest, rows, digest)


def verify_snapshot_bytes(snapshot: Snapshot, pinned_sha256: str | None = None) -> Snapshot:
    """Refuse a snapshot whose bytes no longer match its manifest (and the code's pin, if any).

    Hashes the file on disk again, so a change made after loading is caught too.
    """
    on_disk = sha256_file(snapshot.path)
    recorded = snapshot.manifest.get("snapshot", {}).get("sha256")
    for name, want in (("its manifest", recorded), ("the family manifest.json", pinned_sha256)):
        if want and on_disk != want:
            raise SnapshotError(
                f"{snapshot.path}: sha256 {on_disk} does not match {name} ({want}); "
                "refusing to run inference on a changed snapshot — prepare it again"
            )
    if not recorded:
        raise SnapshotError(f"{snapshot.path}: its manifest records no snapshot sha256")
    if snapshot.sha256 != on_disk:
        raise SnapshotError(f"{snapshot.path}: changed while loading ({snapshot.sha256} -> {on_disk})")
    snapshot.verified = True
    return snapshot
