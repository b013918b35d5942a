"""The ``model`` settings: the engine's (:class:`EngineSettings`), each adapter's ``Options`` and the
adapter registry, typed and checked before any node runs.

``model`` is one flat group in ``parameters.yml`` (``model.concurrency``, ``model.endpoint``, ...);
:meth:`ModelSettings.parse` splits it into the engine's keys and the chosen adapter's own keys and
refuses a key that belongs to neither (naming the adapter it belongs to, or the closest known key).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from annotated_types import Ge, Gt, Le
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, SerializeAsAny, StrictFloat, StrictInt, field_validator, model_validator

from jevkedro.config import Settings, SettingsError, check_run_name, closest, parse_group, unknown_key_problem

if TYPE_CHECKING:
    from jevkedro.models.base import Adapter

PositiveInt = Annotated[StrictInt, Ge(1)]
NonNegativeFloat = Annotated[StrictFloat, Ge(0), AllowInfNan(False)]  # 1e400 reads as infinity: refused
PositiveFloat = Annotated[StrictFloat, Gt(0), AllowInfNan(False)]
# USD per 1M tokens. No model costs a billion: a larger price is a slip, and under the cap a cost
# (a count is at most 2**53 tokens, nodes.engine.Tariff) and any run's total stay finite numbers.
MAX_PRICE_PER_1M = 1e9
Price = Annotated[StrictFloat, Ge(0), Le(MAX_PRICE_PER_1M), AllowInfNan(False)]

# -- the engine ------------------------------------------------------------------------------------

RetryKind = Literal["429", "5xx", "timeout", "connection"]
RETRY_KINDS: tuple[RetryKind, ...] = ("429", "5xx", "timeout", "connection")
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
    price_input_per_1m: Price | None = Field(None, description="USD per 1M input tokens (unknown: null)")
    price_output_per_1m: Price | None = Field(None, description="USD per 1M output tokens (unknown: null)")
    executor: Literal["local", "dask"] = "local"
    workers: PositiveInt = Field(2, description="dask: LocalCluster worker processes")
    scheduler: str | None = Field(None, description="dask: address of an existing scheduler")
    shard_size: PositiveInt = Field(64, description="dask: requests per shard")
    shard_store: str | None = Field(None, description="dask: fsspec URL or local path of the optional crash-safe shard store")
    repeats: PositiveInt = Field(1, description="answers asked of every request (stochastic models; docs/inference.md)")

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


# -- adapters --------------------------------------------------------------------------------------

# adapter name -> "module:Class"; imported when named, so optional extras stay optional (adapter
# modules import their heavy dependencies only in ``setup``).
ADAPTERS: dict[str, str] = {
    "sparrow": "jevkedro.models.sparrow:SparrowAdapter",
    "replay": "jevkedro.models.replay:ReplayAdapter",
    "systemone": "jevkedro.models.systemone:SystemOneAdapter",
    "openai_compat": "jevkedro.models.openai_compat:OpenAICompatAdapter",
    "minilm": "jevkedro.models.minilm:MiniLMAdapter",
}


def adapter_class(kind: str) -> type[Adapter]:
    if kind not in ADAPTERS:
        raise ValueError(f"unknown model.adapter {kind!r}; known: {', '.join(sorted(ADAPTERS))}")
    module, cls = ADAPTERS[kind].split(":")
    return getattr(importlib.import_module(module), cls)


# -- the model group -------------------------------------------------------------------------------

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
        problems: list[str] = []
        adapter = values.get("adapter") or "sparrow"
        if adapter not in ADAPTERS:
            hint = closest(str(adapter), ADAPTERS)
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
        if isinstance(engine, EngineSettings) and engine.repeats > 1:  # repeated sampling: a stochastic model, the local engine
            problems += [p for p in (adapter_class(adapter).repeats_problem(engine.repeats),) if p]
            if engine.executor == "dask":
                problems.append(f"model.repeats={engine.repeats}: the dask executor asks each request once; "
                                "use model.executor=local for repeated sampling")
        if problems:
            raise SettingsError(problems)
        return {"adapter": adapter, "name": values.get("name"), "engine": engine, "options": options}

    def flat(self) -> dict[str, Any]:
        """The settings as users write them (``null``/unset left out)."""
        return {"adapter": self.adapter, **({"name": self.name} if self.name else {}),
                **self.engine.model_dump(mode="json", exclude={"repeats"} if self.engine.repeats == 1 else None),  # K=1: as before
                **self.options.model_dump(mode="json", exclude_none=True)}


# -- family preparation ----------------------------------------------------------------------------
