"""The JSON text of snapshot cells, fast and byte for byte what :func:`jevkedro.protocol.dumps` writes.

A snapshot cell is ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``
(:func:`~jevkedro.protocol.dumps`); the family manifests pin the hashes of those bytes. msgspec
writes the same bytes about four times faster, but only for some objects:

- both write strings alike (every code point checked: the same escapes, non-ASCII kept), and ints,
  booleans, null, lists, tuples and dicts with string or int keys alike;
- floats differ where Python's ``repr`` uses an exponent (``1e-05`` against msgspec's
  ``0.00001``, ``1e+16`` against ``1e16``), and NaN/infinity, which ``dumps`` refuses, are
  written ``null`` by msgspec;
- msgspec also writes what ``dumps`` refuses (sets, dataclasses, datetimes, enums, ...) and
  refuses some dict keys ``dumps`` converts (``True``, ``None``).

So :meth:`CellEncoder.encode_all` first takes a census of the types in a batch of cells: every
container is walked level by level with ``gc.get_referents`` (a C call per level: the keys and
values of dicts, the items of lists and tuples) and the types of a level are collected with a C
``map``. When every object is exactly a ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``bool``,
``None`` or a finite float whose ``repr`` has no exponent, msgspec writes the batch; otherwise (or
when msgspec refuses something) the batch goes through the same C encoder ``json.dumps`` uses,
made once per snapshot instead of once per cell, with the same settings and errors.
``tests/test_celljson.py`` checks the equality on generated objects of every kind.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]  # the C encoder json.dumps uses
from typing import Any

import msgspec

from jevkedro.protocol import dumps

# Objects msgspec writes exactly as json.dumps does (exact types: a subclass may change either).
PLAIN_TYPES = frozenset({dict, list, tuple, str, int, bool, type(None)})
MAX_DEPTH = 256  # nesting walked by the census; deeper (or a cycle) takes the exact path
CENSUS_BUDGET = 1 << 24  # objects one census walks beyond the cells themselves (a DI block: ~0.2M)


def _float_writes_alike(x: float) -> bool:
    """msgspec writes a finite float as ``repr`` does unless ``repr`` uses an exponent."""
    return math.isfinite(x) and "e" not in repr(x)


def plain_json(objs: list[Any]) -> bool:
    """True when ``objs`` and everything they hold are :data:`PLAIN_TYPES` or floats msgspec
    writes as ``repr`` does (see the module docstring): then msgspec's bytes are ``dumps``'s."""
    level, budget = objs, CENSUS_BUDGET + len(objs)
    for _ in range(MAX_DEPTH):
        budget -= len(level)
        if budget < 0:  # e.g. a cycle through two references: levels double; the exact path decides
            return False
        types = set(map(type, level))
        if not types <= PLAIN_TYPES:
            if float not in types or not types - {float} <= PLAIN_TYPES:
                return False
            if not all(_float_writes_alike(x) for x in level if type(x) is float):
                return False
        level = gc.get_referents(*level)  # dict keys and values, list and tuple items
        if not level:
            return True
    return False


def _not_serializable(obj: Any) -> Any:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


def exact_encoder() -> Callable[[Any], str]:
    """:func:`~jevkedro.protocol.dumps` without its per-call set-up: the C encoder ``json.dumps``
    makes for each call, made once (same separators, ``allow_nan=False``, circular check and
    errors). Use one per snapshot: a failed encoding may leave circular-check markers behind."""
    if c_make_encoder is None:  # a Python without the _json accelerator
        return dumps
    encode = c_make_encoder({}, _not_serializable, encode_basestring, None, ":", ",", False, False, False)
    join = "".join
    return lambda obj: join(encode(obj, 0))


class CellEncoder:
    """Encodes batches of cells to UTF-8 JSON, each exactly ``dumps(cell).encode("utf-8")``."""

    def __init__(self) -> None:
        self._fast = msgspec.json.Encoder().encode
        self._exact = exact_encoder()
        self.fast_batches = self.exact_batches = 0

    def encode_all(self, cells: list[Any]) -> list[bytes]:
        if plain_json(cells):
            try:
                out = list(map(self._fast, cells))
            except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
                pass  # e.g. nesting msgspec will not follow: the exact encoder decides
            else:
                self.fast_batches += 1
                return out
        self.exact_batches += 1
        exact = self._exact
        return [exact(c).encode("utf-8") for c in cells]
