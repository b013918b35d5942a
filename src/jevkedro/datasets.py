"""Kedro datasets of the views' pipelines (declared as factories in ``conf/base/catalog.yml``).

``{view}.release`` (raw) -> ``{view}.snapshot`` (primary) -> ``{view}.predictions`` (model output) ->
``{view}.report`` / ``{view}.official`` (reporting). Every file written here is written atomically
(temp file + rename), so a killed run never leaves half a file where a good one was; a file that is
broken anyway (edited, copied half) is refused naming it, and :func:`read_reports` names a broken
report and goes on with the others.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError
from kedro_datasets._typing import JSONPreview, TablePreview

from jevkedro.config import PrepareOptions, parse_prepare_options
from jevkedro.family import Release
from jevkedro.nodes import output_lock
from jevkedro.nodes.jsonparse import dumps_utf8
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.snapshot import (
    PreparedView,
    Snapshot,
    atomic_write_bytes,
    atomic_write_json,
    commit_dataset,
    load_snapshot,
    snapshot_paths,
)
from jevkedro.registry import family_of


class ReleaseDataset(AbstractDataset[None, Release]):
    """A view's upstream release, read and checked by its family's ``read_release`` (read-only).

    Where the release is and what kind of data it holds come from the typed ``<view>.prepare``
    settings, which :class:`jevkedro.hooks.CheckSettings` checks and binds (:meth:`bind`) when the
    catalog is created; a dataset that was never bound refuses to load rather than guess a folder.
    """

    def __init__(self, view: str, metadata: dict[str, Any] | None = None) -> None:
        family_of(view)  # an unknown view fails here, naming the known ones
        self.view, self.metadata = view, metadata
        self.options: PrepareOptions | None = None

    def bind(self, options: PrepareOptions | dict[str, Any]) -> None:
        self.options = parse_prepare_options(self.view, options)

    def load(self) -> Release:
        if self.options is None:
            raise DatasetError(f"{self.view}.release: no release configured; set {self.view}.prepare.source "
                               f"and {self.view}.prepare.data (parameters_<family>.yml or --params)")
        return family_of(self.view).module().read_release(self.options, self.view)

    def save(self, data: None) -> None:
        raise DatasetError(f"{self.view}.release is read-only: upstream releases are never written by a run")

    def _exists(self) -> bool:
        return self.options is not None and Path(self.options.source).exists()

    def _describe(self) -> dict[str, Any]:
        return {"view": self.view, **(self.options.model_dump() if self.options else {})}


class SnapshotDataset(AbstractDataset[PreparedView, Snapshot]):
    """``<root>/<view>.tsv`` + manifest. Saving commits through the one shared writer."""

    def __init__(self, root: str, view: str, metadata: dict[str, Any] | None = None) -> None:
        self.root, self.view, self.metadata = Path(root), view, metadata

    def load(self) -> Snapshot:
        return load_snapshot(self.root, self.view)

    def save(self, data: PreparedView) -> None:
        if data.view != self.view:
            raise ValueError(f"snapshot dataset for {self.view} got a prepared view of {data.view}")
        commit_dataset(data, self.root)

    def _exists(self) -> bool:
        return all(p.is_file() for p in snapshot_paths(self.root, self.view))

    def _describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "view": self.view}


class PredictionsDataset(AbstractDataset[PredictionLog, PredictionLog]):
    """The append-only predictions log of one (model, view); loads as a :class:`PredictionLog`.

    Inference appends to the log as answers arrive (crash safety needs that), so saving only
    checks that the log handed back is this file and flushes it. Loading first takes the output
    folder's lock (:mod:`jevkedro.nodes.output_lock`) for the rest of the pipeline: a second run
    with the same ``model.name`` on the same view is refused before it asks anything.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> PredictionLog:
        output_lock.claim(self.filepath.parent)
        return PredictionLog(self.filepath)

    def save(self, data: PredictionLog) -> None:
        if Path(data.path).resolve() != self.filepath.resolve():
            raise ValueError(f"predictions for {self.filepath} were written to {data.path}")
        data.close()

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


class BrokenFileError(DatasetError):
    """A JSON or JSON Lines file the project wrote that cannot be read back (the message names it)."""


