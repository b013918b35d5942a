"""The one list of benchmark families and their views (docs/protocol.md §1, docs/families.md).

Pipelines, settings, the CLI and the evaluator find a family only through its entry here. A family
is a package under ``jevkedro.pipelines`` exposing ``read_release(options, view)`` (the release,
read and checked), ``build(release, view)`` (the pure mapping to snapshot rows) and, when it has
its own scorer, ``evaluate(snapshot, table, predictions)`` (see :mod:`jevkedro.family`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from jevkedro.errors import UserError


@dataclass(frozen=True)
class Family:
    name: str  # family id, e.g. "zh_decision_bench"
    title: str  # human name, e.g. "zh-decision-bench"
    package: str  # module under jevkedro.pipelines
    modality: str  # "text", "image+video", ...
    views: tuple[str, ...]  # TSV data views this family builds

    def module(self) -> ModuleType:
        return importlib.import_module(f"jevkedro.pipelines.{self.package}")


FAMILIES: tuple[Family, ...] = (
    Family("visual_decision_bench", "VisualDecisionBench", "visual_decision_bench", "image+video",
           ("visual_decision_bench", "visual_decision_bench_image", "visual_decision_bench_video")),
    Family("jevbench", "JevBench", "jevbench", "text", ("jevbench",)),
    Family("decision_index", "Decision Index", "decision_index", "text", ("decision_index",)),
    Family("typed_decisions", "Typed-Decisions", "typed_decisions", "text", ("typed_decisions",)),
    Family("decisionbench", "DecisionBench", "decisionbench", "text", ("decisionbench",)),
    Family("procedural_typed_decisions", "Procedural Typed Decisions", "procedural_typed_decisions",
           "text", ("procedural_typed_decisions",)),
    Family("zh_decision_bench", "zh-decision-bench", "zh_decision_bench", "text", ("zh_decision_bench",)),
    Family("jevalt_bench", "JevAlt-Bench", "jevalt_bench", "text", ("jevalt_bench",)),
)

FAMILY_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
FAMILY_BY_VIEW: dict[str, Family] = {v: f for f in FAMILIES for v in f.views}
VIEWS: tuple[str, ...] = tuple(FAMILY_BY_VIEW)


class UnknownViewError(UserError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; say it plainly
        return self.args[0]


def family_of(view: str) -> Family:
    try:
        return FAMILY_BY_VIEW[view]
    except KeyError:
        raise UnknownViewError(f"unknown view {view!r}; known views: {', '.join(VIEWS)}") from None
