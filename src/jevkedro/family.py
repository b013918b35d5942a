"""What every family package shares: reading its ``manifest.json`` and turning a ``build``
(upstream release -> :class:`PreparedView`) into the public ``prepare(root, source, **options)``.

A family package (``jevkedro.pipelines.<family>``) holds only what differs between families:
``build`` (its source mapping), ``evaluate`` (its ``official`` scorer), ``manifest.json`` and
its docs. Everything else -- writing, verifying, inference, validation, metrics, reports,
tracking -- is shared.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from jevkedro.nodes.snapshot import PreparedView, commit_dataset

DEFAULT_SNAPSHOT_ROOT = Path("data/02_snapshots")
DEFAULT_RAW_ROOT = Path("data/01_raw")


@lru_cache(maxsize=None)
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


def make_prepare(family: str, views: tuple[str, ...], build: Callable[..., PreparedView]) -> Callable[..., list[dict]]:
    """The family's public ``prepare(root=None, source=None, **options)``.

    Builds each view from ``source`` (default ``data/01_raw/<family>``) and writes it under
    ``root`` (default ``data/02_snapshots``) through the one shared writer; returns the manifests.
    """

    def prepare(root: str | Path | None = None, source: str | Path | None = None, **options: Any) -> list[dict]:
        root = Path(root) if root is not None else DEFAULT_SNAPSHOT_ROOT
        source = Path(source) if source is not None else DEFAULT_RAW_ROOT / family
        return [commit_dataset(build(source=source, view=view, **options), root) for view in views]

    prepare.__doc__ = f"Prepare the {family} snapshot(s) {views} from an upstream release folder."
    return prepare
