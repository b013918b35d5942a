"""Distributed inference on Dask (``model.executor=dask``; optional extra ``dask``; docs/distributed.md).

**Shards.** A view's requests are cut into shards of ``model.shard_size`` consecutive requests in
snapshot order (a shard's identity does not depend on what an earlier run finished); each shard
with unanswered requests is one Dask task, asked in the worker by the same engine as a local run
(:func:`jevkedro.nodes.engine.ask_all`, with an adapter built once per worker process).

**Records travel back through Dask**, as task results: workers need no shared filesystem, and the
driver is the only writer of the predictions log. It appends each shard's records as the shard
finishes and releases the task; tasks are submitted in a sliding window of two per worker thread,
so neither the driver nor the scheduler holds more than the window's requests.

**Optional shard store** (``model.shard_store``, an fsspec URL or a local path): each worker also
writes its finished shard there whole (temp file and rename; one PUT on object stores), as lines
of the predictions log. The driver merges those files before asking and at the end of the run,
so shards finished for a killed driver, or by a Dask retry whose result was lost, are not asked
again.

**Clusters and keys.** ``model.scheduler`` names an existing cluster (never closed here); else a
``LocalCluster`` of ``model.workers`` processes runs for the run. Every worker is checked first
(jevkedro at the driver's version, the ``model.api_key_env`` variable set); keys are never sent,
and a setting holding the key's value is refused.

**Repeated sampling** (``model.repeats`` > 1) is refused with this executor by the settings check:
every request is asked once here.

**Failures.** A shard lost with its worker is rescheduled by Dask; one that still fails is recorded
``unattempted`` with the reason. A stop rule in one shard stops the run: unsent and pending shards
are recorded ``unattempted``; finished ones keep their answers.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from jevkedro import console
from jevkedro.models import Adapter, AdapterResult, make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.engine import Progress, ask_all, make_record
from jevkedro.nodes.predictions_log import (
    FINAL_STATUSES,
    PredictionLog,
    PredictionLogError,
    encode_record,
    read_records,
)
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.jsonl"
# Filesystems without an atomic rename whose single PUT is atomic (an object appears whole or not at all).
OBJECT_STORE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory"})
# How long to wait for the first worker of an existing cluster (an adaptive one may start at zero).
WORKER_WAIT_S = 60.0

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


# -- the shard store (fsspec) -------------------------------------------------------------------

class ShardFileError(PredictionLogError):
    """A shard file in the store that is not whole JSONL of records (names URL and line)."""


_FIX_SHARD = ("shard files are written whole, so this one was changed or cut by something else: move it away "
              "to ask its requests again")


def store_root(setting: str) -> str:
    """``model.shard_store`` as an absolute URL every process resolves alike: a plain or relative
    local path becomes ``file:///abs/path`` (relative to the driver's working directory, not the
    workers')."""
    from fsspec.core import url_to_fs

    try:
        fs, root = url_to_fs(setting)
    except (ImportError, ValueError) as exc:  # unknown protocol, or its library is not installed
        raise ValueError(f"model.shard_store={setting!r}: {exc}") from None
    return fs.unstrip_protocol(root.rstrip("/"))


def _fs(url: str):
    from fsspec.core import url_to_fs

    return url_to_fs(url)


def _renames_atomically(fs) -> bool:
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    return not protocols & OBJECT_STORE_PROTOCOLS


def write_shard(url: str, records: list[dict[str, Any]]) -> None:
    """Write a shard file whole or not at all (see the module docstring for what holds where)."""
    from fsspec.implementations.local import LocalFileSystem

    fs, path = _fs(url)
    body = b"".join(map(encode_record, records))  # the lines of the predictions log
    if isinstance(fs, LocalFileSystem):
        atomic_write_bytes(path, body)  # temp file in the same folder, fsync, rename
        return
    parent = fs._parent(path)
    fs.makedirs(parent, exist_ok=True)
    if not _renames_atomically(fs):
        tmp = f"{parent}/.{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex[:8]}.tmp"
        fs.pipe_file(tmp, body)
        fs.mv(tmp, path)
    else:
        fs.pipe_file(path, body)


