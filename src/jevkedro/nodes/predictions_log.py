"""The predictions log: one JSONL file per (model, view), one record per line, appended as answers arrive.

A record is written by :func:`encode_record` and read by :func:`read_records` (the strict JSON
reader, :func:`~jevkedro.nodes.jsonparse.parse_json`); Dask shard files hold the same lines. Lines
end only at ``\\n`` (a U+2028 inside a string is part of its line). Opening a log reads it once, in
order, decoding and checking every line: the records decoded are what scoring reads
(:attr:`PredictionLog.records`, nothing decoded twice) until the log is first written; from then on
only a small :class:`LogEntry` per request is kept (the index). A line that
is not a record is refused naming file and line; a last line without its newline (a killed write)
is dropped with a warning, and cut from the file only by the writer. ``run.json`` beside the log
names the identity that wrote its records.

**Repeats** (``model.repeats``): a record may carry ``attempt`` (a whole number from 0; absent
means 0, as every record of a run asking each request once). The log keeps each request's latest
line per attempt: :attr:`PredictionLog.index` for attempt 0, :attr:`PredictionLog.repeats` for the
others; resuming counts per (request, attempt) and compaction keeps every attempt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any

import msgspec

from jevkedro.errors import UserError
from jevkedro.models.settings import FSYNC_POLICIES
from jevkedro.nodes.jsonparse import JSONTextError, dumps_utf8, parse_json
from jevkedro.nodes.reply_body import body_problem
from jevkedro.nodes.snapshot import atomic_write_bytes, atomic_writer, collector_paused

log = logging.getLogger(__name__)

FINAL_STATUSES = {"ok", "unsupported"}
RECORD_STATUSES = ("ok", "unsupported", "error", "unattempted")
IDENTITY_FIELD = "run_identity"
FIX_LINE = ("the log is written by jevkedro one record per line; fix or delete that line "
            "(a deleted line's request is asked again) or delete the log to start afresh")
_MISSING = object()
READ_LIMIT = 0x7FFFF000  # the most one read(2) returns on Linux (2,147,479,552 bytes): larger files take several


def read_file(path: Path) -> bytearray:
    """Every byte of ``path``, read in calls of at most :data:`READ_LIMIT` bytes until the end of
    the file (so a log of any size reads whole)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        view, at = memoryview(data), 0
        while True:
            if at == len(data):  # grown since it was opened (a writer's appends): read on to its end
                view.release()
                data.extend(bytes(min(READ_LIMIT, max(size, 1 << 16))))
                view = memoryview(data)
            got = f.readinto(view[at: at + READ_LIMIT])
            if not got:
                break
            at += got
        view.release()
        del data[at:]
        return data


class PredictionLogError(UserError, ValueError):
    """A predictions log line that is not a record, or a damaged ``run.json`` (names the file,
    the line and what to do)."""


class LogEntry(msgspec.Struct, frozen=True, gc=False):
    """What the index keeps per request: enough to resume (``status``, ``snapshot_sha256``,
    ``identity``), to summarise (``cost_usd``) and to compact (where the request's latest line
    lies: ``offset``, ``length`` in bytes). Not tracked by the cycle collector (it holds only
    strings, numbers and None), so a long index costs the collector nothing."""

    status: str
    snapshot_sha256: str | None
    cost_usd: float | None
    offset: int
    length: int
    identity: str | None = None  # the run identity digest the record is stamped with


# -- one record: written, read ---------------------------------------------------------------------

