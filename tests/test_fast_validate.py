"""The fast validation path against the reference rules, on random and adversarial answers.

``build_question_table`` (typed decoding, grouped numpy checks) must give exactly what
``reference_question_table`` (``judge_request`` -> ``validate_answer`` on every question) gives:
the same status, the same reason text and bit-identical probabilities, for records given as Python
objects and for records read back from a predictions log on disk.
"""

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevkedro.nodes import validate as V
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.validate import build_question_table, question_records, reference_question_table
from jevkedro.protocol import SnapshotRow, Target

# -- views --------------------------------------------------------------------------------------------

OPTION_NAMES = ["a", "b", "c", "d", "e", "opt x", "ü", "unknown"]
LEVEL_NAMES = ["low", "mid", "high", "top", "max", "mid"]  # "mid" twice: names that are not distinct


@st.composite
def questions(draw):
    qtype = draw(st.sampled_from(["noul", "choice", "score"]))
    if qtype == "noul":
        cands = draw(st.sampled_from([["true", "false"], ["false", "true"]]))
        return {"type": "noul", "instructions": "?"}, cands
    k = draw(st.integers(1 if qtype == "choice" else 2, 6))
    if qtype == "choice":
        cands = draw(st.permutations(OPTION_NAMES).map(lambda names: names[:k]))
        return {"type": "choice", "instructions": "?", "criteria": {c: None for c in cands}}, cands
    levels = draw(st.lists(st.sampled_from(LEVEL_NAMES), min_size=k, max_size=k))
    natural = [str(i) for i in range(k)]
    cands = draw(st.sampled_from([natural, list(reversed(natural))]))  # DecisionBench keeps source order
    return {"type": "score", "instructions": "?", "criteria": levels}, cands


@st.composite
def rows(draw):
    out = []
    for i in range(draw(st.integers(1, 5))):
        qs, cands, targets = {}, {}, {}
        for j in range(draw(st.integers(1, 3))):
            q, c = draw(questions())
            qs[f"q{j}"], cands[f"q{j}"] = q, c
            targets[f"q{j}"] = Target(label=draw(st.integers(0, len(c) - 1)))
        out.append(SnapshotRow(f"r{i}", {"state": "s", "questions": qs}, cands, targets,
                               {"domain": draw(st.sampled_from(["x", "y"]))}, {}))
    return out


# -- answers --------------------------------------------------------------------------------------------

JUNK = [True, False, None, "0.5", "", [0.5], {"p": 0.5}, float("nan"), float("inf"), -float("inf"),
        -0.1, 1.5, 10 ** 400, -(10 ** 400), 2, 0, 1, -0.0, 1e-320]


@st.composite
def probability(draw):
    return draw(st.one_of(
        st.floats(0, 1),
        st.sampled_from([0.0, 1.0, 0.5, 0.25, 0.33, 0.34, 0.995, 1.005]),
        st.sampled_from(JUNK),
    ))


@st.composite
def near_simplex(draw, k):
    """k floats summing to 1 give or take: inside, at and just outside the tolerance band."""
    w = [draw(st.floats(0.01, 1)) for _ in range(k)]
    p = [x / sum(w) for x in w]
    shift = draw(st.sampled_from([0.0, 0.0, 0.0, 0.004, -0.009, 0.01, -0.01, 0.0100000001, 0.02, -0.03]))
    p[0] = min(max(p[0] + shift, 0.0), 1.0)
    if draw(st.booleans()):
        p = [round(x, 2) for x in p]
    return p