def read_shard(url: str) -> list[dict[str, Any]]:
    """The records of a shard file, read as the predictions log is read (a cut last line refused)."""
    fs, path = _fs(url)
    try:
        return [rec for _, _, rec in read_records(fs.cat_file(path), url, _FIX_SHARD, whole=True)]
    except PredictionLogError as exc:
        raise ShardFileError(str(exc)) from None


def list_shards(folder_url: str) -> list[str]:
    fs, folder = _fs(folder_url)
    fs.invalidate_cache()  # object-store listings are cached per filesystem instance
    return sorted(fs.unstrip_protocol(p) for p in fs.glob(f"{folder}/{SHARD_GLOB}"))


def merge_store(folder_url: str, plog: PredictionLog, sha: str) -> int:
    """Append to the log the final records of the store's shard files it does not have yet, make
    the log durable, then delete those files (everything worth keeping is in the log now, and a
    shard file must not stand in for a later run's shard). Returns how many records were merged."""
    urls = list_shards(folder_url)
    if not urls:
        return 0
    done = plog.done(sha)
    merged = 0
    for url in urls:
        for rec in read_shard(url):
            if rec["status"] in FINAL_STATUSES and rec.get("snapshot_sha256") == sha and rec["request_id"] not in done:
                plog.append(rec)
                done.add(rec["request_id"])
                merged += 1
    plog.sync()
    fs, _ = _fs(folder_url)
    fs.rm([fs._strip_protocol(u) for u in urls])
    return merged


# -- the task -----------------------------------------------------------------------------------

def run_shard(settings: dict[str, Any], items: list[tuple[str, dict[str, Any]]], sha: str,
              shard_url: str | None = None) -> dict[str, Any]:
    """Dask task: ask one shard's requests; returns ``{"records": [...], "stopped": why or None}``.

    With a shard store (``shard_url``) the records are also written there whole before returning;
    if that file is already there, an earlier attempt of this very task (same run token) finished
    it and its result was lost with its worker: nothing is asked again.
    """
    if shard_url is not None:
        fs, path = _fs(shard_url)
        if fs.exists(path):
            stored = read_shard(shard_url)
            return {"records": stored, "stopped": next((r["error"] for r in stored if r["status"] == "unattempted"), None)}
    adapter = _worker_adapter(settings)
    engine = EngineSettings.from_model(settings)
    records: list[dict[str, Any]] = []
    asks = [(rid, request, None) for rid, request in items]  # once each: model.repeats > 1 is refused with dask
    stopped = ask_all(adapter, asks, engine, sha, records.append, _WORKER_FIRST)
    if shard_url is not None:
        write_shard(shard_url, records)
    return {"records": records, "stopped": stopped}


def shard_of(position: int, shard_size: int) -> int:
    return position // shard_size


def task_settings(settings: dict[str, Any], adapter: Adapter) -> dict[str, Any]:
    """The ``model`` settings as sent to every task. They name the key's environment variable and
    never hold its value: workers read the key from their own environment. A setting that contains
    the value the driver's environment has for that variable is refused (naming the setting)."""
    key_env = getattr(adapter, "key_env", None)
    key = os.environ.get(key_env, "") if key_env else ""
    if key:
        def walk(value: Any, where: str) -> Iterator[str]:
            if isinstance(value, str) and key in value:
                yield where
            elif isinstance(value, dict):
                for k, v in value.items():
                    yield from walk(v, f"{where}.{k}")
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    yield from walk(v, f"{where}[{i}]")

        leaks = [where for k, v in settings.items() for where in walk(v, f"model.{k}")]
        if leaks:
            raise ValueError(f"{', '.join(leaks)} contains the value of {key_env}: settings are sent to every Dask "
                             f"worker and logged as MLflow params; name the variable in model.api_key_env and set it "
                             f"in each worker's environment instead")
    return dict(settings)


