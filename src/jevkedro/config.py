"""Typed settings: every parameter group is a model checked before the first node runs.

Parameter groups (``conf/base/parameters*.yml`` plus ``kedro run --params``):

- ``model``: the adapter (``model.adapter``), the run's name (``model.name``), the engine settings
  (:class:`EngineSettings`: concurrency, retries, executor, fsync, ...) and the adapter's own options
  (each adapter class declares them as its ``Options`` model, e.g. ``SystemOneAdapter.Options``);
- ``<view>.prepare``: the family's :class:`PrepareOptions` (release folder, data kind, extras).

The lists live once: views in :mod:`jevkedro.registry`, engine keys in :class:`EngineSettings`, an
adapter's keys in its ``Options``. A key that is in none of them is refused, naming it and the closest
known key; a wrong type or range is refused naming the setting and what is allowed. ``null`` means
"not set" (the model's default applies), so ``parameters.yml`` may list every adapter's keys as null.

:class:`jevkedro.hooks.CheckSettings` runs :func:`check_parameters` when the Kedro context is created,
so ``kedro run`` stops before any node with every problem listed. The node functions take the typed
models (Kedro instantiates a pydantic-annotated ``params:`` input itself).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from annotated_types import Ge, Gt, Le
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from jevkedro.protocol import DataKind

# -- base ------------------------------------------------------------------------------------------


class SettingsError(ValueError):
    """One or more settings are unknown or out of range; the message lists each, by its full key."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n  " + "\n  ".join(self.problems))


class Settings(BaseModel):
    """A settings group: unknown keys are refused, numbers must be numbers (not strings or booleans)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[StrictInt, Ge(1)]
NonNegativeFloat = Annotated[StrictFloat, Ge(0)]
PositiveFloat = Annotated[StrictFloat, Gt(0)]


def _described(annotation: Any) -> str:
    """A short phrase for what a field accepts: "an integer ≥ 1", "one of: local, dask", ..."""
    text = str(annotation)
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin in (tuple, list) and args:
        return "a list of " + _described(args[0]).replace("one of: ", "values from: ")
    if annotation is bool:
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


def _closest(key: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key_problem(prefix: str, key: str, known: Iterable[str]) -> str:
    known = sorted(known)
    hint = _closest(key, known)
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
            known = (parent[0].model_fields[parent[1]].annotation.model_fields if parent else model.model_fields)
            out.append(unknown_key_problem(key[: len(key) - len(str(loc[-1]))], str(loc[-1]), known))
            continue
        target = _model_at(model, loc)
        allowed = describe_field(*target) if target else err["msg"]
        if err["type"] == "missing":
            out.append(f"{key}: missing; required: {allowed}")
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


# -- the engine ------------------------------------------------------------------------------------

RETRY_KINDS = ("429", "5xx", "timeout", "connection")
RetryKind = Literal["429", "5xx", "timeout", "connection"]
FSYNC_POLICIES = ("always", "interval", "never")
EXECUTORS = ("local", "dask")


class RetrySettings(Settings):
    """Which failures are tried again, how often and after how long (``model.retry``)."""

    max_attempts: PositiveInt = Field(1, description="1 = no retries (JevBench's policy)")
    kinds: tuple[RetryKind, ...] = RETRY_KINDS
    backoff_s: NonNegativeFloat = 1.0
    backoff_max_s: NonNegativeFloat = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based); doubling, capped;
        a ``retry-after`` header wins over the backoff (still capped)."""
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        return min(self.backoff_s * 2 ** (attempt - 1), self.backoff_max_s)


