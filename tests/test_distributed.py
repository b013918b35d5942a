"""Distributed inference on real Dask processes.

Most tests use a cluster started the way a real one is: a scheduler and two workers launched as
separate processes by the ``dask`` command line on loopback, the workers with their working and
temporary directories elsewhere (so nothing can come back through a shared path), and the
loopback System One server counting requests per ticket. One test lets the engine start its own
LocalCluster. Every process started here is ended by a fixture finalizer.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytest.importorskip("aiohttp")

import dask  # noqa: E402
from distributed import Client  # noqa: E402

import jevkedro  # noqa: E402
from jevkedro.models import make_adapter  # noqa: E402
from jevkedro.models.settings import EngineSettings  # noqa: E402
from jevkedro.nodes.distributed import (  # noqa: E402
    ShardFileError,
    list_shards,
    read_shard,
    store_root,
    task_settings,
    write_shard,
)
from jevkedro.nodes.infer import run_inference  # noqa: E402
from jevkedro.nodes.predictions_log import PredictionLog  # noqa: E402
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot  # noqa: E402

N = 48
SHARD = 4
DASK_BIN = Path(sys.executable).parent / "dask"
SRC = Path(jevkedro.__file__).resolve().parents[1]  # the jevkedro this test imports; workers get the same
WORKER_KEY_ENV = "JEVKEDRO_TEST_WORKER_KEY"
WORKER_KEY = "worker-secret-7f3a9c1e5d"


class CliCluster:
    """A scheduler and workers started by ``dask scheduler`` / ``dask worker`` as separate process
    groups; ``close`` ends exactly those groups (SIGTERM, then SIGKILL after a grace period)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.address: str | None = None

    def _spawn(self, args: list[str], name: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
        out = open(self.root / f"{name}.log", "wb")
        proc = subprocess.Popen([str(DASK_BIN), *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def start(self, n_workers: int, pythonpath: Path, worker_env: dict[str, str] | None = None) -> CliCluster:
        cwd, local = self.root / "cwd", self.root / "local"
        cwd.mkdir()
        local.mkdir()
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
        sched_file = self.root / "scheduler.json"
        self._spawn(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], "scheduler", cwd, env)
        for i in range(n_workers):
            self._spawn(["worker", "--scheduler-file", str(sched_file), "--host", "127.0.0.1", "--nthreads", "1",
                         "--no-dashboard", "--local-directory", str(local), "--name", f"w{i}"],
                        f"worker{i}", cwd, {**env, **(worker_env or {})})
        deadline = time.monotonic() + 60
        while self.address is None:
            try:
                self.address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"the scheduler did not start: {(self.root / 'scheduler.log').read_text()}") from None
                time.sleep(0.05)
        if n_workers:
            with Client(self.address) as client:
                client.wait_for_workers(n_workers, timeout=60)
        return self

    def worker_pids(self) -> list[int]:
        with Client(self.address) as client:
            return list(client.run(os.getpid).values())

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _cli_cluster(request, root: Path, n_workers: int, pythonpath: Path, worker_env=None) -> CliCluster:
    root.mkdir(parents=True, exist_ok=True)
    cluster = CliCluster(root)
    request.addfinalizer(cluster.close)  # before start: a failed start is cleaned up too
    return cluster.start(n_workers, pythonpath, worker_env)


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    return _cli_cluster(request, tmp_path_factory.mktemp("dask-cli"), 2, SRC, {WORKER_KEY_ENV: WORKER_KEY})


def _settings(srv, address, **extra):
    return {"adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-1.13.0", "api_key_env": "",
            "executor": "dask", "scheduler": address, "shard_size": SHARD, "progress": 0, **extra}


def _run(snapshot, settings, log_path):
    plog = PredictionLog(log_path)
    return run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings), plog


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(n)]


def test_records_come_back_as_task_results_from_workers_on_their_own_directories(tmp_path, cluster):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer(delay_s=0.01) as srv:
        summary, plog = _run(snapshot, _settings(srv, cluster.address), log_path)
        counts, max_inflight = dict(srv.counts), srv.max_inflight
    assert summary["statuses"] == {"ok": N} and summary["asked"] == N
    assert counts == dict.fromkeys(_ids("r", N), 1)  # every request asked exactly once
    assert max_inflight == 2  # both workers asked at once (concurrency 1 per task)
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert [r["request_id"] for r in lines] == _ids("r", N)
    assert all(r["response"]["answers"] for r in lines)
    # no shard store: nothing was written but the log and run.json, and nothing in the workers' cwd
    assert sorted(p.name for p in log_path.parent.iterdir()) == ["predictions.jsonl", "run.json"]
    assert list((cluster.root / "cwd").iterdir()) == []


