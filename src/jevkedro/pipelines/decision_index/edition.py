"""Edition 0.3 of the Decision Index as its kit defines it: the two shipped kit files, pinned.

``kit/index-0.3.json`` (areas, fixed area weights, gold weights, chance per benchmark, track-scored
benchmarks, shown-but-not-counted benchmarks, tie) and ``kit/hub-0.3-manifest.json`` (suite files,
scoring subsets, per-benchmark request counts) are copies of the MIT-licensed kit files at the
pinned fork commit (see ``kit/NOTICE.md``). Both are checked against their sha256 when read, so
the scorer can never run on edited weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jevkedro.nodes.snapshot import SnapshotError

KIT_DIR = Path(__file__).parent / "kit"
KIT_PINS = {
    "index-0.3.json": "158c38439c004a1bfb371dab02ec614046aabd3de08a02629ae89e7137d67167",
    "hub-0.3-manifest.json": "e24b2f990ed2220233af19713a13c0a92b3c1756af1991ddf985a3420bf1258c",
}
RETIRED = {48: "ForecastBench"}  # in selected-rows.jsonl.gz, skipped at read time in 0.3
GSM8K = 30  # its rows are replaced at read time by gsm8k-rows.jsonl.gz


@cache
def kit_file(name: str) -> dict[str, Any]:
    """A shipped kit file, refused when its bytes differ from the pin."""
    path = KIT_DIR / name
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != KIT_PINS[name]:
        raise SnapshotError(f"{path}: sha256 {digest} does not match the pinned {KIT_PINS[name]}")
    return json.loads(data)


@dataclass(frozen=True)
class Edition:
    """The public-index rules of one edition, as plain lookups by catalog id."""

    label: str
    panel_id: str
    headline: str
    secondary: str
    area_of: dict[int, str]  # counted benchmark -> area (from ``areas``, not ``chance[].area``)
    area_weight: dict[str, float]  # fixed area sizing
    gold_weight: dict[int, float]  # 1.2 for gold benchmarks; others weigh 1.0 inside their area
    chance: dict[int, float]
    names: dict[int, str]
    track_scored: frozenset[int]
    shown_only: dict[int, str]  # scored and shown, not counted in the index
    tie: float

    @property
    def counted(self) -> tuple[int, ...]:
        return tuple(self.area_of)

    def weight(self, catalog_id: int) -> float:
        return self.gold_weight.get(catalog_id, 1.0)


@cache
def edition_03() -> Edition:
    idx = kit_file("index-0.3.json")
    area_of = {int(b): a["id"] for a in idx["areas"] for b in a["benchmarks"]}
    names = {int(k): v["name"] for k, v in idx["chance"].items()}
    shown = {int(x["id"]): x["name"] for x in idx["not_in_index"]}
    for cid, name in shown.items():
        names.setdefault(cid, name)
    return Edition(
        label=idx["label"], panel_id=idx["panel_id"], headline=idx["headline"], secondary=idx["secondary"],
        area_of=area_of,
        area_weight={k: float(v) for k, v in idx["area_sizing"]["fixed"].items()},
        gold_weight={int(k): float(v) for k, v in idx["gold"].items()},
        chance={int(k): float(v["chance"]) for k, v in idx["chance"].items()},
        names=names,
        track_scored=frozenset(int(x) for x in idx["track_scored"]),
        shown_only=shown,
        tie=float(idx["tie"]),
    )


def hub_manifest() -> dict[str, Any]:
    return kit_file("hub-0.3-manifest.json")


def run_datasets() -> dict[int, str]:
    """The 43 datasets an 0.3 run asks: 37 static minus the retired one, plus the 7 added."""
    hub = hub_manifest()
    out = {int(b["catalog_id"]): b["dataset"] for b in hub["benchmarks"] if int(b["catalog_id"]) not in RETIRED}
    out.update({int(b["catalog_id"]): b["dataset"] for b in hub["added"]})
    return out
