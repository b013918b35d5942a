"""What a prediction record keeps of a reply body, and the rule that binds its parsed copy to it.

**One source.** A record that stores a body (``raw_response``: an HTTP reply, or a replay line that
reading changed) has its body-derived fields (``response``, ``model``, ``usage`` and the
``duplicate_keys``/``verbalized_problem`` notes in ``meta``) derived from the *stored* text by the
adapter's own reader (:meth:`jevkedro.models.base.Adapter.read_body`, named by ``body_reader``),
when it is written (:func:`keep_body`) and again when it is read (:func:`body_problem`): a record
whose fields say anything else is refused naming file and line, so what is scored is what the body
says. A record of an HTTP reply (``http_status``) or naming a reader must hold its body.

**Bounded.** A body of at most :data:`KEEP_BYTES` (UTF-8) is kept as received. A larger one keeps
only what the protocol reads (:meth:`~jevkedro.models.base.Adapter.protocol_part`: for System One
``model``, ``usage`` and ``answers``), written again as JSON with every repeated key written twice
(a repeat outside that part as its top-level key, twice, with ``null``), so the reader derives the
same verdicts from it; the record says so (``raw_truncated: true``, ``raw_bytes`` and
``raw_sha256`` of the body received, ``raw_excerpt``: its first :data:`EXCERPT_CHARS` characters).
An error body over the limit keeps only the excerpt.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jevkedro.models.base import Adapter, AdapterResult, BodyFields
from jevkedro.models.settings import ADAPTERS, adapter_class
from jevkedro.nodes.jsonparse import JSONTextError, parse_json

KEEP_BYTES = 256 * 1024  # a body up to this size is stored as received
EXCERPT_CHARS = 2048  # what is kept of the rest of a larger body
SCORED = "what is scored must be the answer received"
BODY_META = ("duplicate_keys", "verbalized_problem")  # the notes of meta a reader derives


def reader(kind: str) -> type[Adapter] | None:
    """The adapter class whose :meth:`~Adapter.read_body` reads bodies recorded under ``kind``."""
    cls = adapter_class(kind) if kind in ADAPTERS else None
    return cls if cls is not None and cls.reads_bodies else None


def readers() -> list[type[Adapter]]:
    return [cls for kind in ADAPTERS if (cls := reader(kind)) is not None]


def derive(cls: type[Adapter], text: str, model: str | None) -> BodyFields:
    """The body-derived fields of ``text`` as ``cls`` reads them (``model``: the record's model when
    the body names none). Raises ``JSONTextError`` for a text that is not JSON."""
    parsed = parse_json(text)
    return cls.read_body(parsed.value, [list(p) for p in parsed.duplicate_keys], model)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dump_with_repeats(value: Any, repeats: list[list[Any]]) -> str:
    """``value`` as JSON text in which each key at a path of ``repeats`` is written twice (with its
    value), so that reading the text finds the same repeats."""
    paths = {tuple(p) for p in repeats}
    prefixes = {p[:i] for p in paths for i in range(len(p))}

    def enc(v: Any, path: tuple[Any, ...]) -> str:
        if path not in prefixes:
            return _json(v)
        if isinstance(v, dict):
            parts = []
            for k, x in v.items():
                member = f"{_json(k)}:{enc(x, (*path, k))}"
                parts += [member, member] if (*path, k) in paths else [member]
            return "{" + ",".join(parts) + "}"
        if isinstance(v, list):
            return "[" + ",".join(enc(x, (*path, i)) for i, x in enumerate(v)) + "]"
        return _json(v)

    return enc(value, ())


def protocol_text(cls: type[Adapter], value: Any, repeats: list[list[Any]]) -> str:
    """The JSON text of what ``cls``'s protocol reads of ``value``, its repeats kept (a repeat
    outside that part as its top-level key, twice, with ``null``: it still touches every question)."""
    kept = cls.protocol_part(value)
    inside = [p for p in repeats if _holds(kept, p)]
    outside = sorted({str(p[0]) for p in repeats if not _holds(kept, p) and p}, key=str)
    if isinstance(kept, dict) and outside:
        kept = {**kept, **{k: None for k in outside if k not in kept}}
        inside += [[k] for k in outside]
    return dump_with_repeats(kept, inside)


def _holds(value: Any, path: list[Any]) -> bool:
    for step in path:
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
            value = value[step]
        else:
            return False
    return True


def _set_fields(rec: dict[str, Any], fields: BodyFields) -> None:
    rec["response"], rec["model"], rec["usage"] = fields.response, fields.model, fields.usage
    meta = {k: v for k, v in (rec.get("meta") or {}).items() if k not in BODY_META}
    meta.update({k: v for k, v in fields.meta.items() if k in BODY_META and v})
    if meta:
        rec["meta"] = meta
    else:
        rec.pop("meta", None)


def keep_body(rec: dict[str, Any], result: AdapterResult, cls: type[Adapter] | None) -> None:
    """Store ``result.raw`` in ``rec`` bounded, and (an ``ok`` result read by ``cls``) derive the
    record's body fields from what is stored.

    The stored text is the body as received (redacted) when it says what the adapter read, bounded
    to its protocol part when large. When the redaction changed what it says (a short key such as
    ``true`` replaced inside the text: see :mod:`jevkedro.redaction`), the answer as read, with its
    strings redacted, is written again as the stored text (``raw_rewritten: "redacted"``; the text
    received, redacted, begins ``raw_excerpt``)."""
    raw = result.raw
    assert raw is not None
    size = len(raw.encode("utf-8", "surrogatepass"))
    big = size > KEEP_BYTES
    if big:
        rec.update(raw_truncated=True, raw_bytes=size,
                   raw_sha256=hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest(),
                   raw_excerpt=raw[:EXCERPT_CHARS])
    if cls is None or result.status != "ok":
        rec["raw_response"] = raw[:EXCERPT_CHARS] if big else raw
        return
    rec["body_reader"] = cls.kind
    model = rec.get("model") if isinstance(rec.get("model"), str) else None
    try:
        parsed = parse_json(raw)
        repeats = [list(p) for p in parsed.duplicate_keys]
        faithful = _matches(rec, cls.read_body(parsed.value, repeats, model)) is None
    except JSONTextError:
        faithful = False
    if faithful:
        text = protocol_text(cls, parsed.value, repeats) if big else raw
    else:
        value, repeats = cls.body_of(result)
        text = protocol_text(cls, value, repeats) if big else dump_with_repeats(value, repeats)
        rec.update(raw_rewritten="redacted", raw_excerpt=raw[:EXCERPT_CHARS])
    rec["raw_response"] = text
    _set_fields(rec, derive(cls, text, model))


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (a NaN equals a NaN)."""
    if a == b:
        return True
    try:
        return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)
    except (TypeError, ValueError):
        return False


