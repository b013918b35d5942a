"""The inference engine: ask a model every request of a verified snapshot, resumably.

Predictions live in an append-only JSONL log per model and view, one line per request answered:
``request_id``, ``status`` (ok/unsupported/error/unattempted), ``response`` (the parsed body as
returned), ``latency_s``, ``model`` (resolved id), ``usage``, ``error``,
``unsupported_questions``, ``snapshot_sha256``, ``first`` (first timed request of its process),
``probability_source`` (``native``/``verbalized``), ``cost_usd``, ``run_identity`` (the digest of
the identity that asked it: adapter, model, endpoint, the settings that change answers, view and
snapshot — the identity itself is in ``run.json``); remote adapters add
``raw_response`` (the body text exactly as received), ``http_status``, ``server_request_id``
(``x-typesafe-request-id``), ``failure`` (why an error happened) and ``attempts``.

**Crash safety.** Each line is written and flushed as its answer arrives (one ``write`` per line,
so a killed process leaves at most one torn last line, dropped when the log is reopened);
``model.fsync`` decides how often the file is also fsynced (``always``, ``interval`` = at most
every ``fsync_interval_s`` seconds, the default, or ``never``) — that only matters for a machine
crash, not a killed process. A rerun with the same identity on the same snapshot asks only what has
no final line yet (``ok`` and ``unsupported`` are final; ``error`` and ``unattempted`` are asked
again), and the log is compacted to one line per request at the end of every run. Memory stays
flat: during a run only a small index entry per request is kept (:class:`PredictionLog`).

**Answers carry their identity.** Every record is stamped with its run's identity digest, and only
records stamped with this run's identity are reused: a log whose records another adapter, model,
endpoint or answer-changing setting wrote (``run.json`` present or not) is set aside as
``predictions.<digest>.superseded.jsonl`` and a fresh log is started. Records without a stamp
(written before stamps existed) are reused only when ``run.json`` names this very identity.
Scoring takes the identity it reports from ``run.json`` only when the records' stamps agree with it.

**One writer.** The output folder's lock (:mod:`jevkedro.nodes.output_lock`) is held while the log
is written: a second process on the same folder is refused at once, naming the holder.

**Execution.** Remote adapters have at most ``model.concurrency`` requests in flight: as
coroutines on one event loop in the calling thread when the adapter offers that path (the HTTP
adapters do), else from that many threads; local adapters are called in batches of ``model.batch_size``. With
``model.executor=dask`` the requests are sharded over Dask workers (:mod:`jevkedro.nodes.distributed`).

**Stop rules** (docs/protocol.md §2): 401, 403 and 429 stop the run (a 429 may first be waited out
if the retry policy says so); ``model.max_consecutive_failures`` (3) infrastructure failures in a
row (timeouts, dropped connections, 5xx, malformed bodies) stop it. Requests not attempted are
recorded ``unattempted`` with the reason, never as wrong answers. A 413/422 is an ``error`` for
that request only.

**Retry policy** (``model.retry``, recorded in ``run.json``): ``max_attempts`` (1 = no retries,
JevBench's policy), ``kinds`` (any of ``429``, ``5xx``, ``timeout``, ``connection``), ``backoff_s``
(doubling per attempt) capped at ``backoff_max_s``; a ``retry-after`` header wins over the backoff.

**Cost** per request = ``input_tokens × price_input_per_1m / 1e6 + output_tokens ×
price_output_per_1m / 1e6`` from the measured ``usage``; null when the usage or a needed price is
unknown (an unknown output price is not needed when no output tokens were used), never 0.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, ValuesView
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter, countOf, itemgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from tqdm.auto import tqdm

from jevkedro.config import FSYNC_POLICIES, EngineSettings, ModelSettings, RetrySettings
from jevkedro.models import Adapter, AdapterResult, StopRun, make_adapter
from jevkedro.nodes import output_lock
from jevkedro.nodes.gcpause import gc_paused
from jevkedro.nodes.jsonparse import JSONTextError, dumps_utf8, parse_json
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes, atomic_writer

log = logging.getLogger(__name__)

FINAL_STATUSES = {"ok", "unsupported"}
RECORD_STATUSES = ("ok", "unsupported", "error", "unattempted")
SCORING_BATCH = 8192  # records judged per batch while scoring
READ_BLOCK = 1 << 22  # bytes of log read at once while scoring
_FIX_LINE = ("the log is written by jevkedro one record per line; fix or delete that line "
             "(a deleted line's request is asked again) or delete the log to start afresh")


class PredictionLogError(ValueError):
    """A predictions log line that is not a record, or a damaged ``run.json`` (names the file,
    the line and what to do)."""


class LogEntry(msgspec.Struct, frozen=True, gc=False):
    """What is kept in memory per request while a view is asked: enough to resume (``status``,
    ``snapshot_sha256``), to summarise (``cost_usd``) and to compact (where the request's latest
    line lies in the log: ``offset``, ``length`` in bytes).

    Never tracked by the cycle collector (``gc=False``; its fields are strings, numbers and None,
    so it cannot be part of a cycle): a tuple subclass stays tracked, and an index of a few hundred
    thousand of them made the collector walk the whole heap again and again while a log was
    written (0.5 s of a 1.4 s write of 140,178 lines)."""

    status: str | None
    snapshot_sha256: str | None
    cost_usd: float | None
    offset: int
    length: int
    identity: str | None = None  # the run identity digest the record is stamped with


class _IndexFields(msgspec.Struct):
    """The fields of a record the index keeps; the rest of the line is skipped while decoding."""

    request_id: Any = msgspec.UNSET
    status: Any = msgspec.UNSET
    snapshot_sha256: Any = None
    cost_usd: Any = None
    run_identity: Any = None


_INDEX_DECODER = msgspec.json.Decoder(_IndexFields)
_STATUS_SET = frozenset(RECORD_STATUSES)
_get_request_id, _get_status = attrgetter("request_id"), attrgetter("status")
_second = itemgetter(1)
_get_sha, _get_cost = attrgetter("snapshot_sha256"), attrgetter("cost_usd")
_get_identity = attrgetter("run_identity")
# the fields of a LogEntry, for maps over many of them
_entry_status, _entry_sha, _entry_cost, _entry_offset, _entry_length, _entry_identity = map(
    attrgetter, ("status", "snapshot_sha256", "cost_usd", "offset", "length", "identity"))
IDENTITY_FIELD = "run_identity"


def _problem(request_id: Any, status: Any) -> str | None:
    """What makes decoded fields not a prediction record (None: they are one)."""
    if request_id is msgspec.UNSET:
        return "no request_id"
    if not isinstance(request_id, str):
        return f"request_id is {type(request_id).__name__}, not a string"
    if status is msgspec.UNSET:
        return "no status (a record without one would silently be asked again)"
    if status not in RECORD_STATUSES:
        return f"status {status!r} is not one of {', '.join(RECORD_STATUSES)}"
    return None


def _json_safe(value: Any) -> Any:
    """``value`` with integers beyond the double range as ±infinity (``jsonparse`` reads them so),
    for records a local adapter filled with Python ints too long for ``json.dumps``."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1024:
        return math.inf if value > 0 else -math.inf
    return value


