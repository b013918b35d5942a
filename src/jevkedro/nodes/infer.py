"""Inference: ask a model every request of a verified snapshot, resumably (docs/inference.md).

**Records.** One line per answer in ``predictions.jsonl`` (:mod:`jevkedro.nodes.predictions_log`):
``request_id``, ``status`` (ok/unsupported/error/unattempted), ``response`` (the parsed body),
``latency_s``, ``model``, ``usage``, ``cost_usd``, ``run_identity`` and, from remote adapters, the
body as received (``raw_response``), ``http_status``, ``failure`` and ``attempts``.

**Crash safety.** Each line is written with one ``write`` as its answer arrives (``model.fsync``:
``always``, ``interval`` or ``never`` also fsyncs); a killed run leaves at most one torn last
line, dropped on the next run. A rerun with the same identity asks only what has no final answer
(``ok``, ``unsupported``); the log is compacted to one line per request at the end of every run.
Memory stays flat: only a small index entry per request is kept while a view is asked.

**Identity and one writer.** Records are stamped with their run identity (adapter, model,
endpoint, the settings that change answers, view, snapshot); a log another identity wrote is set
aside as ``predictions.<digest>.superseded.jsonl``. The output folder's lock
(:mod:`jevkedro.nodes.output_lock`) is held while the log is written.

**Stop rules** (docs/protocol.md §2): 401, 403 and 429 stop the run; so do
``model.max_consecutive_failures`` infrastructure failures in a row. Requests not asked are
recorded ``unattempted`` with the reason; a 413/422 is an ``error`` of that request only.

**Retries** (``model.retry``): ``max_attempts``, ``kinds`` (429, 5xx, timeout, connection),
``backoff_s`` doubling up to ``backoff_max_s``; a ``retry-after`` header wins.

**Cost** = ``input_tokens × price_input_per_1m / 1e6 + output_tokens × price_output_per_1m / 1e6``
from the measured usage; null when a needed number is unknown, never 0.

**Repeats** (``model.repeats=K``): every request is asked K times, attempt 0 for every request
first, then attempt 1, ...; each record carries its ``attempt`` and resuming counts per (request,
attempt). ``repeats`` is not part of the run identity: attempt k is the same draw whatever K is,
so raising K asks only the new attempts, and lowering it keeps the others in the log, unscored.

**Execution**: :mod:`jevkedro.nodes.engine` locally, or sharded over Dask workers with
``model.executor=dask`` (:mod:`jevkedro.nodes.distributed`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from jevkedro import console
from jevkedro.models import Adapter, make_adapter
from jevkedro.models.settings import EngineSettings, ModelSettings
from jevkedro.nodes import output_lock
from jevkedro.nodes.distributed import run_distributed
from jevkedro.nodes.engine import Progress, ask_all
from jevkedro.nodes.predictions_log import PredictionLog, identity_digest, summarize
from jevkedro.nodes.snapshot import Snapshot

log = logging.getLogger(__name__)


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
    adapter.check_repeats(engine.repeats)  # a deterministic model, a replay file's attempts
    with output_lock.holding(plog.path.parent):  # one writer per output folder
        return _run_locked(snapshot, adapter, plog, engine, adapter_settings)


def _start_log(plog: PredictionLog, adapter: Adapter, identity: dict[str, Any]) -> None:
    """Bind the log to ``identity``: resume it when every record in it is this identity's, else set
    it aside (never reuse another identity's answers, never silently drop them)."""
    digest = identity_digest(identity)
    previous = plog.meta()
    vouched = bool(previous) and (previous or {}).get("identity") == identity  # run.json written for this identity
    if not adapter.resumable:
        plog.reset()
    else:
        stamps = plog.identities()
        foreign = {d for d in stamps if d is not None and d != digest}
        if plog.index and (foreign or (None in stamps and not vouched)):
            why = (f"its records were written by run identity {', '.join(sorted(foreign))}" if foreign else
                   "its records carry no run identity and " + (f"{plog.meta_path.name} names {previous.get('identity')}"
                                                               if previous else f"there is no {plog.meta_path.name}"))
            moved = plog.set_aside()
            log.warning("%s: %s, not this run's identity %s (%s); those answers are not reused: the log was moved "
                        "to %s and every request is asked afresh", plog.path, why, digest, identity, moved)
        elif previous and previous.get("identity") != identity:  # an empty log under another run.json
            plog.reset()
    plog.bind_identity(digest, adopt_unstamped=vouched)


def _run_local(snapshot: Snapshot, adapter: Adapter, plog: PredictionLog, engine: EngineSettings,
               model_id: str, ids: list[str]) -> tuple[int, int, str | None]:
    """Ask the (request, attempt) pairs without a final answer in this process, attempt by attempt
    (``model.repeats``; with one, records carry no attempt); ``ids``: the snapshot's request ids, in
    order. Returns (asked, reused, stopped)."""
    K = engine.repeats
    dones = [plog.done(snapshot.sha256, k) for k in range(K)]
    reused = sum(len(done) for done in dones)
    asked = sum(len(ids) - len(done.intersection(ids)) for done in dones)
    todo = ((rid, req, k if K > 1 else None)  # taken one at a time as they are asked
            for k, done in enumerate(dones) for rid, req in snapshot.requests() if rid not in done)
    total = len(snapshot.rows) * K
    console.resumed(snapshot.view, total, reused, asked, f", {model_id}" + (f", x {K} repeats" if K > 1 else ""))
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
    return asked, reused, stopped


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
            if adapter_settings is None:
                raise ValueError("the dask executor needs the model settings to build adapters in its workers")
            asked, reused, stopped = run_distributed(snapshot, plog, engine, dict(adapter_settings),
                                                     identity_digest(identity), adapter)
        else:
            asked, reused, stopped = _run_local(snapshot, adapter, plog, engine, identity["model"], order)
    finally:
        plog.compact(order)
    summary = {"asked": asked, "reused": reused, "stopped": stopped, **summarize(plog.entries()),
               "identity": identity}
    plog.write_meta({**meta, **adapter.run_notes(order), "last_run": {k: v for k, v in summary.items() if k != "identity"}})
    return summary


def infer(snapshot: Snapshot, plog: PredictionLog, model: ModelSettings | Mapping[str, Any]) -> PredictionLog:
    """Run the configured model (``params:model``) on a verified snapshot."""
    model = ModelSettings.parse(model)
    summary = run_inference(snapshot, make_adapter(model), plog, model.engine, model.flat())
    log.info("%s: inference done: %s (cost %s USD)", snapshot.view, summary["statuses"], summary["cost_usd"])
    if summary["stopped"]:  # said on the console once, at the end of `kedro run` (exit status 4, hooks.TrackViewRuns)
        log.info("%s: run stopped early: %s", snapshot.view, summary["stopped"])
    return plog
