"""Sample results: one rule for telling a result on data jevkedro wrote from a benchmark result.

A report records the kind of data its snapshot holds (``report.json``'s ``data``, from the view's
``<view>.prepare.data``: ``official`` = the upstream release; ``sample`` or ``synthetic`` = data
jevkedro wrote). Every place a number is shown marks a non-official one as ``sample``
(:func:`is_sample`) and says once what that means (:data:`SAMPLE_NOTE`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAMPLE_TAG = "[sample]"
SAMPLE_NOTE = ("[sample]: run on data jevkedro wrote (a small sample or synthetic set), not on the official "
               "release: such numbers check the pipeline, not a model's skill")


def is_sample(report: Mapping[str, Any]) -> bool:
    """True unless the report says its data is the official release (a report that does not say is a
    sample: a result is never taken for a benchmark's without its word)."""
    return report.get("data") != "official"
