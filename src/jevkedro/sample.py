"""Whether a result is a benchmark result: the one rule every place that shows a number uses.

A report records the kind of data it was computed on (``report["data"]``, the snapshot's
manifest's word, checked against the family's pins by ``verify_snapshot``): ``official`` (the
benchmark's own release), ``sample`` (small data jevkedro ships to exercise a view) or
``synthetic`` (invented rows at benchmark scale). Only ``official`` numbers say anything about a
model; every other one is marked ``[sample]`` where it is shown (``decision_index [sample]``: the
summary lines, the MLflow run's name and ``sample`` tag, the leaderboard) and :data:`SAMPLE_NOTE`
says once what the mark means.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

OFFICIAL = "official"
SAMPLE_TAG = "[sample]"
SAMPLE_NOTE = ("[sample]: data jevkedro ships or generates to exercise a view (a small sample or a synthetic set), "
               "not the benchmark's release; those numbers check the pipeline and say nothing about a model")


def note(width: int = 100) -> str:
    """:data:`SAMPLE_NOTE` in lines of at most ``width`` characters, as the console shows it."""
    return textwrap.fill(SAMPLE_NOTE, width, subsequent_indent="  ")


def data_kind(report: Mapping[str, Any]) -> str:
    """The report's data kind (``official``, ``sample``, ``synthetic``); a report that does not say
    is not taken for a benchmark result (``unknown``)."""
    kind = report.get("data")
    return kind if isinstance(kind, str) and kind else "unknown"


def is_sample(report: Mapping[str, Any]) -> bool:
    """True unless the report is of the benchmark's official data."""
    return data_kind(report) != OFFICIAL


def mark(report: Mapping[str, Any]) -> str:
    """``" [sample]"`` for a result that is not a benchmark result, else ``""``."""
    return f" {SAMPLE_TAG}" if is_sample(report) else ""


def view_label(report: Mapping[str, Any]) -> str:
    """The view's name as shown beside a number: ``decision_index [sample]``."""
    return f"{report.get('view')}{mark(report)}"


def any_sample(reports: Iterable[Mapping[str, Any]]) -> bool:
    return any(is_sample(r) for r in reports)
