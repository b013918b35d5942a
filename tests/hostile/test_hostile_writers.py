"""Corpus, classes 4 and 5 — one writer per output folder, and answers that carry their identity.

Class 4: a second process on the same output folder is refused at once (before asking anything),
naming the folder and the holder; a holder killed with SIGKILL never blocks the next run.
Class 5: every record is stamped with its run identity; only records of this run's identity are
reused, whether ``run.json`` is there or not, and a report names the identity its records carry.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hostile_support import lines, settings_for

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes import output_lock
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.output_lock import OutputFolderBusy
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError, identity_digest
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot
from support import copy_project, kedro_run, run_kedro

pytest.importorskip("aiohttp")

N = 6

HOLDER = textwrap.dedent("""
    import sys, time
    from jevkedro.nodes import output_lock
    with output_lock.holding(sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
""")


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def snapshot(tmp_path):
    return synthetic_snapshot(tmp_path / "snap", synthetic_rows(N))


def run(snapshot, folder: Path, settings: dict):
    plog = PredictionLog(folder / "predictions.jsonl")
    return run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings), plog


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def hold_in_another_process(tmp_path: Path, folder: Path) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(folder)], env=_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


# -- class 4: one writer ------------------------------------------------------------------------------

def test_a_second_process_is_refused_at_once_naming_the_folder_and_the_holder(tmp_path, server, snapshot):
    folder = tmp_path / "out" / "m" / "v"
    holder = hold_in_another_process(tmp_path, folder)
    try:
        asked_before = server.total
        t0 = time.monotonic()
        with pytest.raises(OutputFolderBusy) as err:
            run(snapshot, folder, settings_for(server))
        assert time.monotonic() - t0 < 5  # at once: nothing was asked, nothing waited for
        assert server.total == asked_before
        message = str(err.value)
        assert str(folder.resolve()) in message and f"pid {holder.pid} on {socket.gethostname()}" in message
        assert "holder.py" in message and "model.name" in message
        assert not (folder / "predictions.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_killed_with_sigkill_does_not_block_the_next_run(tmp_path, server, snapshot):
    folder = tmp_path / "out"
    holder = hold_in_another_process(tmp_path, folder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (folder / output_lock.LOCK_FILE).is_file()  # the dead holder's file is still there
    summary, _ = run(snapshot, folder, settings_for(server))
    assert summary["statuses"] == {"ok": N}
    assert not (folder / output_lock.LOCK_FILE).exists()  # let go (and removed) after the run


def test_the_lock_is_reentrant_within_a_process_and_released_after(tmp_path):
    folder = tmp_path / "f"
    with output_lock.holding(folder), output_lock.holding(folder):
        output_lock.claim(folder)
        assert output_lock.held_folders() == [folder.resolve()]
    assert output_lock.held_folders() == [folder.resolve()]  # the claim outlives the blocks
    assert output_lock.release_claims() == [folder.resolve()]
    assert output_lock.held_folders() == [] and not (folder / output_lock.LOCK_FILE).exists()


@pytest.mark.parametrize("left_behind", [b"", b"not json", b'{"pid": 999999, "host": "elsewhere"}'])
def test_a_lock_file_nobody_holds_never_blocks_whatever_it_says(tmp_path, server, snapshot, left_behind):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / output_lock.LOCK_FILE).write_bytes(left_behind)  # a copy, an editor, a dead run on another host
    summary, _ = run(snapshot, folder, settings_for(server))
    assert summary["statuses"] == {"ok": N} and not (folder / output_lock.LOCK_FILE).exists()


def test_a_held_lock_whose_file_was_overwritten_still_refuses_naming_the_folder(tmp_path, server, snapshot):
    folder = tmp_path / "out"
    holder = hold_in_another_process(tmp_path, folder)
    try:
        (folder / output_lock.LOCK_FILE).write_bytes(b"garbage")  # same file: the holder's flock stands
        with pytest.raises(OutputFolderBusy, match=r"another run is writing this output folder \(a process that has not said who"):
            run(snapshot, folder, settings_for(server))
    finally:
        holder.kill()
        holder.wait()


def test_a_score_only_run_is_refused_when_it_loads_the_log_of_a_held_folder(tmp_path):
    from kedro.io.core import DatasetError

    from jevkedro.datasets import PredictionsDataset

    folder = tmp_path / "out"
    holder = hold_in_another_process(tmp_path, folder)
    try:  # Kedro wraps the refusal in its DatasetError, which names the dataset too
        with pytest.raises(DatasetError, match=rf"PredictionsDataset.*\n.*{folder}: another run is writing .*pid {holder.pid}"):
            PredictionsDataset(str(folder / "predictions.jsonl")).load()
    finally:
        holder.kill()
        holder.wait()


def test_another_view_of_the_same_model_is_not_blocked(tmp_path, server, snapshot):
    holder = hold_in_another_process(tmp_path, tmp_path / "out" / "m" / "view_a")
    try:
        summary, _ = run(snapshot, tmp_path / "out" / "m" / "view_b", settings_for(server))
        assert summary["statuses"] == {"ok": N}
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.e2e
def test_two_kedro_runs_with_the_same_model_name_the_second_is_refused_and_the_first_reports(tmp_path, monkeypatch):
    """The issue's case: before, both runs asked the server everything and both failed at compaction."""
    project = copy_project(tmp_path / "p", ["zh_decision_bench"])
    with LoopbackServer(delay_s=0.05) as srv:
        params = (f"model.adapter=systemone,model.endpoint={srv.endpoint},model.model=jev-1.13.0,"
                  "model.api_key_env=none,model.name=same-name,model.concurrency=2")
        cmd = [sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench", f"--params={params}"]
        env = {**_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "KEDRO_DISABLE_TELEMETRY": "true"}
        first = subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        log = project / "data" / "07_model_output" / "same-name" / "zh_decision_bench" / "predictions.jsonl"
        deadline = time.monotonic() + 120
        while (not log.is_file() or log.stat().st_size < 2000) and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before the second could start"
        monkeypatch.chdir(project)
        with pytest.raises(Exception) as err:
            run_kedro(project, "zh_decision_bench", params={"model": {
                "adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-1.13.0", "api_key_env": "none",
                "name": "same-name"}})
        assert "another run is writing this output folder" in str(err.value) and f"pid {first.pid}" in str(err.value)
        out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, out[-3000:]
        assert srv.total == 378  # nothing asked twice: the second run asked nothing
    report = json.loads((project / "data/08_reporting/same-name/zh_decision_bench/report.json").read_text())
    assert report["coverage"]["requests_by_status"] == {"ok": 378}


# -- class 5: identity with the answers ---------------------------------------------------------------

def test_without_run_json_another_model_with_the_same_name_reuses_nothing(tmp_path, server, snapshot):
    folder = tmp_path / "m" / "v"
    run(snapshot, folder, settings_for(server, model="model-a"))
    (folder / "run.json").unlink()
    before = server.total
    summary, plog = run(snapshot, folder, settings_for(server, model="model-b"))
    assert (summary["asked"], summary["reused"]) == (N, 0) and server.total - before == N
    assert {r["model"] for r in lines(plog)} == {"model-b"}
    aside = list(folder.glob("predictions.*.superseded.jsonl"))  # model-a's answers: kept, out of the way
    assert len(aside) == 1 and {json.loads(x)["model"] for x in aside[0].read_text().splitlines()} == {"model-a"}
    meta = PredictionLog(plog.path).checked_meta()  # what scoring names in the report
    assert meta["identity"]["model"] == "model-b" and meta["identity_digest"] == lines(plog)[0]["run_identity"]


def test_without_run_json_the_same_identity_reuses_its_stamped_answers(tmp_path, server, snapshot):
    folder = tmp_path / "m"
    _, plog = run(snapshot, folder, settings_for(server))
    digests = {r["run_identity"] for r in lines(plog)}
    (folder / "run.json").unlink()
    before = server.total
    summary, _ = run(snapshot, folder, settings_for(server))
    assert (summary["asked"], summary["reused"]) == (0, N) and server.total == before and len(digests) == 1


def test_a_log_copied_under_another_identitys_run_json_is_not_reused(tmp_path, server, snapshot):
    a, b = tmp_path / "a", tmp_path / "b"
    run(snapshot, a, settings_for(server, model="model-a"))
    run(snapshot, b, settings_for(server, model="model-b"))
    (b / "predictions.jsonl").write_bytes((a / "predictions.jsonl").read_bytes())  # run.json still says model-b
    before = server.total
    summary, plog = run(snapshot, b, settings_for(server, model="model-b"))
    assert summary["reused"] == 0 and server.total - before == N
    assert {r["model"] for r in lines(plog)} == {"model-b"}


def _unstamped(plog: PredictionLog) -> None:
    """The log as it was written before records carried their identity."""
    recs = lines(plog)
    plog.path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "run_identity"}) + "\n" for r in recs))


