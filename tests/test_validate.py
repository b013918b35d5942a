"""Answer validation edge cases (docs/protocol.md §3) and the question table's coverage policy."""

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jevkedro.nodes.validate import answer_probabilities, build_question_table, question_records
from jevkedro.protocol import SnapshotRow, Target

CHOICE = ["a", "b", "c"]


def choice(**probs):
    return {"type": "choice", "probabilities": probs}


@pytest.mark.parametrize(
    "answer, reason_part",
    [
        (choice(a=float("nan"), b=0.5, c=0.5), "finite numbers"),
        (choice(a=float("inf"), b=0.0, c=0.0), "finite numbers"),
        (choice(a=-0.1, b=0.6, c=0.5), "finite numbers"),
        (choice(a=1.2, b=-0.1, c=-0.1), "finite numbers"),
        (choice(a=0.5, b=0.5), "missing ['c']"),
        (choice(a=0.5, b=0.3, c=0.2, d=0.0), "extra ['d']"),
        (choice(a=True, b=False, c=False), "finite numbers"),
        (choice(a="0.5", b=0.3, c=0.2), "finite numbers"),
        (choice(a=0.5, b=0.3, c=0.25), "sum to 1.05"),
        ({"type": "choice"}, "no probabilities"),
        ({"type": "noul", "noul": 0.5}, "answer type 'noul'"),
        (None, "no answer"),
    ],
)
def test_invalid_choice_answers(answer, reason_part):
    probs, reason = answer_probabilities("choice", CHOICE, answer)
    assert probs is None
    assert reason_part in reason


def test_sum_within_tolerance_is_renormalised():
    raw = choice(a=0.508, b=0.3, c=0.2)  # sums to 1.008
    probs, reason = answer_probabilities("choice", CHOICE, raw)
    assert reason is None
    assert probs == pytest.approx(np.array([0.508, 0.3, 0.2]) / 1.008)
    assert raw["probabilities"]["a"] == 0.508  # the raw answer is never changed


def test_sum_tolerance_edges():
    assert answer_probabilities("choice", CHOICE, choice(a=0.5, b=0.3, c=0.19))[1] is None  # 0.99
    assert answer_probabilities("choice", CHOICE, choice(a=0.5, b=0.3, c=0.18))[0] is None  # 0.98


@pytest.mark.parametrize("bad", [True, False, -0.01, 1.01, float("nan"), "0.7", None])
def test_noul_value_checks(bad):
    probs, reason = answer_probabilities("noul", ["true", "false"], {"type": "noul", "noul": bad})
    assert probs is None and "noul must be" in reason


def test_noul_maps_to_candidate_order():
    assert answer_probabilities("noul", ["true", "false"], {"noul": 0.8})[0] == pytest.approx([0.8, 0.2])
    assert answer_probabilities("noul", ["false", "true"], {"noul": 0.8})[0] == pytest.approx([0.2, 0.8])
    # a probabilities object over true/false is accepted when `noul` is absent
    got = answer_probabilities("noul", ["true", "false"], {"probabilities": {"false": 0.3, "true": 0.7}})[0]
    assert got == pytest.approx([0.7, 0.3])


def test_score_by_index_and_by_level_name():
    cands = ["0", "1", "2"]
    names = ["不紧急", "一般", "紧急"]
    by_index = {"type": "score", "probabilities": {"0": 0.1, "1": 0.6, "2": 0.3}}
    by_name = {"type": "score", "probabilities": {"紧急": 0.3, "不紧急": 0.1, "一般": 0.6}}
    mixed = {"type": "score", "probabilities": {"0": 0.1, "一般": 0.6, "2": 0.3}}
    assert answer_probabilities("score", cands, by_index, names)[0] == pytest.approx([0.1, 0.6, 0.3])
    assert answer_probabilities("score", cands, by_name, names)[0] == pytest.approx([0.1, 0.6, 0.3])
    assert answer_probabilities("score", cands, mixed, names)[0] is None
    assert answer_probabilities("score", cands, by_name, None)[0] is None  # no names known: keys must be indices


@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=3, max_size=3))
def test_valid_iff_in_band(values):
    probs, _ = answer_probabilities("choice", CHOICE, choice(a=values[0], b=values[1], c=values[2]))
    assert (probs is not None) == (abs(sum(values) - 1) <= 0.01 + 1e-12)
    if probs is not None:
        assert math.isclose(sum(probs), 1.0)


