"""Edition 0.3 of the Decision Index as its kit defines it: the two shipped kit files, pinned.

``kit/index-0.3.json`` (areas, fixed area weights, gold weights, chance per benchmark, track-scored
benchmarks, shown-but-not-counted benchmarks, tie) and ``kit/hub-0.3-manifest.json`` (suite files,
scoring subsets, per-benchmark request counts) are copies of the MIT-licensed kit files at the
pinned fork commit (see ``kit/NOTICE.md``). Both are checked against their sha256 when read, so
the scorer can never run on edited weights.

Each counted benchmark's chance correction is read from its ``chance[id].method`` text into one of
three typed rules (:func:`chance_rule`); a method text this module does not know is refused, naming
the benchmark, so a new edition can never be scored with a silently assumed rule:

- :class:`PooledCorrection`: ``skill = clip((raw - chance) / (1 - chance), 0, 1)`` once, on the
  benchmark's whole raw score (the method text only says how the edition obtained ``chance``);
- :class:`PerTrackCorrection` (GSM8K: "per track: 4-choice and 10-choice versions corrected
  separately, then averaged"): each option-count version is corrected against ``1 / options`` (one
  gold among ``options`` equally likely answers), clipped, and the track skills are averaged; the
  file's ``chance`` must equal the mean of those per-track chances;
- :class:`HeadlineTrackCorrection` (iSarcasmEval: "track A English: ..."): only that track counts.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jevkedro.nodes.snapshot import SnapshotError
from jevkedro.pipelines.decision_index import scoring as S

KIT_DIR = Path(__file__).parent / "kit"
KIT_PINS = {
    "index-0.3.json": "158c38439c004a1bfb371dab02ec614046aabd3de08a02629ae89e7137d67167",
    "hub-0.3-manifest.json": "e24b2f990ed2220233af19713a13c0a92b3c1756af1991ddf985a3420bf1258c",
}
RETIRED = {48: "ForecastBench"}  # in selected-rows.jsonl.gz, skipped at read time in 0.3
GSM8K = 30  # its rows are replaced at read time by gsm8k-rows.jsonl.gz


def kit_text(name: str) -> str:
    """A shipped kit file's text, refused when its bytes differ from the pin."""
    path = KIT_DIR / name
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != KIT_PINS[name]:
        raise SnapshotError(f"{path}: sha256 {digest} does not match the pinned {KIT_PINS[name]}")
    return data.decode("utf-8")


@cache
def kit_file(name: str) -> dict[str, Any]:
    """A shipped kit file, parsed (refused when its bytes differ from the pin)."""
    return json.loads(kit_text(name))


# ---------------------------------------------------------------------------------------------
# chance correction rules, one per counted benchmark, read from ``chance[id].method``

CHANCE_ROUNDING = 5e-5  # the edition prints chance levels to 4 decimals


@dataclass(frozen=True)
class PooledCorrection:
    """``skill = clip((raw - chance) / (1 - chance), 0, 1)`` on the benchmark's whole raw score."""

    chance: float
    method: str

    def skill(self, raw: float) -> float:
        return S.skill(raw, self.chance)


@dataclass(frozen=True)
class PerTrackCorrection:
    """Every version (track) with ``k`` options is corrected against ``1 / k`` and clipped on its
    own; the benchmark's skill is the mean of the track skills and its raw the mean of the track raws."""

    option_counts: tuple[int, ...]
    chance: float  # the file's figure: the mean of the per-track chances
    method: str

    @staticmethod
    def track_chance(options: int) -> float:
        return 1.0 / options  # one gold among `options` answers, each picked with 1 / options

    def skill(self, raw_by_options: dict[int, float]) -> float:
        """Mean over the declared versions of ``clip((raw_k - 1/k) / (1 - 1/k), 0, 1)``."""
        if set(raw_by_options) != set(self.option_counts):
            raise ValueError(f"tracks with {sorted(raw_by_options)} options, the method names {list(self.option_counts)}")
        return sum(S.skill(raw_by_options[k], self.track_chance(k)) for k in self.option_counts) / len(self.option_counts)


@dataclass(frozen=True)
class HeadlineTrackCorrection:
    """Only the track of task ``task`` in ``language`` counts, corrected once with ``chance``."""

    task: str  # the task letter, e.g. "A"
    language: str  # e.g. "English"
    chance: float
    method: str

    @property
    def track_suffix(self) -> str:
        # the kit spells these tracks `<dataset>-<task>-<first two letters of the language>`,
        # e.g. iSarcasmEval-A-En
        return f"-{self.task}-{self.language[:2]}"

    def is_headline(self, track: str) -> bool:
        return track.endswith(self.track_suffix)

    def skill(self, raw: float) -> float:
        """``raw`` is the headline track's raw score."""
        return S.skill(raw, self.chance)


ChanceRule = PooledCorrection | PerTrackCorrection | HeadlineTrackCorrection
TASK_TRACK = re.compile(r"-[A-Z]-[A-Z][a-z]$")  # a track id that names a task and a language

