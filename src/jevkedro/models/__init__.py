"""Model adapters, found by the name given in ``model.adapter``.

Each adapter class declares its own settings as a nested ``Options`` model (a
:class:`jevkedro.config.AdapterOptions`); :class:`jevkedro.config.ModelSettings` checks
``model.<key>`` against the chosen adapter's ``Options`` and the engine's settings.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jevkedro.models.base import Adapter, AdapterResult, StopRun

if TYPE_CHECKING:
    from jevkedro.config import ModelSettings

# adapter name -> "module:Class"; imported lazily so optional extras stay optional (adapter modules
# import their heavy dependencies only in ``setup``).
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


def make_adapter(settings: ModelSettings | Mapping[str, Any]) -> Adapter:
    """Build the adapter named by ``model.adapter`` from the (typed or flat) ``model`` settings."""
    from jevkedro.config import ModelSettings

    settings = ModelSettings.parse(settings)
    return adapter_class(settings.adapter)(**settings.options.model_dump(exclude_none=True))


__all__ = ["ADAPTERS", "Adapter", "AdapterResult", "StopRun", "adapter_class", "make_adapter"]