def _row(rid, qtype="choice", label=0, probs=None):
    q = {"type": qtype, "instructions": "?"}
    if qtype == "choice":
        q["criteria"] = {"a": None, "b": None}
        cands = ["a", "b"]
    else:
        cands = ["true", "false"]
    return SnapshotRow(rid, {"state": "s", "questions": {"q": q}}, {"q": cands},
                       {"q": Target(label=label, probabilities=probs)}, {"domain": "d"}, {})


def test_table_statuses_and_policy():
    rows = [_row("ok"), _row("bad"), _row("unsup"), _row("missing"), _row("err")]
    preds = {
        "ok": {"status": "ok", "response": {"answers": {"q": choice(a=0.9, b=0.1)}}},
        "bad": {"status": "ok", "response": {"answers": {"q": choice(a=0.9, b=0.3)}}},
        "unsup": {"status": "unsupported", "response": None},
        "err": {"status": "error", "error": "HTTP 422"},
    }
    t = build_question_table(rows, preds)
    assert t.status.tolist() == ["ok", "invalid", "unsupported", "unattempted", "error"]
    assert t.P[0].tolist() == pytest.approx([0.9, 0.1])
    assert t.P[1].tolist() == [0.0, 0.0]
    assert "sum to 1.2" in t.reason[1]


def test_table_list_shaped_answers():
    rows = [_row("r")]
    preds = {"r": {"status": "ok", "response": {"answers": [{"id": "q", "type": "choice", "choice": "b",
                                                             "probabilities": {"a": 0.2, "b": 0.8}}]}}}
    t = build_question_table(rows, preds)
    assert t.status.tolist() == ["ok"] and t.P[0].tolist() == pytest.approx([0.2, 0.8])


def test_choice_field_must_name_an_option():
    ok = {"type": "choice", "choice": "b", "probabilities": {"a": 0.2, "b": 0.5, "c": 0.3}}
    foreign = {**ok, "choice": "z"}
    assert answer_probabilities("choice", CHOICE, ok)[1] is None
    assert "'z' is not one of the options" in answer_probabilities("choice", CHOICE, foreign)[1]


def test_no_key_a_model_writes_passes_for_what_validation_derives():
    """What validation learns of a list-shaped body (an id answered twice, a choice entry) is kept
    beside the answers: keys named like it inside an answer are the model's and change nothing."""
    rows = [_row("r1"), _row("r2"), _row("r3")]
    probs = {"a": 0.4, "b": 0.6}
    preds = {
        "r1": {"status": "ok", "response": {"answers": {"q": {"probabilities": probs, "_list_entries": 2}}}},
        "r2": {"status": "ok", "response": {"answers": {"q": {"probabilities": probs, "_list_flavour": True}}}},
        "r3": {"status": "ok", "response": {"answers": [{"id": "q", "choice": "b", "probabilities": probs,
                                                         "_list_entries": 5}]}},
    }
    table = build_question_table(rows, preds)
    assert table.status.tolist() == ["ok"] * 3 and table.reason == [None] * 3
    twice = {"r1": {"status": "ok", "response": {"answers": [{"id": "q", "probabilities": probs}] * 2}}}
    assert build_question_table(rows[:1], twice).reason == ["the list-shaped body answers this question in 2 entries"]


def test_list_flavour_requires_choice_and_rejects_noul_in_choice_slot():
    rows = [_row("r1"), _row("r2"), _row("r3")]
    probs = {"a": 0.4, "b": 0.6}
    preds = {
        "r1": {"status": "ok", "response": {"answers": [{"id": "q", "type": "choice", "choice": "b", "probabilities": probs}]}},
        "r2": {"status": "ok", "response": {"answers": [{"id": "q", "type": "choice", "probabilities": probs}]}},
        "r3": {"status": "ok", "response": {"answers": [{"id": "q", "type": "noul", "noul": 0.7}]}},
    }
    t = build_question_table(rows, preds)
    assert t.status.tolist() == ["ok", "invalid", "invalid"]
    assert "None is not one of the options" in t.reason[1] and "answer type 'noul'" in t.reason[2]


def test_choice_keys_in_another_order_are_read_in_candidate_order():
    rows = [_row("r")]
    preds = {"r": {"status": "ok", "response": {"answers": {"q": {"type": "choice", "choice": "b",
                                                                    "probabilities": {"b": 0.7, "a": 0.3}}}}}}
    t = build_question_table(rows, preds)
    assert t.status.tolist() == ["ok"] and t.P[0].tolist() == [0.3, 0.7]