def record_unattempted(plog: PredictionLog, items: Iterable[tuple[str, Any]], why: str, sha: str,
                       probability_source: str) -> int:
    """Record ``items`` as ``unattempted`` with ``why``; returns how many."""
    n = 0
    for rid, _ in items:
        plog.append(make_record(rid, AdapterResult(status="unattempted", error=why), None, sha, False, probability_source))
        n += 1
    return n


# -- the cluster --------------------------------------------------------------------------------

def _worker_probe(key_env: str | None):
    """A function for ``client.run`` that reports what a worker has. Defined inside a function so
    that it is pickled by value: it must run on a worker that cannot import jevkedro (to say so)."""

    def probe() -> dict[str, Any]:
        import os as _os

        try:
            import jevkedro

            version, error = getattr(jevkedro, "__version__", None), None
        except Exception as exc:  # not installed, or broken: reported, not raised
            version, error = None, f"{type(exc).__name__}: {exc}"
        return {"jevkedro": version, "error": error,
                "key_set": bool(_os.environ.get(key_env)) if key_env else None}

    return probe


def worker_problems(probes: dict[str, Any], version: str, key_env: str | None) -> list[str]:
    """What is wrong with each worker, from its probe (or the exception ``client.run`` returned)."""
    problems = []
    for worker, probe in sorted(probes.items()):
        if isinstance(probe, BaseException):
            problems.append(f"worker {worker} could not be checked ({type(probe).__name__}: {probe})")
            continue
        if probe["error"]:
            problems.append(f"worker {worker} cannot import jevkedro ({probe['error']}); install jevkedro {version} there")
        elif probe["jevkedro"] != version:
            problems.append(f"worker {worker} has jevkedro {probe['jevkedro']}, this driver {version}; install the same "
                            f"version on every worker")
        elif key_env and not probe["key_set"]:
            problems.append(f"worker {worker} has no {key_env} in its environment (model.api_key_env): keys are read "
                            f"from each worker's own environment and never sent to it")
    return problems


def check_workers(client, where: str, key_env: str | None) -> int:
    """Fail before anything is asked if a worker lacks jevkedro at this version or the API key
    variable. Returns the number of workers checked."""
    import jevkedro

    probes = client.run(_worker_probe(key_env), on_error="return")
    problems = worker_problems(probes, jevkedro.__version__, key_env)
    if problems:
        raise RuntimeError(f"Dask cluster at {where}: " + "; ".join(problems))
    return len(probes)


