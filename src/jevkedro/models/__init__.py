"""Model adapters, found by the name given in ``model.adapter``."""

from __future__ import annotations

import importlib
from typing import Any

from jevkedro.models.base import Adapter, AdapterResult, StopRun

# adapter name -> "module:Class"; imported lazily so optional extras stay optional.
ADAPTERS: dict[str, str] = {
    "sparrow": "jevkedro.models.sparrow:SparrowAdapter",
    "replay": "jevkedro.models.replay:ReplayAdapter",
    "systemone": "jevkedro.models.systemone:SystemOneAdapter",
    "openai_compat": "jevkedro.models.openai_compat:OpenAICompatAdapter",
    "minilm": "jevkedro.models.minilm:MiniLMAdapter",
}

# Settings that configure the engine or name the run rather than the adapter.
ENGINE_KEYS = {"adapter", "name", "concurrency", "batch_size", "retry", "progress",
               "max_consecutive_failures", "fsync", "fsync_interval_s", "price_input_per_1m",
               "price_output_per_1m", "executor", "workers", "scheduler", "shard_size",
               "shard_store"}


def make_adapter(settings: dict[str, Any]) -> Adapter:
    """Build the adapter named by ``settings["adapter"]`` from the ``model`` parameters."""
    kind = settings.get("adapter", "sparrow")
    if kind not in ADAPTERS:
        raise ValueError(f"unknown model.adapter {kind!r}; known: {', '.join(sorted(ADAPTERS))}")
    module, cls = ADAPTERS[kind].split(":")
    adapter_cls = getattr(importlib.import_module(module), cls)
    kwargs = {k: v for k, v in settings.items() if k not in ENGINE_KEYS and v is not None}
    return adapter_cls(**kwargs)


__all__ = ["ADAPTERS", "Adapter", "AdapterResult", "StopRun", "make_adapter"]
