"""What the readers of ``report.json`` rely on, checked before they read it.

A report is written by the ``report`` node, but the file can be edited or copied by hand. The leaderboard
(:mod:`jevkedro.summary`) and ``python -m jevkedro.compare`` read a handful of its fields directly; a
field missing or of another type would end in a traceback far from the file. :func:`report_problem`
checks exactly the fields a reader declares (:data:`LEADERBOARD_FIELDS`, :data:`COMPARE_FIELDS`) and
names each one that is wrong, so the reader can skip or refuse the file naming the file and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from jevkedro.config import SettingsError, check_run_name
from jevkedro.protocol import DATA_KINDS

Check = Callable[[Any], str | None]  # None when the value is fine, else what it is and what was expected


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number" if math.isfinite(value) else f"{value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _expect(ok: Callable[[Any], bool], what: str, null: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if (null and value is None) or ok(value):
            return None
        return f"is {_kind(value)}, expected {what}" + (" or null" if null else "")
    return check


def _name(value: Any) -> str | None:
    try:
        check_run_name(value, "name")
    except SettingsError:
        return f"is {value!r}, expected a plain name (as model.name)"[:200]
    return None


def _pair(value: Any) -> str | None:
    if value is None or (isinstance(value, list) and len(value) == 2 and all(v is None or _number(v) for v in value)):
        return None
    return f"is {_kind(value)}, expected a pair of numbers or null"


def _gates(value: Any) -> str | None:
    if value is None or (isinstance(value, list) and all(isinstance(g, dict) and isinstance(g.get("message"), str)
                                                         for g in value)):
        return None
    return f"is {_kind(value)}, expected a list of gates with a message each"


def _run(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"is {_kind(value)}, expected an object or null"
    if value.get("complete") is False and not _count(value.get("unattempted_requests")):
        return "says complete: false without a count of unattempted_requests"
    return None


def _main_metric(value: Any) -> str | None:
    if not isinstance(value, dict) or "name" not in value or "value" not in value:
        return None  # not a headline (the generic accuracy is shown)
    if not isinstance(value["name"], str):
        return f"name is {_kind(value['name'])}, expected a string"
    return None if value["value"] is None or _number(value["value"]) else \
        f"value is {_kind(value['value'])}, expected a number or null"


def _counts(value: Any) -> str | None:
    if value is None or (isinstance(value, dict) and all(_count(v) for v in value.values())):
        return None
    return f"is {_kind(value)}, expected counts per status" if not isinstance(value, dict) else \
        "holds a value that is not a count"


OBJECT = _expect(lambda v: isinstance(v, dict), "an object")
OBJECT_OR_NULL = _expect(lambda v: isinstance(v, dict), "an object", null=True)
NUMBER_OR_NULL = _expect(_number, "a number", null=True)
COUNT = _expect(_count, "a count (an integer ≥ 0)")
COUNT_OR_NULL = _expect(_count, "a count (an integer ≥ 0)", null=True)
FLAG_OR_NULL = _expect(lambda v: isinstance(v, bool), "true or false", null=True)
TEXT_OR_NULL = _expect(lambda v: isinstance(v, str), "a string", null=True)
# the resolved model version, or every version when the records name several (nodes.report)
MODEL_ID = _expect(lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
                   "a string or a list of strings", null=True)
DATA_KIND = _expect(lambda v: v in DATA_KINDS, "one of " + ", ".join(DATA_KINDS), null=True)
SHA256 = _expect(lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None, "a sha256 (64 hex digits)")

# (field, check, required): a required field must be there (its check says whether null is allowed); an
# optional one may be missing or sit under a missing or null object. Every object on a field's way must be
# an object where it is there: the readers look inside it.
Fields = tuple[tuple[str, Check, bool], ...]

LEADERBOARD_FIELDS: Fields = (  # jevkedro.summary: the table's cell and nodes.report.summary_line
    ("model", _name, True), ("view", _name, True), ("data", DATA_KIND, False),
    ("metrics", OBJECT, True), ("metrics.overall", OBJECT, True),
    ("metrics.overall.accuracy", NUMBER_OR_NULL, True), ("metrics.overall.ece", NUMBER_OR_NULL, True),
    ("coverage", OBJECT, True), ("coverage.questions", COUNT, True), ("coverage.by_status", _counts, False),
    ("intervals", OBJECT_OR_NULL, False), ("intervals.overall", OBJECT_OR_NULL, False),
    ("intervals.overall.accuracy", _pair, False),
    ("official", OBJECT_OR_NULL, False), ("official.main_metric", _main_metric, False),
    ("latency", OBJECT_OR_NULL, False), ("latency.p50", NUMBER_OR_NULL, False),
    ("run", _run, False), ("run.error_requests", COUNT_OR_NULL, False),
    ("errors", OBJECT_OR_NULL, False), ("errors.requests", COUNT_OR_NULL, False),
    ("gates", OBJECT_OR_NULL, False), ("gates.failed", _gates, False),
)

COMPARE_FIELDS: Fields = (  # jevkedro.compare: pairing on one snapshot, and what the comparison records
    ("model", _name, True), ("view", _name, True), ("snapshot_sha256", SHA256, True),
    ("probability_source", TEXT_OR_NULL, False), ("model_id", MODEL_ID, False),
)

_MISSING = object()


def report_problem(report: Any, fields: Fields) -> str | None:
    """What is wrong with the ``fields`` of ``report`` (each field named), or None."""
    if not isinstance(report, Mapping):
        return f"not a report (expected an object, got {_kind(report)})"
    problems: list[str] = []
    for field, check, required in fields:
        value: Any = report
        for part in field.split("."):
            value = value.get(part, _MISSING) if isinstance(value, Mapping) else _MISSING
            if value is _MISSING or value is None:
                break
        if value is _MISSING:
            if required and not _parent_reported(field, problems):
                problems.append(f"field {field} is missing")
            continue
        if value is None and not required:
            continue
        wrong = check(value)
        if wrong and not _parent_reported(field, problems):
            problems.append(f"field {field} {wrong}")
    return "; ".join(problems) if problems else None


def _parent_reported(field: str, problems: list[str]) -> bool:
    return any(field.startswith(p.split(" ")[1] + ".") for p in problems)
