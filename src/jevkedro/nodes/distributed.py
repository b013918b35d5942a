"""Distributed inference on Dask (``model.executor=dask``; optional extra ``dask``).

A view's requests are cut into shards of ``model.shard_size`` consecutive requests **in snapshot
order** (shard *k* = positions ``k·S … k·S+S−1``, so a shard's identity does not depend on what an
earlier run finished). Each shard that still has unanswered requests becomes one Dask task; the
worker builds the adapter from the ``model`` settings (once per worker process), asks the shard's
missing requests with the same engine as a local run (concurrency, retries, stop rules), and
writes its records as one file, atomically (temp file + rename)::

    <predictions dir>/shards/<identity digest>/shard-<k>-<digest of the asked ids>-<run token>.jsonl

The driving Kedro process is the only writer of the predictions log: it appends each finished
shard's records as the shard arrives, and at the start of every run it first merges the final
records of shard files left by an earlier (killed) run, so finished shards are skipped, and then
deletes those files (their errors and unattempted requests are asked again, like a local rerun).
MLflow tracking stays in the driver (workers never touch it).

A worker killed mid-shard loses only that shard's unwritten answers: Dask reschedules the task on
another worker (``distributed.scheduler.allowed-failures``, 3 by default), and a shard that still
fails is recorded ``unattempted`` with the reason. A shard that hits a stop rule (401/403/429,
consecutive infrastructure failures) stops the run: pending shards are cancelled and recorded
``unattempted``. Without ``model.scheduler`` (an address) a ``LocalCluster`` of ``model.workers``
processes with one thread each is started for the run; workers read API keys from their own
environment (a LocalCluster inherits the driver's).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

from jevkedro.models import Adapter, make_adapter
from jevkedro.models.base import AdapterResult
from jevkedro.nodes.infer import FINAL_STATUSES, EngineSettings, PredictionLog, Progress, _record, ask_all
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes

log = logging.getLogger(__name__)

# Per worker process: adapters already set up, keyed by their settings, and the first-request flag.
_WORKER_ADAPTERS: dict[str, Adapter] = {}
_WORKER_FIRST = {"taken": False}


def _close_worker_adapters() -> None:
    for adapter in _WORKER_ADAPTERS.values():
        adapter.close()
    _WORKER_ADAPTERS.clear()


atexit.register(_close_worker_adapters)


def _worker_adapter(settings: dict[str, Any]) -> Adapter:
    key = json.dumps(settings, sort_keys=True, default=str)
    if key not in _WORKER_ADAPTERS:
        adapter = make_adapter(settings)
        adapter.setup()
        _WORKER_ADAPTERS[key] = adapter
    return _WORKER_ADAPTERS[key]


def run_shard(settings: dict[str, Any], items: list[tuple[str, dict[str, Any]]], shard_path: str,
              sha: str) -> dict[str, Any]:
    """Dask task: ask one shard's requests and write its records to ``shard_path`` atomically.

    If the file is already there the shard was finished by an earlier attempt of this task (Dask
    recomputes a finished task whose result lived on a worker that died): nothing is asked again.
    """
    done = Path(shard_path)
    if done.is_file():
        lines = done.read_text(encoding="utf-8").splitlines()
        stopped = next((json.loads(x)["error"] for x in lines if json.loads(x)["status"] == "unattempted"), None)
        return {"path": shard_path, "n": len(lines), "stopped": stopped}
    adapter = _worker_adapter(settings)
    engine = EngineSettings.from_model(settings)
    records: list[dict[str, Any]] = []
    stopped = ask_all(adapter, items, engine, sha, records.append, _WORKER_FIRST)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_bytes(shard_path, body.encode("utf-8"))
    return {"path": shard_path, "n": len(records), "stopped": stopped}


def shard_of(position: int, shard_size: int) -> int:
    return position // shard_size


def merge_shard_files(folder: Path, plog: PredictionLog, sha: str) -> int:
    """Append to the log the final records of shard files it does not have yet, make the log
    durable, then delete the shard files (everything worth keeping is in the log now, and a shard
    file must not stand in for a later run's shard). Returns how many records were merged."""
    if not folder.is_dir():
        return 0
    done = plog.done(sha)
    merged = 0
    paths = sorted(folder.glob("shard-*.jsonl"))
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)  # shard files are written whole (atomic rename): no torn lines
            if rec.get("status") in FINAL_STATUSES and rec.get("snapshot_sha256") == sha and rec["request_id"] not in done:
                plog.append(rec)
                done.add(rec["request_id"])
                merged += 1
    plog.sync()
    for path in paths:
        path.unlink()
    return merged