class PredictionLog:
    """Append-only JSONL of prediction records for one (model, view), tolerant of a torn tail.

    Memory stays flat however many requests a view has: while answers are appended only the small
    :class:`LogEntry` index is kept per request; :attr:`records` reads a record from the file when
    it is asked for (scoring decodes them all straight from the log's bytes, see
    :class:`LogRecords`), and :meth:`compact` copies lines from the old file to the new one without
    holding them. Every line is checked when the log is opened: a line that is not a record (not
    JSON, no ``request_id``, no or an unknown ``status``) is refused naming file and line.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name("run.json")
        self.index: dict[str, LogEntry] = {}
        self._fh = None
        self.fsync_policy = "interval"
        self.fsync_interval_s = 1.0
        self._last_sync = 0.0
        self.identity: str | None = None  # the digest appended records are stamped with
        self.adopt_unstamped = False  # whether records without a stamp count as this identity's
        if self.path.is_file():
            self._scan()

    def configure(self, fsync: str = "interval", fsync_interval_s: float = 1.0) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"model.fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        self.fsync_policy, self.fsync_interval_s = fsync, float(fsync_interval_s)

    def _refuse(self, where: int | str, why: str) -> PredictionLogError:
        return PredictionLogError(f"{self.path}:{where}: not a prediction record: {why}; {_FIX_LINE}")

    def _parse(self, line: bytes, where: int | str) -> dict[str, Any]:
        """A whole record, read exactly (:func:`~jevkedro.nodes.jsonparse.parse_json`)."""
        try:
            rec = parse_json(line).value
        except JSONTextError as exc:
            raise self._refuse(where, f"not valid JSON ({exc.within_line()})") from None
        if not isinstance(rec, dict):
            raise self._refuse(where, f"a JSON {type(rec).__name__}, not an object")
        why = _problem(rec.get("request_id", msgspec.UNSET), rec.get("status", msgspec.UNSET))
        if why:
            raise self._refuse(where, why)
        return rec

    def _fields(self, line: bytes, lineno: int) -> _IndexFields:
        try:
            fields = _INDEX_DECODER.decode(line)
        except (msgspec.DecodeError, RecursionError):  # NaN literals, oversized numbers, not an object...
            rec = self._parse(line, lineno)
            return _IndexFields(rec["request_id"], rec["status"], rec.get("snapshot_sha256"), rec.get("cost_usd"),
                                rec.get(IDENTITY_FIELD))
        why = _problem(fields.request_id, fields.status)
        if why:
            raise self._refuse(lineno, why)
        return fields

    @gc_paused()
    def _scan(self) -> None:
        """Index every line (later lines win); cut off a torn last line left by a killed run.

        The log is read in blocks; the lines of a block are decoded by msgspec in one C-level pass
        (only the indexed fields are kept) and checked together; a block with a line that is not a
        record is gone through line by line to name the line.
        """
        index = self.index
        offset = 0
        first = 1  # line number of the block's first line
        rest = b""
        shared: dict[Any, Any] = {}  # one string object per distinct status and snapshot hash
        with open(self.path, "rb") as fh:
            while chunk := fh.read(READ_BLOCK):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                block, rest = data[:cut], data[cut:]
                if not block:
                    continue
                lines = block.split(b"\n")
                lines.pop()  # after the last newline
                fields = self._block_fields(lines, first)
                lengths = [len(line) + 1 for line in lines]  # with its newline
                starts: Iterable[int] = accumulate(lengths, initial=offset)
                if None in fields:  # blank lines: not indexed
                    keep = [i for i, f in enumerate(fields) if f is not None]
                    all_starts = list(starts)
                    fields = [fields[i] for i in keep]
                    lengths = [lengths[i] for i in keep]
                    starts = [all_starts[i] for i in keep]
                statuses = [shared.setdefault(v, v) for v in map(_get_status, fields)]
                shas = [shared.setdefault(v, v) for v in map(_get_sha, fields)]
                idents = [shared.setdefault(v, v) if isinstance(v, str) else None for v in map(_get_identity, fields)]
                index.update(zip(map(_get_request_id, fields),
                                 map(LogEntry, statuses, shas, map(_get_cost, fields), starts, lengths, idents)))
                first += len(lines)
                offset += len(block)
        if rest:  # only the last line can lack its newline: a write cut short; dropped before appending
            log.warning("%s: dropping a torn last line (%d bytes)", self.path, len(rest))
            with open(self.path, "r+b") as fh:
                fh.truncate(offset)

    def _block_fields(self, lines: list[bytes], first: int) -> list[_IndexFields | None]:
        """The indexed fields of each line (None for a blank line); refuses a line that is not a record."""
        fields = decode_each(_INDEX_DECODER, lines)
        # lines msgspec could not read (NaN literals, ...) are read exactly, one by one
        for i in [i for i, f in enumerate(fields) if f is None]:
            fields[i] = self._fields(lines[i], first + i) if lines[i].strip() else None
        decoded = [f for f in fields if f is not None] if None in fields else fields
        try:
            if set(map(type, map(_get_request_id, decoded))) <= {str} and set(map(_get_status, decoded)) <= _STATUS_SET:
                return fields
        except TypeError:  # an unhashable status
            pass
        return [f if f is None or not _problem(f.request_id, f.status) else self._fields(lines[i], first + i)
                for i, f in enumerate(fields)]

    def line_number(self, offset: int) -> int:
        """The 1-based line at byte ``offset`` (for messages; counts the newlines before it)."""
        with open(self.path, "rb") as fh:
            return fh.read(offset).count(b"\n") + 1

    def read_line(self, entry: LogEntry) -> bytes:
        with open(self.path, "rb") as fh:
            return os.pread(fh.fileno(), entry.length, entry.offset)

    @property
    def records(self) -> LogRecords:
        """Every request's latest record by request id, in log order (a mapping read from the
        file on access: nothing is held in memory)."""
        return LogRecords(self)

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

    def reset(self) -> None:
        self.close()
        self.index = {}
        self.path.unlink(missing_ok=True)

    def bind_identity(self, digest: str, adopt_unstamped: bool = False) -> None:
        """Stamp every record appended from now on with ``digest``; :meth:`done` then counts only
        records stamped with it (and unstamped ones when ``adopt_unstamped``)."""
        self.identity, self.adopt_unstamped = digest, adopt_unstamped

    def identities(self) -> set[str | None]:
        """The identity digests the records are stamped with (None: a record without a stamp)."""
        return {e.identity for e in self.index.values()}

    def _ours(self, entry: LogEntry) -> bool:
        if self.identity is None:
            return True
        return entry.identity == self.identity or (entry.identity is None and self.adopt_unstamped)

    def done(self, snapshot_sha256: str) -> set[str]:
        """Requests with a final record for ``snapshot_sha256`` written by the bound identity."""
        return {rid for rid, e in self.index.items()
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

    def set_aside(self) -> Path | None:
        """Move the log out of the way (``predictions.<digest>.superseded.jsonl``, named after the
        identity its records carry) and start empty; returns where it went (None: it was empty)."""
        self.close()
        if not self.path.is_file() or not self.index:
            self.reset()
            return None
        stamps = sorted(str(i) for i in self.identities() if i is not None) or ["unstamped"]
        target = self.path.with_name(f"{self.path.stem}.{'+'.join(stamps)[:40]}.superseded{self.path.suffix}")
        os.replace(self.path, target)
        self.index = {}
        return target

    def append(self, record: dict[str, Any]) -> None:
        rid, status = record.get("request_id", msgspec.UNSET), record.get("status", msgspec.UNSET)
        if not (type(rid) is str and type(status) is str and status in _STATUS_SET):  # else: _problem's verdict
            why = _problem(rid, status)
            if why:  # never write a line the log would refuse when it is read back
                raise PredictionLogError(f"{self.path}: refusing to append a record with {why}")
        identity, stamp = record.get(IDENTITY_FIELD), None
        if self.identity is not None and identity != self.identity:
            identity = stamp = self.identity
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab", buffering=0)  # unbuffered: each write is the system call
            self._end = self._fh.seek(0, os.SEEK_END)
        data = encode_record(record, stamp)
        offset = self._end
        # One write per complete line: a kill leaves whole lines plus at most one torn tail.
        fd = self._fh.fileno()
        written = os.write(fd, data)
        while written < len(data):  # a short write (a full disk raises on the next one)
            written += os.write(fd, data[written:])
        self._end += len(data)
        now = time.monotonic()
        if self.fsync_policy == "always" or (self.fsync_policy == "interval"
                                             and now - self._last_sync >= self.fsync_interval_s):
            os.fsync(fd)
            self._last_sync = now
        sha = record.get("snapshot_sha256")
        self.index[rid] = LogEntry(sys.intern(status), sys.intern(sha) if type(sha) is str else sha,
                                     record.get("cost_usd"), offset, len(data),
                                     sys.intern(identity) if type(identity) is str else None)

    def sync(self) -> None:
        if self._fh is not None:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None

    @gc_paused()
    def compact(self, order: list[str]) -> None:
        """Rewrite atomically: one line per request (its latest), in ``order``; requests not in
        ``order`` are dropped. Lines are copied byte for byte from the old file, each run of
        adjacent lines with one read (at most ``COMPACT_RUN_BYTES`` held), so memory stays flat."""
        self.close()
        old = self.index
        found: list[LogEntry | None] = list(map(old.get, order))
        entries: list[LogEntry] = [e for e in found if e is not None]
        # requests without a line are not kept
        rids = list(order) if len(entries) == len(found) else [rid for rid, e in zip(order, found) if e is not None]
        n = len(entries)
        starts, lengths, runs = _line_runs(entries)
        new_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_offsets[1:])
        # a run ends where the next kept line does not follow it in the old file, or at the size cap
        bounds = np.asarray(_capped_runs(np.asarray(runs), new_offsets, COMPACT_RUN_BYTES))
        firsts, ends = bounds[:-1], bounds[1:]
        firsts, ends = firsts[ends > firsts], ends[ends > firsts]  # the runs that hold lines
        run_starts, run_sizes = starts[firsts].tolist(), (new_offsets[ends] - new_offsets[firsts]).tolist()
        with ExitStack() as stack:
            src = stack.enter_context(open(self.path, "rb")) if entries else None
            dst = stack.enter_context(atomic_writer(self.path))
            fd, pread, write = src.fileno() if src is not None else -1, os.pread, dst.write
            for at, size in zip(run_starts, run_sizes):
                data = pread(fd, size, at)
                if len(data) != size or data[-1:] != b"\n":
                    last = int(ends[run_starts.index(at)]) - 1
                    raise PredictionLogError(f"{self.path}: changed while it was being compacted "
                                             f"(line of {rids[last]} at byte {entries[last].offset})")
                write(data)
        offsets = new_offsets.tolist()
        self.index = dict(zip(rids, map(LogEntry, map(_entry_status, entries), map(_entry_sha, entries),
                                        map(_entry_cost, entries), offsets, lengths.tolist(),
                                        map(_entry_identity, entries))))


def _capped_runs(bounds: np.ndarray, offsets: np.ndarray, cap: int) -> list[int]:
    """Run boundaries (as a list) with runs longer than ``cap`` bytes cut at line boundaries."""
    sizes = offsets[bounds[1:]] - offsets[bounds[:-1]]
    if not (sizes > cap).any():
        return bounds.tolist()
    out = [0]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        while offsets[b] - offsets[a] > cap and b - a > 1:
            a = max(int(np.searchsorted(offsets, offsets[a] + cap, side="right")) - 1, a + 1)
            out.append(a)
        out.append(b)
    return sorted(set(out))


def encode_record(record: Mapping[str, Any], stamp: str | None = None) -> bytes:
    """One log line (UTF-8, ending in a newline): ``record``, stamped with ``stamp`` when given,
    exactly as ``{**record, "run_identity": stamp}`` would be written (a new field goes last:
    spliced in without copying the record). msgspec writes it unless the response holds a
    float JSON has no literal for (NaN, infinity: written ``NaN``/``Infinity`` by ``json.dumps``, so
    the reader judges the number, not a null) or something msgspec does not write (a lone
    surrogate, an integer past 64 bits).

    msgspec writes a non-finite float as ``null``; a line with no more ``null`` than the record has
    top-level None values holds no null inside any value, so no such float: then nothing but the
    one encoding is needed. Otherwise the response is looked at (written alone, then walked)."""
    if stamp is not None and IDENTITY_FIELD in record:  # stamped by another identity: restamped in place
        record, stamp = {**record, IDENTITY_FIELD: stamp}, None
    try:
        data = _RECORD_ENCODER.encode(record)
        finite = (data.count(b"null") == countOf(record.values(), None)
                  or not _non_finite_response(record.get("response")))
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        finite = False
    if finite:
        if stamp is None:
            return data + b"\n"
        field = b'"' + IDENTITY_FIELD.encode() + b'":'  # after the last member, before the closing brace
        return b"".join((data[:-1], b"," if len(data) > 2 else b"", field, _RECORD_ENCODER.encode(stamp), b"}\n"))
    if stamp is not None:
        record = {**record, IDENTITY_FIELD: stamp}
    return utf8_json_line(record)


def utf8_json_line(value: Any) -> bytes:
    """``value`` as one JSON line of valid UTF-8 (``json.dumps``; an integer past Python's digit
    limit written as the log's reader reads it). A string holding a lone surrogate (a model may
    send ``"\\ud800"``: valid JSON) has no UTF-8 form, so such a line is written with every
    non-ASCII character escaped: the reader gets the very same strings back."""
    try:
        return dumps_utf8(value) + b"\n"
    except ValueError:
        return dumps_utf8(_json_safe(value)) + b"\n"


_RECORD_ENCODER = msgspec.json.Encoder()


def _non_finite_response(response: Any) -> bool:
    """Whether a response (the rest of a record is ours: a null there is a None) holds a NaN or an
    infinity: only where msgspec writes a ``null`` in it."""
    return response is not None and b"null" in _RECORD_ENCODER.encode(response) and _has_non_finite(response)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    return False


COMPACT_RUN_BYTES = 1 << 22  # at most this much of the log is held while compacting


class LogRecords(Mapping[str, dict[str, Any]]):
    """The records of a :class:`PredictionLog` by request id, in log order, read on access.

    ``records[rid]`` parses that request's line (:func:`~jevkedro.nodes.jsonparse.parse_json`);
    :meth:`items` reads them all in log order.
    """

    def __init__(self, plog: PredictionLog) -> None:
        self._plog = plog

    def __getitem__(self, rid: str) -> dict[str, Any]:
        entry = self._plog.index[rid]
        line = self._plog.read_line(entry)
        if len(line) != entry.length:
            raise PredictionLogError(f"{self._plog.path}: changed since it was opened (line of {rid!r})")
        return self._parse_indexed(rid, entry, line)

    def _parse_indexed(self, rid: str, entry: LogEntry, line: bytes) -> dict[str, Any]:
        """The record of ``rid`` on its indexed line, read exactly. Every line was checked when the
        log was opened, so a line that is no record now, or the record of another request or with
        another status than the index holds, is refused as a change, naming the line."""
        try:
            rec = self._plog._parse(line, f"byte {entry.offset}")
        except PredictionLogError:
            rec = None
        if rec is None or rec["request_id"] != rid or rec["status"] != entry.status:
            raise self._changed(entry)
        return rec

    def _changed(self, entry: LogEntry) -> PredictionLogError:
        return self._plog._refuse(self._plog.line_number(entry.offset), "changed since the log was opened")

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._plog.index))

    def __len__(self) -> int:
        return len(self._plog.index)

    def __contains__(self, rid: object) -> bool:
        return rid in self._plog.index

    def items(self) -> ItemsView[str, dict[str, Any]]:
        """Every ``(request id, record)``, read as :meth:`__getitem__` reads one, but with one open
        of the file and one read per run of adjacent lines (a family scorer walking every record
        would otherwise open the file once per record)."""
        return _LogItems(self)

    def values(self) -> ValuesView[dict[str, Any]]:
        return _LogValues(self)

    def _parsed(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for chunk, lines in self._line_batches():
            for (rid, entry), line in zip(chunk, lines):
                yield rid, self._parse_indexed(rid, entry, line)

    def _line_batches(self) -> Iterator[tuple[list[tuple[str, LogEntry]], list[bytes]]]:
        """The index in log order, ``SCORING_BATCH`` entries at a time, with their lines (one open
        of the file, one read per run of adjacent lines)."""
        entries = list(self._plog.index.items())
        if not entries:
            return
        with open(self._plog.path, "rb") as fh:
            for b in range(0, len(entries), SCORING_BATCH):
                chunk = entries[b: b + SCORING_BATCH]
                yield chunk, _read_lines(fh.fileno(), chunk, self._plog.path)


class _LogItems(ItemsView):
    _mapping: LogRecords

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._mapping._parsed()


class _LogValues(ValuesView):
    _mapping: LogRecords

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (rec for _, rec in self._mapping._parsed())


def decode_each(decoder: Any, lines: list[bytes], chunk: int = 256) -> list[Any]:
    """``decoder.decode`` of every line, None where a line does not decode: a C-level map over
    the lines. Lines holding ``NaN``/``Infinity`` (literals msgspec does not read; the log has
    them where a model returned such a number) are set apart first, so no work is thrown away;
    anything else that fails narrows the map to chunks, then to single lines."""
    odd = _lines_with(lines, (b"NaN", b"Infinity"))
    out: list[Any] = []
    start = 0
    for i in [*odd, len(lines)]:
        out.extend(_decode_run(decoder, lines[start:i], chunk))
        if i < len(lines):
            out.append(_typed_or_none(decoder, lines[i]))
        start = i + 1
    return out


def _lines_with(lines: list[bytes], tokens: tuple[bytes, ...]) -> list[int]:
    """Indices of the lines holding any of ``tokens`` (searched in C over the joined lines)."""
    joined = b"\n".join(lines)
    found = []
    for token in tokens:
        at = joined.find(token)
        while at >= 0:
            found.append(at)
            at = joined.find(token, at + 1)
    if not found:
        return []
    ends = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1)
    return np.unique(np.searchsorted(ends, found, side="right")).tolist()


def _decode_run(decoder: Any, lines: list[bytes], chunk: int) -> list[Any]:
    try:
        return list(map(decoder.decode, lines))
    except (msgspec.DecodeError, RecursionError):
        pass
    out: list[Any] = []
    for i in range(0, len(lines), chunk):
        part = lines[i: i + chunk]
        try:
            out.extend(list(map(decoder.decode, part)))  # whole or not at all
        except (msgspec.DecodeError, RecursionError):
            out.extend(_typed_or_none(decoder, line) for line in part)
    return out


def _typed_or_none(decoder: Any, line: bytes) -> Any:
    try:
        return decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None


def _line_runs(entries: list[LogEntry]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The entries' offsets and lengths, and the bounds of their runs: a run is entries whose lines
    follow each other in the file (a compacted log read in order is one run)."""
    n = len(entries)
    starts = np.fromiter(map(_entry_offset, entries), dtype=np.int64, count=n)
    lengths = np.fromiter(map(_entry_length, entries), dtype=np.int64, count=n)
    breaks = (np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1).tolist() if n else []
    return starts, lengths, [0, *breaks, n]


