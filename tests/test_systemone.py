"""The System One client and the engine against a real loopback server, with injected faults."""

from __future__ import annotations

import json

import pytest

from jevkedro.config import SettingsError
from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings, ModelSettings, RetrySettings
from jevkedro.models.systemone import SystemOneAdapter
from jevkedro.nodes.engine import Tariff
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.validate import build_question_table
from jevkedro.protocol import SnapshotRow, Target, candidates_for
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot

pytest.importorskip("aiohttp")


@pytest.fixture
def server():
    with LoopbackServer(hang_s=3.0) as srv:
        yield srv


def settings_for(srv, **extra):
    return {"adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-latest", "api_key_env": "",
            "timeout_s": 30, "progress": 0, **extra}  # generous: a loaded test machine is no failing server


def run(tmp_path, snapshot, settings, name="preds"):
    plog = PredictionLog(tmp_path / name / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    return summary, plog


def snap(tmp_path, n=4, faults=None, rows=None):
    return synthetic_snapshot(tmp_path / "snap", rows if rows is not None else synthetic_rows(n, faults))


# -- the happy path: body, recorded fields, raw text ---------------------------------------------

def test_answers_are_recorded_with_resolved_model_usage_request_id_and_raw_body(tmp_path, server):
    s = snap(tmp_path, 3)
    summary, plog = run(tmp_path, s, settings_for(server))
    assert summary["statuses"] == {"ok": 3} and summary["stopped"] is None
    rec = plog.records["r00001"]
    assert rec["model"] == "jev-1.13.0"  # the alias resolved by the server, not "jev-latest"
    assert rec["usage"]["output_tokens"] == 0 and rec["usage"]["input_tokens"] > 0
    assert rec["server_request_id"].startswith("srv-") and rec["http_status"] == 200
    assert json.loads(rec["raw_response"]) == rec["response"]
    assert rec["probability_source"] == "native"
    # exactly the three documented fields, a question with criteria null sends no criteria
    body = server.bodies[0]
    assert set(body) == {"model", "state", "questions"} and body["model"] == "jev-latest"
    assert server.auth_headers == [None, None, None]  # api_key_env '' -> no Authorization header
    table = build_question_table(s.rows, plog.records)
    assert set(table.status) == {"ok"}
    # the file on disk has one line per request in snapshot order
    lines = plog.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == ["r00000", "r00001", "r00002"]


def test_null_criteria_are_left_out_of_the_wire_body(tmp_path, server):
    rows = synthetic_rows(1)
    rows[0].request["questions"]["is_billing"]["criteria"] = None
    run(tmp_path, snap(tmp_path, rows=rows), settings_for(server))
    assert "criteria" not in server.bodies[0]["questions"]["is_billing"]


def test_bearer_key_from_the_named_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("JEV_UNIT_KEY", "k-123-secret")
    with LoopbackServer(required_key="k-123-secret") as srv:
        summary, plog = run(tmp_path, snap(tmp_path, 2), settings_for(srv, api_key_env="JEV_UNIT_KEY"))
        assert srv.auth_headers == ["Bearer k-123-secret"] * 2
    assert summary["statuses"] == {"ok": 2}
    assert "k-123-secret" not in plog.path.read_text() + plog.meta_path.read_text()


def test_a_named_but_unset_key_variable_fails_before_any_request(tmp_path, server, monkeypatch):
    monkeypatch.delenv("JEV_UNSET_KEY", raising=False)
    with pytest.raises(ValueError, match="JEV_UNSET_KEY"):
        run(tmp_path, snap(tmp_path, 1), settings_for(server, api_key_env="JEV_UNSET_KEY"))
    assert server.total == 0


def test_endpoint_with_credentials_is_refused():
    with pytest.raises(ValueError, match="credentials"):
        SystemOneAdapter(endpoint="https://user:pw@api.example/v1", api_key_env="")
    with pytest.raises(ValueError, match="query"):
        SystemOneAdapter(endpoint="https://api.example/v1?key=abc", api_key_env="")


# -- faults of one request -------------------------------------------------------------------------

@pytest.mark.parametrize("fault, status, failure, http_status", [
    ("500", "error", "server", 500),
    ("529", "error", "server", 529),
    ("404", "error", "server", 404),
    ("422", "error", "request", 422),
    ("413", "error", "request", 413),
    ("malformed", "error", "malformed", 200),
    ("drop", "error", "connection", None),
])
def test_a_failing_request_is_an_error_for_that_request_only(tmp_path, server, fault, status, failure, http_status):
    summary, plog = run(tmp_path, snap(tmp_path, 3, {1: fault}), settings_for(server))
    rec = plog.records["r00001"]
    assert (rec["status"], rec["failure"], rec.get("http_status")) == (status, failure, http_status)
    assert plog.records["r00000"]["status"] == plog.records["r00002"]["status"] == "ok"
    assert summary["stopped"] is None
    assert rec["latency_s"] is None  # only answered requests are latency samples


def test_malformed_body_is_kept_exactly_as_returned(tmp_path, server):
    _, plog = run(tmp_path, snap(tmp_path, 1, {0: "malformed"}), settings_for(server))
    rec = plog.records["r00000"]
    assert rec["raw_response"] == '{"model": "jev-1.13.0", "answers": {oops'
    assert rec["response"] is None and "not JSON" in rec["error"]


def test_slow_answer_within_the_deadline_is_answered_and_timed(tmp_path, server):
    _, plog = run(tmp_path, snap(tmp_path, 1, {0: "slow:0.4"}), settings_for(server))
    rec = plog.records["r00000"]
    assert rec["status"] == "ok" and rec["latency_s"] >= 0.4


def test_answer_past_the_deadline_times_out(tmp_path, server):
    # the server answers (200) after 3 s; a timeout outcome can only come from the client's deadline
    _, plog = run(tmp_path, snap(tmp_path, 1, {0: "hang"}), settings_for(server, timeout_s=0.5))
    rec = plog.records["r00000"]
    assert (rec["status"], rec["failure"]) == ("error", "timeout") and "0.5s" in rec["error"]
    assert rec["latency_s"] is None and "raw_response" not in rec


def test_a_body_trickling_in_past_the_deadline_times_out(tmp_path, server):
    # every byte arrives well within a read timeout, but the whole body would take ~8 s: the
    # request deadline covers the body as a whole
    _, plog = run(tmp_path, snap(tmp_path, 1, {0: "trickle"}), settings_for(server, timeout_s=1))
    rec = plog.records["r00000"]
    assert (rec["status"], rec["failure"]) == ("error", "timeout")


def test_probabilities_missing_a_candidate_are_invalid_at_scoring(tmp_path, server):
    s = snap(tmp_path, 1, {0: "missing"})
    _, plog = run(tmp_path, s, settings_for(server))
    assert plog.records["r00000"]["status"] == "ok"  # the server answered; validity is judged at scoring
    table = build_question_table(s.rows, plog.records)
    status = dict(zip(table.question_id, table.status))
    assert status == {"is_billing": "ok", "queue": "invalid", "anger": "ok"}
    reason = table.reason[list(table.question_id).index("queue")]
    assert "missing ['other']" in reason


# -- stop rules ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["401", "403", "429"])
def test_auth_and_rate_limit_stop_the_run_and_the_rest_is_unattempted(tmp_path, server, fault):
    summary, plog = run(tmp_path, snap(tmp_path, 6, {2: fault}), settings_for(server))
    statuses = [plog.records[f"r{i:05d}"]["status"] for i in range(6)]
    assert statuses == ["ok", "ok", "unattempted", "unattempted", "unattempted", "unattempted"]
    assert f"HTTP {fault}" in summary["stopped"]
    assert plog.records["r00002"]["http_status"] == int(fault)
    assert sum(server.counts.values()) == 3  # nothing after the stop was sent
    # unattempted requests are not wrong answers: their questions are 'unattempted' at scoring
    table = build_question_table(snap(tmp_path, 6, {2: fault}).rows, plog.records)
    assert (table.status == "unattempted").sum() == 4 * 3


def test_rate_limit_can_be_waited_out_by_the_retry_policy_but_still_stops_when_it_persists(tmp_path, server):
    retry = {"max_attempts": 2, "kinds": ["429"], "backoff_s": 0.01}
    summary, plog = run(tmp_path, snap(tmp_path, 2, {0: "429"}), settings_for(server, retry=retry))
    assert server.counts["r00000"] == 2 and server.counts["r00001"] == 0
    assert "429" in summary["stopped"]


def test_three_consecutive_infrastructure_failures_stop_the_run(tmp_path, server):
    summary, plog = run(tmp_path, snap(tmp_path, 7, {1: "500", 2: "drop", 3: "malformed"}), settings_for(server))
    statuses = [plog.records[f"r{i:05d}"]["status"] for i in range(7)]
    assert statuses == ["ok", "error", "error", "error", "unattempted", "unattempted", "unattempted"]
    assert summary["stopped"].startswith("3 consecutive infrastructure failures")
    assert server.counts["r00004"] == 0


def test_failures_that_are_not_consecutive_or_not_infrastructure_do_not_stop(tmp_path, server):
    faults = {0: "500", 1: "500", 2: None, 3: "500", 4: "422", 5: "422", 6: "422", 7: "422"}
    faults = {k: v for k, v in faults.items() if v}
    summary, plog = run(tmp_path, snap(tmp_path, 9, faults), settings_for(server))
    assert summary["stopped"] is None
    assert summary["statuses"] == {"error": 7, "ok": 2}


def test_an_unsupported_request_between_failures_does_not_reset_the_count(tmp_path, server):
    # r00001 is never sent (an image on a text-only server): it says nothing about the server, so
    # the 500s around it are still three in a row.
    rows = synthetic_rows(6, {0: "500", 2: "500", 3: "500"})
    rows[1].request["state"]["photo"] = {"type": "image_url", "image_url": {"url": "a.png"}}
    summary, plog = run(tmp_path, snap(tmp_path, rows=rows), settings_for(server))
    statuses = [plog.records[f"r{i:05d}"]["status"] for i in range(6)]
    assert statuses == ["error", "unsupported", "error", "error", "unattempted", "unattempted"]
    assert summary["stopped"].startswith("3 consecutive infrastructure failures")
    assert server.counts["r00004"] == 0 and server.counts["r00001"] == 0


def test_server_errors_are_retried_with_backoff_when_the_policy_says_so(tmp_path, server):
    settings = settings_for(server, retry={"max_attempts": 3, "kinds": ["5xx"], "backoff_s": 0.01})
    summary, plog = run(tmp_path, snap(tmp_path, 1, {0: "flaky:2"}), settings)
    rec = plog.records["r00000"]
    assert rec["status"] == "ok" and rec["attempts"] == 3 and server.counts["r00000"] == 3
    assert plog.meta()["engine"]["retry"] == {"max_attempts": 3, "kinds": ["5xx"], "backoff_s": 0.01,
                                              "backoff_max_s": 30.0}


def test_retry_policy_backoff_doubles_and_retry_after_wins():
    p = RetrySettings(max_attempts=5, backoff_s=0.5, backoff_max_s=3.0)
    assert [p.delay(i, None) for i in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert p.delay(1, 2.5) == 2.5
    with pytest.raises(SettingsError, match=r"model\.retry\.kinds\[0\]: '418' is not allowed; allowed: a list of values from: 429"):
        ModelSettings.parse({"adapter": "sparrow", "retry": {"kinds": ["418"]}})


# -- concurrency -----------------------------------------------------------------------------------

def test_concurrency_is_bounded_and_used(tmp_path):
    # each answer takes 0.3 s, so the four client threads overlap on the server; never more than
    # four at once (speed itself is measured in benchmarks/inference_throughput.py)
    with LoopbackServer(delay_s=0.3) as srv:
        summary, _ = run(tmp_path, snap(tmp_path, 16), settings_for(srv, concurrency=4))
        assert srv.max_inflight == 4
    assert summary["statuses"] == {"ok": 16}


# -- flavours, images, validation ------------------------------------------------------------------

def test_decide_flavour_posts_to_decide_and_list_answers_score(tmp_path, server):
    s = snap(tmp_path, 2)
    _, plog = run(tmp_path, s, settings_for(server, flavour="decide"))
    assert isinstance(plog.records["r00000"]["response"]["answers"], list)
    assert set(build_question_table(s.rows, plog.records).status) == {"ok"}


def _image_rows(kind="image_url"):
    rows = synthetic_rows(1)
    part = {"type": kind, kind: {"url": "assets/a.png"}}
    rows[0].request["state"] = {"ticket": "img0", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Is this a cat?"}, part,
                                     {"type": "image_url", "image_url": {"url": "assets/b.png"}}]}]}
    return rows