class EngineSettings(Settings):
    """How the inference engine runs a view (``model.<key>``); recorded in ``run.json``."""

    concurrency: Annotated[StrictInt, Ge(1), Le(1024)] = Field(1, description="requests in flight at once (remote adapters)")
    batch_size: PositiveInt | None = Field(None, description="requests per forward pass (local adapters; null: the adapter's default)")
    retry: RetrySettings = RetrySettings()
    max_consecutive_failures: PositiveInt = Field(3, description="infrastructure failures in a row that stop the run")
    fsync: Literal["always", "interval", "never"] = "interval"
    fsync_interval_s: PositiveFloat = 1.0
    progress: NonNegativeFloat = Field(5.0, description="seconds between progress lines; 0: only at the end")
    price_input_per_1m: NonNegativeFloat | None = Field(None, description="USD per 1M input tokens (unknown: null)")
    price_output_per_1m: NonNegativeFloat | None = Field(None, description="USD per 1M output tokens (unknown: null)")
    executor: Literal["local", "dask"] = "local"
    workers: PositiveInt = Field(2, description="dask: LocalCluster worker processes")
    scheduler: str | None = Field(None, description="dask: address of an existing scheduler")
    shard_size: PositiveInt = Field(64, description="dask: requests per shard")
    shard_store: str | None = Field(None, description="dask: fsspec URL or local path of the optional crash-safe shard store")

    @field_validator("shard_store")
    @classmethod
    def _no_secret_in_store(cls, value: str | None) -> str | None:
        # recorded in run.json and as an MLflow param: the store's credentials come from each
        # process's environment (e.g. AWS_* for s3://), never from the URL
        if value is not None:
            parts = urlsplit(value)
            if parts.password is not None or parts.query:
                raise ValueError("must not carry a password or a query (tokens)")
        return value

    @classmethod
    def from_model(cls, model: Mapping[str, Any]) -> EngineSettings:
        """The engine part of a flat ``model`` mapping (checked like every other key)."""
        return ModelSettings.parse(model).engine

    @model_validator(mode="before")
    @classmethod
    def _progress_off(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("progress") is False:  # `progress: false` = no periodic lines
            return {**data, "progress": 0.0}
        return data


# -- the model group -------------------------------------------------------------------------------

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
RUN_NAME_RULE = ("1-128 characters from letters, digits, '.', '_', '+', '-', starting with a letter or digit "
                 "(it names output folders and MLflow runs)")


def check_run_name(name: Any, key: str = "model.name") -> str:
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name):
        raise SettingsError([f"{key}: {name!r} is not allowed; allowed: {RUN_NAME_RULE}"])
    return name


class AdapterOptions(Settings):
    """Base of every adapter's ``Options``: the adapter-specific ``model.<key>`` settings."""