def _read_lines(fd: int, entries: list[tuple[str, LogEntry]], path: Path) -> list[bytes]:
    """The lines of ``(request id, entry)`` pairs (without their newlines), each run of adjacent
    lines read with one ``pread``. A run whose bytes are not those lines any more (the file
    changed since it was indexed) is refused."""
    starts, lengths, bounds = _line_runs([e for _, e in entries])
    out: list[bytes] = []
    for i, j in zip(bounds[:-1], bounds[1:]):
        if i == j:
            continue
        start = int(starts[i])
        data = os.pread(fd, int(starts[j - 1] + lengths[j - 1]) - start, start)
        lines = data.split(b"\n")
        tail = lines.pop()
        if tail or len(lines) != j - i or not np.array_equal(
                np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1, lengths[i:j]):
            bad = next((k for k in range(i, j) if k - i >= len(lines) or len(lines[k - i]) + 1 != lengths[k]), j - 1)
            raise PredictionLogError(f"{path}: changed since it was opened (line of {entries[bad][0]!r})")
        out.extend(lines)
    return out


# -- settings -----------------------------------------------------------------------------------
# The engine's settings are typed in :mod:`jevkedro.config` (EngineSettings, RetrySettings); what
# follows is how the engine applies them.


def retry_kind(result: AdapterResult | None, stop: StopRun | None) -> str | None:
    """The retry class of a failed attempt (None: not retryable by any policy)."""
    if stop is not None:
        return "429" if stop.http_status == 429 else None
    if result is None or result.status != "error":
        return None
    if result.failure == "server" and (result.http_status or 0) >= 500:
        return "5xx"
    if result.failure in ("timeout", "connection"):
        return result.failure
    return None