def test_a_400_digit_integer_makes_one_answer_invalid_and_the_view_is_scored():
    row = SnapshotRow("r", {"state": "s", "questions": {"a": {"type": "noul"}, "b": {"type": "noul"}}},
                      {"a": ["true", "false"], "b": ["true", "false"]}, {"a": Target(label=0), "b": Target(label=0)}, {}, {})
    big = 10 ** 400
    for answer in ({"noul": big}, {"probabilities": {"true": big, "false": -big}}, {"noul": math.inf}):
        preds = {"r": {"status": "ok", "response": {"answers": {"a": answer, "b": {"noul": 0.9}}}}}
        table = build_question_table([row], preds)
        assert table.status.tolist() == ["invalid", "ok"]
        assert "characters)" in table.reason[0] or "inf" in table.reason[0]  # quoted, shortened
        assert len(table.reason[0]) < 300


def test_request_columns_come_from_every_record_in_its_order():
    """The report's request-level columns hold every record once, in the records' order (one for a
    request the view does not have too); unattempted counts the view's requests without an
    attempted record."""
    rows = [_row("a"), _row("b"), _row("c"), _row("d")]
    preds = {
        "c": {"status": "error", "error": "HTTP 500", "latency_s": 0.5, "failure": "server"},
        "zz": {"status": "ok", "response": {"answers": {}}, "latency_s": 0.1, "model": "m"},
        "a": {"status": "ok", "response": {"answers": {"q": choice(a=0.5, b=0.5)}}, "latency_s": 0.2, "first": True,
              "cost_usd": 0.01, "model": "m"},
        "b": {"status": "unattempted"},
    }
    t = build_question_table(rows, preds)
    assert t.status.tolist() == ["ok", "unattempted", "error", "unattempted"]
    cols = t.requests
    assert cols.status == ["error", "ok", "ok", "unattempted"] and cols.latency_s == [0.5, 0.1, 0.2, None]
    assert cols.first == [None, None, True, None] and cols.cost_usd == [None, None, 0.01, None]
    assert cols.model == [None, "m", "m", None] and cols.failure == ["server", None, None, None]
    assert cols.unattempted == 2  # b (unattempted) and d (no record)


def test_question_records_jsonl_holds_exactly_the_records():
    row = SnapshotRow("r\"1", {"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}, "ü": {"type": "noul"}}},
                      {"q": ["true", "false"], "ü": ["false", "true"]}, {"q": Target(label=0), "ü": Target(unscored=True)},
                      {}, {})
    preds = {"r\"1": {"status": "ok", "response": {"answers": {"q": {"noul": 0.123456789}, "ü": {"noul": "x\n"}}}}}
    recs = question_records(build_question_table([row], preds))
    assert [json.loads(line) for line in recs.jsonl().splitlines()] == list(recs)
    assert recs[0]["probabilities"] == [0.123457, 0.876543] and recs[0]["correct"] is False  # label true, p 0.12
    assert recs[1]["reason"].startswith("noul must be") and recs[1]["unscored"] is True and recs[1]["label"] is None
    assert "unscored" not in recs[0]
    for error in ({"detail": ["x"]}, "\ud800 lone surrogate"):  # any reason, even one msgspec does not write
        table = build_question_table([row], {"r\"1": {"status": "error", "error": error}})
        assert [json.loads(line) for line in question_records(table).jsonl().splitlines()] == list(question_records(table))


def test_question_records_with_a_lone_surrogate_are_written_as_utf8_that_reads_back_the_same():
    """An error text holding a lone surrogate (a string no UTF-8 can hold) becomes the questions'
    reason: questions.jsonl is still valid UTF-8 and gives the very same string back."""
    row = SnapshotRow("r1", {"state": "s", "questions": {"q": {"type": "noul"}}}, {"q": ["true", "false"]},
                      {"q": Target(label=0)}, {}, {})
    table = build_question_table([row], {"r1": {"request_id": "r1", "status": "error", "error": "HTTP 500: \ud800 é"}})
    (line,) = question_records(table).jsonl().decode("utf-8").splitlines()
    assert json.loads(line)["reason"] == "HTTP 500: \ud800 é"


@pytest.mark.parametrize("body", [None, [], "text", {"answers": "no"}, {"answers": None}, {"model": "m"},
                                  {"answers": ["junk", {"id": 5, "probabilities": {"a": 1.0, "b": 0.0}}]}])
def test_a_body_without_answers_leaves_every_question_unanswered(body):
    t = build_question_table([_row("r")], {"r": {"status": "ok", "response": body}})
    assert t.status.tolist() == ["invalid"] and t.reason == ["no answer for this question"]


def test_a_record_without_a_status_is_unattempted():
    t = build_question_table([_row("r")], {"r": {"request_id": "r", "response": {"answers": {"q": choice(a=1.0, b=0.0)}}}})
    assert t.status.tolist() == ["unattempted"] and t.requests.unattempted == 1