def _matches(rec: Mapping[str, Any], fields: BodyFields) -> str | None:
    """The first body-derived field of ``rec`` that is not what ``fields`` says (None: all are)."""
    if not _same(rec.get("response"), fields.response):
        return "response"
    if rec.get("model") != fields.model:
        return "model"
    if not _same(rec.get("usage"), fields.usage):
        return "usage"
    given = rec.get("meta")
    meta: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    for key in BODY_META:
        if not _same(meta.get(key) or None, fields.meta.get(key) or None):
            return f"meta.{key}"
    return None


def body_problem(rec: Mapping[str, Any]) -> str | None:
    """Why the body-derived fields of a record are not what its stored body says (None: they are,
    or the record stores no body and needs none)."""
    raw, kind = rec.get("raw_response"), rec.get("body_reader")
    if rec.get("status") != "ok":
        return None
    if kind is None and rec.get("http_status") is None:
        return None  # not a body received (an adapter without a reader)
    if raw is None:
        return f"an answer received as a body is stored without it (raw_response); {SCORED}"
    if not isinstance(raw, str):
        return f"raw_response is a JSON {type(raw).__name__}, not the body's text"
    if kind is None:  # an HTTP reply written before records named their reader: one reader must agree
        candidates = readers()
    else:
        cls = reader(kind) if isinstance(kind, str) else None
        if cls is None:
            return f"body_reader {kind!r} names no adapter that reads bodies; {SCORED}"
        candidates = [cls]
    model = rec.get("model") if isinstance(rec.get("model"), str) else None
    first = None
    for cls in candidates:
        try:
            field = _matches(rec, derive(cls, raw, model))
        except JSONTextError as exc:
            field = f"raw_response (not JSON: {exc})"
        except Exception as exc:  # a reader refusing what it cannot read: the record is not its
            field = f"raw_response ({type(exc).__name__}: {exc})"
        if field is None:
            return None
        first = first or field
    return f"its {first} is not what its stored body (raw_response) says; {SCORED}"


__all__ = ["BODY_META", "EXCERPT_CHARS", "KEEP_BYTES", "body_problem", "derive", "dump_with_repeats",
           "keep_body"]
