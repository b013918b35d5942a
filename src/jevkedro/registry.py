"""The one list of benchmark families and their views (PROTOCOL §1, §7).

Pipelines, the CLI and the evaluator find a family only through its entry here. A family is a
package under ``jevkedro.pipelines`` exposing ``prepare(root=None, source=None, **options)`` and,
when it needs its own scorer, ``evaluate(dataset, records, predictions, output)``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


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


class UnknownViewError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; say it plainly
        return self.args[0]


class ViewNotBuiltError(NotImplementedError):
    """Raised by a family whose preparation or scorer has not been built yet."""


def family_of(view: str) -> Family:
    try:
        return FAMILY_BY_VIEW[view]
    except KeyError:
        raise UnknownViewError(f"unknown view {view!r}; known views: {', '.join(VIEWS)}") from None


def not_built(family: str, issue: str):
    """A ``prepare`` for a family whose data preparation is not built yet: fails clearly."""

    def prepare(root=None, source=None, **options):
        raise ViewNotBuiltError(
            f"{family}: data preparation is not built yet ({issue}); "
            f"built views: {', '.join(built_views())}"
        )

    prepare.not_built = True  # type: ignore[attr-defined]
    return prepare


def built_views() -> list[str]:
    out = []
    for fam in FAMILIES:
        if not getattr(fam.module().prepare, "not_built", False):
            out.extend(fam.views)
    return out