@st.composite
def answer(draw, qtype, cands, levels):
    kind = draw(st.sampled_from(["canonical"] * 6 + ["junk value", "keys", "noul", "type", "choice", "absent", "weird"]))
    if kind == "absent":
        return None
    if kind == "weird":
        return draw(st.sampled_from([0.7, "yes", [1, 2], None, {"type": qtype}]))
    if qtype == "noul" and kind in ("canonical", "noul") and draw(st.booleans()):
        value = draw(st.one_of(st.floats(0, 1), st.sampled_from(JUNK))) if kind == "noul" else draw(st.floats(0, 1))
        out = {"noul": value}
    else:
        probs = dict(zip(cands, draw(near_simplex(len(cands)))))
        if kind == "junk value":
            probs[draw(st.sampled_from(cands))] = draw(probability())
        if kind == "keys":
            change = draw(st.sampled_from(["drop", "extra", "shuffle", "levels", "mixed"]))
            items = list(probs.items())
            if change == "drop":
                items = items[1:]
            elif change == "extra":
                items.append(("zz", 0.0))
            elif change == "shuffle":
                items = draw(st.permutations(items))
            elif change == "levels" and levels:
                items = [(levels[int(c)] if c.isdigit() and int(c) < len(levels) else c, v) for c, v in items]
            elif change == "mixed" and levels:
                items = [(levels[0], items[0][1])] + items[1:]
            probs = dict(items)
        out = {"probabilities": probs}
        if qtype == "choice" and (kind == "choice" or draw(st.booleans())):
            out["choice"] = draw(st.sampled_from([cands[0], cands[-1], "zz", None, 3, [cands[0]], {cands[0]: 1}]))
    if draw(st.booleans()):
        odd_types = ["noul", "choice", "score", None, 7, True, "NOUL", ["noul"], {"k": qtype}]
        out["type"] = qtype if kind != "type" else draw(st.sampled_from(odd_types))
    if draw(st.booleans()):  # fields validation does not read, some named like what validation derives
        out[draw(st.sampled_from(["confidence", "_list_entries", "_list_flavour"]))] = draw(st.sampled_from([0.5, 2, True]))
    return out


@st.composite
def records(draw, view):
    """One record per request (or none), with every request-level oddity the rules know."""
    preds = {}
    for row in view:
        shape = draw(st.sampled_from(["dict"] * 8 + ["list", "missing", "error", "unsupported_q", "repeats",
                                                     "odd body", "no status"]))
        if shape == "missing":
            continue
        if shape == "error":
            preds[row.request_id] = {"request_id": row.request_id, "status": draw(st.sampled_from(["error", "unsupported", "unattempted"])),
                                     "error": draw(st.sampled_from(["HTTP 500", None]))}
            continue
        answers = {}
        for qid, q in row.request["questions"].items():
            levels = q.get("criteria") if q["type"] == "score" else None
            a = draw(answer(q["type"], row.candidates[qid], levels))
            if a is not None:
                answers[qid] = a
        body = {"model": "m", "answers": answers}
        if shape == "list":
            entries = [{"id": qid, **a} if isinstance(a, dict) else a for qid, a in answers.items()]
            if entries and draw(st.booleans()):
                entries.append(draw(st.sampled_from([entries[0], {"id": 5}, "junk"])))
            body = {"answers": entries}
        if shape == "odd body":
            body = draw(st.sampled_from([None, [], "text", {"answers": "no"}, {"answers": None}, {"model": "m"}]))
        rec = {"request_id": row.request_id, "status": "ok", "response": body, "latency_s": 0.1, "model": "m"}
        if shape == "no status":
            del rec["status"]
        if shape == "unsupported_q":
            rec["unsupported_questions"] = [next(iter(row.request["questions"]))]
        if shape == "repeats":
            qid = next(iter(row.request["questions"]))
            rec["meta"] = {"duplicate_keys": draw(st.sampled_from([
                [["model"]], [["answers", qid, "probabilities", "a"]], [["answers", 0, "noul"]], [["answers", "zz"]]]))}
        preds[row.request_id] = rec
    return preds


def assert_same(fast, ref):
    assert fast.status.tolist() == ref.status.tolist()
    assert fast.reason == ref.reason
    assert np.array_equal(fast.P, ref.P)  # bit for bit: the same sums, the same divisions
    assert fast.P.shape == ref.P.shape


def assert_same_request_columns(fast, view, preds):
    """The report's request-level columns equal those read record by record from generic dicts."""
    from jevkedro.nodes.fast_validate import RequestColumns

    ref = RequestColumns.of(preds, [row.request_id for row in view])
    assert fast.requests.columns() == ref.columns()
    assert fast.requests.unattempted == ref.unattempted


