"""What every family package shares: the :class:`Release` type, reading its ``manifest.json``,
data-kind markers, and ``prepare(root, source, **options)`` for use outside Kedro.

A family package (``jevkedro.pipelines.<family>``) holds only what differs between families:

- ``read_release(options, view) -> Release``: read the upstream release named by the typed
  ``<view>.prepare`` options, check its pins (sha256, counts, data-kind markers) and parse it
  (malformed lines name file and line); the ``{view}.release`` catalog dataset calls it;
- ``build(release, view) -> PreparedView``: the pure mapping from the release to the view's
  snapshot rows (no file access), run by the ``prepare_snapshot`` node;
- optionally ``PrepareOptions`` (a :class:`jevkedro.config.PrepareOptions` subclass with the
  family's extra options) and ``evaluate(snapshot, table, predictions)`` (its ``official`` report);
- ``manifest.json`` and its docs.

Everything else -- writing, verifying, inference, validation, metrics, reports, tracking -- is shared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jevkedro.config import PrepareOptions, parse_prepare_options
from jevkedro.files import check_file, present
from jevkedro.nodes.snapshot import SnapshotError, SourceFile, SourceFormatError, atomic_write_json, commit_dataset
from jevkedro.nodes.sources import read_source_document
from jevkedro.protocol import DATA_KINDS, OWN_DATA_KINDS, candidates_for

DEFAULT_SNAPSHOT_ROOT = Path("data/02_snapshots")
DEFAULT_RAW_ROOT = Path("data/01_raw")
# A release folder written by us (shipped sample or full-scale synthetic) carries this file, so
# that it can never be prepared as the official release, nor an official one as ours.
DATA_KIND_MARKER = "JEVKEDRO_DATA_KIND.json"


@cache
def family_manifest(family: str) -> dict[str, Any]:
    path = Path(__file__).parent / "pipelines" / family / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8"))


def expected_for(family: str, view: str, data: str) -> dict[str, Any]:
    """Counts and snapshot hash the family pins for ``view`` built from ``data`` (may be empty)."""
    spec = family_manifest(family).get("views", {}).get(view, {})
    out: dict[str, Any] = {}
    if data in spec.get("counts", {}):
        out["counts"] = spec["counts"][data]
    if data in spec.get("snapshot_sha256", {}):
        out["snapshot_sha256"] = spec["snapshot_sha256"][data]
    return out


def pinned_snapshot_sha256(family: str, view: str, data: str) -> str | None:
    return expected_for(family, view, data).get("snapshot_sha256")


def known_data_kinds(family: str, view: str) -> set[str]:
    """The data kinds the family's ``manifest.json`` knows for ``view`` (pinned or described)."""
    spec = family_manifest(family)
    view_spec = spec.get("views", {}).get(view, {})
    return (set(spec.get("data_kinds", {})) | set(spec.get("sources", {}))
            | set(view_spec.get("counts", {})) | set(view_spec.get("snapshot_sha256", {})))


def check_snapshot_kind(manifest: dict[str, Any], where: Path | str, family: str, view: str, asked: str) -> None:
    """Refuse a snapshot that is not what the run asked for, before its pins are looked up.

    ``asked`` is the data kind of the run's typed settings (``<view>.prepare.data``), never the
    manifest's own word: the family's pins (snapshot hash, source hashes) are looked up by it, so a
    manifest cannot choose a kind without a pin. Refused, naming ``where`` (the manifest) and the
    setting: a kind the family does not know, a manifest of another view or family, a manifest
    whose ``data`` differs from the kind asked for (a misspelt kind included), and sources whose
    sha256 differ from the files the family pins for that kind.
    """
    setting = f"{view}.prepare.data"
    known = known_data_kinds(family, view)
    if asked not in known:
        raise SnapshotError(f"{setting}={asked!r}: the {family} family has no {asked!r} data for view {view} "
                            f"(known: {', '.join(sorted(known))})")
    if manifest.get("view") != view or manifest.get("family") != family:
        raise SnapshotError(f"{where}: a snapshot of view {manifest.get('view')!r} of family {manifest.get('family')!r}, "
                            f"not of {view!r} ({family})")
    kind = manifest.get("data")
    if kind != asked:
        what = f"data kind {kind!r}" + ("" if kind in DATA_KINDS else f" (not a data kind: {', '.join(DATA_KINDS)})")
        raise SnapshotError(f"{where}: the snapshot records {what}, but this run asks for {asked!r} ({setting}); "
                            f"prepare it again from the {asked} release, or set {setting} to the kind you mean")
    pinned: dict[str, set[str]] = {}  # file name -> pinned hashes (names repeat across folders: en/test.jsonl, ...)
    for pin in family_manifest(family).get("sources", {}).get(asked, []):
        if pin.get("sha256"):
            pinned.setdefault(Path(pin["file"]).name, set()).add(pin["sha256"])
    for source in manifest.get("sources") or []:
        name = Path(str(source.get("file", ""))).name if isinstance(source, dict) else ""
        if name in pinned and source.get("sha256") not in pinned[name]:
            raise SnapshotError(f"{where}: source {name} has sha256 {source.get('sha256')}, but the {family} {asked} "
                                f"release pins {', '.join(sorted(pinned[name]))}; this snapshot was not prepared from "
                                f"the {asked} release")