def test_keys_come_from_each_workers_environment_and_never_travel_with_a_task(tmp_path, cluster, monkeypatch):
    # The driver has a different value for the variable (as the credentials hook would export it):
    # the server accepts only the workers' key, so an ok run proves the workers used their own.
    driver_key = "driver-secret-2b8e61d04c"
    monkeypatch.setenv(WORKER_KEY_ENV, driver_key)
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(2 * SHARD, prefix="key"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer(required_key=WORKER_KEY) as srv:
        settings = _settings(srv, cluster.address, api_key_env=WORKER_KEY_ENV)
        summary, _ = _run(snapshot, settings, log_path)
        assert set(srv.auth_headers) == {f"Bearer {WORKER_KEY}"}
    assert summary["statuses"] == {"ok": 2 * SHARD}

    def received_settings() -> list[str]:
        from jevkedro.nodes import distributed

        return list(distributed._WORKER_ADAPTERS)  # keyed by the JSON of the settings each task received

    with Client(cluster.address) as client:
        received = [s for per_worker in client.run(received_settings).values() for s in per_worker]
    ours = [json.loads(s) for s in received if srv.endpoint in s]
    assert ours and all(s["api_key_env"] == WORKER_KEY_ENV for s in ours)
    for secret in (WORKER_KEY, driver_key):
        assert not any(secret in s for s in received)
        for path in tmp_path.rglob("*"):
            if path.is_file() and path.suffix in (".jsonl", ".json"):
                assert secret not in path.read_text(), path


def test_a_worker_without_the_key_variable_is_refused_before_anything_is_asked(tmp_path, cluster, monkeypatch):
    monkeypatch.setenv("JEVKEDRO_TEST_DRIVER_ONLY_KEY", "driver-only-secret-99")  # the driver has it; workers not
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(SHARD, prefix="nokey"))
    with LoopbackServer() as srv:
        settings = _settings(srv, cluster.address, api_key_env="JEVKEDRO_TEST_DRIVER_ONLY_KEY")
        with pytest.raises(RuntimeError) as err:
            _run(snapshot, settings, tmp_path / "out" / "predictions.jsonl")
        assert srv.total == 0
    message = str(err.value)
    assert cluster.address in message and "JEVKEDRO_TEST_DRIVER_ONLY_KEY" in message
    assert message.count("has no JEVKEDRO_TEST_DRIVER_ONLY_KEY") == 2  # both workers named
    assert "driver-only-secret-99" not in message


def test_a_setting_that_holds_the_key_value_is_never_sent_to_workers(monkeypatch):
    monkeypatch.setenv("JEVKEDRO_TEST_KEY", "sk-test-0123456789abcdef")
    settings = {"adapter": "systemone", "endpoint": "http://127.0.0.1:9/v1", "api_key_env": "JEVKEDRO_TEST_KEY",
                "model": "jev-1.13.0", "headers": {"x-extra": ["Bearer sk-test-0123456789abcdef"]}}
    adapter = make_adapter({k: v for k, v in settings.items() if k != "headers"})
    with pytest.raises(ValueError) as err:
        task_settings(settings, adapter)
    assert "model.headers.x-extra[0]" in str(err.value) and "JEVKEDRO_TEST_KEY" in str(err.value)
    assert "sk-test" not in str(err.value)
    clean = {k: v for k, v in settings.items() if k != "headers"}
    assert task_settings(clean, adapter) == clean


