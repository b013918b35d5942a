"""Builders shared by the JevBench tests: tasks in the upstream format, snapshots, answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jevkedro.nodes.snapshot import PreparedView, commit_dataset, load_snapshot
from jevkedro.pipelines.jevbench import map_row


def task(id: str, qtype: str, labels: list[str], expected: Any, family: str = "fam", group: str | None = None,
         criteria: Any = "auto", state: Any = "some state", provenance: dict | None = None) -> dict[str, Any]:
    if criteria == "auto":
        criteria = {"noul": {"true": "T", "false": "F"}, "choice": {lab: f"desc {lab}" for lab in labels},
                    "score": [f"level {i}" for i in range(len(labels))]}[qtype]
    return {"id": id, "family": family, "state": state,
            "question": {"type": qtype, "instructions": "decide", "criteria": criteria},
            "labels": labels, "expected": expected, "split": "public", "group": group,
            "provenance": provenance if provenance is not None else {"source": "test"}}


def tier_of(task_id: str) -> str:
    return task_id.split("-", 1)[0]


def snapshot_of(tmp_path: Path, tasks: list[dict[str, Any]], data: str = "synthetic"):
    """Map ``tasks`` (tier from the id prefix), commit them as a snapshot and load it back."""
    rows = [map_row(Path(f"{tier_of(t['id'])}.jsonl"), i + 1, t, tier_of(t["id"])) for i, t in enumerate(tasks)]
    prepared = PreparedView(view="jevbench", family="jevbench", data=data, rows=rows, sources=[], scoring={})
    commit_dataset(prepared, tmp_path)
    return load_snapshot(tmp_path, "jevbench")


def record(answer: Any, status: str = "ok", latency: float | None = 0.1, first: bool = False, **extra: Any) -> dict:
    return {"status": status, "response": {"model": "m", "answers": {"decision": answer}} if status == "ok" else None,
            "latency_s": latency, "first": first, "model": "m", "error": extra.pop("error", None), **extra}


def choice(**probs: float) -> dict[str, Any]:
    return {"type": "choice", "probabilities": probs}


def noul(p: Any) -> dict[str, Any]:
    return {"type": "noul", "noul": p}
