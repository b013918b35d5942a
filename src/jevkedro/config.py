"""Typed settings: the rules every parameter group is checked by, and the groups that are not the model's.

A settings group is a pydantic model (:class:`Settings`): a key it does not have is refused, naming
it and the closest known key; a wrong type or range is refused naming the setting and what is
allowed. ``null`` means "not set" (the default applies), so ``parameters.yml`` may list every
adapter's keys as null. Here: ``<view>.prepare`` (:class:`PrepareOptions`), ``gates``
(:class:`GateThresholds`) and the run-name rule; the ``model`` group lives with the models
(:mod:`jevkedro.models.settings`), and :mod:`jevkedro.parameters` checks all groups at once.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from jevkedro.errors import UserError
from jevkedro.protocol import DataKind

# -- base ------------------------------------------------------------------------------------------


class SettingsError(UserError, ValueError):
    """One or more settings are unknown or out of range; the message lists each, by its full key."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n  " + "\n  ".join(self.problems))


class Settings(BaseModel):
    """A settings group: unknown keys are refused, numbers must be numbers (not strings or booleans).

    Every pair of fields ``min_X`` and ``max_X`` of a group is a range: a minimum above its maximum
    is refused naming both settings (``model.min_choice_options`` over ``model.max_choice_options``
    would make every question unsendable without a word)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _ranges_in_order(self) -> Settings:
        for name in type(self).model_fields:
            if not name.startswith("min_") or f"max_{name[4:]}" not in type(self).model_fields:
                continue
            low, high = getattr(self, name), getattr(self, f"max_{name[4:]}")
            if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
                raise ValueError(f"{RANGE_PREFIX}{name} ({low:g}) is above {RANGE_PREFIX}max_{name[4:]} ({high:g}); "
                                 "a minimum may not exceed its maximum")
        return self


# stands for the group's prefix ("model.", "gates.jevbench.") in a whole-group rule's message
RANGE_PREFIX = "<group>."


def _described(annotation: Any) -> str:
    """A short phrase for what a field accepts: "an integer ≥ 1", "one of: local, dask", ..."""
    text = str(annotation)
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin in (tuple, list) and args:
        return "a list of " + _described(args[0]).replace("one of: ", "values from: ")
    if annotation is bool or origin is bool:  # bool, StrictBool
        return "true or false"
    if "int" in text and "float" not in text:
        return "an integer"
    if "float" in text:
        return "a number"
    if annotation is str or text.startswith("str"):
        return "a string"
    return text.replace("typing.", "")


def describe_field(model: type[BaseModel], name: str) -> str:
    """What field ``name`` of ``model`` allows, in words (type, bounds, null)."""
    info = model.model_fields[name]
    annotation = info.annotation
    optional = False
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if len(args) < len(getattr(annotation, "__args__", ())):  # X | None
        optional, annotation = True, args[0] if len(args) == 1 else annotation
    phrase = _described(annotation)
    bounds = []
    for meta in list(info.metadata) + list(getattr(annotation, "__metadata__", ())):
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(meta, attr, None) is not None and type(meta).__name__.lower() == attr:
                bounds.append(f"{sign} {getattr(meta, attr)}")
    if bounds:
        phrase += " " + " and ".join(bounds)
    if optional:
        phrase += " (or null)"
    if info.description:
        phrase += f" — {info.description}"
    return phrase


def closest(key: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key_problem(prefix: str, key: str, known: Iterable[str]) -> str:
    known = sorted(known)
    hint = closest(key, known)
    return (f"{prefix}{key}: unknown setting" + (f"; did you mean {prefix}{hint}?" if hint else "")
            + f" (known: {', '.join(known)})")


def _model_at(model: type[BaseModel], loc: tuple) -> tuple[type[BaseModel], str] | None:
    """The (model, field) a pydantic error location points at, following nested settings models."""
    current: Any = model
    for i, part in enumerate(loc):
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        if i == len(loc) - 1:
            return current, str(part)
        current = current.model_fields[part].annotation
    return None


def validation_problems(exc: ValidationError, model: type[BaseModel], prefix: str) -> list[str]:
    """Turn pydantic's errors into lines naming the full setting and what it allows."""
    out = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not isinstance(p, int))
        key = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        if err["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1]) if len(loc) > 1 else None
            known = (getattr(parent[0].model_fields[parent[1]].annotation, "model_fields", {}) if parent
                     else model.model_fields)
            out.append(unknown_key_problem(key[: len(key) - len(str(loc[-1]))], str(loc[-1]), known))
            continue
        target = _model_at(model, loc)
        allowed = describe_field(*target) if target else err["msg"]
        if err["type"] == "missing":
            out.append(f"{key}: missing; required: {allowed}")
        elif err["type"] == "value_error" and not loc:  # a rule over the whole group: it names its settings
            out.append(str(err["msg"]).removeprefix("Value error, ").replace(RANGE_PREFIX, prefix))
        elif err["type"] == "value_error":  # a validator's own rule; the value is not echoed (it may hold a token)
            out.append(f"{key}: {str(err['msg']).removeprefix('Value error, ')}")
        else:
            out.append(f"{key}: {err.get('input')!r} is not allowed; allowed: {allowed}")
    return out


def parse_group(model: type[Settings], values: Mapping[str, Any] | None, prefix: str) -> Settings:
    """Validate one settings group (``None`` values are dropped: they mean "not set")."""
    if values is not None and not isinstance(values, Mapping):
        raise SettingsError([f"{prefix.rstrip('.')}: expected a mapping of settings, got {values!r}"])
    clean = {k: v for k, v in (values or {}).items() if v is not None}
    try:
        return model(**clean)
    except ValidationError as exc:
        raise SettingsError(validation_problems(exc, model, prefix)) from None


# -- run names -------------------------------------------------------------------------------------

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
RUN_NAME_RULE = ("1-128 characters from letters, digits, '.', '_', '+', '-', starting with a letter or digit "
                 "(it names output folders and MLflow runs)")


# names the project's own outputs take beside the model folders (conf/base/catalog.yml: the leaderboard's
# files and the comparisons' folder in data/08_reporting), refused in any case (a case-blind disk)
RESERVED_RUN_NAMES = ("compare", "leaderboard.csv", "leaderboard.md")


def check_run_name(name: Any, key: str = "model.name") -> str:
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
        raise SettingsError([f"{key}: {name!r} is not allowed; allowed: {RUN_NAME_RULE}"])
    if name.lower() in RESERVED_RUN_NAMES:
        raise SettingsError([f"{key}: {name!r} is not allowed: the project's own outputs are named "
                             f"{', '.join(RESERVED_RUN_NAMES)} beside the model folders"])
    return name


# -- family preparation ----------------------------------------------------------------------------

class PrepareOptions(Settings):
    """``<view>.prepare``: where the view's upstream release is and what kind of data it holds.

    Families with more options subclass this (e.g. VisualDecisionBench's ``verify_media``)."""

    source: str = Field(description="the release folder (e.g. data/01_raw/<family>/sample)")
    data: DataKind = Field(
        "official", description="official = the upstream release; sample/synthetic = data written by jevkedro")


def prepare_options_model(view: str) -> type[PrepareOptions]:
    from jevkedro.registry import family_of

    return getattr(family_of(view).module(), "PrepareOptions", PrepareOptions)


def parse_prepare_options(view: str, values: Mapping[str, Any] | PrepareOptions | None) -> PrepareOptions:
    if isinstance(values, PrepareOptions):
        return values
    options = parse_group(prepare_options_model(view), values, f"{view}.prepare.")
    assert isinstance(options, PrepareOptions)
    return options


# -- regression gates ------------------------------------------------------------------------------

def _number_only(value: Any) -> Any:
    # thresholds compare with numbers: "0.3" or true would be a typo, never a threshold; nor is a
    # NaN (every comparison with it is false: a gate that can never fail) or an infinity
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return float(value)


Number = Annotated[float, BeforeValidator(_number_only)]
Fraction = Annotated[Number, Ge(0), Le(1)]
NonNegativeNumber = Annotated[Number, Ge(0)]


class GateThresholds(Settings):
    """Thresholds one view must meet after scoring (``gates.<view>`` or ``gates.all``); a view
    that falls short makes ``kedro run`` exit non-zero naming the view, gate, threshold and value."""

    min_accuracy: Fraction | None = Field(None, description="overall accuracy at least this")
    min_accuracy_ci_low: Fraction | None = Field(None, description="lower 95% bootstrap bound of accuracy at least this")
    max_ece: Fraction | None = Field(None, description="overall ECE at most this")
    max_ece_ci_high: Fraction | None = Field(None, description="upper 95% bootstrap bound of ECE at most this")
    max_nll: NonNegativeNumber | None = Field(None, description="overall NLL at most this")
    max_brier: NonNegativeNumber | None = Field(None, description="overall Brier score at most this")
    min_valid_fraction: Fraction | None = Field(None, description="share of questions answered validly at least this")
    max_errors: Annotated[StrictInt, Ge(0)] | None = Field(None, description="requests with an error status at most this")
    max_latency_p95_ms: NonNegativeNumber | None = Field(None, description="request latency p95 (ms) at most this")
    min_official: Number | None = Field(None, description="the family's official headline at least this")
    require_complete: StrictBool | None = Field(None, description="true: every request must have been attempted")
    baseline: str | None = Field(None, description="a model.name whose current run on the same snapshot this run "
                                 "must not fall behind by more than the max_drop_/max_rise_ margins")
    max_drop_accuracy: Fraction | None = Field(None, description="accuracy below the baseline's by at most this "
                                               "(one-sided 95% bound, Holm over the view's baseline gates)")
    max_rise_nll: NonNegativeNumber | None = Field(None, description="NLL above the baseline's by at most this")
    max_rise_brier: NonNegativeNumber | None = Field(None, description="Brier score above the baseline's by at most this")
    max_rise_ece: Fraction | None = Field(None, description="ECE above the baseline's by at most this (bootstrap bound)")

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline_is_a_run_name(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not RUN_NAME.fullmatch(value)):
            raise ValueError(f"must be a model.name: {RUN_NAME_RULE}")
        return value


# the gates that compare with gates.<view>.baseline: gate -> the metric it bounds
BASELINE_GATES = {"max_drop_accuracy": "accuracy", "max_rise_nll": "nll", "max_rise_brier": "brier",
                  "max_rise_ece": "ece"}


GATE_SCOPE_ALL = "all"


def parse_gates(values: Mapping[str, Any] | None) -> dict[str, GateThresholds]:
    """The ``gates`` group: ``all`` and/or view names, each a :class:`GateThresholds` mapping."""
    from jevkedro.registry import VIEWS

    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SettingsError([f"gates: expected a mapping of views to thresholds, got {values!r}"])
    problems: list[str] = []
    out: dict[str, GateThresholds] = {}
    for scope, group in values.items():
        if scope != GATE_SCOPE_ALL and scope not in VIEWS:
            problems.append(unknown_key_problem("gates.", str(scope), (GATE_SCOPE_ALL, *VIEWS)))
            continue
        try:
            out[str(scope)] = parse_group(GateThresholds, group, f"gates.{scope}.")  # type: ignore[assignment]
        except SettingsError as exc:
            problems += exc.problems
    if not problems:
        problems += _baseline_problems(out)
    if problems:
        raise SettingsError(problems)
    return out


def _baseline_problems(gates: Mapping[str, GateThresholds]) -> list[str]:
    """A ``max_drop_``/``max_rise_`` margin needs a baseline to compare with, and a baseline with
    no margin checks nothing (a typo in a margin's name would leave it silently unchecked); judged
    on the settings as they apply to each view (``gates.all`` then ``gates.<view>``): a margin of
    ``gates.all`` applies to the views that have a baseline."""
    problems = []
    for scope, group in gates.items():
        merged = [gates_for(gates, v) for v in ([scope] if scope != GATE_SCOPE_ALL else _views())]
        margins = [g for g in BASELINE_GATES if getattr(group, g) is not None]
        if margins and not any(m.baseline for m in merged):
            problems.append(f"gates.{scope}.{margins[0]}: compares with a baseline, but no gates.{scope}.baseline "
                            "(a model.name) is set")
        if group.baseline and not any(getattr(m, g) is not None for m in merged for g in BASELINE_GATES):
            problems.append(f"gates.{scope}.baseline: set, but no margin to check against it (one or more of: "
                            + ", ".join(f"gates.{scope}.{g}" for g in BASELINE_GATES) + ")")
    return problems


def _views() -> tuple[str, ...]:
    from jevkedro.registry import VIEWS

    return tuple(VIEWS)


def gates_for(gates: Mapping[str, GateThresholds], view: str) -> GateThresholds:
    """The thresholds that apply to ``view``: ``gates.all`` overridden key by key by ``gates.<view>``."""
    merged = {**(gates[GATE_SCOPE_ALL].model_dump(exclude_none=True) if GATE_SCOPE_ALL in gates else {}),
              **(gates[view].model_dump(exclude_none=True) if view in gates else {})}
    return GateThresholds(**merged)