@dataclass(frozen=True)
class Tariff:
    """USD per million tokens; None = unknown."""

    input_per_1m: float | None = None
    output_per_1m: float | None = None

    @classmethod
    def of(cls, engine: EngineSettings) -> Tariff:
        return cls(engine.price_input_per_1m, engine.price_output_per_1m)

    def cost(self, usage: Any) -> float | None:
        if not isinstance(usage, Mapping) or self.input_per_1m is None:
            return None
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens") or 0
        if not isinstance(tokens_in, (int, float)) or not isinstance(tokens_out, (int, float)):
            return None
        if tokens_out and self.output_per_1m is None:
            return None
        return tokens_in * self.input_per_1m / 1e6 + tokens_out * (self.output_per_1m or 0.0) / 1e6


# -- progress -----------------------------------------------------------------------------------

class Progress:
    """Progress of a run: a live bar (tqdm: done/total, rate, ETA) when stderr is a terminal, and a
    log line with the same figures at most every ``every_s`` seconds (0 = only at the end), so
    runs under CI or ``nohup`` still show where they are."""

    def __init__(self, total: int, label: str, every_s: float = 5.0) -> None:
        self.total, self.label, self.every_s = total, label, every_s
        self.done = 0
        self.start = self.last = time.perf_counter()
        self.bar = tqdm(total=total, desc=label, unit="req", dynamic_ncols=True, leave=False,
                        disable=not sys.stderr.isatty() or total == 0)

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate else float("inf")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.label}: {self.done}/{self.total} requests ({pct:.0f}%), "
                f"{rate:.1f} req/s, elapsed {elapsed:.0f}s, ETA {eta:.0f}s")

    def update(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)
        now = time.perf_counter()
        if (self.every_s and now - self.last >= self.every_s) or self.done >= self.total:
            log.info(self.line())
            self.last = now
        if self.done >= self.total:
            self.close()

    def close(self) -> None:
        self.bar.close()