def test_images_go_as_multipart_parts_to_image_servers(tmp_path, server):
    media = tmp_path / "media" / "assets"
    media.mkdir(parents=True)
    (media / "a.png").write_bytes(b"\x89PNG-a")
    (media / "b.png").write_bytes(b"\x89PNG-b")
    s = snap(tmp_path, rows=_image_rows())
    _, plog = run(tmp_path, s, settings_for(server, images="multipart", media_root=str(tmp_path / "media")))
    assert plog.records["r00000"]["status"] == "ok"
    assert server.image_counts == [2] and server.image_bytes == [b"\x89PNG-a", b"\x89PNG-b"]
    assert set(server.bodies[0]) == {"model", "state", "questions"}


def test_images_on_a_text_only_server_and_video_anywhere_are_unsupported_and_not_sent(tmp_path, server):
    _, plog = run(tmp_path, snap(tmp_path, rows=_image_rows()), settings_for(server), name="a")
    assert plog.records["r00000"]["status"] == "unsupported"
    _, plog = run(tmp_path, snap(tmp_path, rows=_image_rows("video_url")),
                  settings_for(server, images="multipart"), name="b")
    assert plog.records["r00000"]["status"] == "unsupported"
    assert server.total == 0


def _row(questions, rid="q0"):
    cands = {q: candidates_for(v) for q, v in questions.items()}
    return SnapshotRow(rid, {"state": {"ticket": rid, "text": "x"}, "questions": questions}, cands,
                       {q: Target(label=0) for q in questions}, {}, {"generator": "test"})


