"""Snapshots: the one writer (:func:`commit_dataset`), the loader and the verifier.

A snapshot of a view is ``<root>/<view>.tsv`` (one row per shared request) plus
``<root>/<view>.manifest.json`` (source pins with sha256, counts by type, TSV sha256, scoring
protocol). Columns: ``request_id``, ``request`` (exactly what a model may see), ``candidates``,
``targets``, ``slices``, ``source``. JSON cells never contain raw tabs or newlines.

Every byte of a snapshot is deterministic for a given source and mapping, so the family's
``manifest.json`` can pin the TSV hash and a changed mapping or source is caught at preparation.

The manifest carries ``manifest_sha256``, the sha256 of its own other fields (canonical JSON,
:func:`manifest_digest`): a manifest whose view, family, data kind, counts, sources or snapshot
hash were edited after it was written is refused when it is read. (It guards against edits, not
forgery: what makes a forged snapshot fail is the family's pin, looked up by the data kind the
run's settings ask for — see :func:`jevkedro.family.check_snapshot_kind`.)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from jevkedro import __version__
from jevkedro.nodes.background import handed_off
from jevkedro.nodes.celljson import CellEncoder, exact_encoder
from jevkedro.nodes.gcpause import gc_paused
from jevkedro.nodes.jsonparse import JSONTextError, describe_path, dumps_utf8, parse_json
from jevkedro.nodes.layout import QuestionLayout, load_layout, save_layout
from jevkedro.protocol import SnapshotRow, Target, level_names_of

COLUMNS = ("request_id", "request", "candidates", "targets", "slices", "source")
DATA_KINDS = ("official", "sample", "synthetic")


class SnapshotError(RuntimeError):
    """A snapshot or its source does not match what is pinned."""


class SourceFormatError(ValueError):
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


class SourceJSONError(ValueError):
    """Why the JSON text of an upstream source is refused; ``syntax`` when it is not JSON at all."""

    def __init__(self, what: str, syntax: bool) -> None:
        super().__init__(what)
        self.syntax = syntax


def read_source_json(text: str) -> Any:
    """One JSON document of an upstream source, read strictly. Beyond text that is not JSON, a key
    repeated within one object (parsers keep one of its values silently: which was meant is
    unknown) and a number beyond the range of a double (it would be read as infinity) are refused:
    a label or a target must never change on the way in. Raises :class:`SourceJSONError`."""
    try:
        parsed = parse_json(text)
    except JSONTextError as exc:
        if exc.line is None:  # nested too deeply: no single place to name
            raise SourceJSONError(f"cannot be read ({exc.msg})", syntax=False) from None
        at = f"column {exc.column}" if exc.line == 1 else f"line {exc.line} column {exc.column}"
        raise SourceJSONError(f"not valid JSON ({exc.msg} at {at})", syntax=True) from None
    if parsed.duplicate_keys:
        keys = ", ".join(describe_path(p) for p in parsed.duplicate_keys[:5])
        raise SourceJSONError(f"key repeated within one object ({keys}): which of its values is meant is unknown",
                              syntax=False)
    if parsed.numbers_out_of_range:
        raise SourceJSONError(f"{parsed.numbers_out_of_range} number(s) beyond the range of a double "
                              "(they would be read as infinity)", syntax=False)
    return parsed.value


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)``; a malformed line raises naming file, line and column
    (bytes that are not UTF-8, repeated keys and numbers a double cannot hold included:
    :func:`read_source_json`)."""
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, read_source_object(f"{path}:{lineno}", raw)


