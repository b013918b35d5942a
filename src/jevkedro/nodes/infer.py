"""The inference engine: ask a model every request of a verified snapshot, resumably.

Predictions live in an append-only JSONL log per model and view, one line per request answered:
``request_id``, ``status`` (ok/unsupported/error/unattempted), ``response`` (the parsed body as
returned), ``latency_s``, ``model`` (resolved id), ``usage``, ``error``,
``unsupported_questions``, ``snapshot_sha256``, ``first`` (first timed request of its process),
``probability_source`` (``native``/``verbalized``), ``cost_usd``; remote adapters add
``raw_response`` (the body text exactly as received), ``http_status``, ``server_request_id``
(``x-typesafe-request-id``), ``failure`` (why an error happened) and ``attempts``.

**Crash safety.** Each line is written and flushed as its answer arrives (one ``write`` per line,
so a killed process leaves at most one torn last line, dropped when the log is reopened);
``model.fsync`` decides how often the file is also fsynced (``always``, ``interval`` = at most
every ``fsync_interval_s`` seconds, the default, or ``never``) — that only matters for a machine
crash, not a killed process. A rerun with the same model on the same snapshot asks only what has
no final line yet (``ok`` and ``unsupported`` are final; ``error`` and ``unattempted`` are asked
again), and the log is compacted to one line per request at the end of every run. Memory stays
flat: during a run only a small index entry per request is kept (:class:`PredictionLog`).

**Execution.** Remote adapters are called from ``model.concurrency`` threads, with at most that
many requests in flight; local adapters are called in batches of ``model.batch_size``. With
``model.executor=dask`` the requests are sharded over Dask workers (:mod:`jevkedro.nodes.distributed`).

**Stop rules** (wire_protocol §7): 401, 403 and 429 stop the run (a 429 may first be waited out
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

import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from tqdm.auto import tqdm

from jevkedro.config import FSYNC_POLICIES, EngineSettings, ModelSettings, RetrySettings
from jevkedro.models import Adapter, AdapterResult, StopRun, make_adapter
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes, atomic_writer

log = logging.getLogger(__name__)

FINAL_STATUSES = {"ok", "unsupported"}


class PredictionLogError(ValueError):
    """A predictions log line that is not a record (names file and line)."""


class LogEntry(NamedTuple):
    """What is kept in memory per request while a view is asked: enough to resume (``status``,
    ``snapshot_sha256``), to summarise (``cost_usd``) and to compact (where the request's latest
    line lies in the log: ``offset``, ``length`` in bytes)."""

    status: str | None
    snapshot_sha256: str | None
    cost_usd: float | None
    offset: int
    length: int


def _entry(record: Mapping[str, Any], offset: int, length: int) -> LogEntry:
    status, sha = record.get("status"), record.get("snapshot_sha256")
    return LogEntry(sys.intern(status) if isinstance(status, str) else status,
                    sys.intern(sha) if isinstance(sha, str) else sha,
                    record.get("cost_usd"), offset, length)


class PredictionLog:
    """Append-only JSONL of prediction records for one (model, view), tolerant of a torn tail.

    Memory stays flat however many requests a view has: while answers are appended only the small
    :class:`LogEntry` index is kept per request; the full records are read back from the file on
    first use of :attr:`records` (scoring needs them all), and :meth:`compact` copies lines from
    the old file to the new one without holding them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name("run.json")
        self.index: dict[str, LogEntry] = {}
        self._records: dict[str, dict[str, Any]] | None = None
        self._fh = None
        self.fsync_policy = "interval"
        self.fsync_interval_s = 1.0
        self._last_sync = 0.0
        if self.path.is_file():
            self._scan()

    def configure(self, fsync: str = "interval", fsync_interval_s: float = 1.0) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"model.fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        self.fsync_policy, self.fsync_interval_s = fsync, float(fsync_interval_s)

    def _parse(self, line: bytes, lineno: int | str) -> dict[str, Any]:
        try:
            rec = json.loads(line)
            if not isinstance(rec["request_id"], str):
                raise TypeError("request_id is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            raise PredictionLogError(f"{self.path}:{lineno}: not a prediction record ({exc})") from None
        return rec

    def _scan(self) -> None:
        """Index every line (later lines win); cut off a torn last line left by a killed run."""
        offset = 0
        with open(self.path, "rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.endswith(b"\n"):
                    break  # only the last line can lack its newline: a write cut short
                if line.strip():
                    rec = self._parse(line, lineno)
                    self.index[rec["request_id"]] = _entry(rec, offset, len(line))
                offset += len(line)
        size = self.path.stat().st_size
        if offset < size:  # drop it before appending, so the next line starts on its own
            log.warning("%s: dropping a torn last line (%d bytes)", self.path, size - offset)
            with open(self.path, "r+b") as fh:
                fh.truncate(offset)

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        """Every request's latest record by request id, in log order (read from the file once)."""
        if self._records is None:
            if self._fh is not None:
                self._fh.flush()
            records: dict[str, dict[str, Any]] = {}
            if self.index:
                with open(self.path, "rb") as fh:
                    for rid, entry in self.index.items():
                        fh.seek(entry.offset)
                        records[rid] = self._parse(fh.read(entry.length), f"byte {entry.offset}")
            self._records = records
        return self._records

    def meta(self) -> dict[str, Any] | None:
        if self.meta_path.is_file():
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        return None

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_bytes(self.meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))

    def reset(self) -> None:
        self.close()
        self.index.clear()
        self._records = None
        self.path.unlink(missing_ok=True)

    def done(self, snapshot_sha256: str) -> set[str]:
        return {rid for rid, e in self.index.items()
                if e.status in FINAL_STATUSES and e.snapshot_sha256 == snapshot_sha256}

    def append(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab")
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        offset = self._fh.tell()
        # One write per complete line: a kill leaves whole lines plus at most one torn tail.
        self._fh.write(data)
        self._fh.flush()
        now = time.monotonic()
        if self.fsync_policy == "always" or (self.fsync_policy == "interval"
                                             and now - self._last_sync >= self.fsync_interval_s):
            os.fsync(self._fh.fileno())
            self._last_sync = now
        self.index[record["request_id"]] = _entry(record, offset, len(data))
        if self._records is not None:
            self._records[record["request_id"]] = record

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None

    def compact(self, order: list[str]) -> None:
        """Rewrite atomically: one line per request (its latest), in ``order``; requests not in
        ``order`` are dropped. Lines are copied byte for byte from the old file, one at a time."""
        self.close()
        index: dict[str, LogEntry] = {}
        with ExitStack() as stack:
            src = stack.enter_context(open(self.path, "rb")) if self.index else None
            dst = stack.enter_context(atomic_writer(self.path))
            pos = 0
            for rid in order:
                entry = self.index.get(rid)
                if entry is None:
                    continue
                src.seek(entry.offset)
                line = src.read(entry.length)
                if len(line) != entry.length or not line.endswith(b"\n"):
                    raise PredictionLogError(f"{self.path}: changed while it was being compacted "
                                             f"(line of {rid} at byte {entry.offset})")
                dst.write(line)
                index[rid] = entry._replace(offset=pos)
                pos += entry.length
        self.index = index
        if self._records is not None:
            self._records = {rid: self._records[rid] for rid in index}


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
        kind = retry_kind(result, stop)
        if kind in policy.kinds and attempt < policy.max_attempts and not halt.is_set():
            delay = policy.delay(attempt, stop.retry_after if stop is not None else None)
            log.info("%s: %s on attempt %d; retrying in %.1fs", rid, kind, attempt, delay)
            if not halt.wait(delay):
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


def ask_all(adapter: Adapter, items: Iterable[tuple[str, dict[str, Any]]], engine: EngineSettings, sha: str,
            emit: Callable[[dict[str, Any]], None], first_state: dict[str, bool] | None = None) -> str | None:
    """Ask ``items`` (already set up adapter), emitting one record per request in completion order.

    Every item gets exactly one record: answered, or ``unattempted`` once the run stopped.
    Returns why the run stopped, or None.
    """
    halt = threading.Event()
    col = _Collector(adapter, engine, sha, emit, halt, first_state if first_state is not None else {"taken": False})
    pending = iter(items)
    if adapter.remote:
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
        counts[e.status] = counts.get(e.status, 0) + 1
        if e.status == "ok":
            costs.append(e.cost_usd)
    total = None if not costs or any(c is None for c in costs) else float(sum(costs))
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
    identity = {**adapter.identity(), "view": snapshot.view, "snapshot_sha256": snapshot.sha256}
    previous = plog.meta()
    if not adapter.resumable or (previous and previous.get("identity") != identity):
        if previous and adapter.resumable:
            log.warning("%s: earlier predictions came from %s; starting afresh for %s",
                        plog.path, previous.get("identity"), identity)
        plog.reset()
    plog.configure(engine.fsync, engine.fsync_interval_s)
    meta = {"identity": identity, "probability_source": adapter.probability_source, "engine": engine.model_dump(mode="json")}
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
    plog.write_meta({**meta, "last_run": {k: v for k, v in summary.items() if k != "identity"}})
    return summary


def infer(snapshot: Snapshot, plog: PredictionLog, model: ModelSettings | Mapping[str, Any]) -> PredictionLog:
    """Run the configured model (``params:model``) on a verified snapshot."""
    model = ModelSettings.parse(model)
    summary = run_inference(snapshot, make_adapter(model), plog, model.engine, model.flat())
    log.info("%s: inference done: %s (cost %s USD)", snapshot.view, summary["statuses"], summary["cost_usd"])
    if summary["stopped"]:
        log.error("%s: run stopped early: %s", snapshot.view, summary["stopped"])
    return plog
