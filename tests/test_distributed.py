"""Distributed inference on a Dask LocalCluster (2 worker processes), including a worker killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

pytest.importorskip("distributed")
pytest.importorskip("httpx")

from distributed import Client, LocalCluster  # noqa: E402

from jevkedro.models import make_adapter  # noqa: E402
from jevkedro.nodes.infer import EngineSettings, PredictionLog, run_inference  # noqa: E402
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot  # noqa: E402

N = 48
SHARD = 4


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        yield lc


def _settings(srv, cluster, **extra):
    return {"adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-1.13.0", "api_key_env": "",
            "executor": "dask", "scheduler": cluster.scheduler_address, "shard_size": SHARD, "progress": 0,
            **extra}


def _run(snapshot, settings, log_path):
    plog = PredictionLog(log_path)
    return run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings), plog


def test_shards_are_spread_over_workers_written_atomically_and_skipped_on_rerun(tmp_path, cluster):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer(delay_s=0.01) as srv:
        summary, plog = _run(snapshot, _settings(srv, cluster), log_path)
        assert summary["statuses"] == {"ok": N} and summary["asked"] == N
        assert all(c == 1 for c in srv.counts.values()) and len(srv.counts) == N
        shard_files = sorted((log_path.parent / "shards").glob("*/shard-*.jsonl"))
        assert len(shard_files) == N // SHARD
        assert not list((log_path.parent / "shards").glob("*/.shard-*"))  # no temp files left behind
        # each shard holds exactly its consecutive block of the snapshot
        first = [json.loads(x)["request_id"] for x in shard_files[0].read_text().splitlines()]
        assert sorted(first) == [f"r{i:05d}" for i in range(SHARD)]
        # the driver lost its log (killed before merging): the shard files are reused, nothing re-asked
        log_path.unlink()
        (log_path.parent / "run.json").unlink(missing_ok=True)
        summary, plog = _run(snapshot, _settings(srv, cluster), log_path)
        assert summary["asked"] == 0 and summary["statuses"] == {"ok": N}
        assert srv.total == N
    lines = log_path.read_text().splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == [f"r{i:05d}" for i in range(N)]


def test_a_worker_killed_mid_run_loses_only_its_shard_in_flight(tmp_path, cluster):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N, prefix="k"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    killed: list[int] = []
    with Client(cluster.scheduler_address) as client:
        pids = list(client.run(os.getpid).values())
    with LoopbackServer(delay_s=0.05) as srv:

        def killer() -> None:
            # wait until a few shards are done and the workers are busy, then kill one of them
            deadline = time.monotonic() + 60
            while srv.total < 3 * SHARD + 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

        t = threading.Thread(target=killer)
        t.start()
        summary, plog = _run(snapshot, _settings(srv, cluster), log_path)
        t.join()
        counts = dict(srv.counts)
    assert killed
    assert summary["statuses"] == {"ok": N}  # Dask gave the lost shard to the surviving worker
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert len(lines) == N and len({r["request_id"] for r in lines}) == N
    # only requests of the shard in flight on the killed worker were asked twice
    twice = [rid for rid, c in counts.items() if c > 1]
    assert max(counts.values()) <= 2 and len(twice) <= SHARD
    assert len({int(rid[1:]) // SHARD for rid in twice}) <= 1


def test_a_rerun_asks_again_what_a_shard_could_not_answer(tmp_path, cluster):
    # every request of shard 0 fails once (a 500 on the first call of each): the rerun must ask
    # them again, not take the first run's shard file for a finished shard
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(2 * SHARD, {i: "flaky:1" for i in range(SHARD)},
                                                                     prefix="e"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        settings = _settings(srv, cluster, max_consecutive_failures=10)
        first, _ = _run(snapshot, settings, log_path)
        second, plog = _run(snapshot, settings, log_path)
        counts = dict(srv.counts)
    assert first["statuses"] == {"error": SHARD, "ok": SHARD}
    assert (second["asked"], second["reused"]) == (SHARD, SHARD)
    assert second["statuses"] == {"ok": 2 * SHARD}
    assert [counts[f"e{i:05d}"] for i in range(2 * SHARD)] == [2] * SHARD + [1] * SHARD
    assert len(list((log_path.parent / "shards").glob("*/shard-*.jsonl"))) == 1  # the first run's files merged and gone


def test_after_a_stop_a_shard_finished_meanwhile_keeps_its_answers(tmp_path):
    from jevkedro.models.base import AdapterResult
    from jevkedro.nodes.distributed import record_unfinished_shards
    from jevkedro.nodes.infer import _record

    written = tmp_path / "shard-000001-x.jsonl"
    written.write_text(json.dumps(_record("b", AdapterResult(status="ok", response={"answers": {}}), 0.1, "s", False))
                       + "\n")
    plog = PredictionLog(tmp_path / "predictions.jsonl")
    n = record_unfinished_shards(plog, [(1, [("b", {})], written), (2, [("c", {}), ("d", {})], tmp_path / "none.jsonl")],
                                 "HTTP 429", "s", "native")
    assert n == 3
    assert {rid: r["status"] for rid, r in plog.records.items()} == {"b": "ok", "c": "unattempted", "d": "unattempted"}
    assert plog.records["c"]["error"] == "run stopped: HTTP 429"
