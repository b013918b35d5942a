"""Keeping API keys out of everything the project writes: redaction by structure, in every encoding.

A remote adapter sends its key as ``Authorization: Bearer <key>``, and a server may send it back:
in a header the client stores, inside a JSON string in another escaping, percent-encoded, in
base64, upper-cased. Two rules follow.

1. **A body is never edited before it is read.** The client parses the body exactly as received
   and validation reads the parsed value; only what is *stored* is redacted. (Replacing the key's
   text in the raw body first would corrupt a valid body whenever a short key such as ``true``
   or ``0.5`` occurs in it.)
2. **What is stored is redacted by structure.** Every string of the parsed body, object keys
   included, is searched after JSON unescaping (``\\u0073k-…`` and ``\\/`` are the same text as
   ``sk-…``); the body text as stored (``raw_response``) is searched token by token — each JSON
   string decoded first — and between tokens; stored header values are searched one by one and
   joined without whitespace (a key split over two values); error texts and exception messages
   are searched; and, as a backstop, every log record of the process (:func:`install_log_filter`).

What counts as the key (:class:`Redactor`):

- the key in any letter case, and any piece of it at least :data:`FRAGMENT` characters long (a
  truncated copy, one half of a split key);
- its percent-encoding (``quote``, ``quote_plus`` and every byte as ``%XX``), its hexadecimal, its
  JSON ``\\uXXXX`` spelling;
- its base64 in the standard and the URL-safe alphabet at each of the three byte alignments, so
  the key is found inside the encoding of a longer text too (``Basic``/``Bearer`` blobs), padded
  or not (the part of an encoding that depends only on the key's bytes is searched);
- a string whose percent-decoding, JSON-unescaping or HTML-unescaping holds the key is replaced
  whole;
- a string holding, once whitespace, zero-width and separator characters (``: - _ . / , ; |``)
  are dropped and case is folded, the whole key, the key reversed, its ROT13, its hexadecimal
  (UTF-8 or UTF-16), its base32, or (case kept) its base64 of UTF-8 or UTF-16, is replaced whole;
  an all-digit key also in a JSON number (:meth:`Redactor.value`). That is the list: a server can
  always re-encode what it was sent in a way no redactor enumerates (docs/reliability.md).

**Public strings are kept.** A string of the parsed body that equals a string of the request the
client sent (snapshot data: question ids, candidate keys, states, level names), a candidate key,
or a field name of the reply formats is stored as it is even when it holds the key: that text is
already in the snapshot on disk, and keeping it is what keeps a valid body valid when a short
key happens to be ``true`` or ``answers``. Everything else that holds the key becomes
``[REDACTED]``.
"""

from __future__ import annotations

import base64
import codecs
import functools
import html
import json
import logging
import re
import sys
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

REDACTED = "[REDACTED]"
FRAGMENT = 8  # a piece of the key this long (or the whole key, if shorter) counts as the key

# Field names of the reply formats the remote adapters read (System One bodies, the list-shaped
# /decide flavour, chat completions): never secret, and redacting one would break a valid body.
REPLY_FIELDS = frozenset({
    "model", "answers", "id", "type", "noul", "choice", "score", "confidence", "probabilities", "legend",
    "usage", "input_tokens", "output_tokens", "abstain", "detail", "error_type", "message", "loc", "msg", "input",
    "object", "choices", "index", "role", "content", "finish_reason", "prompt_tokens", "completion_tokens",
    "total_tokens", "true", "false", "chat.completion", "assistant", "stop",
})

_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*("?)', re.DOTALL)  # a JSON string token; group 1 empty: torn (no closing quote)


def _base64_cores(key: bytes) -> list[str]:
    """The parts of the key's base64 that depend on the key's bytes only, for each of the three
    alignments of the key within a longer text, in both alphabets."""
    out = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + key).decode("ascii")
        start = -(-8 * offset // 6)  # the first character holding no bit of the prefix
        end = 8 * (offset + len(key)) // 6  # past the last character holding only key bits
        core = encoded[start:end]
        if core:
            out += [core, core.translate(str.maketrans("+/", "-_"))]
    return sorted(set(out), key=len, reverse=True)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ESCAPES = ("\\", "%", "&")  # a text without any of these has no other reading than itself
_MAX_DEPTH = 3  # readings of readings searched (a JSON document inside a JSON string, percent-encoded)


@functools.cache
def _separators() -> dict[int, None]:
    """Whitespace, zero-width/format characters and the separators a key may be spelt with
    (made on first use: only a run with a key needs it)."""
    drop = {ord(c): None for c in ":-_./,;|"}
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) in ("Zs", "Zl", "Zp", "Cc", "Cf"):
            drop[code] = None
    return drop



