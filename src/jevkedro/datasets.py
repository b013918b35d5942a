"""Kedro datasets for snapshots and predictions (declared as factories in ``conf/base/catalog.yml``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from jevkedro.nodes.infer import PredictionLog
from jevkedro.nodes.snapshot import PreparedView, Snapshot, atomic_write_bytes, commit_dataset, load_snapshot, snapshot_paths


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
    checks that the log handed back is this file and flushes it.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> PredictionLog:
        return PredictionLog(self.filepath)

    def save(self, data: PredictionLog) -> None:
        if Path(data.path).resolve() != self.filepath.resolve():
            raise ValueError(f"predictions for {self.filepath} were written to {data.path}")
        data.close()

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


class JSONLinesDataset(AbstractDataset[list, list]):
    """A list of JSON objects, one per line, written atomically (UTF-8, non-ASCII kept)."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> list[dict[str, Any]]:
        with open(self.filepath, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def save(self, data: list[dict[str, Any]]) -> None:
        if hasattr(data, "jsonl"):  # per-question records write themselves column-wise (same records)
            atomic_write_bytes(self.filepath, data.jsonl())
            return
        text = "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in data)
        atomic_write_bytes(self.filepath, text.encode("utf-8"))

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}
