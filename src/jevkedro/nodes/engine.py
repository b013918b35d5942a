"""The engine: ask an adapter a list of requests and hand over one record per request as it completes.

Remote adapters have at most ``model.concurrency`` requests in flight: as coroutines on one event
loop in the calling thread when the adapter offers that path, else from that many threads; local
adapters are called in batches of ``model.batch_size``. Every item gets exactly one record:
answered, or ``unattempted`` with the reason once a stop rule ended the run. An item is
``(request id, request, attempt)``: ``attempt`` is None for a run asking each request once (its
records carry no attempt), else the 0-based repeat (``model.repeats``), written as the record's
``attempt`` and named to the adapter (:meth:`~jevkedro.models.base.Adapter.answer_attempt`). The retry policy,
stop rules and cost are described in :mod:`jevkedro.nodes.infer`; the local run and the Dask
executor (:mod:`jevkedro.nodes.distributed`) both ask through :func:`ask_all`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import islice
from typing import Any

from tqdm.auto import tqdm

from jevkedro.models import Adapter, AdapterResult, StopRun
from jevkedro.models.settings import EngineSettings, RetrySettings
from jevkedro.nodes.reply_body import keep_body

log = logging.getLogger(__name__)


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
        """The request's cost, or None when a price or a count is unknown: a count is a whole
        number of tokens, at least 0 (``true``, ``-5000000`` or ``1.5`` are no counts)."""
        if not isinstance(usage, Mapping) or self.input_per_1m is None:
            return None
        tokens_in = _token_count(usage.get("input_tokens"))
        tokens_out = _token_count(usage.get("output_tokens", 0))
        if tokens_in is None or tokens_out is None or (tokens_out and self.output_per_1m is None):
            return None
        return tokens_in * self.input_per_1m / 1e6 + tokens_out * (self.output_per_1m or 0.0) / 1e6


def _token_count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0 or value != int(value):
        return None
    if value >= 2**53:  # no reply uses this many tokens (and no float counts them exactly): an invented count
        return None
    return int(value)


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

def make_record(rid: str, result: AdapterResult, latency: float | None, sha: str, first: bool,
                probability_source: str = "native", cost: float | None = None,
                attempts: int | None = None, reader: type[Adapter] | None = None,
                attempt: int | None = None) -> dict[str, Any]:
    """The log record of one request's outcome; a body (``result.raw``) is kept bounded and, read
    by ``reader`` (the adapter's class), is the source of the record's response
    (:func:`jevkedro.nodes.reply_body.keep_body`)."""
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
    if result.raw is not None:
        keep_body(rec, result, reader)
    if attempt is not None:  # repeated sampling: which repeat this answer is (none when asked once)
        rec["attempt"] = attempt
    for key, value in (("http_status", result.http_status),
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
    repeat: int | None = None  # the item's attempt (None: the request is asked once)


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


def _call(adapter: Adapter, rid: str, request: dict[str, Any], repeat: int | None, policy: RetrySettings,
          halt: threading.Event) -> _Outcome:
    """One request with the retry policy; latency is that of the last attempt."""
    attempt = 0
    while True:
        attempt += 1
        t0 = time.perf_counter()
        try:
            result, stop = adapter.answer_attempt(rid, request, repeat or 0), None
            latency = time.perf_counter() - t0
        except StopRun as exc:
            result, stop, latency = None, exc, None
        delay = _retry_delay(rid, result, stop, attempt, policy, halt)
        if delay is not None and not halt.wait(delay):
            continue
        return _Outcome(rid, result, latency, stop, attempt, repeat)


async def _call_async(adapter: Adapter, rid: str, request: dict[str, Any], repeat: int | None, policy: RetrySettings,
                      halt: threading.Event, halted: asyncio.Event) -> _Outcome:
    """:func:`_call` on the event loop: the same retry policy; a wait ends early when the run halts."""
    attempt = 0
    while True:
        attempt += 1
        t0 = time.perf_counter()
        try:
            result, stop = await adapter.answer_attempt_async(rid, request, repeat or 0), None
            latency = time.perf_counter() - t0
        except StopRun as exc:
            result, stop, latency = None, exc, None
        delay = _retry_delay(rid, result, stop, attempt, policy, halt)
        if delay is not None:
            try:
                await asyncio.wait_for(halted.wait(), delay)
            except TimeoutError:
                continue
        return _Outcome(rid, result, latency, stop, attempt, repeat)


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

    def unattempted(self, rid: str, why: str, http_status: int | None = None, repeat: int | None = None) -> None:
        self.emit(make_record(rid, AdapterResult(status="unattempted", error=why, http_status=http_status),
                          None, self.sha, False, self.adapter.probability_source, attempt=repeat))

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
            log.error("stopping the run: %s", why)
        self.halt.set()

    def take(self, o: _Outcome) -> None:
        if o.stop is not None:
            self.stop(str(o.stop))
            self.unattempted(o.rid, f"run stopped: {o.stop}", o.stop.http_status, o.repeat)
            return
        result = o.result
        assert result is not None  # an outcome that did not stop the run has a result
        timed = result.status == "ok" and self.adapter.measures_latency
        first = timed and not self.first_state["taken"]
        self.first_state["taken"] = self.first_state["taken"] or timed
        self.emit(make_record(o.rid, result, o.latency if timed else None, self.sha, first,
                          self.adapter.probability_source, self.tariff.cost(result.usage),
                          o.attempts if self.adapter.remote else None,
                          type(self.adapter) if self.adapter.reads_bodies else None, o.repeat))
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


def _run_on_a_loop(make: Callable[[], Any]) -> None:
    """Run the coroutine ``make()`` on a new event loop in this thread, or, when this thread already
    runs one (a notebook, an async caller), in one helper thread: a loop cannot be nested."""
    def run() -> None:
        with asyncio.Runner() as runner:
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


Item = tuple[str, dict[str, Any], "int | None"]  # (request id, request, attempt: None when asked once)


async def _ask_on_loop(adapter: Adapter, pending: Iterator[Item], engine: EngineSettings,
                       col: _Collector, halt: threading.Event) -> None:
    """The remote loop of :func:`ask_all` as coroutines on this one thread: ``engine.concurrency``
    workers, each taking the next request in snapshot order, asking it and recording its outcome
    before taking another, so at most that many are in flight and every answer is recorded as it
    completes."""
    halted = asyncio.Event()  # halt as the loop sees it: ends retry waits at once

    async def worker() -> None:
        while not halt.is_set():
            nxt = next(pending, None)
            if nxt is None:
                return
            try:
                outcome = await _call_async(adapter, nxt[0], nxt[1], nxt[2], engine.retry, halt, halted)
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


def ask_all(adapter: Adapter, items: Iterable[Item], engine: EngineSettings, sha: str,
            emit: Callable[[dict[str, Any]], None], first_state: dict[str, bool] | None = None) -> str | None:
    """Ask ``items`` (already set up adapter; see :data:`Item`), emitting one record per item in
    completion order.

    Every item gets exactly one record: answered, or ``unattempted`` once the run stopped.
    Returns why the run stopped, or None.
    """
    halt = threading.Event()
    col = _Collector(adapter, engine, sha, emit, halt, first_state if first_state is not None else {"taken": False})
    pending = iter(items)
    if adapter.remote and adapter.event_loop:
        # The objects alive before the run (the snapshot's requests, ...) are set aside from the
        # cycle collector while it runs, and given back after it: otherwise each full collection
        # walks them all again while every reply waits. Objects made during the run are collected as usual.
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
                    inflight[pool.submit(_call, adapter, nxt[0], nxt[1], nxt[2], engine.retry, halt)] = nxt[0]

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
            batch = list(islice(pending, size))
            if not batch:
                break
            t0 = time.perf_counter()
            try:
                results = (adapter.answer_batch_attempts([(r, q, k or 0) for r, q, k in batch])
                           if any(k is not None for _, _, k in batch) else adapter.answer_batch([(r, q) for r, q, _ in batch]))
            except StopRun as exc:
                col.stop(str(exc))
                for rid, _, k in batch:
                    col.unattempted(rid, f"run stopped: {exc}", exc.http_status, k)
                break
            if len(results) != len(batch):  # zip would silently drop requests: a broken adapter
                raise RuntimeError(f"{adapter.kind}: answer_batch returned {len(results)} results for "
                                   f"{len(batch)} requests")
            share = (time.perf_counter() - t0) / len(batch)  # a batch's wall time, shared evenly
            for (rid, _, k), result in zip(batch, results):
                if len(batch) > 1:
                    result.meta = {**result.meta, "batch_size": len(batch)}
                col.take(_Outcome(rid, result, share, None, 1, k))
    for rid, _, k in pending:
        col.unattempted(rid, f"run stopped: {col.stopped}", repeat=k)
    return col.stopped

