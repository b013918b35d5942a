"""One template pipeline, reused for every view under the view's namespace.

``<view>.prepare_snapshot`` -> ``<view>.verify_snapshot`` -> ``<view>.infer`` -> ``<view>.score``
-> ``<view>.track``. Datasets are namespaced the same way (``<view>.snapshot``,
``<view>.predictions``, ``<view>.report``, ...) and matched by the factories in the catalog.
``params:model`` is shared by all views; ``params:<view>.prepare`` holds a view's own options.
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
        node(_bound(steps.prepare_snapshot, view=view), "params:prepare", "snapshot", name="prepare_snapshot"),
        node(steps.verify_snapshot, "snapshot", "verified_snapshot", name="verify_snapshot"),
        node(steps.infer, ["verified_snapshot", "prediction_log", "params:model"], "predictions", name="infer"),
        node(steps.score, ["verified_snapshot", "predictions", "params:model"],
             ["report", "official", "question_scores"], name="score"),
        node(steps.track, ["report", "official", "verified_snapshot"], "mlflow_run_id", name="track"),
    ])
    return Pipeline(template, namespace=view, parameters={"params:model"})