def test_unstamped_answers_are_reused_when_run_json_names_this_identity(tmp_path, server, snapshot):
    _, plog = run(snapshot, tmp_path / "m", settings_for(server))
    _unstamped(plog)
    before = server.total
    summary, plog = run(snapshot, tmp_path / "m", settings_for(server))
    assert summary["reused"] == N and server.total == before
    assert [r.get("run_identity") for r in lines(plog)] == [None] * N  # kept as written


def test_unstamped_answers_without_run_json_are_not_reused(tmp_path, server, snapshot):
    _, plog = run(snapshot, tmp_path / "m", settings_for(server))
    _unstamped(plog)
    plog.meta_path.unlink()
    summary, _ = run(snapshot, tmp_path / "m", settings_for(server))
    assert (summary["asked"], summary["reused"]) == (N, 0)
    assert list((tmp_path / "m").glob("predictions.unstamped.superseded.jsonl"))


@pytest.mark.parametrize("first, second", [
    ({"max_questions": 1}, {}),  # two questions per request were unsupported under the first limit
    ({"max_score_levels": 2}, {}),
    ({"send_abstain": True}, {}),
    ({"flavour": "decide"}, {}),
])
def test_settings_that_change_answers_are_part_of_the_identity(tmp_path, server, snapshot, first, second):
    run(snapshot, tmp_path / "m", settings_for(server, **first))
    summary, _ = run(snapshot, tmp_path / "m", settings_for(server, **second))
    assert summary["reused"] == 0