def read_source_document(where: str, raw: bytes) -> Any:
    """One JSON document of an upstream source given as bytes (a line, or a whole file), read by
    :func:`read_source_json`; a fault raises :class:`SourceFormatError` starting with ``where``
    (``<file>`` or ``<file>:<line>``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceFormatError(f"{where}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})") from None
    try:
        return read_source_json(text)
    except SourceJSONError as exc:
        raise SourceFormatError(f"{where}: {exc}") from None


def read_source_object(where: str, raw: bytes) -> dict[str, Any]:
    """:func:`read_source_document` that must be a JSON object (one record of a JSON-lines source)."""
    obj = read_source_document(where, raw)
    if not isinstance(obj, dict):
        raise SourceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def json_cell(where: str, column: str, text: Any) -> Any:
    """Decode one JSON-text cell of an upstream row (a Parquet column holding JSON as a string).

    ``where`` names the row (e.g. ``<file>:row <n>``); a cell that is not a string or not valid
    JSON raises :class:`SourceFormatError` naming the row and the column.
    """
    if not isinstance(text, str):
        raise SourceFormatError(f"{where}: column {column} must hold JSON text, got {type(text).__name__}")
    try:
        return read_source_json(text)
    except SourceJSONError as exc:
        raise SourceFormatError(f"{where}: column {column} is {exc}" if exc.syntax else f"{where}: column {column}: {exc}") from None


@dataclass(frozen=True)
class SourceFile:
    """One upstream file as read, with its pin (if the family pins one)."""

    path: Path
    sha256: str
    bytes: int
    info: dict[str, Any] = field(default_factory=dict)  # repo, upstream path, commit, licence

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path.name, "sha256": self.sha256, "bytes": self.bytes, **self.info}


def check_source(path: str | Path, pin: dict[str, Any] | None) -> SourceFile:
    """Hash an upstream file and compare it with its pin; a mismatch names the file and both values."""
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"source file not found: {path}")
    digest = sha256_file(path)
    size = path.stat().st_size
    info = {k: v for k, v in (pin or {}).items() if k not in {"file", "sha256", "bytes"}}
    if pin:
        if pin.get("sha256") and pin["sha256"] != digest:
            raise SnapshotError(
                f"source {path}: sha256 {digest} does not match the pinned {pin['sha256']}"
            )
        if pin.get("bytes") is not None and pin["bytes"] != size:
            raise SnapshotError(f"source {path}: {size} bytes, pinned {pin['bytes']}")
    return SourceFile(path=path, sha256=digest, bytes=size, info=info)


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


TSV_BATCH_ROWS = 4096  # rows rendered, encoded to UTF-8, hashed and written at a time


def _checked_id(row: SnapshotRow, seen: set[str]) -> str:
    """Check one row (shape, unique request id without tabs or newlines) and record its id."""
    row.check()
    rid = row.request_id
    if rid in seen:
        raise SnapshotError(f"duplicate request_id {rid!r}")
    if "\t" in rid or "\n" in rid or "\r" in rid:
        raise SnapshotError(f"request_id {rid!r} contains a tab or newline")
    seen.add(rid)
    return rid


def _targets_cell(row: SnapshotRow) -> dict[str, Any]:
    return {q: t.to_json() for q, t in row.targets.items()}


REQUEST_KEYS = frozenset({"state", "questions", "media"})
WIRE_QUESTION_KEYS = frozenset({"type", "instructions", "criteria"})  # none of them forbidden


def _batch_passes_checks(batch: list[SnapshotRow], ids: list[str], seen: set[str]) -> bool:
    """True when every row of ``batch`` passes :meth:`SnapshotRow.check` and the ids are new, unique
    strings without tabs or newlines (what :func:`_checked_id` checks), tested with fewer steps per
    row. False when any test fails or cannot decide: the caller then checks row by row, which
    raises the first failing row's own error."""
    joined = "".join(ids)  # TypeError for an id that is not a string: the row-by-row path names it
    if "\t" in joined or "\n" in joined or "\r" in joined or len(set(ids)) != len(ids) or not seen.isdisjoint(ids):
        return False
    for row in batch:
        request = row.request
        questions = request.get("questions")
        if not isinstance(questions, dict) or not questions or "state" not in request or not request.keys() <= REQUEST_KEYS:
            return False
        candidates, targets = row.candidates, row.targets
        for qid, q in questions.items():
            if type(q) is not dict or not q.keys() <= WIRE_QUESTION_KEYS or qid not in candidates or qid not in targets:
                return False
            t, k = targets[qid], len(candidates[qid])
            label, probabilities = t.label, t.probabilities
            if (label is not None and not 0 <= label < k) or (probabilities is not None and len(probabilities) != k):
                return False
    return True


