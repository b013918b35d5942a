"""Every parameter group checked at once, before the first node runs.

Groups (``conf/base/parameters*.yml`` plus ``kedro run --params``): ``model`` (the adapter, the
run's name, the engine and the adapter's options: :mod:`jevkedro.models.settings`), ``gates`` and
``<view>.prepare`` (:mod:`jevkedro.config`). :class:`jevkedro.hooks.CheckSettings` runs
:func:`check_parameters` when the Kedro context is created, so ``kedro run`` stops before any node
with every problem listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jevkedro.config import PrepareOptions, SettingsError, parse_gates, parse_prepare_options, unknown_key_problem
from jevkedro.models.settings import ModelSettings, adapter_class
from jevkedro.registry import VIEWS

VIEW_GROUP_KEYS = ("prepare",)
TOP_GROUPS = ("model", "gates")


def check_parameters(params: Mapping[str, Any]) -> tuple[ModelSettings, dict[str, PrepareOptions]]:
    """Check every parameter group (unknown groups and keys, types, ranges); return the typed
    ``model`` settings and each view's prepare options. Raises :class:`SettingsError` listing
    every problem found."""
    problems: list[str] = []
    model = None
    prepare: dict[str, PrepareOptions] = {}
    for group in params:
        if group not in TOP_GROUPS and group not in VIEWS:
            problem = unknown_key_problem("", str(group), (*TOP_GROUPS, *VIEWS))
            problems.append(problem.replace("unknown setting", "unknown parameter group"))
    gates = {}
    try:
        gates = parse_gates(params.get("gates"))
    except SettingsError as exc:
        problems += exc.problems
    try:
        model = ModelSettings.parse(params.get("model") or {}, require_name=True)
    except SettingsError as exc:
        problems += exc.problems
    else:  # what the adapter can check before any node: its file, its key
        problems += adapter_class(model.adapter).preflight(model.options, model.flat())
        # this run overwrites its own model's report: it cannot be its own baseline
        problems += [f"gates.{scope}.baseline: {group.baseline!r} is this run's own model.name; name the model "
                     "to compare with" for scope, group in gates.items() if group.baseline == model.name]
    for view in VIEWS:
        group = params.get(view)
        if group is None:
            continue
        if not isinstance(group, Mapping):
            problems.append(f"{view}: expected a mapping (with a 'prepare' group), got {group!r}")
            continue
        for key in group:
            if key not in VIEW_GROUP_KEYS:
                problems.append(unknown_key_problem(f"{view}.", str(key), VIEW_GROUP_KEYS))
        if "prepare" in group:
            try:
                prepare[view] = parse_prepare_options(view, group["prepare"])
            except SettingsError as exc:
                problems += exc.problems
    if problems:
        raise SettingsError(problems)
    assert model is not None
    return model, prepare
