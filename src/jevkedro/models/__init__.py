"""Model adapters, found by the name given in ``model.adapter``.

Each adapter class declares its own settings as a nested ``Options`` model (a
:class:`jevkedro.models.settings.AdapterOptions`); :class:`jevkedro.models.settings.ModelSettings`
checks ``model.<key>`` against the chosen adapter's ``Options`` and the engine's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jevkedro.models.base import Adapter, AdapterResult, StopRun
from jevkedro.models.settings import ADAPTERS, ModelSettings, adapter_class


def make_adapter(settings: ModelSettings | Mapping[str, Any]) -> Adapter:
    """Build the adapter named by ``model.adapter`` from the (typed or flat) ``model`` settings."""
    settings = ModelSettings.parse(settings)
    return adapter_class(settings.adapter)(**settings.options.model_dump(exclude_none=True))


__all__ = ["ADAPTERS", "Adapter", "AdapterResult", "StopRun", "adapter_class", "make_adapter"]
