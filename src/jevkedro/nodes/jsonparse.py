"""Reading JSON that a model wrote: repeated keys found, oversized numbers tamed, faults located.

Model output enters the project as JSON text in a few places: an HTTP reply body
(:meth:`jevkedro.models.http.HttpAdapter.post`), a line of a replay file
(:mod:`jevkedro.models.replay`), the JSON an instruction model writes
(:mod:`jevkedro.models.openai_compat`) and, read back, the predictions log. :func:`parse_json`
reads all of them with one set of rules:

- **Repeated keys.** JSON leaves the meaning of ``{"a": 0.2, "a": 0.9}`` open; every parser keeps
  one value silently. The value is still read (last one wins, like the standard library), but each
  repeated key is reported as a path from the top of the document (``("answers", "q1",
  "probabilities", "a")``), so validation can mark exactly the affected answers invalid.
- **Numbers beyond the double range.** A number whose magnitude exceeds the largest double
  (about 1.8e308) is read as ±infinity: ``1e400`` already is (standard library), and so is a
  400- or 5,000-digit integer, which would otherwise crash whatever converts it to a float later
  (or fail to parse at all past Python's 4,300-digit limit). Integers within range stay exact.
  ``NaN``/``Infinity`` literals are accepted (what ``json.dumps`` writes for non-finite floats);
  validation judges such numbers, the parser does not.
- **Text is UTF-8, without a byte-order mark.** Bytes that are not UTF-8 (anywhere: inside a
  string too, never replaced by U+FFFD) and a byte-order mark (U+FEFF) before the document (RFC
  8259 §8.1: JSON text has none) are faults like any other syntax error, the same in an HTTP reply
  body, a replay file's line and an upstream source; callers that hold bytes pass the bytes.
- **Faults are located.** :class:`JSONTextError` carries the 1-based line and column of the fault
  (columns count characters; a byte that is not UTF-8 is named by its byte column), so callers
  can name file, line and column.

msgspec reads a document first; its value is taken only when it provably says what the text
says (:func:`_msgspec_value`: no digit run long enough to be out of range, and as many colons
in the value written again as in the text, which a repeated key would lower). Anything else is
read by the standard library with hooks (:func:`read_exact`), which decides.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import msgspec

LONG_DIGITS = 300  # a digit run this long may be out of range: only the exact reader judges it
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * LONG_DIGITS
_DECODER = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder()
_FAST_ERRORS = (msgspec.DecodeError, RecursionError, ValueError, OverflowError)
BOM = "\ufeff"
_BOM_UTF8 = BOM.encode("utf-8")
BOM_FAULT = "a byte-order mark (U+FEFF) before the JSON text, which has none (RFC 8259 section 8.1)"

Path = tuple[str | int, ...]


class JSONTextError(ValueError):
    """Text that is not a JSON document. ``line``/``column`` are 1-based (column: characters, or
    bytes when ``byte_column`` is set because the text is not UTF-8); both are None for a fault
    that has no single position (nesting too deep)."""

    def __init__(self, msg: str, line: int | None = None, column: int | None = None, byte_column: bool = False) -> None:
        self.msg, self.line, self.column, self.byte_column = msg, line, column, byte_column
        super().__init__(f"{msg} at line {line} {self.unit} {column}" if line is not None else msg)

    @property
    def unit(self) -> str:
        return "byte" if self.byte_column else "column"

    def within_line(self) -> str:
        """The fault for a message that already names the line: ``msg at column N``."""
        return f"{self.msg} at {self.unit} {self.column}" if self.column is not None else self.msg


@dataclass(frozen=True)
class ParsedJSON:
    """A decoded document, the path of every key that was repeated in its object and how many
    numbers were beyond the double range (read as ±infinity)."""

    value: Any
    duplicate_keys: tuple[Path, ...] = ()
    numbers_out_of_range: int = 0

    @property
    def exact(self) -> bool:
        """Whether ``value`` says everything the text said (no repeat lost, no number changed)."""
        return not self.duplicate_keys and not self.numbers_out_of_range


def parse_int(text: str) -> int | float:
    """A JSON integer: exact while a double can hold its magnitude, else ±infinity."""
    digits = len(text) - (text[0] == "-")
    if digits <= 308:  # below 1e308 < the largest double
        return int(text)
    if digits == 309:
        value = int(text)
        try:
            float(value)
            return value
        except OverflowError:
            pass
    return -math.inf if text[0] == "-" else math.inf


def _decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise JSONTextError(f"not UTF-8 (byte 0x{data[exc.start]:02x})", line, column, byte_column=True) from None


def _msgspec_value(raw: bytes) -> tuple[bool, Any]:
    """``(True, value)`` when msgspec's reading of ``raw`` is provably what :func:`read_exact`
    gives (nothing repeated, nothing out of range), else ``(False, None)``.

    msgspec keeps the last of a repeated key silently, so the text's colons are counted: with no
    escaped backslash beside a ``\\u`` escape, every ``:`` byte (or ``\\u003a`` escape) is a member
    separator or a character of a string, so the value written again has as many colons exactly
    when no member was lost. A run of :data:`LONG_DIGITS` digits may hide a number no double holds.
    """
    escapes = b"\\u" in raw
    if escapes and b"\\\\" in raw:  # an escaped backslash makes the \\u003a count ambiguous
        return False, None
    if len(raw) >= LONG_DIGITS and _LONG_RUN in raw.translate(_DIGITS_AS_ZERO):
        return False, None
    try:
        value = _DECODER.decode(raw)
        colons = raw.count(b":")
        if escapes:
            colons += raw.count(b"\\u003a") + raw.count(b"\\u003A")
        return _ENCODER.encode(value).count(b":") == colons, value
    except _FAST_ERRORS:
        return False, None


def read_exact(raw: bytes) -> ParsedJSON:
    """:func:`parse_json` by the standard library alone (the reader that decides every case)."""
    if raw.startswith(_BOM_UTF8):
        raise JSONTextError(BOM_FAULT, 1, 1)
    return _exact(_decode_text(raw))


def parse_json(data: bytes | bytearray | memoryview | str) -> ParsedJSON:
    """Decode one JSON document with the rules in the module docstring.

    Raises :class:`JSONTextError` (line, column) for text that is not JSON, not UTF-8, starts with
    a byte-order mark or is nested too deeply to read.
    """
    raw: bytes | None
    if (data[:1] == BOM) if isinstance(data, str) else (data[:3] == _BOM_UTF8):  # a memoryview compares by content
        raise JSONTextError(BOM_FAULT, 1, 1)
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: only the exact path can read them
            raw = None
    else:
        raw = data if type(data) is bytes else bytes(data)
    if raw is not None:
        taken, value = _msgspec_value(raw)
        if taken:
            return ParsedJSON(value)
    text = data if isinstance(data, str) else _decode_text(raw or b"")
    return _exact(text)


def _exact(text: str) -> ParsedJSON:
    repeated: dict[int, tuple[dict, list[str]]] = {}

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            keys = []
            for k, _ in pairs:
                if k in seen:
                    keys.append(k)
                seen.add(k)
            repeated[id(obj)] = (obj, list(dict.fromkeys(keys)))  # the object is kept alive: ids stay unique
        return obj

    out_of_range = 0

    def read_int(text: str) -> int | float:
        nonlocal out_of_range
        value = parse_int(text)
        out_of_range += isinstance(value, float)
        return value

    def read_float(text: str) -> float:
        nonlocal out_of_range
        value = float(text)
        out_of_range += math.isinf(value)  # 1e400: a literal, not the Infinity constant
        return value

    try:
        value = json.loads(text, object_pairs_hook=pairs_hook, parse_int=read_int, parse_float=read_float)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.lineno, exc.colno) from None
    except RecursionError:
        raise JSONTextError("nested too deeply to read") from None
    paths = tuple(_paths_of(value, repeated)) if repeated else ()
    return ParsedJSON(value, paths, out_of_range)


def _paths_of(root: Any, repeated: dict[int, tuple[dict, list[str]]]) -> list[Path]:
    """Paths of the repeated keys of the objects still reachable from ``root`` (an object that
    lost to a repeated key is gone, and so are the repeats inside it)."""
    out: list[Path] = []
    stack: list[tuple[Any, Path]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            hit = repeated.get(id(node))
            if hit is not None and hit[0] is node:
                out.extend(path + (key,) for key in hit[1])
            stack.extend((v, path + (k,)) for k, v in node.items() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(node) if isinstance(v, (dict, list)))
    return sorted(out, key=lambda p: [str(x) for x in p])


def describe_path(path: Path) -> str:
    """``answers/q1/probabilities`` style, for messages (the top level is ``the top level``)."""
    return "/".join(str(p) for p in path) or "the top level"


def dumps_utf8(value: Any, **dumps_options: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, **dumps_options)`` as UTF-8 bytes, for every file
    that holds what a model sent. A string holding a lone surrogate (a model may send
    ``"\\ud800"``, valid JSON) has no UTF-8 form: then the document is written with every non-ASCII
    character escaped (``ensure_ascii=True``), which reads back as the very same strings."""
    text = json.dumps(value, ensure_ascii=False, **dumps_options)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, **dumps_options).encode("ascii")