def _json_safe(value: Any) -> Any:
    """``value`` with integers beyond the double range as ±infinity (how the reader reads them), for
    records a local adapter filled with Python ints too long for ``json.dumps``."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1024:
        return math.inf if value > 0 else -math.inf
    return value


def utf8_json_line(value: Any, separators: tuple[str, str] | None = None, **options: Any) -> bytes:
    """``value`` as one JSON line of valid UTF-8 (:func:`~jevkedro.nodes.jsonparse.dumps_utf8`;
    NaN and infinities as ``NaN``/``Infinity``, so the reader judges the number, not a null)."""
    try:
        return dumps_utf8(value, separators=separators, **options) + b"\n"
    except ValueError:  # an integer past Python's digit limit
        return dumps_utf8(_json_safe(value), separators=separators, **options) + b"\n"


def encode_record(record: Mapping[str, Any]) -> bytes:
    """The one writer of a record: a compact JSON line."""
    return utf8_json_line(record, (",", ":"), check_circular=False)  # records are trees: parsed JSON


def _problem(request_id: Any, status: Any, attempt: Any = _MISSING) -> str | None:
    """What makes these fields not a prediction record's (None: they are one)."""
    if request_id is _MISSING:
        return "no request_id"
    if not isinstance(request_id, str):
        return f"request_id is {type(request_id).__name__}, not a string"
    if status is _MISSING:
        return "no status (a record without one would silently be asked again)"
    if not isinstance(status, str) or status not in RECORD_STATUSES:
        return f"status {status!r} is not one of {', '.join(RECORD_STATUSES)}"
    if attempt is not _MISSING and (type(attempt) is not int or attempt < 0):
        return f"attempt {attempt!r} is not a whole number from 0 (which repeat of the request it answers)"
    return None


def attempt_of(record: Mapping[str, Any]) -> int:
    """Which repeat of its request a record answers (0 when it carries no ``attempt``)."""
    return record.get("attempt", 0)