@dataclass(frozen=True)
class Release:
    """An upstream release as read and checked by a family's ``read_release``.

    ``files``: every file read, with its sha256 (checked against the family's pins where it pins
    them); ``content``: the parsed records in the family's own shape (each keeps its file and line,
    so the mapping can name them in errors); ``notes``: what the reading decided (exclusions, media
    checks, ...), carried into the snapshot manifest.
    """

    family: str
    data: str  # official | sample | synthetic
    source: Path
    files: tuple[SourceFile, ...]
    content: Any
    options: PrepareOptions
    notes: dict[str, Any] = field(default_factory=dict)


def prepare_view(view: str, source: str | Path, **options: Any) -> Any:
    """Read and map one view outside a Kedro run (tests, scripts): the family's
    ``build(read_release(options, view), view)`` with ``options`` checked like ``<view>.prepare``."""
    from jevkedro.registry import family_of

    module = family_of(view).module()
    typed = parse_prepare_options(view, {"source": str(source), **options})
    return module.build(module.read_release(typed, view), view)


def make_prepare(family: str, views: tuple[str, ...], read_release: Callable[..., Release],
                 build: Callable[[Release, str], Any]) -> Callable[..., list[dict]]:
    """The family's ``prepare(root=None, source=None, **options)``, for use outside a Kedro run.

    Reads each view's release from ``source`` (default ``data/01_raw/<family>``) with the typed
    ``<view>.prepare`` options, maps it and writes it under ``root`` (default ``data/02_snapshots``)
    through the one shared writer; returns the manifests.
    """

    def prepare(root: str | Path | None = None, source: str | Path | None = None, **options: Any) -> list[dict]:
        root = Path(root) if root is not None else DEFAULT_SNAPSHOT_ROOT
        source = Path(source) if source is not None else DEFAULT_RAW_ROOT / family
        manifests = []
        for view in views:
            typed = parse_prepare_options(view, {"source": str(source), **options})
            manifests.append(commit_dataset(build(read_release(typed, view), view), root))
        return manifests

    prepare.__doc__ = f"Prepare the {family} snapshot(s) {views} from an upstream release folder."
    return prepare


def wire_question(where: str, qid: str, question: Any,
                  noul_order: tuple[str, str]) -> tuple[dict[str, Any], list[str]]:
    """One source question as the model sees it, and its candidate keys (docs/protocol.md §1).

    Only ``type``, ``instructions`` and ``criteria`` reach the request (``criteria`` left out when
    null); whatever else the source stores with a question stays out. ``noul_order`` is the
    family's noul candidate order. A question that is not an object, or whose type and criteria
    give no candidates, raises :class:`SourceFormatError` naming ``where`` and the question id.
    """
    if not isinstance(question, dict):
        raise SourceFormatError(f"{where}: question {qid!r} must be an object")
    wire = {"type": question.get("type"), "instructions": question.get("instructions")}
    if question.get("criteria") is not None:
        wire["criteria"] = question["criteria"]
    try:
        return wire, candidates_for(wire, noul_order)
    except ValueError as exc:
        raise SourceFormatError(f"{where}: question {qid!r}: {exc}") from None