# -- one request / the core loop ----------------------------------------------------------------

def _record(rid: str, result: AdapterResult, latency: float | None, sha: str, first: bool,
            probability_source: str = "native", cost: float | None = None, attempts: int | None = None) -> dict[str, Any]:
    rec = {
        "request_id": rid,
        "status": result.status,
        "response": result.response,
        "latency_s": latency,
        "model": result.model,
        "usage": result.usage,
        "error": result.error,
        "unsupported_questions": result.unsupported_questions,
        "snapshot_sha256": sha,
        "first": first,
        "probability_source": probability_source,
        "cost_usd": cost,
        **({"meta": result.meta} if result.meta else {}),
    }
    for key, value in (("raw_response", result.raw), ("http_status", result.http_status),
                       ("server_request_id", result.server_request_id), ("failure", result.failure),
                       ("attempts", attempts)):
        if value is not None:
            rec[key] = value
    return rec


@dataclass
class _Outcome:
    rid: str
    result: AdapterResult | None
    latency: float | None
    stop: StopRun | None
    attempts: int


def _retry_delay(rid: str, result: AdapterResult | None, stop: StopRun | None, attempt: int, policy: RetrySettings,
                 halt: threading.Event) -> float | None:
    """Seconds to wait before asking again, or None when this attempt's outcome is final (the
    retry policy's kinds and attempts; never once the run halts). Both call paths decide by it."""
    kind = retry_kind(result, stop)
    if kind not in policy.kinds or attempt >= policy.max_attempts or halt.is_set():
        return None
    delay = policy.delay(attempt, stop.retry_after if stop is not None else None)
    log.info("%s: %s on attempt %d; retrying in %.1fs", rid, kind, attempt, delay)
    return delay