def decode_record(line: bytes | bytearray) -> dict[str, Any]:
    """The one reader of a record; raises ``ValueError(why)`` for a line that is not one."""
    try:
        rec = parse_json(line).value
    except JSONTextError as exc:
        raise ValueError(f"not valid JSON ({exc.within_line()})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"a JSON {type(rec).__name__}, not an object")
    why = _problem(rec.get("request_id", _MISSING), rec.get("status", _MISSING), rec.get("attempt", _MISSING))
    if why:
        raise ValueError(why)
    return rec


def read_records(data: bytes | bytearray, name: str | Path, fix: str = FIX_LINE,
                 whole: bool = False) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(byte offset, line length, record)`` of every record line of ``data`` (a file's bytes), in
    order; blank lines are skipped. A line that is not a record raises :class:`PredictionLogError`
    naming ``name``, the line and ``fix``. A last line without its newline is dropped with a warning
    (a write cut short), or refused when the file is written ``whole`` (a shard file)."""
    offset, lineno = 0, 0
    while offset < len(data):
        lineno += 1
        end = data.find(b"\n", offset) + 1
        if not end:
            if whole:
                raise PredictionLogError(f"{name}:{lineno}: not a prediction record: cut short (no newline); {fix}")
            log.warning("%s: dropping a torn last line (%d bytes)", name, len(data) - offset)
            return
        line = data[offset:end]
        if line.strip():
            try:
                rec = decode_record(line)
            except ValueError as exc:
                raise PredictionLogError(f"{name}:{lineno}: not a prediction record: {exc}; {fix}") from None
            why = body_problem(rec)
            if why:
                raise PredictionLogError(f"{name}:{lineno}: request {rec['request_id']!r}: {why}; {fix}")
            yield offset, end - offset, rec
        offset = end


def summarize(entries: Iterable[LogEntry]) -> dict[str, Any]:
    """Status counts and total cost (null when any answered request has an unknown cost)."""
    counts: dict[str, int] = {}
    costs: list[float | None] = []
    for e in entries:
        counts[e.status] = counts.get(e.status, 0) + 1
        if e.status == "ok":
            costs.append(e.cost_usd)
    known = [c for c in costs if c is not None]
    total = float(sum(known)) if costs and len(known) == len(costs) else None
    return {"statuses": counts, "cost_usd": total}


def identity_digest(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _entry(rec: Mapping[str, Any], offset: int, length: int) -> LogEntry:
    identity = rec.get(IDENTITY_FIELD)
    return LogEntry(sys.intern(rec["status"]), _interned(rec.get("snapshot_sha256")), rec.get("cost_usd"),
                    offset, length, sys.intern(identity) if type(identity) is str else None)


# -- the log ---------------------------------------------------------------------------------------

class LogRecords(dict[str, dict[str, Any]]):
    """The records of one read of a log: a dict by request id, in log order (each request's latest
    line of attempt 0), the records of the other attempts beside it (:meth:`attempt`)."""

    def __init__(self, repeats: dict[int, dict[str, dict[str, Any]]] | None = None) -> None:
        super().__init__()
        self.repeats = repeats if repeats is not None else {}

    @property
    def attempts(self) -> int:
        """How many attempts the log holds answers of (1 + the highest attempt recorded; 1 when none has one)."""
        return 1 + max((k for k, r in self.repeats.items() if r), default=0)

    def attempt(self, k: int) -> LogRecords:
        """The records of attempt ``k`` by request id (attempt 0: these)."""
        if k == 0:
            return self
        records = LogRecords()
        records.update(self.repeats.get(k, {}))
        return records


class PredictionLog:
    """Append-only JSONL of prediction records for one (model, view), tolerant of a torn tail.

    Opening reads the file once, decoding and checking every line, into the index (:attr:`index`:
    request id -> :class:`LogEntry` of its latest line) and the records decoded, which serve
    :attr:`records` until the log is first written; from then on only the index is held. Only the
    writer (:meth:`append`, :meth:`compact`) changes the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name("run.json")
        self._fh: IO[bytes] | None = None
        self._end = 0
        self.fsync_policy = "interval"
        self.fsync_interval_s = 1.0
        self._last_sync = 0.0
        self.identity: str | None = None  # the digest appended records are stamped with
        self.adopt_unstamped = False  # whether records without a stamp count as this identity's
        self.index: dict[str, LogEntry] = {}  # attempt 0 (every record of a run asking each request once)
        self.repeats: dict[int, dict[str, LogEntry]] = {}  # attempt (1, 2, ...) -> its records' entries
        self._records: LogRecords | None = None  # the records of the last read, while they are the file's
        self._whole_end = 0  # where the last record's line ends: the writer cuts what follows (a torn tail)
        self._read()  # every line checked: a log that is not one is refused at once

    def configure(self, fsync: str = "interval", fsync_interval_s: float = 1.0) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"model.fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        self.fsync_policy, self.fsync_interval_s = fsync, float(fsync_interval_s)

    @collector_paused()  # the records it decodes are kept
    def _read(self) -> None:
        """One pass over the file: the index, the records and where the last record's line ends."""
        data = bytes(read_file(self.path)) if self.path.is_file() else b""  # lines sliced as bytes: no copy to parse
        index: dict[str, LogEntry] = {}
        repeats: dict[int, dict[str, LogEntry]] = {}
        records = LogRecords()
        end = 0
        for offset, length, rec in read_records(data, self.path):
            k, rid = attempt_of(rec), rec["request_id"]
            if k == 0:
                index[rid], records[rid] = _entry(rec, offset, length), rec
            else:
                repeats.setdefault(k, {})[rid] = _entry(rec, offset, length)
                records.repeats.setdefault(k, {})[rid] = rec
            end = offset + length
        self.index, self.repeats, self._records, self._whole_end = index, repeats, records, end

    def _written(self) -> None:
        """The file is about to change: the records read no longer describe it (a :class:`LogRecords`
        handed out keeps them), and the writer does not need them."""
        self._records = None

    @property
    def records(self) -> LogRecords:
        """Every request's latest record by request id, in log order (the file is read again when
        it was written since it was read)."""
        if self._records is None:
            self.close()
            self._read()
        assert self._records is not None
        return self._records

    def entries(self) -> Iterator[LogEntry]:
        """The index entry of every (request, attempt)."""
        yield from self.index.values()
        for entries in self.repeats.values():
            yield from entries.values()

    def meta(self) -> dict[str, Any] | None:
        """The run's identity and settings (``run.json``), or None when there is none."""
        if not self.meta_path.is_file():
            return None
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            where = f"line {exc.lineno} column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise PredictionLogError(
                f"{self.meta_path}: damaged or truncated ({where}); it records which model and settings wrote "
                f"{self.path.name}: delete both files to ask every request afresh") from None
        if not isinstance(meta, dict):
            raise PredictionLogError(f"{self.meta_path}: expected a JSON object, got {type(meta).__name__}; "
                                     f"delete it together with {self.path.name} to ask every request afresh")
        return meta

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_bytes(self.meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))

    # -- identity

    def bind_identity(self, digest: str, adopt_unstamped: bool = False) -> None:
        """Stamp every record appended from now on with ``digest``; :meth:`done` then counts only
        records stamped with it (and unstamped ones when ``adopt_unstamped``)."""
        self.identity, self.adopt_unstamped = digest, adopt_unstamped

    def identities(self) -> set[str | None]:
        """The identity digests the records are stamped with (None: a record without a stamp)."""
        return {e.identity for e in self.entries()}

    def _ours(self, entry: LogEntry) -> bool:
        if self.identity is None:
            return True
        return entry.identity == self.identity or (entry.identity is None and self.adopt_unstamped)

    def done(self, snapshot_sha256: str, attempt: int = 0) -> set[str]:
        """Requests with a final record of ``attempt`` for ``snapshot_sha256`` written by the bound identity."""
        entries = self.index if attempt == 0 else self.repeats.get(attempt, {})
        return {rid for rid, e in entries.items()
                if e.status in FINAL_STATUSES and e.snapshot_sha256 == snapshot_sha256 and self._ours(e)}

    def checked_meta(self) -> dict[str, Any] | None:
        """``run.json``, only when it describes the records: the identity a report names must be
        the one whose digest every record is stamped with. Refuses (naming both files and what to
        do) a log whose records were stamped by another identity than ``run.json`` names, or whose
        ``run.json`` is missing."""
        meta = self.meta()
        stamps = {s for s in self.identities() if s is not None}
        if not stamps:
            return meta
        fix = (f"run the view's inference again (its infer node) with the settings you mean: it reuses the "
               f"answers of that identity and writes {self.meta_path.name}; or delete {self.path.name} to start afresh")
        if meta is None:
            raise PredictionLogError(f"{self.path}: its records were written by run identity {', '.join(sorted(stamps))}, "
                                     f"but {self.meta_path} is missing, so nothing says which adapter and model that "
                                     f"is; {fix}")
        recorded = identity_digest(meta.get("identity") or {})
        if stamps != {recorded}:
            raise PredictionLogError(f"{self.path}: its records were written by run identity "
                                     f"{', '.join(sorted(stamps))}, but {self.meta_path} names identity {recorded} "
                                     f"({meta.get('identity')}); {fix}")
        return meta

    # -- writing

    def reset(self) -> None:
        self.close()
        self._written()
        self.index, self.repeats, self._whole_end = {}, {}, 0
        self.path.unlink(missing_ok=True)

    def set_aside(self) -> Path | None:
        """Move the log out of the way (``predictions.<digest>.superseded.jsonl``, named after the
        identity its records carry) and start empty; returns where it went (None: it was empty)."""
        self.close()
        if not self.path.is_file() or next(self.entries(), None) is None:
            self.reset()
            return None
        stamps = sorted(str(i) for i in self.identities() if i is not None) or ["unstamped"]
        target = self.path.with_name(f"{self.path.stem}.{'+'.join(stamps)[:40]}.superseded{self.path.suffix}")
        self._written()
        os.replace(self.path, target)
        self.index, self.repeats, self._whole_end = {}, {}, 0
        return target

    def _open(self) -> IO[bytes]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file() and self.path.stat().st_size > self._whole_end:
            os.truncate(self.path, self._whole_end)  # a torn tail (and blank lines) after the last record
        fh = open(self.path, "ab", buffering=0)  # unbuffered: each write is the system call
        self._end = fh.seek(0, os.SEEK_END)
        return fh

    def append(self, record: dict[str, Any]) -> None:
        rid = record.get("request_id", _MISSING)
        why = _problem(rid, record.get("status", _MISSING), record.get("attempt", _MISSING))
        if why:  # never write a line the log would refuse when it is read back
            raise PredictionLogError(f"{self.path}: refusing to append a record with {why}")
        if self.identity is not None and record.get(IDENTITY_FIELD) != self.identity:
            record = {**record, IDENTITY_FIELD: self.identity}
        if self._fh is None:
            self._written()
            self._fh = self._open()
        data = encode_record(record)
        offset = self._end
        # One write per complete line: a kill leaves whole lines plus at most one torn tail.
        fd = self._fh.fileno()
        written = os.write(fd, data)
        while written < len(data):  # a short write (a full disk raises on the next one)
            written += os.write(fd, data[written:])
        self._end = self._whole_end = self._end + len(data)
        now = time.monotonic()
        if self.fsync_policy == "always" or (self.fsync_policy == "interval"
                                             and now - self._last_sync >= self.fsync_interval_s):
            os.fsync(fd)
            self._last_sync = now
        k = attempt_of(record)
        (self.index if k == 0 else self.repeats.setdefault(k, {}))[rid] = _entry(record, offset, len(data))

    def sync(self) -> None:
        if self._fh is not None:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None

    def compact(self, order: list[str]) -> None:
        """Rewrite atomically: one line per request and attempt (its latest), in ``order`` (a request's
        attempts in turn); requests not in ``order`` are dropped. Lines are copied byte for byte from
        the old file: lines kept that lie one after another there are copied as one run (of at most
        :data:`COPY_BYTES`, or one longer line), so a log written in order is copied in large reads."""
        self.close()
        self._written()
        old = self.index
        if self.repeats:
            tables = [(0, old), *sorted(self.repeats.items())]
            kept = [(k, rid, t[rid]) for rid in order for k, t in tables if rid in t]
        else:
            kept = [(0, rid, old[rid]) for rid in order if rid in old]
        new: dict[str, LogEntry] = {}
        repeats: dict[int, dict[str, LogEntry]] = {}
        at = 0
        with (open(self.path, "rb") if kept else nullcontext()) as src, atomic_writer(self.path) as dst:
            for run in _runs(kept):
                assert src is not None
                start = run[0][2].offset
                chunk = os.pread(src.fileno(), run[-1][2].offset + run[-1][2].length - start, start)
                for k, rid, e in run:
                    end = e.offset - start + e.length
                    if chunk[end - 1: end] != b"\n":  # cut short, or not where the line ended
                        raise PredictionLogError(f"{self.path}: changed while it was being compacted "
                                                 f"(line of {rid} at byte {e.offset})")
                    (new if k == 0 else repeats.setdefault(k, {}))[rid] = LogEntry(
                        e.status, e.snapshot_sha256, e.cost_usd, at + e.offset - start, e.length, e.identity)
                dst.write(chunk)
                at += len(chunk)
        self.index, self.repeats, self._whole_end = new, repeats, at


COPY_BYTES = 1 << 20  # the most compaction copies in one read (unless one line is longer)


def _runs(kept: list[tuple[int, str, LogEntry]]) -> Iterator[list[tuple[int, str, LogEntry]]]:
    """``kept`` (in the order they are written) cut into runs of lines that lie one after another
    in the file, each of at most :data:`COPY_BYTES` unless it is one longer line."""
    run: list[tuple[int, str, LogEntry]] = []
    start = end = 0
    for item in kept:
        e = item[2]
        if run and (e.offset != end or e.offset + e.length - start > COPY_BYTES):
            yield run
            run = []
        if not run:
            start = e.offset
        run.append(item)
        end = e.offset + e.length
    if run:
        yield run