def write_data_kind_marker(folder: str | Path, family: str, kind: str, note: str) -> Path:
    """Mark ``folder`` as a release written by jevkedro (``kind``: sample or synthetic)."""
    if kind not in OWN_DATA_KINDS:
        raise ValueError(f"only our own releases are marked; got data kind {kind!r}")
    path = Path(folder) / DATA_KIND_MARKER
    atomic_write_json(path, {"family": family, "data_kind": kind, "synthetic": True, "note": note})
    return path


def check_data_kind(folder: str | Path, family: str, data: str,
                    file_marker: tuple[str | Path, str | None] | None = None) -> dict[str, Any] | None:
    """Refuse a release folder whose marker disagrees with the requested data kind.

    ``official`` needs a folder without our marker; ``sample``/``synthetic`` need our marker
    naming that kind and this family. Returns the marker (None for an official folder).

    ``file_marker`` is ``(file, kind)`` for a file format that can carry the kind inside the file
    too (our Parquet files' schema metadata; ``kind`` None when the file has none). It is a
    secondary check by the same rule, so a file of ours copied out of its marked folder is still
    refused as ``official``, and a marked folder must hold files stamped with its kind.
    """
    path = Path(folder) / DATA_KIND_MARKER
    marker = read_marker(path) if present(path) else None  # a folder or FIFO in its place is refused
    if data == "official":
        if marker is not None:
            raise SnapshotError(
                f"{folder}: marked by {path.name} as a jevkedro {marker.get('data_kind')!r} release "
                "(written by us, not benchmark data); it cannot be prepared as data=official"
            )
    else:
        if marker is None:
            raise SnapshotError(
                f"{folder}: data={data!r} but the folder has no {DATA_KIND_MARKER}; an upstream release "
                "is prepared with data=official"
            )
        if marker.get("data_kind") != data or marker.get("family") != family:
            raise SnapshotError(
                f"{path}: marks a {marker.get('family')!r} {marker.get('data_kind')!r} release, "
                f"not a {family!r} {data!r} one"
            )
    if file_marker is not None:
        _check_file_marker(Path(file_marker[0]), data, file_marker[1])
    return marker


def read_marker(path: Path) -> dict[str, Any]:
    """A folder's data-kind marker: a regular file (:func:`jevkedro.files.check_file`) holding a
    JSON object, read by the strict source reader; anything else is refused naming the file."""
    check_file(path, "data-kind marker", SnapshotError)
    marker = read_source_document(str(path), path.read_bytes())
    if not isinstance(marker, dict):
        raise SourceFormatError(f"{path}: expected a JSON object (a data-kind marker), got {type(marker).__name__}")
    return marker


def _check_file_marker(file: Path, data: str, stamp: str | None) -> None:
    if data == "official" and stamp is not None:
        raise SnapshotError(
            f"{file}: this file was written by jevkedro as {stamp!r} data (marked inside the file); "
            "it is not the upstream release and cannot be prepared as 'official'"
        )
    if data != "official" and stamp != data:
        found = f"marked {stamp!r}" if stamp else "carries no jevkedro marker (it may be the real release)"
        raise SnapshotError(f"{file}: prepared as {data!r} data, but the file {found}")


OUR_RECORD_SOURCE = "jevkedro-synthetic"  # the provenance value every record we write carries


def check_record_stamp(where: str, stamp: Any, data: str, field: str = "source") -> None:
    """The per-record counterpart of the folder marker, for formats without file metadata (JSONL).

    Every record jevkedro writes carries ``<field>: "jevkedro-synthetic"``; upstream records never
    do. So a record of ours is refused as ``official`` even when the folder marker was removed (no
    file hash is published to catch it), and a sample/synthetic release holds only our records.
    """
    ours = stamp == OUR_RECORD_SOURCE
    if data == "official" and ours:
        raise SnapshotError(f"{where}: record written by jevkedro ({field} {OUR_RECORD_SOURCE!r}), "
                            "not benchmark data; it cannot be prepared as data=official")
    if data != "official" and not ours:
        raise SnapshotError(f"{where}: prepared as {data!r} data, but the record is not marked "
                            f"{field} {OUR_RECORD_SOURCE!r} (it may be the real release)")