# How the edition describes the chance level of a benchmark corrected once on its pooled score.
# Each text only explains where the number comes from; the correction itself is the same.
POOLED_METHODS = tuple(re.compile(p) for p in (
    r"expected score of uniform random choice over each question's options",
    r"F1 of random guessing over the fixed label set",
    r"F1 of random guessing on the [\w-]+ class",
    r"F1 of always answering \"[\w-]+\" \(a fair coin scores lower\)",
    r"per-review F1 of answering yes to every aspect-and-sentiment pair \(a fair coin scores lower\)",
    r"all fields of a case right by chance(, on the kept rows)?",
    r"per query: expected nDCG@10 of a random ranking of that query's candidates(, answerable queries only)?",
))
PER_TRACK_METHOD = re.compile(r"per track: (?P<versions>\d+-choice(?: and \d+-choice)+) versions corrected separately, then averaged")
HEADLINE_METHOD = re.compile(r"track (?P<task>[A-Z]) (?P<language>[A-Z][a-z]+): (?P<baseline>.+)")


def _entry_line(text: str | None, catalog_id: int, key: str) -> int | None:
    """1-based line of ``chance[catalog_id][key]`` in the kit file's text (for error messages)."""
    in_chance = in_entry = False
    for n, line in enumerate((text or "").splitlines(), 1):
        item = line.strip()
        if not in_chance:
            in_chance = item.startswith('"chance": {')
        elif not in_entry:
            in_entry = item.startswith(f'"{catalog_id}": {{')
        elif item.startswith("}"):
            return None  # the entry ends without the key
        elif item.startswith(f'"{key}":'):
            return n
    return None


def chance_rule(catalog_id: int, entry: dict[str, Any], where: str = "index-0.3.json",
                text: str | None = None) -> ChanceRule:
    """The correction that ``chance[catalog_id]`` describes, refused when its method is unknown."""
    def at(key: str) -> str:
        line = _entry_line(text, catalog_id, key)
        return f"{where}:{line}" if line else where

    method = entry.get("method")
    name = f"{entry.get('name', '?')} ({catalog_id})"
    try:
        chance = float(entry["chance"])
    except (KeyError, TypeError, ValueError):
        raise SnapshotError(f"{at('chance')}: chance[\"{catalog_id}\"] ({name}) has no numeric chance") from None
    if not 0.0 <= chance < 1.0:
        raise SnapshotError(f"{at('chance')}: chance[\"{catalog_id}\"].chance ({name}) is {chance}, outside [0, 1)")
    if not isinstance(method, str):
        raise SnapshotError(f"{at('method')}: chance[\"{catalog_id}\"] ({name}) has no method text")
    if any(p.fullmatch(method) for p in POOLED_METHODS):
        return PooledCorrection(chance=chance, method=method)
    if m := PER_TRACK_METHOD.fullmatch(method):
        counts = tuple(int(v.split("-")[0]) for v in m["versions"].split(" and "))
        if len(set(counts)) != len(counts) or min(counts) < 2:
            raise SnapshotError(f"{at('method')}: chance[\"{catalog_id}\"].method ({name}) names the versions {list(counts)}; "
                                "each needs a distinct option count of at least 2")
        mean = sum(PerTrackCorrection.track_chance(k) for k in counts) / len(counts)
        if abs(mean - chance) > CHANCE_ROUNDING:
            raise SnapshotError(f"{at('chance')}: chance[\"{catalog_id}\"] ({name}): the per-track chances of {list(counts)} "
                                f"options average {mean:.4f}, but chance is {chance}")
        return PerTrackCorrection(option_counts=counts, chance=chance, method=method)
    if (m := HEADLINE_METHOD.fullmatch(method)) and any(p.fullmatch(m["baseline"]) for p in POOLED_METHODS):
        return HeadlineTrackCorrection(task=m["task"], language=m["language"], chance=chance, method=method)
    raise SnapshotError(f"{at('method')}: chance[\"{catalog_id}\"].method ({name}) is {method!r}, which this scorer does "
                        "not implement; refusing to guess how to correct it for chance")


def chance_rules(idx: dict[str, Any], where: str = "index-0.3.json", text: str | None = None) -> dict[int, ChanceRule]:
    """Every counted benchmark's rule; a counted benchmark without a ``chance`` entry is refused."""
    counted = [int(b) for a in idx["areas"] for b in a["benchmarks"]]
    missing = [c for c in counted if str(c) not in idx["chance"]]
    if missing:
        raise SnapshotError(f"{where}: counted benchmarks {missing} have no chance entry")
    return {c: chance_rule(c, idx["chance"][str(c)], where, text) for c in counted}


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
    chance: dict[int, float]  # the file's figure per benchmark (for per-track rules: their mean)
    rules: dict[int, ChanceRule]  # how each counted benchmark is corrected for chance
    names: dict[int, str]
    track_scored: frozenset[int]  # the kit's list; which of them split by track is in `rules`
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
        rules=chance_rules(idx, str(KIT_DIR / "index-0.3.json"), kit_text("index-0.3.json")),
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
