"""One template pipeline, reused for every view under the view's namespace.

``<view>.release`` -> ``prepare_snapshot`` -> ``<view>.snapshot`` -> ``verify_snapshot`` ->
``<view>.verified_snapshot`` -> ``infer`` -> ``<view>.predictions`` -> ``score`` -> ``<view>.report``,
``<view>.official``, ``<view>.question_scores`` -> ``plot`` -> ``<view>.plots``. Datasets are matched
by the factories in the catalog. ``params:model`` and ``params:gates`` are shared by all views; a
view's own options (``<view>.prepare``) configure its release dataset and tell ``verify_snapshot``
which data kind the run asks for (``params:<view>.prepare``, namespaced like the datasets). MLflow
logging is a hook (:class:`jevkedro.hooks.TrackViewRuns`), not a node: it logs a view once its
reports and plots are saved.
"""

from __future__ import annotations

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from jevkedro.nodes import plots, steps


def _bound(func, **kwargs):
    bound = partial(func, **kwargs)
    update_wrapper(bound, func)
    return bound


def create_view_pipeline(view: str) -> Pipeline:
    template = Pipeline([
        node(_bound(steps.prepare_snapshot, view=view), "release", "snapshot", name="prepare_snapshot"),
        node(steps.verify_snapshot, ["snapshot", "params:prepare"], "verified_snapshot", name="verify_snapshot"),
        node(steps.infer, ["verified_snapshot", "prediction_log", "params:model"], "predictions", name="infer"),
        node(steps.score, ["verified_snapshot", "predictions", "params:model", "params:gates"],
             ["report", "official", "question_scores"], name="score", tags=["score"]),
        node(plots.plot_view, ["verified_snapshot", "report", "question_scores"], "plots", name="plot", tags=["plot"]),
    ])
    return Pipeline(template, namespace=view, parameters={"params:model", "params:gates"})