@st.composite
def views(draw):
    view = draw(rows())
    return view, draw(records(view))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(views())
def test_fast_path_equals_reference_on_python_records(case):
    view, preds = case
    fast = build_question_table(view, preds)
    assert_same(fast, reference_question_table(view, preds))
    assert_same_request_columns(fast, view, preds)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(views())
def test_fast_path_equals_reference_on_a_predictions_log(case):
    """The same, reading the records from a log on disk (typed decoding of the bytes; NaN literals
    and integers beyond the double range as the log's exact reader reads them)."""
    view, preds = case
    with tempfile.TemporaryDirectory() as tmp:
        plog = PredictionLog(Path(tmp) / "predictions.jsonl")
        for rec in preds.values():
            if "status" in rec:
                plog.append(rec)
        plog.close()
        plog = PredictionLog(plog.path)
        reread = {rid: plog.records[rid] for rid in plog.records}
        fast = build_question_table(view, plog.records)
        assert_same(fast, reference_question_table(view, reread))
        assert_same_request_columns(fast, view, reread)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(views())
def test_plot_inputs_by_columns_equal_those_read_from_the_written_records(case):
    """The plot node gets the score node's records in memory and reads them by columns; a run that
    starts at the plot node reads questions.jsonl one object per question: the same arrays."""
    from jevkedro.nodes.plots import confidence_and_correct

    view, preds = case
    recs = question_records(build_question_table(view, preds))
    by_columns = confidence_and_correct(recs)
    from_file = confidence_and_correct([json.loads(line) for line in recs.jsonl().splitlines()])
    for got, want in zip(by_columns, from_file):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


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


def test_canonical_answers_never_reach_the_per_answer_rules(monkeypatch):
    """Valid answers in canonical shape (and sums outside the band) are judged on arrays only."""
    calls = []
    real = V.validate_answer
    monkeypatch.setattr("jevkedro.nodes.fast_validate.validate_answer", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr("jevkedro.nodes.fast_validate.judge_request", lambda *a, **k: pytest.fail("reference used"))
    view, preds = [], {}
    for i in range(50):
        qs = {"n": {"type": "noul"}, "c": {"type": "choice", "criteria": {"x": 1, "y": 2, "z": 3}},
              "s": {"type": "score", "criteria": ["lo", "hi"]}}
        view.append(SnapshotRow(f"r{i}", {"state": "s", "questions": qs},
                                {"n": ["true", "false"], "c": ["x", "y", "z"], "s": ["0", "1"]},
                                {q: Target(label=0) for q in qs}, {}, {}))
        preds[f"r{i}"] = {"status": "ok", "response": {"answers": {
            "n": {"type": "noul", "noul": 0.25},
            "c": {"type": "choice", "choice": "y", "probabilities": {"z": 0.2, "x": 0.3, "y": 0.5}},  # another order
            "s": {"probabilities": {"0": 0.5, "1": 0.55 if i % 2 else 0.5}}}}}  # half of them sum to 1.05
    table = build_question_table(view, preds)
    assert calls == []
    assert (table.status == "invalid").sum() == 25 and "sum to 1.05" in table.reason[5]
    assert_same(table, reference_question_table(view, preds))


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


def test_question_records_with_a_lone_surrogate_are_written_as_utf8_that_reads_back_the_same():
    """An error text holding a lone surrogate (a string no UTF-8 can hold) becomes the questions'
    reason: questions.jsonl is still valid UTF-8 and gives the very same string back."""
    row = SnapshotRow("r1", {"state": "s", "questions": {"q": {"type": "noul"}}}, {"q": ["true", "false"]},
                      {"q": Target(label=0)}, {}, {})
    table = build_question_table([row], {"r1": {"request_id": "r1", "status": "error", "error": "HTTP 500: \ud800 é"}})
    (line,) = question_records(table).jsonl().decode("utf-8").splitlines()
    assert json.loads(line)["reason"] == "HTTP 500: \ud800 é"
