"""Replay adapter: scores answers recorded elsewhere.

Reads a JSONL file whose lines are ``{"request_id": ..., "response": <System One body>}`` (UTF-8;
a byte-order mark at the start is allowed, blank lines are skipped). Requests with no line are
``unattempted``. The response is kept as recorded; validity is judged at scoring time. Lines are
read with :func:`jevkedro.nodes.jsonparse.parse_json`, so:

- a line that is not JSON, not UTF-8 or not a replay record is refused naming file, line and
  column (before anything is scored);
- a ``request_id`` on two lines is refused naming both lines (no line silently wins);
- a key repeated inside one line's response is carried with the record
  (``meta.duplicate_keys``) and makes the answers it touches ``invalid``; a repeated
  ``request_id`` key is refused (which request would the line answer?);
- a number beyond the double range (a 400-digit integer) is read as infinity and judged
  ``invalid`` at scoring; the line as written is kept in the record (``raw_response``) whenever
  reading it changed something (a repeat or such a number);
- request ids the snapshot does not have are counted and named (first few) in the run's
  ``run.json`` (``replay``), in the report and as a warning: they are never scored.

Speed: every line is parsed once, when it is answered (:func:`~jevkedro.nodes.jsonparse.parse_json`,
as before). Setting up only has to refuse a faulty file before anything is asked and find each
line's request id: chunks of lines are checked by msgspec without building their bodies (a typed
pass that skips the response, which still checks its JSON), and a chunk that pass cannot vouch for
(not UTF-8, a ``request_id`` key written twice or with escapes, anything it refuses) is read line
by line by the strict reader, which names the fault. What is kept per request is the position of
its line in the file's bytes (held once, as read), not a parsed body.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any

import msgspec
from pydantic import Field

from jevkedro.config import AdapterOptions
from jevkedro.models.base import Adapter, AdapterResult
from jevkedro.nodes.gcpause import gc_paused
from jevkedro.nodes.jsonparse import NOT_FAST, JSONTextError, ParsedJSON, countable, fast_value, parse_json, read_exact
from jevkedro.nodes.snapshot import SourceFormatError, sha256_file

log = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
UNKNOWN_IDS_NAMED = 10  # how many unknown request ids the run metadata names (all are counted)
CHUNK_BYTES = 1 << 18  # bytes of lines checked together (a chunk with one odd line is read line by line)


class _ReplayLine(msgspec.Struct):
    """What setting up needs of a line: its request id, and that it has a response (skipped, not built)."""

    request_id: str
    response: msgspec.Raw


_LINE_DECODER = msgspec.json.Decoder(_ReplayLine)
_REQUEST_ID_KEY = b'"request_id"'
# the letters of "request_id" as \u escapes: a key written so may be a second request_id
_ESCAPED_KEY_LETTERS = tuple({f"\\u{ord(c):04x}".encode() for c in "request_id"} | {b"\\u005F"})


def line_key(offset: int, length: int, counted: bool) -> int:
    """Where a line lies in the file's bytes and whether :func:`~jevkedro.nodes.jsonparse.countable`
    is known to hold for it, in one integer (a dict of small tuples would cost three times the
    memory): ``offset << 33 | length << 1 | counted`` (a line is shorter than 4 GiB)."""
    return offset << 33 | length << 1 | counted


def line_place(key: int) -> tuple[int, int, bool]:
    """``(offset, length, counted)`` of a :func:`line_key`."""
    return key >> 33, (key >> 1) & 0xFFFFFFFF, bool(key & 1)


def _vouched_ids(chunk: bytes, lines: list[bytes]) -> list[str] | None:
    """The request ids of ``lines`` (``chunk`` split at newlines) when each is, beyond doubt, a line
    the strict reader accepts with that id; None when that cannot be vouched for.

    msgspec's typed pass checks the JSON grammar of every line (skipped values included: strings,
    escapes, numbers, nesting), that it is an object, that ``request_id`` is a string and that
    ``response`` is there. What it does not check is ruled out on the chunk: bytes that are not
    UTF-8 (skipped strings are not decoded), and a ``request_id`` key given twice (msgspec keeps the
    last one silently): the chunk holds exactly one ``"request_id"`` per line and no key letter
    written as a ``\\u`` escape.
    """
    if not chunk.isascii():
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if chunk.count(_REQUEST_ID_KEY) != len(lines) or (b"\\u00" in chunk and any(e in chunk for e in _ESCAPED_KEY_LETTERS)):
        return None
    try:
        return [line.request_id for line in map(_LINE_DECODER.decode, lines)]
    except (msgspec.DecodeError, RecursionError):
        return None


class ReplayAdapter(Adapter):
    kind = "replay"
    resumable = False  # the file is the answer: re-read it on every run
    measures_latency = False  # reading a recorded answer says nothing about the model's speed

    class Options(AdapterOptions):
        path: str | None = Field(None, description='JSONL of {"request_id", "response"} lines')
        model: str | None = Field(None, description="the model id to record (default replay:<file name>)")

    def __init__(self, path: str | None = None, **settings: Any) -> None:
        super().__init__(path=path, **settings)
        if not path:
            raise ValueError("the replay adapter needs model.path=<answers.jsonl>")
        self.path = Path(path)
        self._data = b""  # the file's bytes (after a byte-order mark), as read by setup()
        self._lines: dict[str, int] | None = None  # request id -> line_key() of its line
        self._n_lines = 0

    @property
    def model_id(self) -> str:
        return str(self.settings.get("model") or f"replay:{self.path.name}")

    def identity(self) -> dict[str, Any]:
        self._check_file()
        return {"adapter": self.kind, "model": self.model_id, "file_sha256": sha256_file(self.path)}

    def _check_file(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(f"replay file not found: {self.path} (model.path)")

    def _error(self, lineno: int, what: str) -> SourceFormatError:
        return SourceFormatError(f"{self.path}:{lineno}: {what} (model.path names this replay file)")

    def _read(self, lineno: int, line: bytes) -> tuple[str, ParsedJSON]:
        """One line as ``(request id, parsed line)``, read strictly; refuses a line that is not a replay record."""
        try:
            parsed = parse_json(line)
        except JSONTextError as exc:
            raise self._error(lineno, f"not valid JSON: {exc.within_line()}") from None
        obj = parsed.value
        if not isinstance(obj, dict):
            raise self._error(lineno, f"expected a JSON object, got a JSON {type(obj).__name__}")
        rid = obj.get("request_id")
        if not isinstance(rid, str) or "response" not in obj:
            raise self._error(lineno, "a replay line needs request_id (a string) and response")
        if ("request_id",) in parsed.duplicate_keys:
            raise self._error(lineno, "the key request_id appears twice: which request does the line answer?")
        return rid, parsed

    def _line_number(self, offset: int) -> int:
        """The 1-based line at byte ``offset`` of the file's bytes (for messages)."""
        return self._data.count(b"\n", 0, offset) + 1

    def setup(self) -> None:
        if self._lines is not None:
            return
        self._check_file()
        data = self.path.read_bytes()
        if data.startswith(BOM):
            data = data[len(BOM):]
        self._data = data
        lines: dict[str, int] = {}
        n = 0
        with gc_paused():
            offset, lineno = 0, 1  # of the chunk's first line
            while offset < len(data):
                end = data.rfind(b"\n", offset, offset + CHUNK_BYTES) + 1 or data.find(b"\n", offset) + 1 or len(data)
                chunk = data[offset:end]
                n += self._index_chunk(chunk, offset, lineno, lines)
                offset, lineno = end, lineno + chunk.count(b"\n")
        self._lines, self._n_lines = lines, n

    def _index_chunk(self, chunk: bytes, offset: int, lineno: int, lines: dict[str, int]) -> int:
        """Add the lines of ``chunk`` (whole lines from byte ``offset``, line ``lineno``) to ``lines``;
        returns how many were not blank. Refuses the chunk's first faulty line, as the strict reader names it."""
        parts = chunk.split(b"\n")
        if parts[-1] == b"":
            parts.pop()  # after the last newline
        lengths = list(map(len, parts))
        starts = list(accumulate([offset, *lengths[:-1]], lambda at, length: at + length + 1))
        rids = _vouched_ids(chunk, parts)
        if rids is not None:
            new = dict(zip(rids, map(line_key, starts, lengths, repeat(countable(chunk)))))
            if len(new) == len(parts) and lines.keys().isdisjoint(new):
                lines.update(new)
                return len(parts)
        # line by line, in order: the first fault of the file is the one named
        n = 0
        for i, line in enumerate(parts):
            if not line.strip():
                continue
            n += 1
            rid, _ = self._read(lineno + i, line)
            if rid in lines:
                first = self._line_number(line_place(lines[rid])[0])
                raise self._error(lineno + i, f"request_id {rid!r} repeats line {first}; a replay file "
                                              "has one line per request")
            lines[rid] = line_key(starts[i], lengths[i], False)
        return n

    def _loaded(self) -> dict[str, int]:
        if self._lines is None:
            self.setup()
        assert self._lines is not None
        return self._lines

    def has(self, request_id: str) -> bool:
        return request_id in self._loaded()

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        key = self._loaded().get(request_id)
        if key is None:
            return AdapterResult(status="unattempted")
        offset, length, counted = line_place(key)
        line = self._data[offset: offset + length]
        # setup() accepted the line (a replay record): it is parsed here, once
        value = fast_value(line, known_countable=counted)
        if value is not NOT_FAST:
            return self._result(value["response"])
        parsed = read_exact(line)
        # repeats inside the response, as paths from the body's top; a repeated "response" key
        # of the line stays ["response"]: a path outside answers/<id> touches every question
        repeats = [list(p[1:]) if len(p) > 1 else list(p) for p in parsed.duplicate_keys if p[0] == "response"]
        return self._result(parsed.value["response"], {"duplicate_keys": repeats} if repeats else {},
                            None if parsed.exact else line.decode("utf-8"))

    def _result(self, body: Any, meta: dict[str, Any] | None = None, raw: str | None = None) -> AdapterResult:
        model = usage = None
        if type(body) is dict:  # what a JSON object decodes to
            model, usage = body.get("model"), body.get("usage")
        return AdapterResult(status="ok", response=body, model=model if isinstance(model, str) and model else self.model_id,
                             usage=usage if isinstance(usage, dict) else None, meta=meta if meta is not None else {}, raw=raw)

    def run_notes(self, request_ids: Sequence[str]) -> dict[str, Any]:
        """The file's account for ``run.json``: lines, requests it answers, and the request ids it
        has that the snapshot does not (counted; the first ``UNKNOWN_IDS_NAMED`` named)."""
        lines = self._loaded()
        known = set(request_ids)
        unknown = [rid for rid in lines if rid not in known]
        if unknown:
            log.warning("%s: %d request ids are not in the snapshot and are not scored (first: %s)",
                        self.path, len(unknown), ", ".join(unknown[:UNKNOWN_IDS_NAMED]))
        return {"replay": {
            "file": self.path.name,
            "lines": self._n_lines,
            "requests_answered": len(lines) - len(unknown),
            "unknown_request_ids": {"count": len(unknown), "first": unknown[:UNKNOWN_IDS_NAMED]},
        }}