def test_a_stop_in_one_shard_stops_the_run_on_its_own_local_cluster(tmp_path):
    # no model.scheduler: the engine starts a LocalCluster of one worker and closes it afterwards
    n = 10 * SHARD
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(n, {5: "429"}, prefix="s"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer(delay_s=0.01) as srv:
        settings = _settings(srv, None, workers=1)
        del settings["scheduler"]
        summary, plog = _run(snapshot, settings, log_path)
        counts = dict(srv.counts)
    assert multiprocessing.active_children() == []  # the cluster's worker processes are gone
    assert "429" in summary["stopped"]
    status = {rid: r["status"] for rid, r in plog.records.items()}
    assert list(status) == _ids("s", n)  # one line per request, in snapshot order
    assert [status[r] for r in _ids("s", 6)] == ["ok"] * 5 + ["unattempted"]
    assert plog.records["s00005"]["http_status"] == 429
    # the rest of shard 1 was never sent; of the later shards at most the one already queued ran
    # (its answers kept), and nothing past it was ever sent
    assert status["s00006"] == status["s00007"] == "unattempted"
    assert len({status[r] for r in _ids("s", 12)[8:]}) == 1
    assert all(status[r] == "unattempted" and "429" in plog.records[r]["error"] for r in _ids("s", n)[12:])
    assert all(c == 1 for c in counts.values()) and set(counts) <= set(_ids("s", 12))


def test_a_worker_killed_mid_run_loses_only_its_shard_in_flight(tmp_path, cluster):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N, prefix="k"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    killed: list[int] = []
    pids = cluster.worker_pids()
    with LoopbackServer(delay_s=0.05) as srv:

        def killer() -> None:
            # wait until a few shards are done and the workers are busy, then kill one of them
            deadline = time.monotonic() + 60
            while srv.total < 3 * SHARD + 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            os.kill(pids[0], signal.SIGKILL)  # its nanny starts a fresh worker process
            killed.append(pids[0])

        t = threading.Thread(target=killer)
        t.start()
        summary, plog = _run(snapshot, _settings(srv, cluster.address), log_path)
        t.join()
        counts = dict(srv.counts)
    assert killed
    assert summary["statuses"] == {"ok": N}  # Dask gave the lost shard to another worker
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert [r["request_id"] for r in lines] == _ids("k", N)
    # only requests of the shard in flight on the killed worker were asked twice
    twice = [rid for rid, c in counts.items() if c > 1]
    assert max(counts.values()) <= 2 and len(twice) <= SHARD
    assert len({int(rid[1:]) // SHARD for rid in twice}) <= 1


def test_a_rerun_asks_again_what_a_shard_could_not_answer(tmp_path, cluster, monkeypatch):
    # every request of shard 0 fails once (a 500 on the first call of each): the rerun must ask
    # them again, not take the first run's stored shard for a finished one. The store is a
    # relative path: resolved against the driver's working directory, not the workers'.
    monkeypatch.chdir(tmp_path)
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(2 * SHARD, {i: "flaky:1" for i in range(SHARD)},
                                                                     prefix="e"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    with LoopbackServer() as srv:
        settings = _settings(srv, cluster.address, max_consecutive_failures=10, shard_store="store")
        first, _ = _run(snapshot, settings, log_path)
        assert (tmp_path / "store" / "synthetic_view").is_dir()
        assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []  # in the log now: deleted
        second, plog = _run(snapshot, settings, log_path)
        counts = dict(srv.counts)
    assert first["statuses"] == {"error": SHARD, "ok": SHARD}
    assert (second["asked"], second["reused"]) == (SHARD, SHARD)
    assert second["statuses"] == {"ok": 2 * SHARD}
    assert [counts[r] for r in _ids("e", 2 * SHARD)] == [2] * SHARD + [1] * SHARD
    assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []  # merged into the log, then deleted
    assert list((cluster.root / "cwd").iterdir()) == []


DRIVER = textwrap.dedent("""
    import json, sys
    from jevkedro.models import make_adapter
    from jevkedro.models.settings import EngineSettings
    from jevkedro.nodes.predictions_log import PredictionLog
    from jevkedro.nodes.infer import run_inference
    from jevkedro.nodes.snapshot import load_snapshot, verify_snapshot_bytes

    root, log_path, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    snapshot = verify_snapshot_bytes(load_snapshot(root, "synthetic_view"))
    run_inference(snapshot, make_adapter(settings), PredictionLog(log_path), EngineSettings.from_model(settings), settings)
""")


def test_a_killed_driver_resumes_from_the_shard_store_without_asking_finished_shards(tmp_path, cluster):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(N, prefix="d"))
    log_path = tmp_path / "out" / "predictions.jsonl"
    store = f"file://{tmp_path / 'store'}"
    with LoopbackServer(delay_s=0.03) as srv:
        settings = _settings(srv, cluster.address, shard_store=store, name="driver-kill", fsync="always")
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "snap"), str(log_path), json.dumps(settings)],
                                  env={**os.environ, "PYTHONPATH": str(SRC)}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while srv.total < N // 3 and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        finally:
            driver.kill()
            output = driver.communicate()[0].decode(errors="replace")
        assert driver.returncode == -signal.SIGKILL, output
        # the shards running at the kill finish on their workers and land in the store; wait for quiet
        last, quiet_since = -1, time.monotonic()
        while time.monotonic() - quiet_since < 0.6 and time.monotonic() < deadline:
            if srv.total != last or srv.inflight:
                last, quiet_since = srv.total, time.monotonic()
            time.sleep(0.02)
        in_log = len(PredictionLog(log_path).done(snapshot.sha256))
        summary, plog = _run(snapshot, settings, log_path)
        counts = dict(srv.counts)
    assert in_log < N
    assert summary["statuses"] == {"ok": N}
    assert summary["reused"] > in_log  # shards finished after the driver died came from the store
    assert summary["asked"] == N - summary["reused"]
    assert counts == dict.fromkeys(_ids("d", N), 1)  # nothing answered was asked again
    assert [r for r in plog.records] == _ids("d", N)
    assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []


def test_workers_with_another_jevkedro_are_refused_naming_the_scheduler(request, tmp_path):
    fake = tmp_path / "fake-site"
    (fake / "jevkedro").mkdir(parents=True)
    (fake / "jevkedro" / "__init__.py").write_text('__version__ = "0.0.0+other"\n')
    other = _cli_cluster(request, tmp_path / "other", 1, fake)
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(SHARD, prefix="v"))
    with LoopbackServer() as srv:
        with pytest.raises(RuntimeError) as err:
            _run(snapshot, _settings(srv, other.address), tmp_path / "out" / "predictions.jsonl")
        assert srv.total == 0
    message = str(err.value)
    assert f"model.scheduler={other.address}" in message
    assert "jevkedro 0.0.0+other" in message and f"this driver {jevkedro.__version__}" in message


