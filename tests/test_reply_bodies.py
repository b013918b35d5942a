"""Reply bodies read from a real loopback HTTP server: numbers no float can hold and repeated keys.

A 5,000-digit integer in a reply is an answer to judge (``invalid``: not a finite number), never a
reason to call the reply malformed or to crash; a key the reply repeats makes exactly the answers
it touches ``invalid``, naming the key. The same holds for the JSON an instruction model writes.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import build_report
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import synthetic_rows, synthetic_snapshot

pytest.importorskip("aiohttp")

GOOD = {"is_billing": '{"type": "noul", "noul": 0.8}',
        "queue": '{"type": "choice", "probabilities": {"billing": 0.5, "tech": 0.3, "other": 0.2}}',
        "anger": '{"type": "score", "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}}'}
HUGE = "9" * 5000


def body_text(**answers: str) -> str:
    parts = {**GOOD, **answers}
    return '{"model": "jev-1.13.0", "answers": {' + ", ".join(f'"{q}": {a}' for q, a in parts.items()) + "}}"


# the body each request gets, by its ticket (the request id), written by hand: JSON libraries
# cannot write repeated keys or a 5,000-digit integer
BODIES = {
    "r00000": body_text(is_billing='{"type": "noul", "noul": ' + HUGE + "}"),
    "r00001": body_text(queue='{"type": "choice", "probabilities": {"billing": 0.5, "tech": 0.3, "tech": 0.3, "other": 0.2}}'),
    "r00002": body_text().replace('"model": "jev-1.13.0"', '"model": "jev-1.13.0", "model": "other"'),
    "r00003": body_text(),
}
# what an instruction model writes (noul as probabilities over true/false, as its schema asks)
WRITTEN = {**{rid: body.replace('"model": "jev-1.13.0", ', "", 1) for rid, body in BODIES.items()},
           "r00000": body_text(is_billing='{"probabilities": {"true": ' + HUGE + ', "false": 0.2}}').replace(
               '"model": "jev-1.13.0", ', "", 1)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions"):
            rid = next(r for r in BODIES if r in json.dumps(request["messages"]))
            text = WRITTEN[rid]
            body = ('{"model": "tiny", "choices": [{"message": {"role": "assistant", "content": '
                    + json.dumps(text) + '}}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}')
        else:
            body = BODIES[request["state"]["ticket"]]
        data = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def endpoint():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def run(tmp_path, settings):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(4))
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    plog = PredictionLog(plog.path)
    table = build_question_table(snapshot, plog.records)
    verdict = {(r, q): (s, why) for r, q, s, why in zip(table.request_id, table.question_id, table.status, table.reason)}
    return summary, plog, verdict, build_report(snapshot, table, plog.records, settings, plog.meta(), None)


def test_system_one_replies(tmp_path, endpoint):
    settings = {"adapter": "systemone", "endpoint": endpoint, "model": "jev-1.13.0", "api_key_env": "", "progress": 0}
    summary, plog, verdict, report = run(tmp_path, settings)
    assert summary["statuses"] == {"ok": 4}  # no reply is "malformed"
    # the 5,000-digit integer: that answer is invalid, the others of the request are scored
    assert verdict[("r00000", "is_billing")] == ("invalid", "noul must be a number in [0, 1], got inf")
    assert verdict[("r00000", "queue")][0] == verdict[("r00000", "anger")][0] == "ok"
    assert HUGE in plog.records["r00000"]["raw_response"]  # the body as received
    # a repeated probability key: that question; a repeated top-level key: the whole request
    assert verdict[("r00001", "queue")][0] == "invalid" and "'tech' at answers/queue/probabilities" in verdict[("r00001", "queue")][1]
    assert verdict[("r00001", "is_billing")][0] == "ok"
    assert all(verdict[("r00002", q)][0] == "invalid" for q in ("is_billing", "queue", "anger"))
    assert plog.records["r00002"]["meta"]["duplicate_keys"] == [["model"]]
    assert all(verdict[("r00003", q)][0] == "ok" for q in ("is_billing", "queue", "anger"))
    assert report["coverage"]["invalid_by_reason"] == {"repeated key in the response": 4, "noul not a number in [0, 1]": 1}


def test_written_json_of_an_instruction_model(tmp_path, endpoint):
    settings = {"adapter": "openai_compat", "endpoint": endpoint, "model": "tiny", "api_key_env": "", "progress": 0}
    summary, plog, verdict, _ = run(tmp_path, settings)
    assert summary["statuses"] == {"ok": 4}
    assert "verbalized_problem" not in (plog.records["r00000"].get("meta") or {})  # not "no schema answer"
    assert verdict[("r00000", "is_billing")][0] == "invalid"
    assert "finite numbers in [0, 1], got [inf" in verdict[("r00000", "is_billing")][1]
    assert verdict[("r00001", "queue")][0] == "invalid" and "'tech'" in verdict[("r00001", "queue")][1]
    assert verdict[("r00001", "anger")][0] == "ok"
