"""The System One client against an independent server: sparrow-decider's own `serve`.

`sparrow-decider serve` is the model package's reference System One endpoint (POST
/v1/systemone). Evaluating zh-decision-bench through it with `model.adapter=systemone` must give
exactly the judgements of the embedded adapter running the same model in-process: the same
probabilities for every question, hence the same metrics.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from support import run_kedro

VIEW = "zh_decision_bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sparrow_server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sparrow_decider.cli", "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    assert json.load(resp)["status"] == "ok"
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("sparrow-decider serve did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _questions(project, model):
    path = project / f"data/07_model_output/{model}/{VIEW}/questions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.e2e
def test_http_and_in_process_give_the_same_judgements(project, sparrow_server):
    run_kedro(project, VIEW)  # embedded adapter
    run_kedro(project, VIEW, params={"model": {
        "adapter": "systemone", "endpoint": f"{sparrow_server}/v1", "model": "sparrow-nano-general-v1.1",
        "api_key_env": "none", "concurrency": 4, "name": "sparrow-over-http"}})
    local, remote = _questions(project, "sparrow-nano-general-v1.1"), _questions(project, "sparrow-over-http")
    assert len(remote) == 467 and all(q["status"] == "ok" for q in remote)
    assert [(q["request_id"], q["question"]) for q in remote] == [(q["request_id"], q["question"]) for q in local]
    assert [q["probabilities"] for q in remote] == [q["probabilities"] for q in local]
    rep = {m: json.loads((project / f"data/08_reporting/{m}/{VIEW}/report.json").read_text())
           for m in ("sparrow-nano-general-v1.1", "sparrow-over-http")}
    assert rep["sparrow-over-http"]["adapter"] == "systemone"
    assert rep["sparrow-over-http"]["metrics"]["overall"] == rep["sparrow-nano-general-v1.1"]["metrics"]["overall"]
    preds = (project / f"data/07_model_output/sparrow-over-http/{VIEW}/predictions.jsonl").read_text().splitlines()
    first = json.loads(preds[0])
    assert first["model"] == "sparrow-nano-general-v1.1" and first["latency_s"] > 0