def _squeezed(text: str) -> str:
    """``text`` without whitespace, zero-width and separator characters (case kept)."""
    return text.translate(_separators())


def _spellings(key: str) -> tuple[list[str], list[str]]:
    """The key's whole spellings searched in squeezed text: case folded, and case kept (base64)."""
    raw = key.encode("utf-8")
    utf16 = [key.encode("utf-16-le"), key.encode("utf-16-be")]
    folded = {key, key[::-1], codecs.encode(key, "rot13"), raw.hex(), *(u.hex() for u in utf16)}
    for offset in range(5):  # base32 at each alignment: the characters that depend on the key alone
        encoded = base64.b32encode(b"\0" * offset + raw).decode("ascii")
        folded.add(encoded[-(-8 * offset // 5): 8 * (offset + len(raw)) // 5])
    kept = {core for data in (raw, *utf16) for core in _base64_cores(data)}
    fold = sorted({_squeezed(f).casefold() for f in folded} - {""}, key=len, reverse=True)
    return fold, sorted({_squeezed(k) for k in kept} - {""}, key=len, reverse=True)


def _lower(text: str) -> str:
    """Letters lowered, positions kept (``str.lower`` lengthens a few non-ASCII letters, e.g. İ;
    then only ASCII letters are lowered)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


def _find_all(text: str, needle: str) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


class Redactor:
    """Finds an API key in the encodings listed in the module docstring and replaces it.

    Searching is done with ``str.find`` (C speed, no regular expression): a run of key text at
    least ``min(len(key), FRAGMENT)`` long always contains one of the key's aligned blocks of half
    that length, so only where a block occurs is the run measured. ``Redactor(None)`` (no key)
    redacts nothing and costs nothing.
    """

    def __init__(self, key: str | None) -> None:
        self.key = key or None
        if not self.key:
            return
        key = self.key
        raw = key.encode("utf-8")
        self._low = _lower(key)
        self._piece = min(len(key), FRAGMENT)
        size = max(1, self._piece // 2)  # any window of _piece characters holds a whole block
        self._blocks: dict[str, list[int]] = {}
        for at in range(0, len(key) - size + 1, size):
            self._blocks.setdefault(self._low[at: at + size], []).append(at)
        encoded = {quote(key, safe=""), quote_plus(key), "".join(f"%{b:02x}" for b in raw), raw.hex(),
                   "".join(f"\\u{ord(c):04x}" for c in key), key.replace("/", "\\/")}
        self._encoded = sorted({_lower(e) for e in encoded} - {self._low})
        self._b64 = _base64_cores(raw)
        # whole spellings in squeezed text, for keys long enough that squeezing cannot forge one
        self._folded, self._kept = _spellings(key) if len(_squeezed(key)) >= FRAGMENT else ([], [])
        self._digits = key if key.isdigit() and len(key) >= FRAGMENT else None

    def __bool__(self) -> bool:
        return self.key is not None

    # -- finding ---------------------------------------------------------------------------
    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where ``text`` holds key text as it is (any case, a piece, an encoding), merged."""
        if not self or not text:
            return []
        low = _lower(text)
        found: list[tuple[int, int]] = []
        key, n = self._low, len(self._low)
        for block, offsets in self._blocks.items():
            for at in _find_all(low, block):
                for off in offsets:  # text[at] lines up with key[off]: measure the run both ways
                    a, b = off, off + len(block)
                    while a > 0 and at - (off - a) - 1 >= 0 and low[at - (off - a) - 1] == key[a - 1]:
                        a -= 1
                    while b < n and at + (b - off) < len(low) and low[at + (b - off)] == key[b]:
                        b += 1
                    if b - a >= self._piece:
                        found.append((at - (off - a), at + (b - off)))
        for needle in self._encoded:
            found += [(at, at + len(needle)) for at in _find_all(low, needle)]
        for needle in self._b64:
            found += [(at, at + len(needle)) for at in _find_all(text, needle)]
        return _merged(found)

    def spelt(self, text: str) -> bool:
        """Whether ``text``, squeezed (and case folded), holds one of the key's whole spellings."""
        if not self._folded or not text:
            return False
        squeezed = _squeezed(text)
        folded = squeezed.casefold()
        return any(n in folded for n in self._folded) or any(n in squeezed for n in self._kept)

    def holds(self, text: str, depth: int = 0) -> bool:
        """Whether ``text`` holds the key in any encoding, also inside its other readings
        (percent-decoded, JSON-unescaped, HTML-unescaped) and inside the JSON strings it quotes."""
        if not self or not text:
            return False
        if self.spans(text) or self.spelt(text):
            return True
        if depth >= _MAX_DEPTH or not any(e in text for e in _ESCAPES):
            return False
        if any(d != text and self.holds(d, depth + 1) for d in _decodings(text)):
            return True
        return any(self.holds(inner, depth + 1) for _, _, inner in _escaped_tokens(text))

    # -- replacing -------------------------------------------------------------------------
    def string(self, text: str, public: frozenset[str] | set[str] = frozenset()) -> str:
        """One string value (or object key): kept when public, else the key replaced; a string
        whose other reading holds the key is replaced whole."""
        if not self or not text or text in public:
            return text
        out = _replaced(text, self.spans(text))
        return REDACTED if self.holds(out) else out

    def text(self, text: str | None) -> str | None:
        """Free text (a body as stored, an error message, a log line): key text replaced where it
        stands, and each JSON string token whose reading holds the key replaced whole."""
        if not self or not text:
            return text
        found = self.spans(text)
        if any(e in text for e in _ESCAPES):
            found += [(a, b) for a, b, inner in _escaped_tokens(text) if self.holds(inner, 1)]
        if not found:
            return REDACTED if self.spelt(text) else text
        out = _replaced(text, _merged(found))
        return REDACTED if self.holds(out) else out

    def header(self, values: Iterable[str]) -> str | None:
        """A stored header (all its values, joined by ``", "`` as HTTP does), redacted; a key
        split over the values, or over whitespace, replaces the whole header."""
        values = list(values)
        if not values:
            return None
        if self.holds("".join("".join(v.split()) for v in values)):
            return REDACTED
        return self.text(", ".join(values))

    def value(self, obj: Any, public: frozenset[str] | set[str] = frozenset()) -> Any:
        """A parsed JSON value with every string (object keys too) redacted; unchanged parts are
        the same objects (nothing is copied when nothing holds the key)."""
        if not self:
            return obj
        if isinstance(obj, str):
            return self.string(obj, public)
        if self._digits and isinstance(obj, (int, float)) and not isinstance(obj, bool):
            return REDACTED if self._digits in _squeezed(repr(obj)) else obj
        if isinstance(obj, Mapping):
            changed, items = False, []
            for k, v in obj.items():
                nk = self.string(k, public) if isinstance(k, str) else k
                nv = self.value(v, public)
                changed = changed or nk is not k or nv is not v
                items.append((nk, nv))
            if not changed:
                return obj
            out: dict[Any, Any] = {}
            for k, v in items:
                while k in out:  # two keys redacted alike: keep both values
                    k = f"{k}'"
                out[k] = v
            return out
        if isinstance(obj, (list, tuple)):
            new = [self.value(v, public) for v in obj]
            return obj if all(a is b for a, b in zip(new, obj)) else type(obj)(new)
        return obj


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    out, at = [], 0
    for a, b in spans:
        out += [text[at:a], REDACTED]
        at = b
    out.append(text[at:])
    return "".join(out)


def _escaped_tokens(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, reading)`` of each JSON string token of ``text`` that has an escape: the
    span of its contents (quotes excluded) and the string it stands for."""
    out = []
    for m in _TOKEN.finditer(text):
        token = m.group()
        if "\\" not in token and "%" not in token and "&" not in token:
            continue
        closed = bool(m.group(1))
        try:
            reading = json.loads(token if closed else token + '"')
        except ValueError:
            continue
        if isinstance(reading, str):
            out.append((m.start() + 1, m.end() - closed, reading))
    return out


def _decodings(text: str) -> list[str]:
    """Other readings of a string a server may have encoded the key in."""
    out = []
    if "%" in text or "+" in text:
        out.append(unquote_plus(text))
    if "\\" in text:
        try:
            out.append(json.loads(f'"{text}"'))
        except ValueError:
            pass
    if "&" in text:
        out.append(html.unescape(text))
    return out


def public_strings(*values: Any, extra: Iterable[str] = ()) -> frozenset[str]:
    """Every string (object keys included) in ``values`` plus ``extra`` and :data:`REPLY_FIELDS`:
    the text a redactor keeps as it is (see the module docstring)."""
    found: set[str] = set(REPLY_FIELDS)
    found.update(extra)
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            found.add(v)
        elif isinstance(v, Mapping):
            for k, child in v.items():
                if isinstance(k, str):
                    found.add(k)
                stack.append(child)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return frozenset(found)


# -- the process-wide backstop: log records ---------------------------------------------------------

_LOCK = threading.Lock()
_REGISTERED: dict[str, Redactor] = {}
_installed = False


def register_secret(key: str | None) -> None:
    """Remember ``key`` for :func:`redact_registered` and the log filter (installed on first use).

    Keys shorter than :data:`FRAGMENT` are not registered process-wide: such a "key" (``true``,
    ``0.5``) is ordinary text that every log line would lose; the adapter holding it still redacts
    everything it returns."""
    if not key or len(key) < FRAGMENT:
        return
    with _LOCK:
        _REGISTERED.setdefault(key, Redactor(key))
    install_log_filter()


def registered() -> list[Redactor]:
    return list(_REGISTERED.values())


def redact_registered(text: str | None) -> str | None:
    """``text`` with every registered key redacted (error texts, MLflow failure tags, log lines)."""
    for redactor in registered():
        text = redactor.text(text)
    return text


def _scrub_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record whose arguments do not fit its format: leave it to the handler
        return
    clean = redact_registered(message)
    if record.exc_info and record.exc_info[1] is not None:
        trace = logging.Formatter().formatException(record.exc_info)
        clean_trace = redact_registered(trace)
        if clean_trace != trace:  # handlers would render the traceback from exc_info: keep the text only
            clean = f"{clean}\n{clean_trace}"
            record.exc_info, record.exc_text = None, None
    if clean != message:
        record.msg, record.args = clean, ()


def install_log_filter() -> None:
    """Redact registered keys from every log record made in this process, whatever the logger or
    handler (a record factory: filters on a logger miss records of its children)."""
    global _installed
    with _LOCK:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if _REGISTERED:
                _scrub_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True


# -- keys that cannot be sent, and keys where a setting's value should be ---------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def header_problem(key: str) -> str | None:
    """Why ``key`` cannot be sent as ``Authorization: Bearer <key>`` (None: it can). Never
    includes the key: a line break or control character would inject a header line, a character
    outside printable ASCII has no agreed encoding in a header value."""
    for at, ch in enumerate(key):
        if ch in "\r\n":
            return f"a line break at character {at + 1}"
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"a control character at character {at + 1}"
        if ord(ch) > 0x7E:
            return f"a character outside printable ASCII at character {at + 1}"
        if ch == " ":
            return f"a space at character {at + 1}"
    return None if key else "nothing (it is empty)"


def is_env_name(name: str) -> bool:
    """Whether ``name`` can name an environment variable (letters, digits and ``_``, not a digit first)."""
    return bool(_ENV_NAME.match(name))


def settings_holding(values: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The names of the settings (flat ``name -> value``) whose value holds one of ``keys`` in any
    spelling :class:`Redactor` knows: a key's value belongs in the environment, never in a setting."""
    redactors = [Redactor(k) for k in keys if k and len(k) >= FRAGMENT]
    found = []
    for name, value in values.items():
        if any(r.holds(t) for r in redactors for t in _texts(value)):
            found.append(name)
    return found


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [repr(value)]
    return []