def _client(engine: EngineSettings):
    """(client, cluster we started or None, where: the scheduler for messages)."""
    from distributed import Client, LocalCluster

    if engine.scheduler:
        where = f"model.scheduler={engine.scheduler}"
        try:
            client = Client(engine.scheduler)
        except (OSError, TimeoutError, ValueError) as exc:
            raise RuntimeError(f"{where}: cannot connect to the Dask scheduler ({type(exc).__name__}: {exc})") from None
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except TimeoutError:
            client.close()
            raise RuntimeError(f"{where}: no worker joined within {WORKER_WAIT_S:g}s") from None
        return client, None, where
    cluster = LocalCluster(n_workers=engine.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    return Client(cluster), cluster, f"a LocalCluster ({cluster.scheduler_address})"


def _window(client) -> int:
    """Tasks kept submitted at once: two per worker thread (one running, one queued), at least two."""
    return max(2, 2 * sum(client.nthreads().values()))


def run_distributed(snapshot: Snapshot, plog: PredictionLog, engine: EngineSettings, settings: dict[str, Any],
                    digest: str, adapter: Adapter) -> tuple[int, int, str | None]:
    """Shard the missing requests over Dask workers; returns (asked, reused, stopped)."""
    from distributed import as_completed

    sha, source = snapshot.sha256, adapter.probability_source
    folder = None
    if engine.shard_store:
        folder = "/".join([store_root(engine.shard_store), *([str(settings["name"])] if settings.get("name") else []),
                           snapshot.view, digest])
        merged = merge_store(folder, plog, sha)
        if merged:
            log.info("%s: merged %d answers from finished shards in %s", snapshot.view, merged, folder)
    done = plog.done(sha)
    shards: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for pos, (rid, req) in enumerate(snapshot.requests()):
        if rid not in done:
            shards.setdefault(shard_of(pos, engine.shard_size), []).append((rid, req))
    asked = sum(len(v) for v in shards.values())
    console.resumed(snapshot.view, len(snapshot.rows), len(done), asked, f", {len(shards)} shards on dask, {adapter.kind}")
    if not shards:
        return 0, len(done), None
    sent_settings = task_settings(settings, adapter)
    client, cluster, where = _client(engine)
    progress = Progress(asked, snapshot.view, engine.progress)
    stopped = None
    try:
        n_workers = check_workers(client, where, getattr(adapter, "key_env", None))
        log.info("%s: %d shards on %s (%d workers)", snapshot.view, len(shards), where, n_workers)
        run_token = uuid.uuid4().hex[:8]  # a Dask retry of a task finds its store file; a later run never does
        todo = iter(shards.items())
        live: dict[Any, tuple[int, list[tuple[str, dict[str, Any]]]]] = {}
        finished = as_completed()

        def submit_more() -> None:
            limit = _window(client)
            while len(live) < limit:
                nxt = next(todo, None)
                if nxt is None:
                    return
                k, items = nxt
                url = None
                if folder is not None:
                    ids = hashlib.sha256("\n".join(rid for rid, _ in items).encode("utf-8")).hexdigest()[:12]
                    url = f"{folder}/shard-{k:06d}-{ids}-{run_token}.jsonl"
                fut = client.submit(run_shard, sent_settings, items, sha, url,
                                    key=f"jevkedro-shard-{digest[:8]}-{k}-{uuid.uuid4().hex[:8]}", pure=False)
                live[fut] = (k, items)
                finished.add(fut)

        def collect(fut, k: int, items: list[tuple[str, Any]]) -> str | None:
            """Append a finished task's records (or the shard's failure); returns why it stopped."""
            try:
                result = fut.result()
            except Exception as exc:  # the shard's task failed on every worker it was given (e.g. KilledWorker)
                log.error("%s: shard %d failed: %s: %s", snapshot.view, k, type(exc).__name__, exc)
                progress.update(record_unattempted(plog, items, f"shard {k} failed: {type(exc).__name__}: {exc}",
                                                   sha, source))
                return None
            finally:
                fut.release()  # the records live in the log now, not in the cluster's memory
            for rec in result["records"]:
                plog.append(rec)
            progress.update(len(result["records"]))
            return result["stopped"]

        submit_more()
        for fut in finished:
            k, items = live.pop(fut)
            stopped = collect(fut, k, items)
            if stopped:
                log.error("%s: shard %d stopped the run: %s", snapshot.view, k, stopped)
                break
            submit_more()
        if stopped:
            why = f"run stopped: {stopped}"
            for fut, (k, items) in list(live.items()):
                if fut.status == "finished":  # finished while the stop was handled: keep its answers
                    collect(fut, k, items)
                else:  # pending ones are dropped; one already running finishes into the store, if any
                    fut.cancel()
                    fut.release()
                    progress.update(record_unattempted(plog, items, why, sha, source))
            for _k, items in todo:  # never sent
                progress.update(record_unattempted(plog, items, why, sha, source))
        if folder is not None:
            merge_store(folder, plog, sha)  # shards finished during a stop; and deletes this run's files
    finally:
        progress.close()
        client.close()
        if cluster is not None:
            cluster.close()
    return asked, len(done), stopped