def test_requests_beyond_the_servers_limits_are_unsupported_not_sent(tmp_path, server):
    questions = {
        "ok": {"type": "noul", "instructions": "fine"},
        "one_option": {"type": "choice", "instructions": "?", "criteria": {"only": None}},
        "twelve_levels": {"type": "score", "instructions": "?", "criteria": [str(i) for i in range(12)]},
        "bad_noul": {"type": "noul", "instructions": "?", "criteria": {"maybe": "x"}},
    }
    hopeless = {k: v for k, v in questions.items() if k != "ok"}
    s = snap(tmp_path, rows=[_row(questions, "q0"), _row(hopeless, "q1")])
    _, plog = run(tmp_path, s, settings_for(server), name="jev")
    assert plog.records["q0"]["status"] == "ok"
    assert sorted(plog.records["q0"]["unsupported_questions"]) == ["bad_noul", "one_option", "twelve_levels"]
    assert set(server.bodies[0]["questions"]) == {"ok"}
    assert plog.records["q1"]["status"] == "unsupported" and server.counts["q1"] == 0
    table = build_question_table(s.rows, plog.records)
    assert dict(zip(table.question_id[:4], table.status[:4]))["twelve_levels"] == "unsupported"
    # a compat server that takes 32 levels gets the score question
    _, plog = run(tmp_path, s, settings_for(server, max_score_levels=32), name="compat")
    assert sorted(plog.records["q0"]["unsupported_questions"]) == ["bad_noul", "one_option"]


