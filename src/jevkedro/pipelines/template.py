"""One template pipeline, reused for every view under the view's namespace.

``<view>.release`` -> ``prepare_snapshot`` -> ``<view>.snapshot`` -> ``verify_snapshot`` ->
``<view>.verified_snapshot`` -> ``infer`` -> ``<view>.predictions`` -> ``score`` -> ``<view>.report``,
``<view>.official``, ``<view>.question_scores``. Datasets are matched by the factories in the
catalog. ``params:model`` is shared by all views; a view's own options (``<view>.prepare``) configure
its release dataset. MLflow logging is a hook (:class:`jevkedro.hooks.TrackViewRuns`), not a node.
"""

from __future__ import annotations

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from jevkedro.nodes import steps


def _bound(func, **kwargs):
    bound = partial(func, **kwargs)
    update_wrapper(bound, func)
    return bound


def create_view_pipeline(view: str) -> Pipeline:
    template = Pipeline([
        node(_bound(steps.prepare_snapshot, view=view), "release", "snapshot", name="prepare_snapshot"),
        node(steps.verify_snapshot, "snapshot", "verified_snapshot", name="verify_snapshot"),
        node(steps.infer, ["verified_snapshot", "prediction_log", "params:model"], "predictions", name="infer"),
        node(steps.score, ["verified_snapshot", "predictions", "params:model"],
             ["report", "official", "question_scores"], name="score", tags=["score"]),
    ])
    return Pipeline(template, namespace=view, parameters={"params:model"})