def record_unfinished_shards(plog: PredictionLog, shards: list[tuple[int, list[tuple[str, Any]], Path]],
                             stopped: str | None, sha: str, probability_source: str) -> int:
    """After a stop, record the shards the driver did not collect: a shard whose file is written
    (it finished while the stop was being handled) keeps its answers; the rest is ``unattempted``.
    Returns the number of requests recorded."""
    n = 0
    for _k, items, path in shards:
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                plog.append(json.loads(line))
        else:
            for rid, _ in items:
                plog.append(_record(rid, AdapterResult(status="unattempted", error=f"run stopped: {stopped}"),
                                    None, sha, False, probability_source))
        n += len(items)
    return n


def _client(engine: EngineSettings):
    from distributed import Client, LocalCluster

    if engine.scheduler:
        return Client(engine.scheduler), None
    cluster = LocalCluster(n_workers=engine.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    return Client(cluster), cluster


def run_distributed(snapshot: Snapshot, plog: PredictionLog, engine: EngineSettings, settings: dict[str, Any],
                    digest: str, adapter: Adapter) -> tuple[int, int, str | None]:
    """Shard the missing requests over Dask workers; returns (asked, reused, stopped)."""
    from distributed import as_completed

    folder = plog.shards_dir / digest
    merged = merge_shard_files(folder, plog, snapshot.sha256)
    if merged:
        log.info("%s: merged %d answers from finished shards of an earlier run", snapshot.view, merged)
    done = plog.done(snapshot.sha256)
    shards: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for pos, (rid, req) in enumerate(snapshot.requests()):
        if rid not in done:
            shards.setdefault(shard_of(pos, engine.shard_size), []).append((rid, req))
    asked = sum(len(v) for v in shards.values())
    log.info("%s: %d requests, %d already answered, %d to ask in %d shards on dask (%s)",
             snapshot.view, len(snapshot.rows), len(done), asked, len(shards), adapter.kind)
    if not shards:
        return 0, len(done), None
    folder.mkdir(parents=True, exist_ok=True)
    progress = Progress(asked, snapshot.view, engine.progress)
    stopped = None
    client, cluster = _client(engine)
    try:
        futures = {}
        run_token = uuid.uuid4().hex[:8]  # a Dask retry of a task finds its file; a later run never does
        for k, items in shards.items():
            ids = hashlib.sha256("\n".join(rid for rid, _ in items).encode("utf-8")).hexdigest()[:12]
            path = folder / f"shard-{k:06d}-{ids}-{run_token}.jsonl"
            fut = client.submit(run_shard, settings, items, str(path), snapshot.sha256,
                                key=f"jevkedro-shard-{digest[:8]}-{k}-{uuid.uuid4().hex[:8]}", pure=False)
            futures[fut] = (k, items, path)
        unfinished = dict(futures)
        for fut in as_completed(list(futures)):
            k, items, _ = unfinished.pop(fut)
            try:
                result = fut.result()
            except Exception as exc:  # the shard's task failed on every worker it was given (e.g. KilledWorker)
                log.error("%s: shard %d failed: %s: %s", snapshot.view, k, type(exc).__name__, exc)
                for rid, _ in items:
                    plog.append(_record(rid, AdapterResult(status="unattempted",
                                                           error=f"shard {k} failed: {type(exc).__name__}: {exc}"),
                                        None, snapshot.sha256, False, adapter.probability_source))
                progress.update(len(items))
                continue
            for line in Path(result["path"]).read_text(encoding="utf-8").splitlines():
                plog.append(json.loads(line))
            progress.update(result["n"])
            if result["stopped"]:
                stopped = result["stopped"]
                log.error("%s: shard %d stopped the run: %s", snapshot.view, k, stopped)
                break
        for fut in unfinished:  # after a stop: send no more shards
            fut.cancel()
        progress.update(record_unfinished_shards(plog, list(unfinished.values()), stopped, snapshot.sha256,
                                                 adapter.probability_source))
    finally:
        progress.close()
        client.close()
        if cluster is not None:
            cluster.close()
    return asked, len(done), stopped
