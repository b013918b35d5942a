"""The verbalized OpenAI-compatible adapter against the loopback server's chat-completions route."""

from __future__ import annotations

import json

import pytest

from jevkedro.models import make_adapter
from jevkedro.models.openai_compat import OpenAICompatAdapter, answer_schema
from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import build_report
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot

pytest.importorskip("aiohttp")


def _run(tmp_path, rows, srv, **extra):
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    settings = {"adapter": "openai_compat", "endpoint": srv.endpoint, "model": "tiny-instruct", "api_key_env": "",
                "progress": 0, "price_input_per_1m": 1.0, "price_output_per_1m": 4.0, **extra}
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    return snapshot, plog, summary, settings


def test_schema_constrains_every_candidate_of_every_question():
    schema = answer_schema({"q": ["true", "false"], "c": ["a", "b", "c"]})
    q = schema["properties"]["answers"]["properties"]["c"]["properties"]["probabilities"]
    assert q["required"] == ["a", "b", "c"] and q["additionalProperties"] is False
    assert schema["properties"]["answers"]["required"] == ["q", "c"]


def test_written_probabilities_are_scored_and_marked_verbalized(tmp_path):
    with LoopbackServer() as srv:
        snapshot, plog, summary, settings = _run(tmp_path, synthetic_rows(2), srv)
        sent = srv.bodies[0]
    assert sent["response_format"]["type"] == "json_schema" and sent["response_format"]["json_schema"]["strict"]
    assert "criteria" not in json.dumps(sent["messages"][0])  # the system prompt is generic
    rec = plog.records["r00000"]
    assert rec["status"] == "ok" and rec["probability_source"] == "verbalized"
    assert rec["model"] == "tiny-instruct-2026"
    assert json.loads(rec["raw_response"])["object"] == "chat.completion"  # the body as returned
    u = rec["usage"]
    assert u["output_tokens"] == 20
    assert rec["cost_usd"] == pytest.approx(u["input_tokens"] * 1.0 / 1e6 + 20 * 4.0 / 1e6)
    table = build_question_table(snapshot.rows, plog.records)
    assert set(table.status) == {"ok"}
    # noul was written as {"true": 0.5, "false": 0.5} by the loopback model
    i = list(table.question_id).index("is_billing")
    assert table.P[i, :2].tolist() == [0.5, 0.5]
    assert plog.meta()["probability_source"] == "verbalized"
    report = build_report(snapshot, table, plog.records, settings, plog.meta(), None)
    assert report["probability_source"] == "verbalized"
    assert report["cost"]["usd"] == pytest.approx(sum(r["cost_usd"] for r in plog.records.values()))
    assert report["cost"]["requests_priced"] == 2


def test_a_reply_that_is_not_the_schema_is_the_models_invalid_answer_not_a_failure(tmp_path):
    with LoopbackServer() as srv:
        snapshot, plog, summary, _ = _run(tmp_path, synthetic_rows(2, {0: "prose"}), srv)
    rec = plog.records["r00000"]
    assert rec["status"] == "ok" and "no schema answer" in rec["meta"]["verbalized_problem"]
    table = build_question_table(snapshot.rows, plog.records)
    assert list(table.status[:3]) == ["invalid"] * 3 and list(table.status[3:]) == ["ok"] * 3


def test_unknown_output_price_makes_cost_null(tmp_path):
    with LoopbackServer() as srv:
        _, plog, summary, _ = _run(tmp_path, synthetic_rows(1), srv, price_output_per_1m=None)
    assert plog.records["r00000"]["cost_usd"] is None and summary["cost_usd"] is None


def test_the_model_id_is_required():
    with pytest.raises(ValueError, match="model.model"):
        OpenAICompatAdapter(endpoint="http://127.0.0.1:1/v1", api_key_env="")


@pytest.mark.e2e
def test_verbalized_and_incomplete_reach_the_report_and_the_mlflow_tags(tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    from jevkedro.nodes.tracking import track

    with LoopbackServer() as srv:
        snapshot, plog, summary, settings = _run(tmp_path, synthetic_rows(3, {1: "429"}), srv)
    assert "HTTP 429" in summary["stopped"]
    table = build_question_table(snapshot.rows, plog.records)
    report = build_report(snapshot, table, plog.records, {**settings, "name": "tiny-verbalized"}, plog.meta(), None)
    run = report["run"]
    assert run["complete"] is False and run["unattempted_requests"] == 2 and "HTTP 429" in run["stopped"]
    # generic accuracy counts the 6 unattempted questions as not correct; the attempted view does not
    assert report["metrics"]["overall"]["accuracy_n"] == 9 and run["attempted_overall"]["accuracy_n"] == 3
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        run_id = track(report, None, snapshot.manifest)
        tags = MlflowClient().get_run(run_id).data.tags
    finally:
        mlflow.set_tracking_uri("")  # leave no global store behind for other tests
    assert tags["probability_source"] == "verbalized" and tags["complete"] == "false"
    from jevkedro.nodes.report import summary_line

    assert summary_line(json.loads(json.dumps(report))).endswith("INCOMPLETE: 2 requests unattempted")
