"""Project pipelines: one per view (from the registry), and the default."""

from __future__ import annotations

from kedro.pipeline import Pipeline

from jevkedro.pipelines.template import create_view_pipeline
from jevkedro.registry import FAMILIES, VIEWS

DEFAULT_VIEWS = ("zh_decision_bench",)  # what `kedro run` evaluates with no --pipelines


def register_pipelines() -> dict[str, Pipeline]:
    pipelines: dict[str, Pipeline] = {view: create_view_pipeline(view) for view in VIEWS}
    for fam in FAMILIES:  # a family name runs all of its views
        if fam.name not in pipelines:
            pipelines[fam.name] = sum((pipelines[v] for v in fam.views), Pipeline([]))
    pipelines["__default__"] = sum((pipelines[v] for v in DEFAULT_VIEWS), Pipeline([]))
    return pipelines