def _call(adapter: Adapter, rid: str, request: dict[str, Any], policy: RetrySettings,
          halt: threading.Event) -> _Outcome:
    """One request with the retry policy; latency is that of the last attempt."""
    attempt = 0
    while True:
        attempt += 1
        t0 = time.perf_counter()
        try:
            result, stop = adapter.answer(rid, request), None
            latency = time.perf_counter() - t0
        except StopRun as exc:
            result, stop, latency = None, exc, None
        delay = _retry_delay(rid, result, stop, attempt, policy, halt)
        if delay is not None and not halt.wait(delay):
            continue
        return _Outcome(rid, result, latency, stop, attempt)


async def _call_async(adapter: Adapter, rid: str, request: dict[str, Any], policy: RetrySettings,
                      halt: threading.Event, halted: asyncio.Event) -> _Outcome:
    """:func:`_call` on the event loop: the same retry policy; a wait ends early when the run halts."""
    attempt = 0
    while True:
        attempt += 1
        t0 = time.perf_counter()
        try:
            result, stop = await adapter.answer_async(rid, request), None
            latency = time.perf_counter() - t0
        except StopRun as exc:
            result, stop, latency = None, exc, None
        delay = _retry_delay(rid, result, stop, attempt, policy, halt)
        if delay is not None:
            try:
                await asyncio.wait_for(halted.wait(), delay)
            except TimeoutError:
                continue
        return _Outcome(rid, result, latency, stop, attempt)


class _Collector:
    """Turns outcomes into records, applies the stop rules and marks the first timed request.

    ``first_state`` (``{"taken": bool}``) is per run locally and per worker process under Dask:
    the first timed request after an adapter's setup is reported apart (cold caches).
    """

    def __init__(self, adapter: Adapter, engine: EngineSettings, sha: str,
                 emit: Callable[[dict[str, Any]], None], halt: threading.Event,
                 first_state: dict[str, bool]) -> None:
        self.adapter, self.engine, self.sha, self.emit, self.halt = adapter, engine, sha, emit, halt
        self.first_state = first_state
        self.tariff = Tariff.of(engine)
        self.stopped: str | None = None
        self.consecutive = 0

    def unattempted(self, rid: str, why: str, http_status: int | None = None) -> None:
        self.emit(_record(rid, AdapterResult(status="unattempted", error=why, http_status=http_status),
                          None, self.sha, False, self.adapter.probability_source))

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
            log.error("stopping the run: %s", why)
        self.halt.set()

    def take(self, o: _Outcome) -> None:
        if o.stop is not None:
            self.stop(str(o.stop))
            self.unattempted(o.rid, f"run stopped: {o.stop}", o.stop.http_status)
            return
        result = o.result
        assert result is not None  # an outcome that did not stop the run has a result
        timed = result.status == "ok" and self.adapter.measures_latency
        first = timed and not self.first_state["taken"]
        self.first_state["taken"] = self.first_state["taken"] or timed
        self.emit(_record(o.rid, result, o.latency if timed else None, self.sha, first,
                          self.adapter.probability_source, self.tariff.cost(result.usage),
                          o.attempts if self.adapter.remote else None))
        if result.infrastructure_failure:
            self.consecutive += 1
            if self.consecutive >= self.engine.max_consecutive_failures:
                self.stop(f"{self.consecutive} consecutive infrastructure failures (last: {result.error})")
        elif result.status in ("ok", "error"):
            # Only a reply from the server shows it is up again; an unsupported request was never
            # sent (and an unattempted one never asked), so neither breaks a run of failures.
            self.consecutive = 0