class TargetCells:
    """The targets column: ``{question: target.to_json()}`` per row, each distinct :class:`Target`
    object converted once (families share frozen targets, one per label). The cache holds the
    targets themselves, so an ``id`` it holds is never reused; it is bounded for families that make
    one target per question. Cells may share their inner dicts: they are only encoded."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._json: dict[int, dict[str, Any]] = {}
        self._held: list[Target] = []

    def _convert(self, t: Target) -> dict[str, Any]:
        if len(self._held) >= self.LIMIT:
            self._json.clear()
            self._held.clear()
        self._held.append(t)
        out = self._json[id(t)] = t.to_json()
        return out

    def column(self, batch: list[SnapshotRow]) -> list[dict[str, Any]]:
        get, convert = self._json.get, self._convert
        return [{q: get(id(t)) or convert(t) for q, t in row.targets.items()} for row in batch]


def _block_by_columns(batch: list[SnapshotRow], seen: set[str], cells: CellEncoder, targets: TargetCells) -> bytes:
    """The lines of ``batch``: every row checked, then each column encoded in one call. On an
    error, the ids this call added to ``seen`` are taken out again."""
    ids = [row.request_id for row in batch]
    if _batch_passes_checks(batch, ids, seen):
        seen.update(ids)
    else:  # row by row: the first failing row raises its own error (or all pass, e.g. a dict subclass)
        ids = []
        try:
            for row in batch:
                ids.append(_checked_id(row, seen))
        except BaseException:
            seen.difference_update(ids)
            raise
    try:
        columns = [
            [rid.encode("utf-8") for rid in ids],
            cells.encode_all([r.request for r in batch]),
            cells.encode_all([r.candidates for r in batch]),
            cells.encode_all(targets.column(batch)),
            cells.encode_all([r.slices for r in batch]),
            cells.encode_all([r.source for r in batch]),
        ]
    except BaseException:
        seen.difference_update(ids)
        raise
    return b"".join([b"\t".join(line) + b"\n" for line in zip(*columns)])


def _block_by_rows(batch: list[SnapshotRow], seen: set[str], cell: Callable[[Any], str]) -> bytes:
    """The lines of ``batch`` row by row (check, then encode), raising the first row's error first."""
    lines = []
    for row in batch:
        rid = _checked_id(row, seen)
        lines.append("\t".join((rid, cell(row.request), cell(row.candidates), cell(_targets_cell(row)),
                                cell(row.slices), cell(row.source))) + "\n")
    return "".join(lines).encode("utf-8")


def tsv_blocks(rows: Iterable[SnapshotRow]) -> Iterator[bytes]:
    """The snapshot TSV as UTF-8 blocks of ``TSV_BATCH_ROWS`` lines (header first); joined, they
    are :func:`render_tsv`: each cell ``protocol.dumps(value)``, each line ending in a newline.

    A block is rendered column by column (:class:`~jevkedro.nodes.celljson.CellEncoder`); if any
    of its rows fails a check or an encoding, the block is rendered again row by row, so the error
    raised is the one the first failing row gives, as in a row-by-row writer."""
    cells, targets = CellEncoder(), TargetCells()
    seen: set[str] = set()
    yield ("\t".join(COLUMNS) + "\n").encode("utf-8")
    batch: list[SnapshotRow] = []
    for row in rows:
        batch.append(row)
        if len(batch) == TSV_BATCH_ROWS:
            yield _render_block(batch, seen, cells, targets)
            batch = []
    if batch:
        yield _render_block(batch, seen, cells, targets)


def _render_block(batch: list[SnapshotRow], seen: set[str], cells: CellEncoder, targets: TargetCells) -> bytes:
    try:
        return _block_by_columns(batch, seen, cells, targets)
    except Exception:  # noqa: BLE001 -- redone row by row, which raises the first failing row's error
        _block_by_rows(batch, seen, exact_encoder())
        raise  # row by row passed where the column path failed: never expected; do not hide it


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