class ModelSettings(BaseModel):
    """The ``model`` parameter group, typed: ``adapter``, ``name``, the engine and the adapter's options.

    Built from the flat mapping users write (``model.concurrency``, ``model.endpoint``, ...) by
    :meth:`parse`; :meth:`flat` gives it back (None left out), for ``run.json``, MLflow and Dask workers.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    COMMON_KEYS: ClassVar[tuple[str, ...]] = ("adapter", "name")

    adapter: str
    name: str | None = None
    engine: EngineSettings = EngineSettings()
    options: SerializeAsAny[AdapterOptions] = AdapterOptions()

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "engine" not in data and "options" not in data:
            return cls._split(data)
        return data

    @classmethod
    def parse(cls, values: Mapping[str, Any] | ModelSettings, require_name: bool = False) -> ModelSettings:
        """Validate a flat ``model`` mapping; raises :class:`SettingsError` listing every problem."""
        if isinstance(values, ModelSettings):
            settings = values
        else:
            if not isinstance(values, Mapping):
                raise SettingsError([f"model: expected a mapping of settings, got {values!r}"])
            settings = cls.model_validate(cls._split(values))
        if require_name or settings.name is not None:
            check_run_name(settings.name)
        return settings

    @classmethod
    def _split(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        from jevkedro.models import ADAPTERS, adapter_class

        problems: list[str] = []
        adapter = values.get("adapter") or "sparrow"
        if adapter not in ADAPTERS:
            hint = _closest(str(adapter), ADAPTERS)
            raise SettingsError([f"model.adapter: unknown adapter {adapter!r}" + (f"; did you mean {hint!r}?" if hint else "")
                                 + f" (known: {', '.join(sorted(ADAPTERS))})"])
        options_model = adapter_class(adapter).Options
        engine_keys, own_keys = set(EngineSettings.model_fields), set(options_model.model_fields)
        other_adapters = {k: name for name in ADAPTERS for k in adapter_class(name).Options.model_fields}
        engine_values, option_values = {}, {}
        for key, value in values.items():
            if key in cls.COMMON_KEYS:
                continue
            if key in engine_keys:
                engine_values[key] = value
            elif key in own_keys:
                option_values[key] = value
            elif key in other_adapters:
                if value is not None:  # parameters.yml lists every adapter's keys as null
                    users = sorted(n for n in ADAPTERS if key in adapter_class(n).Options.model_fields)
                    problems.append(f"model.{key}: a setting of the {', '.join(users)} adapter(s), "
                                    f"not of model.adapter={adapter}")
            else:
                known = set(cls.COMMON_KEYS) | engine_keys | own_keys
                problems.append(unknown_key_problem("model.", str(key), known))
        engine = options = None
        try:
            engine = parse_group(EngineSettings, engine_values, "model.")
        except SettingsError as exc:
            problems += exc.problems
        try:
            options = parse_group(options_model, option_values, "model.")
        except SettingsError as exc:
            problems += exc.problems
        if problems:
            raise SettingsError(problems)
        return {"adapter": adapter, "name": values.get("name"), "engine": engine, "options": options}

    def flat(self) -> dict[str, Any]:
        """The settings as users write them (``null``/unset left out)."""
        return {"adapter": self.adapter, **({"name": self.name} if self.name else {}),
                **self.engine.model_dump(mode="json"), **self.options.model_dump(mode="json", exclude_none=True)}


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
    return parse_group(prepare_options_model(view), values, f"{view}.prepare.")


# -- regression gates ------------------------------------------------------------------------------

def _number_only(value: Any) -> Any:
    # thresholds compare with numbers: "0.3" or true would be a typo, never a threshold
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {type(value).__name__}")
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
    require_complete: bool | None = Field(None, description="true: every request must have been attempted")


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
    if problems:
        raise SettingsError(problems)
    return out


def gates_for(gates: Mapping[str, GateThresholds], view: str) -> GateThresholds:
    """The thresholds that apply to ``view``: ``gates.all`` overridden key by key by ``gates.<view>``."""
    merged = {**(gates[GATE_SCOPE_ALL].model_dump(exclude_none=True) if GATE_SCOPE_ALL in gates else {}),
              **(gates[view].model_dump(exclude_none=True) if view in gates else {})}
    return GateThresholds(**merged)


# -- all parameters --------------------------------------------------------------------------------

VIEW_GROUP_KEYS = ("prepare",)
TOP_GROUPS = ("model", "gates")


def check_parameters(params: Mapping[str, Any]) -> tuple[ModelSettings, dict[str, PrepareOptions]]:
    """Check every parameter group (unknown groups and keys, types, ranges); return the typed
    ``model`` settings and each view's prepare options. Raises :class:`SettingsError` listing
    every problem found."""
    from jevkedro.registry import VIEWS

    problems: list[str] = []
    model = None
    prepare: dict[str, PrepareOptions] = {}
    for group in params:
        if group not in TOP_GROUPS and group not in VIEWS:
            problem = unknown_key_problem("", str(group), (*TOP_GROUPS, *VIEWS))
            problems.append(problem.replace("unknown setting", "unknown parameter group"))
    try:
        parse_gates(params.get("gates"))
    except SettingsError as exc:
        problems += exc.problems
    try:
        model = ModelSettings.parse(params.get("model") or {}, require_name=True)
    except SettingsError as exc:
        problems += exc.problems
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
