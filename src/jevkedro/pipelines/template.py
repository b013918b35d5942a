"""One template pipeline, reused for every view under the view's namespace.

``<view>.release`` -> ``prepare_snapshot`` -> ``<view>.snapshot`` -> ``verify_snapshot`` ->
``<view>.verified_snapshot`` -> ``infer`` (appends to ``<view>.predictions``) ->
``<view>.inference_run`` -> ``score`` (reads ``<view>.predictions``) -> ``<view>.report``,
``<view>.official``, ``<view>.question_scores`` -> ``plot`` -> ``<view>.plots`` -> ``explore`` -> ``<view>.report_html`` -> ``track`` ->
``<view>.mlflow_run``. Datasets are matched by the factories in the catalog. ``params:model`` and
``params:gates`` are shared by all views; a view's own options (``<view>.prepare``) configure its
release dataset and tell ``verify_snapshot`` which data kind the run asks for
(``params:<view>.prepare``, namespaced like the datasets). ``track`` reads the reports and plots
back from their files, so a run in MLflow always has its files on disk.
"""

from __future__ import annotations

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from jevkedro.explorer import explorer_node
from jevkedro.nodes import plots, steps


def _bound(func, **kwargs):
    bound = partial(func, **kwargs)
    update_wrapper(bound, func)
    return bound


def create_view_pipeline(view: str) -> Pipeline:
    template = Pipeline([
        node(_bound(steps.prepare_snapshot, view=view), "release", "snapshot", name="prepare_snapshot"),
        node(steps.verify_snapshot, ["snapshot", "params:prepare"], "verified_snapshot", name="verify_snapshot"),
        node(steps.infer, ["verified_snapshot", "predictions", "params:model"], "inference_run", name="infer"),
        node(steps.score, ["verified_snapshot", "predictions", "inference_run", "params:model", "params:gates"],
             ["report", "official", "question_scores"], name="score"),
        node(plots.plot_view, ["verified_snapshot", "report", "question_scores"], "plots", name="plot"),
        node(explorer_node, ["verified_snapshot", "report", "question_scores", "predictions", "plots"], "report_html",
             name="explore"),
        node(steps.track, ["verified_snapshot", "report", "official", "plots", "report_html"], "mlflow_run", name="track"),
    ])
    return Pipeline(template, namespace=view, parameters={"params:model", "params:gates"})