@gc_paused()  # rendering makes short-lived containers; the rows are long-lived: nothing to collect
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
    # Streamed: each block is hashed and written as it is rendered, by a helper thread while the
    # next block is rendered; the file replaces the old one only if every row renders and the
    # hash matches its pin (otherwise the temp file is removed).
    with atomic_writer(tsv_path) as fh:

        def hash_and_write(block: bytes) -> None:
            digest.update(block)
            fh.write(block)

        with handed_off(hash_and_write, name="jevkedro-tsv-writer") as put:
            for block in tsv_blocks(prepared.rows):
                put(block)
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
    def layout(self):
        """The per-question layout of the rows (:mod:`jevkedro.nodes.layout`), built once and kept
        while ``rows`` is the same sequence of the same length."""
        from jevkedro.nodes.layout import question_layout

        if isinstance(self.rows, SnapshotRows):
            return self.rows.layout
        key = (id(self.rows), len(self.rows))
        cached = self.__dict__.get("_layout")
        if cached is None or cached[0] != key:
            cached = (key, question_layout(self.rows))
            self.__dict__["_layout"] = cached
        return cached[1]


# Typed decoders of the TSV's JSON cells: the shape is checked while decoding (a cell of the
# wrong shape is refused naming file, line and column), and nothing is decoded twice.
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
    """Rows of one TSV; ``Target`` objects for the common ``{"label": k}`` cell are shared (they
    are frozen), which saves one object per question."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._plain_targets: dict[Any, Target] = {}

    def cell_error(self, lineno: int, column: str, text: bytes, exc: Exception) -> SnapshotError:
        where = f"{self.path}:{lineno}: column {column} (TSV field {COLUMNS.index(column) + 1})"
        try:
            parse_json(text)
        except JSONTextError as bad:  # the exact parser locates the fault within the cell
            return SnapshotError(f"{where} is not valid JSON: {bad.msg} at character {bad.column} of the field")
        return SnapshotError(f"{where} must be {_CELL_SHAPES[column]} ({exc})")

    def target(self, t: dict[str, Any]) -> Target:
        if len(t) == 1 and "label" in t:
            shared = self._plain_targets.get(t["label"])
            if shared is None and isinstance(t["label"], int):
                shared = self._plain_targets[t["label"]] = Target(label=t["label"])
            if shared is not None:
                return shared
        probs = t.get("probabilities")
        return Target(label=t.get("label"), probabilities=tuple(probs) if probs is not None else None,
                      unscored=bool(t.get("unscored", False)),
                      extra={k: v for k, v in t.items() if k not in _TARGET_FIELDS} if len(t.keys() - _TARGET_FIELDS) else {})

    def row(self, lineno: int, line: bytes) -> SnapshotRow:
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
        request, candidates, targets, slices, source = decoded
        if not isinstance(request.get("questions"), dict):
            raise SnapshotError(f"{self.path}:{lineno}: column request has no questions object")
        try:
            rid = cells[0].decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotError(f"{self.path}:{lineno}: column request_id is not UTF-8") from None
        return SnapshotRow(rid, request, candidates, {q: self.target(t) for q, t in targets.items()}, slices, source)


class _QuestionShape(msgspec.Struct):
    type: str
    criteria: msgspec.Raw = msgspec.Raw(b"null")


class _RequestShape(msgspec.Struct):
    questions: dict[str, _QuestionShape]


class _TargetShape(msgspec.Struct):
    label: int | None = None
    probabilities: list[float] | None = None
    unscored: bool = False


class _AnyObject(msgspec.Struct):
    """Decodes (and so checks) a JSON object while keeping none of it."""


_SHAPE_DECODERS: dict[str, msgspec.json.Decoder] = {
    "request": msgspec.json.Decoder(_RequestShape),
    "candidates": _CELL_DECODERS["candidates"],
    "targets": msgspec.json.Decoder(dict[str, _TargetShape]),
    "slices": _CELL_DECODERS["slices"],
    "source": msgspec.json.Decoder(_AnyObject),
}
_LEVELS = msgspec.json.Decoder(list[Any])


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
    """The rows of a loaded TSV, each decoded into a :class:`SnapshotRow` when first used and kept.

    Loading checks every line (each JSON cell decodes with its column's shape) and builds the
    question layout straight from the cells, skipping what scoring does not read (states,
    instructions, option texts, provenance); inference decodes only the ``request`` cells
    (:meth:`requests`). So a view is scored without ever making its rows, and asked without
    making their targets.
    """

    def __init__(self, path: Path, raw: bytes, starts: list[int], ends: list[int], linenos: list[int]) -> None:
        self.path, self._raw, self._starts, self._ends = path, raw, starts, ends
        self._rows: list[SnapshotRow | None] = [None] * len(starts)
        self._reader = _RowReader(path)
        self._layout: QuestionLayout | None = None
        self._linenos = linenos

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
        if None in self._rows:
            with gc_paused():  # the rows are kept: decode them all without the collector walking them
                for i in range(len(self)):
                    self[i]
        return iter(self._rows)  # type: ignore[arg-type]  # every row decoded just above

    @gc_paused()  # the cells are kept by the caller: decode them without the collector walking them
    def cells(self, column: str, decoder: Any, batch: int = 4096) -> list[Any]:
        """One column of every row, each cell decoded by ``decoder`` (a msgspec decoder of just
        the part a scorer reads), without building the rows: a family scorer that needs one field
        of every target reads it in about a tenth of the time a row takes. Only the cell is cut
        out of the file's bytes (not the line, split into every field), and ``batch`` cells are
        decoded as one JSON array; a batch that does not give one value per cell is decoded cell by
        cell, so a bad cell is named as before."""
        at = COLUMNS.index(column)
        raw, find = self._raw, self._raw.find
        texts = []
        for start, end in zip(self._starts, self._ends):
            for _ in range(at):
                start = find(b"\t", start, end) + 1
            stop = find(b"\t", start, end)
            texts.append(raw[start: stop if stop >= 0 else end])
        as_array = msgspec.json.Decoder(list[decoder.type], strict=decoder.strict, dec_hook=decoder.dec_hook,
                                        float_hook=decoder.float_hook)
        out: list[Any] = []
        for first in range(0, len(texts), batch):
            part = texts[first: first + batch]
            try:
                values = as_array.decode(b"[" + b",".join(part) + b"]")
            except (msgspec.DecodeError, RecursionError):
                values = None
            if values is None or len(values) != len(part):
                values = []
                for i, text in enumerate(part, first):
                    try:
                        values.append(decoder.decode(text))
                    except (msgspec.DecodeError, RecursionError) as exc:
                        raise self._reader.cell_error(self._linenos[i], column, text, exc) from None
            out.extend(values)
        return out

    def passing(self) -> Iterator[SnapshotRow]:
        """Every row in order, like iterating, but a row not decoded yet is decoded for the caller
        only and not kept: a single pass over a view (the official scorer) then holds one row at
        a time instead of all of them (~4.5 KB a row) for the rest of the run."""
        reader, rows = self._reader, self._rows
        for i in range(len(rows)):
            row = rows[i]
            yield row if row is not None else reader.row(self._linenos[i], self.line(i))

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

    @property
    def layout(self):
        if self._layout is None:
            from jevkedro.nodes.layout import layout_of_shapes

            self._layout = layout_of_shapes(self._shape(i) for i in range(len(self)))
        return self._layout

    def _shape(self, i: int):
        """Request ``i`` as the layout needs it, decoded from its cells (every cell checked)."""
        from jevkedro.nodes.layout import RequestShape

        lineno, line = self._linenos[i], self.line(i)
        cells = line.split(b"\t")
        if len(cells) != len(COLUMNS):
            raise SnapshotError(f"{self.path}:{lineno}: expected {len(COLUMNS)} tab-separated columns "
                                f"({', '.join(COLUMNS)}), found {len(cells)}")
        decoded = []
        for column, text in zip(COLUMNS[1:], cells[1:]):
            try:
                decoded.append(_SHAPE_DECODERS[column].decode(text))
            except (msgspec.DecodeError, RecursionError) as exc:
                raise self._reader.cell_error(lineno, column, text, exc) from None
        request, candidates, targets, slices, _ = decoded
        try:
            rid = cells[0].decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotError(f"{self.path}:{lineno}: column request_id is not UTF-8") from None
        ids = tuple(request.questions)
        missing = [q for q in ids if q not in candidates or q not in targets]
        if missing:
            raise SnapshotError(f"{self.path}:{lineno}: questions {missing} have no candidates or no target")
        qs = list(request.questions.values())
        qtypes = [q.type for q in qs]
        names = [_level_names(q) if q.type == "score" else None for q in qs]
        return RequestShape(rid, ids, qtypes, names, [candidates[q] for q in ids], [targets[q] for q in ids], slices)


def each_row(rows: Iterable[SnapshotRow]) -> Iterator[SnapshotRow]:
    """The rows for one pass: a loaded snapshot's :meth:`SnapshotRows.passing` (rows decoded for
    the pass are not kept), any other sequence as it is."""
    return rows.passing() if isinstance(rows, SnapshotRows) else iter(rows)


def _level_names(question: _QuestionShape) -> list[str] | None:
    try:
        levels = _LEVELS.decode(question.criteria)
    except msgspec.DecodeError:
        return None
    return level_names_of({"type": "score", "criteria": levels})


def _parse_row(path: Path, lineno: int, line: str | bytes) -> SnapshotRow:
    """One TSV line (without its newline) as a row; a fault names file, line and column."""
    return _RowReader(Path(path)).row(lineno, line.encode("utf-8") if isinstance(line, str) else line)


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


def _sha256_in_background(data: bytes) -> Callable[[], str]:
    """Hash ``data`` on another thread (hashlib releases the GIL): the digest, when called."""
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(hashlib.sha256(data).hexdigest()), daemon=True)
    worker.start()

    def result() -> str:
        worker.join()
        return out[0]

    return result


@gc_paused()
def load_snapshot(root: str | Path, view: str) -> Snapshot:
    """Read ``<root>/<view>.tsv`` and its manifest, refusing bytes that differ from the manifest.

    The TSV is hashed on a second thread (hashlib releases the GIL) while the question layout is
    read from its cache (``<view>.layout.npz``, used only for the TSV hash the manifest records,
    which the file must then have) or built from the TSV's cells, every line checked, and cached
    (:mod:`jevkedro.nodes.layout`; the garbage collector paused, as what is made lives as long as
    the snapshot). Rows are decoded when first used (:class:`SnapshotRows`). A line that does not
    decode is reported only after the hash says the file is the one the manifest describes (an
    edited file is "changed", not "malformed").
    """
    tsv_path, manifest_path = snapshot_paths(root, view)
    if not tsv_path.is_file() or not manifest_path.is_file():
        raise SnapshotError(f"no snapshot for {view} in {Path(root)}: run its prepare_snapshot node first")
    manifest = read_manifest(manifest_path, view)
    raw = tsv_path.read_bytes()
    digest_of = _sha256_in_background(raw)
    recorded = manifest.get("snapshot", {}).get("sha256")

    def check_hash() -> str:
        digest = digest_of()
        if recorded and digest != recorded:  # say "changed", not "malformed", when bytes were edited
            raise SnapshotError(f"{tsv_path}: sha256 {digest} does not match its manifest ({recorded}); "
                                "refusing to use a changed snapshot — prepare it again")
        return digest

    try:
        header_end = raw.find(b"\n")
        header = raw[: header_end if header_end >= 0 else len(raw)]
        if header.split(b"\t") != [c.encode() for c in COLUMNS]:
            check_hash()
            raise SnapshotError(f"{tsv_path}:1: header is not {COLUMNS}")
        newlines = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
        if not len(newlines) or newlines[-1] != len(raw) - 1:
            newlines = np.append(newlines, len(raw))  # a last line without its newline
        starts, ends = newlines[:-1] + 1, newlines[1:]
        keep = ends > starts  # blank lines are skipped
        rows = SnapshotRows(tsv_path, raw, starts[keep].tolist(), ends[keep].tolist(), (np.flatnonzero(keep) + 2).tolist())
        cached = load_layout(tsv_path, recorded) if recorded else None
        if cached is not None and len(cached.request_ids) == len(rows):
            rows._layout = cached
        else:
            cached = None
            rows.layout  # noqa: B018 -- every line checked and the scorer's layout built, once
        digest = check_hash()
        if cached is None and recorded:
            save_layout(rows.layout, tsv_path, digest)
    except SnapshotError:
        check_hash()
        raise
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