def read_json_document(path: str | Path) -> Any:
    """A JSON file; one that is missing, not UTF-8, empty, truncated or otherwise not JSON raises
    :class:`BrokenFileError` naming the file, the place and what to do."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BrokenFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BrokenFileError(f"{path}: not UTF-8 (byte {exc.start + 1}); write it again (rerun the node that writes it)") from None
    except json.JSONDecodeError as exc:
        what = "empty" if not data.strip() else f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        raise BrokenFileError(f"{path}: {what}; write it again (rerun the node that writes it)") from None


def read_reports(root: str | Path, views: list[str] | None = None,
                 models: list[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ``<root>/<model>/<view>/report.json`` (optionally only these views and models) and one
    problem line per report that could not be read (named, then skipped: the others are still read)."""
    found, problems = [], []
    for path in sorted(Path(root).glob("*/*/report.json")):
        try:
            rep = read_json_document(path)
        except BrokenFileError as exc:
            problems.append(f"skipped {exc}")
            continue
        if not isinstance(rep, dict) or not isinstance(rep.get("metrics"), dict) or "view" not in rep or "model" not in rep:
            problems.append(f"skipped {path}: not a report (expected an object with view, model and metrics)")
            continue
        if (views and rep.get("view") not in views) or (models and rep.get("model") not in models):
            continue
        found.append(rep)
    return found, problems


class JSONDataset(AbstractDataset[dict, dict]):
    """A JSON document (UTF-8, non-ASCII kept, indented), written atomically."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> Any:
        return read_json_document(self.filepath)

    def save(self, data: Any) -> None:
        atomic_write_json(self.filepath, data)

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}

    def preview(self) -> JSONPreview:  # kedro-viz: the document itself
        return JSONPreview(self.filepath.read_text(encoding="utf-8") if self.filepath.is_file() else "{}")


class ReportDataset(JSONDataset):
    """``report.json``; kedro-viz previews its headline figures as a table (overall and per type)."""

    HEADLINE = ("n", "accuracy", "accuracy_n", "nll", "brier", "ece", "probability_n")

    def preview(self) -> TablePreview:  # pandas "split" layout
        report = self.load() if self.filepath.is_file() else {}
        metrics = report.get("metrics") or {}
        rows = {"overall": metrics.get("overall") or {}}
        rows.update({f"type={t}": m for t, m in (metrics.get("by_type") or {}).items()})
        return TablePreview({"index": list(rows), "columns": list(self.HEADLINE),
                             "data": [[_rounded(m.get(c)) for c in self.HEADLINE] for m in rows.values()]})


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


class JSONLinesDataset(AbstractDataset[list, list]):
    """A list of JSON objects, one per line, written atomically (UTF-8, non-ASCII kept)."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> list[dict[str, Any]]:
        out = []
        with open(self.filepath, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    out.append(json.loads(raw.decode("utf-8")))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    where = (f"column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                             else f"byte {exc.start + 1}: not UTF-8")
                    raise BrokenFileError(f"{self.filepath}:{lineno}: not a JSON line ({where}); write it again "
                                          "(rerun the node that writes it)") from None
        return out

    def save(self, data: list[dict[str, Any]]) -> None:
        if hasattr(data, "jsonl"):  # per-question records write themselves column-wise (same records)
            atomic_write_bytes(self.filepath, data.jsonl())
            return
        atomic_write_bytes(self.filepath, b"".join(dumps_utf8(rec) + b"\n" for rec in data))

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


class PlotsDataset(AbstractDataset[dict, dict]):
    """A view's plots: ``{file name: matplotlib Figure or PNG bytes}`` saved as PNG files in
    ``folder`` (each written atomically); loads back as ``{file name: PNG bytes}``."""

    def __init__(self, folder: str, metadata: dict[str, Any] | None = None) -> None:
        self.folder, self.metadata = Path(folder), metadata

    def load(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.folder.glob("*.png"))}

    def save(self, data: dict[str, Any]) -> None:
        from jevkedro.nodes.plots import figure_png

        for name, figure in data.items():
            if not name.endswith(".png") or "/" in name or name.startswith("."):
                raise DatasetError(f"{self.folder}: plot name {name!r} must be a plain file name ending in .png")
            atomic_write_bytes(self.folder / name, figure if isinstance(figure, bytes) else figure_png(figure))

    def _exists(self) -> bool:
        return any(self.folder.glob("*.png"))

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self.folder)}