def test_an_unreachable_scheduler_is_named(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(SHARD, prefix="u"))
    with LoopbackServer() as srv, dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(RuntimeError, match=f"model.scheduler=tcp://127.0.0.1:{port}: cannot connect"):
            _run(snapshot, _settings(srv, f"tcp://127.0.0.1:{port}"), tmp_path / "out" / "predictions.jsonl")
        assert srv.total == 0


def test_a_scheduler_without_workers_is_named_after_the_wait(request, tmp_path, monkeypatch):
    from jevkedro.nodes import distributed

    monkeypatch.setattr(distributed, "WORKER_WAIT_S", 0.5)
    empty = _cli_cluster(request, tmp_path / "empty", 0, SRC)
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(SHARD, prefix="w"))
    with LoopbackServer() as srv:
        with pytest.raises(RuntimeError, match=f"model.scheduler={empty.address}: no worker joined within 0.5s"):
            _run(snapshot, _settings(srv, empty.address), tmp_path / "out" / "predictions.jsonl")
        assert srv.total == 0


@pytest.mark.parametrize("root", ["memory:///{name}", "file://{tmp}/store"])  # one PUT; temp file + rename
def test_shard_files_are_written_whole_and_a_damaged_one_is_named(tmp_path, root):
    folder = root.format(tmp=tmp_path, name=tmp_path.name) + "/view/digest"
    records = [{"request_id": f"r{i}", "status": "ok", "response": {"answers": {}}, "note": "€"} for i in range(3)]
    write_shard(f"{folder}/shard-000001-abc-tok.jsonl", records)
    assert list_shards(folder) == [f"{folder}/shard-000001-abc-tok.jsonl"]  # no temp name left behind
    assert read_shard(f"{folder}/shard-000001-abc-tok.jsonl") == records
    write_shard(f"{folder}/shard-000002-abc-tok.jsonl", records)
    import fsspec

    with fsspec.open(f"{folder}/shard-000002-abc-tok.jsonl", "ab") as fh:
        fh.write(b'{"request_id": "r9", "sta')
    with pytest.raises(ShardFileError, match=r"shard-000002-abc-tok\.jsonl:4: not a prediction record"):
        read_shard(f"{folder}/shard-000002-abc-tok.jsonl")


def test_the_shard_store_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store_root("shards") == f"file://{tmp_path}/shards"
    assert store_root(f"file://{tmp_path}/s/") == f"file://{tmp_path}/s"
    assert EngineSettings.from_model({"shard_store": "s3://bucket/prefix"}).shard_store == "s3://bucket/prefix"
    assert EngineSettings.from_model({"shard_store": None}).shard_store is None
    with pytest.raises(ValueError, match="model.shard_store: must not carry a password") as info:
        EngineSettings.from_model({"shard_store": "sftp://me:hunter2@host/shards"})
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match=r"model.shard_store: \['a'\] is not allowed; allowed: a string"):
        EngineSettings.from_model({"shard_store": ["a"]})
    with pytest.raises(ValueError, match="model.shard_store='nosuchfs://x'"):
        store_root("nosuchfs://x")
