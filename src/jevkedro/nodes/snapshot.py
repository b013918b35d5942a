"""Snapshots: the one writer (:func:`commit_dataset`), the loader and the verifier.

A snapshot of a view is ``<root>/<view>.tsv`` (one row per shared request) plus
``<root>/<view>.manifest.json`` (source pins with sha256, counts by type, TSV sha256, scoring
protocol). Columns: ``request_id``, ``request`` (exactly what a model may see), ``candidates``,
``targets``, ``slices``, ``source``. JSON cells never contain raw tabs or newlines.

Every byte of a snapshot is deterministic for a given source and mapping, so the family's
``manifest.json`` can pin the TSV hash and a changed mapping or source is caught at preparation.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from jevkedro import __version__
from jevkedro.protocol import SnapshotRow, Target, dumps

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
    atomic_write_bytes(path, (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)``; a malformed line raises naming file and line."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceFormatError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise SourceFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def json_cell(where: str, column: str, text: Any) -> Any:
    """Decode one JSON-text cell of an upstream row (a Parquet column holding JSON as a string).

    ``where`` names the row (e.g. ``<file>:row <n>``); a cell that is not a string or not valid
    JSON raises :class:`SourceFormatError` naming the row and the column.
    """
    if not isinstance(text, str):
        raise SourceFormatError(f"{where}: column {column} must hold JSON text, got {type(text).__name__}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceFormatError(
            f"{where}: column {column} is not valid JSON ({exc.msg} at column {exc.colno})") from None


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


def count_rows(rows: Iterable[SnapshotRow]) -> dict[str, Any]:
    by_type: Counter[str] = Counter()
    inputs = 0
    for row in rows:
        inputs += 1
        by_type.update(q["type"] for q in row.request["questions"].values())
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


def render_tsv(rows: Iterable[SnapshotRow]) -> bytes:
    lines = ["\t".join(COLUMNS)]
    seen: set[str] = set()
    for row in rows:
        row.check()
        if row.request_id in seen:
            raise SnapshotError(f"duplicate request_id {row.request_id!r}")
        seen.add(row.request_id)
        if any(c in row.request_id for c in "\t\n\r"):
            raise SnapshotError(f"request_id {row.request_id!r} contains a tab or newline")
        lines.append("\t".join((
            row.request_id,
            dumps(row.request),
            dumps(row.candidates),
            dumps({q: t.to_json() for q, t in row.targets.items()}),
            dumps(row.slices),
            dumps(row.source),
        )))
    return ("\n".join(lines) + "\n").encode("utf-8")


def snapshot_paths(root: str | Path, view: str) -> tuple[Path, Path]:
    root = Path(root)
    return root / f"{view}.tsv", root / f"{view}.manifest.json"


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
    payload = render_tsv(prepared.rows)
    digest = hashlib.sha256(payload).hexdigest()
    want_sha = prepared.expected.get("snapshot_sha256")
    if want_sha and want_sha != digest:
        raise SnapshotError(
            f"{tsv_path}: prepared snapshot sha256 {digest} does not match the pinned {want_sha} "
            "(the source or the mapping changed)"
        )
    manifest = {
        "view": prepared.view,
        "family": prepared.family,
        "data": prepared.data,
        "sources": [s.to_json() for s in prepared.sources],
        "counts": counts,
        "snapshot": {"file": tsv_path.name, "sha256": digest, "bytes": len(payload), "rows": counts["inputs"]},
        "scoring": prepared.scoring,
        "notes": prepared.notes,
        "writer": f"jevkedro {__version__}",
    }
    atomic_write_bytes(tsv_path, payload)
    atomic_write_json(manifest_path, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------
# loading and verification


@dataclass
class Snapshot:
    """A view's snapshot as read from disk: rows plus the manifest written beside it."""

    view: str
    path: Path
    manifest: dict[str, Any]
    rows: list[SnapshotRow]
    sha256: str
    verified: bool = False

    @property
    def data(self) -> str:
        return self.manifest.get("data", "official")

    def requests(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """What the model may see, and nothing else."""
        for row in self.rows:
            yield row.request_id, row.request


def _parse_row(path: Path, lineno: int, line: str) -> SnapshotRow:
    cells = line.rstrip("\n").split("\t")
    if len(cells) != len(COLUMNS):
        raise SnapshotError(f"{path}:{lineno}: expected {len(COLUMNS)} columns, found {len(cells)}")
    try:
        rid, request, candidates, targets, slices, source = cells[0], *map(json.loads, cells[1:])
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}:{lineno}: malformed JSON cell ({exc.msg})") from None
    tgts = {
        q: Target(
            label=t.get("label"),
            probabilities=tuple(t["probabilities"]) if t.get("probabilities") is not None else None,
            unscored=bool(t.get("unscored", False)),
            extra={k: v for k, v in t.items() if k not in {"label", "probabilities", "unscored"}},
        )
        for q, t in targets.items()
    }
    return SnapshotRow(rid, request, candidates, tgts, slices, source)


def load_snapshot(root: str | Path, view: str) -> Snapshot:
    tsv_path, manifest_path = snapshot_paths(root, view)
    if not tsv_path.is_file() or not manifest_path.is_file():
        raise SnapshotError(f"no snapshot for {view} in {Path(root)}: run its prepare_snapshot node first")
    raw = tsv_path.read_bytes()
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    digest = hashlib.sha256(raw).hexdigest()
    recorded = manifest.get("snapshot", {}).get("sha256")
    if recorded and digest != recorded:  # say "changed", not "malformed", when bytes were edited
        raise SnapshotError(f"{tsv_path}: sha256 {digest} does not match its manifest ({recorded}); "
                            "refusing to use a changed snapshot — prepare it again")
    lines = raw.decode("utf-8").split("\n")
    if lines[0].split("\t") != list(COLUMNS):
        raise SnapshotError(f"{tsv_path}:1: header is not {COLUMNS}")
    rows = [_parse_row(tsv_path, i, ln) for i, ln in enumerate(lines[1:], start=2) if ln]
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