def _drain(inflight: Mapping[Any, str], col: _Collector) -> None:
    """Record the outcome of every request still in flight (used when the loop dies)."""
    for fut in list(inflight):
        try:
            col.take(fut.result())
        except Exception:  # that request's own failure, or the writer's: nothing more to keep
            log.exception("%s: lost while the run was failing", inflight[fut])


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop where installed (less CPU per socket call), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def _run_on_a_loop(make: Callable[[], Any]) -> None:
    """Run the coroutine ``make()`` on a new event loop in this thread, or, when this thread already
    runs one (a notebook, an async caller), in one helper thread: a loop cannot be nested."""
    def run() -> None:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(make())

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: no loop here
        run()
        return
    failure: list[BaseException] = []

    def run_in_helper() -> None:
        try:
            run()
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    helper = threading.Thread(target=run_in_helper, name="jevkedro-ask-loop")
    helper.start()
    helper.join()
    if failure:
        raise failure[0]


async def _ask_on_loop(adapter: Adapter, pending: Iterator[tuple[str, dict[str, Any]]], engine: EngineSettings,
                       col: _Collector, halt: threading.Event) -> None:
    """The remote loop of :func:`ask_all` as coroutines on this one thread: ``engine.concurrency``
    workers, each taking the next request in snapshot order, asking it, recording its outcome and
    only then taking another, so at most that many are in flight and every answer is recorded as
    it completes. (Workers rather than one dispatcher woken per completion: a request's successor
    is sent right after its own record, not after every record of the same loop turn, which kept
    requests in lock-step batches.)"""
    halted = asyncio.Event()  # halt as the loop sees it: ends retry waits at once

    async def worker() -> None:
        while not halt.is_set():
            nxt = next(pending, None)
            if nxt is None:
                return
            try:
                outcome = await _call_async(adapter, nxt[0], nxt[1], engine.retry, halt, halted)
                col.take(outcome)
            except BaseException:
                halt.set()  # an adapter bug or the writer's failure: send nothing more
                halted.set()
                raise
            if halt.is_set():
                halted.set()

    workers = [asyncio.ensure_future(worker()) for _ in range(engine.concurrency)]
    try:
        try:
            await asyncio.wait(workers)
        except BaseException:
            # Ctrl-C (the loop's runner cancels this task): send nothing more, but let the requests
            # already in flight finish and be recorded before the interruption propagates.
            halt.set()
            halted.set()
            await asyncio.wait(workers)
            raise
        failed = [exc for t in workers if (exc := t.exception()) is not None]
        for extra in failed[1:]:  # a failure while the run was already failing: nothing more to keep
            log.error("lost while the run was failing: %r", extra)
        if failed:
            raise failed[0]
    finally:
        await adapter.aclose()


def ask_all(adapter: Adapter, items: Iterable[tuple[str, dict[str, Any]]], engine: EngineSettings, sha: str,
            emit: Callable[[dict[str, Any]], None], first_state: dict[str, bool] | None = None) -> str | None:
    """Ask ``items`` (already set up adapter), emitting one record per request in completion order.

    Every item gets exactly one record: answered, or ``unattempted`` once the run stopped.
    Returns why the run stopped, or None.
    """
    halt = threading.Event()
    col = _Collector(adapter, engine, sha, emit, halt, first_state if first_state is not None else {"taken": False})
    pending = iter(items)
    if adapter.remote and adapter.event_loop:
        # The objects alive before the run (the snapshot's requests, ...) are set aside from the
        # cycle collector while it runs: otherwise each full collection walks them all again while
        # every reply waits (about a sixth of the client's CPU per request at concurrency 32).
        # Objects made during the run are collected as usual.
        gc.freeze()
        try:
            _run_on_a_loop(lambda: _ask_on_loop(adapter, pending, engine, col, halt))
        finally:
            gc.unfreeze()
    elif adapter.remote:  # adapters without an event-loop path (or taking the thread path, see models/http.py)
        inflight: dict[Any, str] = {}
        with ThreadPoolExecutor(max_workers=engine.concurrency, thread_name_prefix="jevkedro-ask") as pool:
            def fill() -> None:
                while not halt.is_set() and len(inflight) < engine.concurrency:
                    nxt = next(pending, None)
                    if nxt is None:
                        return
                    inflight[pool.submit(_call, adapter, nxt[0], nxt[1], engine.retry, halt)] = nxt[0]

            try:
                fill()
                while inflight:
                    finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        inflight.pop(fut)
                        col.take(fut.result())
                    fill()
            except BaseException:
                # An adapter bug or Ctrl-C: send nothing more, but keep the answers of the requests
                # already in flight (they are paid for) before the error propagates.
                halt.set()
                _drain(inflight, col)
                raise
    else:
        size = engine.batch_size or adapter.default_batch_size
        while not halt.is_set():
            batch = [x for _, x in zip(range(size), pending)]
            if not batch:
                break
            t0 = time.perf_counter()
            try:
                results = adapter.answer_batch(batch)
            except StopRun as exc:
                col.stop(str(exc))
                for rid, _ in batch:
                    col.unattempted(rid, f"run stopped: {exc}", exc.http_status)
                break
            if len(results) != len(batch):  # zip would silently drop requests: a broken adapter
                raise RuntimeError(f"{adapter.kind}: answer_batch returned {len(results)} results for "
                                   f"{len(batch)} requests")
            share = (time.perf_counter() - t0) / len(batch)  # a batch's wall time, shared evenly
            for (rid, _), result in zip(batch, results):
                if len(batch) > 1:
                    result.meta = {**result.meta, "batch_size": len(batch)}
                col.take(_Outcome(rid, result, share, None, 1))
    for rid, _ in pending:
        col.unattempted(rid, f"run stopped: {col.stopped}")
    return col.stopped


