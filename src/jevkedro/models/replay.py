"""Replay adapter: scores answers recorded elsewhere.

Reads a JSONL file whose lines are ``{"request_id": ..., "response": <System One body>}`` (UTF-8
without a byte-order mark, the rule of every JSON text read; blank lines are skipped). Requests
with no line are ``unattempted``. The response is kept as recorded; validity is judged at scoring time. Lines are
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
- a line may carry ``attempt`` (a whole number from 0; absent: 0), one line per (request, attempt):
  the answers of a model asked each request several times (``model.repeats``, which must cover
  every attempt of the file: a file answering attempt 2 with ``model.repeats=2`` is refused);
- request ids the snapshot does not have are counted and named (first few) in the run's
  ``run.json`` (``replay``), in the report and as a warning: they are never scored.

The file is read once, at setup (or when the run's identity is taken): its sha256 in ``run.json``
is that of the bytes answered from. Every line is parsed and checked then, before anything is
asked; what a line says (its parsed value, and the line as written when reading changed something)
is kept until its request is answered, so no line is parsed twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from jevkedro.files import check_file
from jevkedro.models.base import Adapter, AdapterResult, BodyFields, RepeatsError
from jevkedro.models.settings import AdapterOptions
from jevkedro.models.systemone import SystemOneAdapter
from jevkedro.nodes.jsonparse import JSONTextError, ParsedJSON, parse_json
from jevkedro.nodes.snapshot import SourceFormatError, collector_paused

log = logging.getLogger(__name__)

PREFLIGHT_LINE_BYTES = 1 << 24  # the settings check judges the first line when it is at most this long


class ReplayFileError(SourceFormatError, FileNotFoundError):
    """``model.path`` is not a replay file that can be read (missing, a folder, a device, ...)."""


def _first_line(path: Path) -> tuple[int, bytes | None]:
    """The first non-blank line (without its newline) and its number, or None when the file has
    none or it is longer than the settings check reads."""
    with open(path, "rb") as f:
        for lineno in range(1, 1 << 20):
            line = f.readline(PREFLIGHT_LINE_BYTES + 1)
            if not line or len(line) > PREFLIGHT_LINE_BYTES:
                return lineno, None
            if line.strip():
                return lineno, line.removesuffix(b"\n")
    return 1, None

UNKNOWN_IDS_NAMED = 10  # how many unknown request ids the run metadata names (all are counted)

_Line = tuple[ParsedJSON, "str | None"]  # a line as parsed, and its text when reading changed something


class ReplayAdapter(Adapter):
    kind = "replay"
    resumable = False  # the file is the answer: re-read it on every run
    measures_latency = False  # reading a recorded answer says nothing about the model's speed
    reads_bodies = True  # a line that reading changed is kept as written (raw)

    class Options(AdapterOptions):
        path: str | None = Field(None, description='JSONL of {"request_id", "response"} lines')
        model: str | None = Field(None, description="the model id to record (default replay:<file name>)")

    def __init__(self, path: str | None = None, **settings: Any) -> None:
        super().__init__(path=path, **settings)
        if not path:
            raise ValueError("the replay adapter needs model.path=<answers.jsonl>")
        self.path = Path(path)
        self._lines: dict[str, _Line] | None = None  # request id -> its line (attempt 0), as read
        self._repeat_lines: dict[tuple[str, int], _Line] = {}  # (request id, attempt >= 1) -> its line
        self._n_lines = 0
        self._sha256 = ""
        self._model_id = self.model_id  # what every answer names when its body names no model

    @property
    def model_id(self) -> str:
        return str(self.settings.get("model") or f"replay:{self.path.name}")

    def identity(self) -> dict[str, Any]:
        self.setup()
        return {"adapter": self.kind, "model": self.model_id, "file_sha256": self._sha256}

    def _error(self, lineno: int, what: str) -> SourceFormatError:
        return SourceFormatError(f"{self.path}:{lineno}: {what} (model.path names this replay file)")

    def _read(self, lineno: int, line: bytes) -> tuple[str, int, ParsedJSON]:
        """One line as ``(request id, attempt, parsed line)``, read strictly; refuses a line that is not a replay record."""
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
        attempt = obj.get("attempt", 0)
        if type(attempt) is not int or attempt < 0:
            raise self._error(lineno, f"attempt {attempt!r} is not a whole number from 0 (which repeat of the "
                                      "request the line answers)")
        if ("attempt",) in parsed.duplicate_keys:
            raise self._error(lineno, "the key attempt appears twice: which repeat does the line answer?")
        return rid, attempt, parsed

    @classmethod
    def preflight(cls, options: AdapterOptions, settings: Mapping[str, Any]) -> list[str]:
        """The file is there, a regular file, readable, and its first line is a replay record."""
        path = getattr(options, "path", None)
        if not path:
            return ["model.path: the replay adapter needs model.path=<answers.jsonl>"]
        adapter = cls(path=path)
        try:
            adapter._check_file()
            lineno, first = _first_line(adapter.path)
            if first is not None:
                adapter._read(lineno, first)
        except (SourceFormatError, OSError) as exc:
            return [str(exc)]
        return []

    def _check_file(self) -> None:
        """Refuse a ``model.path`` that is not a regular, readable file, saying what it is instead."""
        check_file(self.path, "replay file", ReplayFileError, expected="a replay file (a JSONL file on disk)",
                   setting="model.path")

    def setup(self) -> None:
        """Read the file once: every line parsed (lines end only at ``\\n``), the first fault refused."""
        if self._lines is None:
            self._read_file()

    @collector_paused()  # the parsed lines are kept
    def _read_file(self) -> None:
        self._check_file()
        data = self.path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        lines: dict[str, _Line] = {}
        repeat_lines: dict[tuple[str, int], _Line] = {}
        first_line: dict[tuple[str, int], int] = {}
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            rid, attempt, parsed = self._read(lineno, line)
            if (rid, attempt) in first_line:
                which = f" attempt {attempt}" if attempt or repeat_lines else ""
                raise self._error(lineno, f"request_id {rid!r}{which} repeats line {first_line[rid, attempt]}; a replay "
                                          f"file has one line per request{' and attempt' if which else ''}")
            first_line[rid, attempt] = lineno
            kept = (parsed, None if parsed.exact else line.decode("utf-8"))
            if attempt:
                repeat_lines[rid, attempt] = kept
            else:
                lines[rid] = kept
        self._lines, self._repeat_lines, self._sha256 = lines, repeat_lines, sha256
        self._n_lines = len(lines) + len(repeat_lines)

    def _loaded(self) -> dict[str, _Line]:
        self.setup()
        assert self._lines is not None
        return self._lines

    def _line(self, request_id: str, attempt: int) -> _Line | None:
        return self._loaded().get(request_id) if attempt == 0 else self._repeat_lines.get((request_id, attempt))

    def has(self, request_id: str, attempt: int = 0) -> bool:
        return self._line(request_id, attempt) is not None

    def attempts(self) -> int:
        """How many attempts the file answers (1 + its highest ``attempt``)."""
        self.setup()
        return 1 + max((k for _, k in self._repeat_lines), default=0)

    def check_repeats(self, repeats: int) -> None:
        """Refuse a ``model.repeats`` below the file's attempts: its answers would go unscored."""
        super().check_repeats(repeats)
        if self.attempts() > repeats:
            raise RepeatsError(f"model.repeats={repeats}, but the replay file {self.path} (model.path) answers "
                               f"attempts up to {self.attempts() - 1}; set model.repeats={self.attempts()} to score "
                               "every answer it holds")

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        return self.answer_attempt(request_id, request, 0)

    def answer_batch_attempts(self, items: list[tuple[str, dict[str, Any], int]]) -> list[AdapterResult]:
        return [self.answer_attempt(rid, request, k) for rid, request, k in items]

    def answer_attempt(self, request_id: str, request: dict[str, Any], attempt: int) -> AdapterResult:
        line = self._line(request_id, attempt)
        if line is None:
            return AdapterResult(status="unattempted")
        parsed, raw = line  # read and accepted at setup
        fields = self.read_body(parsed.value, [list(p) for p in parsed.duplicate_keys], self._model_id)
        return AdapterResult(status="ok", response=fields.response, model=fields.model, usage=fields.usage,
                             meta=fields.meta, raw=raw)

    @classmethod
    def read_body(cls, value: Any, duplicate_keys: list[list[Any]], model: str | None) -> BodyFields:
        """A replay line's ``response`` as the answer; its repeats as paths from the body's top (a
        repeated ``response`` key of the line stays ``["response"]``: a path outside
        ``answers/<id>`` touches every question)."""
        body = value.get("response") if isinstance(value, dict) else None
        repeats = [list(p[1:]) if len(p) > 1 else list(p) for p in duplicate_keys if p and p[0] == "response"]
        named = usage = None
        if type(body) is dict:  # what a JSON object decodes to
            named, usage = body.get("model"), body.get("usage")
        return BodyFields(body, named if isinstance(named, str) and named else model,
                          usage if isinstance(usage, dict) else None, {"duplicate_keys": repeats} if repeats else {})

    @classmethod
    def protocol_part(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {**{k: value[k] for k in ("request_id", "attempt") if k in value},
                "response": SystemOneAdapter.protocol_part(value.get("response"))}

    @classmethod
    def body_of(cls, result: AdapterResult) -> tuple[Any, list[list[Any]]]:
        repeats = (result.meta or {}).get("duplicate_keys") or []
        return {"response": result.response}, [p if p == ["response"] else ["response", *p] for p in repeats]

    def run_notes(self, request_ids: Sequence[str]) -> dict[str, Any]:
        """The file's account for ``run.json``: lines, requests it answers, and the request ids it
        has that the snapshot does not (counted; the first ``UNKNOWN_IDS_NAMED`` named)."""
        lines = self._loaded()
        known = set(request_ids)
        rids = dict.fromkeys([*lines, *(rid for rid, _ in self._repeat_lines)])
        unknown = [rid for rid in rids if rid not in known]
        if unknown:
            log.warning("%s: %d request ids are not in the snapshot and are not scored (first: %s)",
                        self.path, len(unknown), ", ".join(unknown[:UNKNOWN_IDS_NAMED]))
        return {"replay": {
            "file": self.path.name,
            "lines": self._n_lines,
            "requests_answered": len(rids) - len(unknown),
            "unknown_request_ids": {"count": len(unknown), "first": unknown[:UNKNOWN_IDS_NAMED]},
            **({"attempts": self.attempts()} if self.attempts() > 1 else {}),
        }}