def test_engine_settings_that_do_not_change_answers_keep_them(tmp_path, server, snapshot):
    run(snapshot, tmp_path / "m", settings_for(server, concurrency=1))
    summary, _ = run(snapshot, tmp_path / "m", settings_for(server, concurrency=4, max_response_bytes=1 << 20,
                                                            timeout_s=10, fsync="never"))
    assert (summary["asked"], summary["reused"]) == (0, N)


def test_openai_token_cap_and_temperature_are_part_of_the_identity():
    def ident(**extra):
        return make_adapter({"adapter": "openai_compat", "endpoint": "http://x.test/v1", "model": "m", **extra}).identity()
    assert len({identity_digest(ident()), identity_digest(ident(max_tokens=50)), identity_digest(ident(temperature=0.5))}) == 3


def test_scoring_refuses_records_of_another_identity_than_run_json_names(tmp_path, server, snapshot):
    folder = tmp_path / "m"
    _, plog = run(snapshot, folder, settings_for(server, model="model-a"))
    meta = json.loads(plog.meta_path.read_text())
    meta["identity"]["model"] = "model-b"  # run.json says one thing, the records another
    plog.meta_path.write_text(json.dumps(meta))
    with pytest.raises(PredictionLogError) as err:
        PredictionLog(plog.path).checked_meta()  # scoring's first step (steps.score)
    assert "predictions.jsonl: its records were written by run identity" in str(err.value)
    assert "run.json names identity" in str(err.value) and "model-b" in str(err.value)


def test_scoring_refuses_records_whose_run_json_is_missing(tmp_path, server, snapshot):
    _, plog = run(snapshot, tmp_path / "m", settings_for(server))
    plog.meta_path.unlink()
    with pytest.raises(PredictionLogError, match="run.json is missing, so nothing says which adapter and model that is"):
        PredictionLog(plog.path).checked_meta()


@pytest.mark.e2e
def test_kedro_a_replayed_name_reused_by_a_live_model_without_run_json(tmp_path, monkeypatch):
    """The issue's case through Kedro: the report names the adapter whose answers it scores."""
    project = copy_project(tmp_path / "p", ["zh_decision_bench"])
    monkeypatch.chdir(project)
    run_kedro(project, "zh_decision_bench", params={"model": {"name": "shared"}})  # sparrow
    (project / "data/07_model_output/shared/zh_decision_bench/run.json").unlink()
    with LoopbackServer() as srv:
        kedro_run(project, "zh_decision_bench", f"model.adapter=systemone,model.endpoint={srv.endpoint},"
                                                "model.model=jev-1.13.0,model.api_key_env=none,model.name=shared")
        assert srv.total == 378  # every request asked: nothing of sparrow's reused
    report = json.loads((project / "data/08_reporting/shared/zh_decision_bench/report.json").read_text())
    assert report["adapter"] == "systemone"
    recs = [json.loads(x) for x in (project / "data/07_model_output/shared/zh_decision_bench/predictions.jsonl").open()]
    assert {r["model"] for r in recs} == {"jev-1.13.0"}
