"""The inference engine: ask a model every request of a verified snapshot, resumably.

Predictions live in an append-only JSONL log per model and view, one line per request answered:
``request_id``, ``status`` (ok/unsupported/error/unattempted), ``response`` (the raw body as
returned), ``latency_s``, ``model`` (resolved id), ``usage``, ``error``,
``unsupported_questions``, ``snapshot_sha256``, ``first`` (first timed request of its run).

Each line is written and flushed as its answer arrives, so a killed run loses at most the request
in flight; a torn last line is dropped when the log is reopened. A rerun with the same model on
the same snapshot asks only what has no final line yet (``ok`` and ``unsupported`` are final;
``error`` and ``unattempted`` are asked again).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator

from jevkedro.models import Adapter, AdapterResult, StopRun, make_adapter
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes

log = logging.getLogger(__name__)

FINAL_STATUSES = {"ok", "unsupported"}


class PredictionLog:
    """Append-only JSONL of prediction records for one (model, view), tolerant of a torn tail."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name("run.json")
        self.records: dict[str, dict[str, Any]] = {}
        self._fh = None
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1
        if end < len(raw):  # a torn last line from a killed run: drop it before appending
            log.warning("%s: dropping a torn last line (%d bytes)", self.path, len(raw) - end)
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
        for line in raw[:end].decode("utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                self.records[rec["request_id"]] = rec  # later lines win

    def meta(self) -> dict[str, Any] | None:
        if self.meta_path.is_file():
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        return None

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_bytes(self.meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))

    def reset(self) -> None:
        self.close()
        self.records.clear()
        self.path.unlink(missing_ok=True)

    def done(self, snapshot_sha256: str) -> set[str]:
        return {rid for rid, r in self.records.items()
                if r.get("status") in FINAL_STATUSES and r.get("snapshot_sha256") == snapshot_sha256}

    def append(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        self.records[record["request_id"]] = record

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
        """Rewrite atomically: one line per request, in snapshot order."""
        self.close()
        lines = [json.dumps(self.records[rid], ensure_ascii=False) for rid in order if rid in self.records]
        atomic_write_bytes(self.path, ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8"))


def _record(rid: str, result: AdapterResult, latency: float | None, sha: str, first: bool) -> dict[str, Any]:
    return {
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
        **({"meta": result.meta} if result.meta else {}),
    }


def _progress(total: int, every_s: float = 5.0) -> Iterator[None]:
    """Log rate and ETA now and then while requests are answered."""
    start = last = time.perf_counter()
    done = 0
    while True:
        yield
        done += 1
        now = time.perf_counter()
        if now - last >= every_s or done == total:
            rate = done / max(now - start, 1e-9)
            eta = (total - done) / rate if rate else float("inf")
            log.info("inference: %d/%d requests, %.1f req/s, ETA %.0fs", done, total, rate, eta)
            last = now


def run_inference(snapshot: Snapshot, adapter: Adapter, plog: PredictionLog) -> dict[str, Any]:
    """Ask ``adapter`` every request of ``snapshot`` that ``plog`` has no final answer for.

    Latency is measured around ``adapter.answer`` only (preprocessing + inference); loading and
    warm-up happen in ``setup`` before the clock starts. Returns a summary of this run.
    """
    if not snapshot.verified:
        raise RuntimeError(f"{snapshot.path}: refusing inference on an unverified snapshot")
    identity = {**adapter.identity(), "view": snapshot.view, "snapshot_sha256": snapshot.sha256}
    previous = plog.meta()
    if not adapter.resumable or (previous and previous.get("identity") != identity):
        if previous and adapter.resumable:
            log.warning("%s: earlier predictions came from %s; starting afresh for %s",
                        plog.path, previous.get("identity"), identity)
        plog.reset()
    plog.write_meta({"identity": identity, "probability_source": adapter.probability_source})
    done = plog.done(snapshot.sha256)
    todo = [(rid, req) for rid, req in snapshot.requests() if rid not in done]
    log.info("%s: %d requests, %d already answered, %d to ask (%s)",
             snapshot.view, len(snapshot.rows), len(done), len(todo), identity["model"])
    adapter.setup()
    stopped = None
    first = True
    tick = _progress(len(todo))
    next(tick)
    try:
        for i, (rid, request) in enumerate(todo):
            try:
                t0 = time.perf_counter()
                result = adapter.answer(rid, request)
                latency = time.perf_counter() - t0
            except StopRun as exc:
                stopped = str(exc)
                for later_rid, _ in todo[i:]:
                    plog.append(_record(later_rid, AdapterResult(status="unattempted", error=stopped),
                                        None, snapshot.sha256, False))
                break
            timed = result.status == "ok" and adapter.measures_latency
            plog.append(_record(rid, result, latency if timed else None, snapshot.sha256, first and timed))
            first = first and not timed
            tick.send(None)
    finally:
        adapter.close()
        plog.compact([rid for rid, _ in snapshot.requests()])
    counts: dict[str, int] = {}
    for rec in plog.records.values():
        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
    return {"asked": len(todo), "reused": len(done), "stopped": stopped, "statuses": counts,
            "identity": identity}


def infer(snapshot: Snapshot, plog: PredictionLog, model: dict[str, Any]) -> PredictionLog:
    """Kedro node: run the configured model (``params:model``) on a verified snapshot."""
    adapter = make_adapter(dict(model))
    summary = run_inference(snapshot, adapter, plog)
    log.info("%s: inference done: %s", snapshot.view, summary["statuses"])
    if summary["stopped"]:
        log.error("%s: run stopped early: %s", snapshot.view, summary["stopped"])
    return plog