def test_request_size_cap_makes_a_request_unsupported(tmp_path, server):
    _, plog = run(tmp_path, snap(tmp_path, 1), settings_for(server, max_request_bytes=100))
    assert plog.records["r00000"]["status"] == "unsupported" and "bytes" in plog.records["r00000"]["error"]
    assert server.total == 0


# -- cost and secrets ------------------------------------------------------------------------------

def test_cost_is_measured_usage_times_the_tariff_and_null_when_unknown(tmp_path, server):
    summary, plog = run(tmp_path, snap(tmp_path, 2), settings_for(server, price_input_per_1m=0.042), name="priced")
    rec = plog.records["r00000"]
    assert rec["cost_usd"] == pytest.approx(rec["usage"]["input_tokens"] * 0.042 / 1e6)
    assert summary["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in plog.records.values()))
    summary, plog = run(tmp_path, snap(tmp_path, 2), settings_for(server), name="unpriced")
    assert plog.records["r00000"]["cost_usd"] is None and summary["cost_usd"] is None


def test_tariff_formula():
    t = Tariff(input_per_1m=2.0, output_per_1m=10.0)
    assert t.cost({"input_tokens": 1000, "output_tokens": 100}) == pytest.approx(0.002 + 0.001)
    assert Tariff(2.0, None).cost({"input_tokens": 1000, "output_tokens": 0}) == pytest.approx(0.002)
    assert Tariff(2.0, None).cost({"input_tokens": 1000, "output_tokens": 5}) is None
    assert Tariff(None, None).cost({"input_tokens": 1000}) is None
    assert t.cost(None) is None


def test_a_body_echoing_the_key_is_saved_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("JEV_ECHO_KEY", "echo-secret-777")
    with LoopbackServer(required_key="echo-secret-777") as srv:
        _, plog = run(tmp_path, snap(tmp_path, 1, {0: "echo"}), settings_for(srv, api_key_env="JEV_ECHO_KEY"))
    text = plog.path.read_text()
    assert "echo-secret-777" not in text and "Bearer [REDACTED]" in text