def summarize(entries: Iterable[LogEntry]) -> dict[str, Any]:
    """Status counts and total cost (null when any answered request has an unknown cost)."""
    counts: dict[str, int] = {}
    costs: list[float | None] = []
    for e in entries:
        status = e.status if e.status is not None else "unattempted"  # as validation judges it
        counts[status] = counts.get(status, 0) + 1
        if e.status == "ok":
            costs.append(e.cost_usd)
    known = [c for c in costs if c is not None]
    total = float(sum(known)) if costs and len(known) == len(costs) else None
    return {"statuses": counts, "cost_usd": total}


def identity_digest(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def run_inference(snapshot: Snapshot, adapter: Adapter, plog: PredictionLog,
                  engine: EngineSettings | None = None,
                  adapter_settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask ``adapter`` every request of ``snapshot`` that ``plog`` has no final answer for.

    Latency is measured around ``adapter.answer`` only (preprocessing + inference); loading and
    warm-up happen in ``setup`` before the clock starts. ``adapter_settings`` (the ``model``
    parameters) are needed by the Dask executor to build the adapter in each worker. Returns a
    summary of this run.
    """
    engine = engine or EngineSettings()
    if not snapshot.verified:
        raise RuntimeError(f"{snapshot.path}: refusing inference on an unverified snapshot")
    with output_lock.holding(plog.path.parent):  # one writer per output folder
        return _run_locked(snapshot, adapter, plog, engine, adapter_settings)


def _start_log(plog: PredictionLog, adapter: Adapter, identity: dict[str, Any]) -> None:
    """Bind the log to ``identity``: resume it when every record in it is this identity's, else set
    it aside (never reuse another identity's answers, never silently drop them)."""
    digest = identity_digest(identity)
    previous = plog.meta()
    vouched = bool(previous) and (previous or {}).get("identity") == identity  # run.json written for this identity
    stamps = plog.identities()
    foreign = {d for d in stamps if d is not None and d != digest}
    if not adapter.resumable:
        plog.reset()
    elif plog.index and (foreign or (None in stamps and not vouched)):
        why = (f"its records were written by run identity {', '.join(sorted(foreign))}" if foreign else
               "its records carry no run identity and " + (f"{plog.meta_path.name} names {previous.get('identity')}"
                                                           if previous else f"there is no {plog.meta_path.name}"))
        moved = plog.set_aside()
        log.warning("%s: %s, not this run's identity %s (%s); those answers are not reused: the log was moved to %s "
                    "and every request is asked afresh", plog.path, why, digest, identity, moved)
    elif previous and previous.get("identity") != identity:  # an empty log under another run.json
        plog.reset()
    plog.bind_identity(digest, adopt_unstamped=vouched)


def _run_locked(snapshot: Snapshot, adapter: Adapter, plog: PredictionLog, engine: EngineSettings,
                adapter_settings: Mapping[str, Any] | None) -> dict[str, Any]:
    identity = {**adapter.identity(), "view": snapshot.view, "snapshot_sha256": snapshot.sha256}
    _start_log(plog, adapter, identity)
    plog.configure(engine.fsync, engine.fsync_interval_s)
    meta = {"identity": identity, "identity_digest": plog.identity, "probability_source": adapter.probability_source,
            "engine": engine.model_dump(mode="json")}
    plog.write_meta(meta)
    order = [rid for rid, _ in snapshot.requests()]
    stopped = None
    try:
        if engine.executor == "dask":
            from jevkedro.nodes.distributed import run_distributed

            if adapter_settings is None:
                raise ValueError("the dask executor needs the model settings to build adapters in its workers")
            asked, reused, stopped = run_distributed(snapshot, plog, engine, dict(adapter_settings),
                                                     identity_digest(identity), adapter)
        else:
            done = plog.done(snapshot.sha256)
            todo = [(rid, req) for rid, req in snapshot.requests() if rid not in done]
            asked, reused = len(todo), len(done)
            log.info("%s: %d requests, %d already answered, %d to ask (%s)",
                     snapshot.view, len(order), reused, asked, identity["model"])
            progress = Progress(asked, snapshot.view, engine.progress)

            def emit(rec: dict[str, Any]) -> None:
                plog.append(rec)
                progress.update()

            adapter.setup()
            try:
                stopped = ask_all(adapter, todo, engine, snapshot.sha256, emit)
            finally:
                progress.close()
                adapter.close()
    finally:
        plog.compact(order)
    summary = {"asked": asked, "reused": reused, "stopped": stopped, **summarize(plog.index.values()),
               "identity": identity}
    plog.write_meta({**meta, **adapter.run_notes(order), "last_run": {k: v for k, v in summary.items() if k != "identity"}})
    return summary


def infer(snapshot: Snapshot, plog: PredictionLog, model: ModelSettings | Mapping[str, Any]) -> PredictionLog:
    """Run the configured model (``params:model``) on a verified snapshot."""
    model = ModelSettings.parse(model)
    summary = run_inference(snapshot, make_adapter(model), plog, model.engine, model.flat())
    log.info("%s: inference done: %s (cost %s USD)", snapshot.view, summary["statuses"], summary["cost_usd"])
    if summary["stopped"]:
        log.error("%s: run stopped early: %s", snapshot.view, summary["stopped"])
    return plog
