"""Replay files, read strictly: nothing silently wins, nothing unread, every fault located."""

import json
import logging

import pytest

from jevkedro.models import make_adapter
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import SourceFormatError
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import synthetic_rows, synthetic_snapshot


@pytest.fixture
def snapshot(tmp_path):
    return synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))


def answers(noul=0.8, **extra):
    return {"is_billing": {"type": "noul", "noul": noul},
            "queue": {"type": "choice", "probabilities": {"billing": 0.5, "tech": 0.3, "other": 0.2}},
            "anger": {"type": "score", "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}}, **extra}


def line(rid, body):
    return json.dumps({"request_id": rid, "response": body})


def replay(snapshot, tmp_path, text, **settings):
    path = tmp_path / "answers.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    adapter = make_adapter({"adapter": "replay", "path": str(path), **settings})
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, adapter, plog)
    plog = PredictionLog(plog.path)
    return summary, plog, build_question_table(snapshot, plog.records)


def test_a_request_id_on_two_lines_is_refused_naming_both(snapshot, tmp_path):
    text = "\n".join([line("r00000", {"answers": answers()}), line("r00001", {"answers": answers()}),
                      line("r00000", {"answers": answers(0.1)})]) + "\n"
    with pytest.raises(SourceFormatError, match=r"answers.jsonl:3: request_id 'r00000' repeats line 1"):
        replay(snapshot, tmp_path, text)


def test_ids_the_snapshot_does_not_have_are_counted_named_and_warned(snapshot, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    extra = [f"old{i:02d}" for i in range(12)]
    text = "\n".join(line(rid, {"answers": answers()}) for rid in ["r00000", *extra]) + "\n"
    summary, plog, table = replay(snapshot, tmp_path, text)
    assert summary["statuses"] == {"ok": 1, "unattempted": 2}
    notes = plog.meta()["replay"]
    assert notes == {"file": "answers.jsonl", "lines": 13, "requests_answered": 1,
                     "unknown_request_ids": {"count": 12, "first": extra[:10]}}
    assert "12 request ids are not in the snapshot" in caplog.text and "old00" in caplog.text
    caplog.clear()
    report = build_report(snapshot, table, plog.records, {"name": "m"}, plog.meta(), None)
    assert report["replay"]["unknown_request_ids"]["count"] == 12
    assert "were not scored" in caplog.text  # said again when the view is scored


def test_repeated_keys_make_exactly_the_touched_answers_invalid(snapshot, tmp_path):
    body = line("r00000", {"answers": answers()})
    # "noul" twice inside one answer: that question only
    one = body.replace('"noul": 0.8', '"noul": 0.1, "noul": 0.8')
    # "model" twice at the top of the body: every question of the request
    top = line("r00001", {"model": "a", "answers": answers()}).replace('"model": "a"', '"model": "a", "model": "b"')
    # a choice probability twice: that question
    inner = line("r00002", {"answers": answers()}).replace('"tech": 0.3', '"tech": 0.3, "tech": 0.3')
    _, plog, table = replay(snapshot, tmp_path, "\n".join([one, top, inner]) + "\n")
    by_q = {(r, q): (s, why) for r, q, s, why in zip(table.request_id, table.question_id, table.status, table.reason)}
    assert by_q[("r00000", "is_billing")][0] == "invalid"
    assert "repeats the key 'noul' at answers/is_billing" in by_q[("r00000", "is_billing")][1]
    assert by_q[("r00000", "queue")][0] == by_q[("r00000", "anger")][0] == "ok"
    assert all(by_q[("r00001", q)][0] == "invalid" and "'model' at the top level" in by_q[("r00001", q)][1]
               for q in ("is_billing", "queue", "anger"))
    assert by_q[("r00002", "queue")][0] == "invalid" and by_q[("r00002", "anger")][0] == "ok"
    rec = plog.records["r00000"]
    assert rec["meta"]["duplicate_keys"] == [["answers", "is_billing", "noul"]]
    assert rec["raw_response"] == one  # the line as written: the first value is not lost


def test_a_repeated_response_key_touches_every_question_and_a_repeated_request_id_is_refused(snapshot, tmp_path):
    twice = '{"request_id": "r00000", "response": {"answers": {}}, "response": ' + json.dumps({"answers": answers()}) + "}\n"
    _, _, table = replay(snapshot, tmp_path, twice)
    assert table.status.tolist()[:3] == ["invalid"] * 3 and "'response'" in table.reason[0]
    with pytest.raises(SourceFormatError, match=r"answers.jsonl:1: the key request_id appears twice"):
        replay(snapshot, tmp_path, '{"request_id": "r00000", "request_id": "r00001", "response": {}}\n')


def test_a_list_shaped_body_answering_one_id_twice_is_invalid_for_that_question(snapshot, tmp_path):
    entries = [{"id": q, **a} for q, a in answers().items()] + [{"id": "is_billing", "type": "noul", "noul": 0.1}]
    entries[1]["choice"] = "billing"  # the list-shaped flavour's choice entries name their choice
    _, _, table = replay(snapshot, tmp_path, line("r00000", {"answers": entries}) + "\n")
    assert table.status.tolist()[:3] == ["invalid", "ok", "ok"]
    assert "answers this question in 2 entries" in table.reason[0]


@pytest.mark.parametrize("digits", [400, 5000])
def test_an_integer_too_large_for_a_float_is_an_invalid_answer_and_the_view_is_scored(snapshot, tmp_path, digits):
    huge = line("r00000", {"answers": answers()}).replace('"noul": 0.8', '"noul": ' + "7" * digits)
    normal = line("r00001", {"answers": answers()})
    summary, plog, table = replay(snapshot, tmp_path, huge + "\n" + normal + "\n")
    assert summary["statuses"] == {"ok": 2, "unattempted": 1}
    assert table.status.tolist()[:6] == ["invalid", "ok", "ok", "ok", "ok", "ok"]
    assert table.reason[0] == "noul must be a number in [0, 1], got inf"
    assert plog.records["r00000"]["raw_response"] == huge  # the answer as written is kept
    report = build_report(snapshot, table, plog.records, {"name": "m"}, plog.meta(), None)
    assert report["coverage"]["invalid_by_reason"] == {"noul not a number in [0, 1]": 1}


def test_bytes_that_are_not_utf8_name_file_line_and_byte(snapshot, tmp_path):
    text = (line("r00000", {"answers": answers()}) + "\n").encode() + b'{"request_id": "r00001", "response": "\xe9t\xe9"}\n'
    with pytest.raises(SourceFormatError) as err:
        replay(snapshot, tmp_path, text)
    assert "answers.jsonl:2: not valid JSON: not UTF-8 (byte 0xe9) at byte 39" in str(err.value)
    assert "model.path" in str(err.value)


def test_a_malformed_line_names_the_column_of_the_fault(snapshot, tmp_path):
    bad = line("r00001", {"answers": answers()}).replace('"tech": 0.3', '"tech": 0.3,')
    with pytest.raises(SourceFormatError) as err:
        replay(snapshot, tmp_path, line("r00000", {"answers": answers()}) + "\n" + bad + "\n")
    column = bad.index(",,") + 2  # 1-based: the second of the two commas
    assert f"answers.jsonl:2: not valid JSON: Expecting property name enclosed in double quotes at column {column}" in str(err.value)


def test_crlf_line_ends_are_read_and_a_byte_order_mark_is_refused(snapshot, tmp_path):
    text = line("r00000", {"answers": answers()}) + "\r\n\r\n" + line("r00001", {"answers": answers()}) + "\r\n"
    summary, _, table = replay(snapshot, tmp_path, text)
    assert summary["statuses"] == {"ok": 2, "unattempted": 1}
    assert table.status.tolist()[:6] == ["ok"] * 6
    (tmp_path / "bom").mkdir()
    with pytest.raises(SourceFormatError, match=r"answers.jsonl:1: not valid JSON: a byte-order mark \(U\+FEFF\)"):
        replay(snapshot, tmp_path / "bom", "\ufeff" + text)  # one rule for every JSON text (jsonparse)


def _read(tmp_path, lines: list[bytes]):
    """Set up a replay adapter on ``lines`` between fine ones: the refusal's message, or its answers."""
    from jevkedro.models.replay import ReplayAdapter

    fine = [line(f"f{i}", {"answers": {}}).encode() for i in range(3)]
    path = tmp_path / "answers.jsonl"
    path.write_bytes(b"\n".join([fine[0], *lines, *fine[1:]]) + b"\n")
    adapter = ReplayAdapter(path=str(path))
    try:
        adapter.setup()
    except SourceFormatError as exc:
        return str(exc)
    return {rid: adapter.answer(rid, {}) for rid in adapter._loaded() if not rid.startswith("f")}


@pytest.mark.parametrize("text, rid, response", [
    ('{"request_id": "b", "response": {"note": "é 中文 \u2028 \u0085"}}', "b", {"note": "é 中文 \u2028 \u0085"}),
    ('{"\\u0072equest_id": "i", "response": {}}', "i", {}),  # an escaped key, alone
    ('{"request_id": "m", "response": {"noul": NaN, "y": -Infinity, "z": 1e400}}', "m", None),
    ('{"request_id": "n", "response": "\\ud800"}', "n", "\ud800"),  # a lone surrogate: valid JSON
    ('{"request_id": "o", "response": {"a\\u003ab": "x:y", "c": "\\\\u003a"}}', "o", {"a:b": "x:y", "c": "\\u003a"}),
    ('{"request_id": "p", "response": {"request_id": "q"}}', "p", {"request_id": "q"}),
    ('{"request_id": "s", "response": {}} ', "s", {}),
])
def test_odd_but_valid_lines_are_read_as_written(tmp_path, text, rid, response):
    got = _read(tmp_path, [text.encode("utf-8", "surrogatepass")])
    assert list(got) == [rid] and got[rid].status == "ok"
    if response is not None:
        assert got[rid].response == response
    else:
        body = got[rid].response
        assert body["noul"] != body["noul"] and body["y"] == -float("inf") and body["z"] == float("inf")
        assert got[rid].raw is not None  # reading changed a number (1e400): the line is kept


@pytest.mark.parametrize("text, why", [
    ('{"request_id": "f", "request\\u005fid": "g", "response": {}}', "the key request_id appears twice"),
    ('{"request_id": "u", "response": {"a": 1,}}', "not valid JSON: Expecting property name"),
    ('{"request_id": "v", "response": "tab\there"}', "not valid JSON: Invalid control character"),
    ('{"request_id": 7, "response": {}}', "a replay line needs request_id (a string) and response"),
    ('{"request_id": "x"}', "a replay line needs request_id (a string) and response"),
    ('["request_id", "response"]', "expected a JSON object, got a JSON list"),
    ("\ufeff" + line("y", {}), "not valid JSON"),  # a byte-order mark inside the file
    ('{"request_id": "z", "response": ' + "[" * 5000 + "]" * 5000 + "}", "not valid JSON: nested too deeply"),
    (line("f0", {}), "request_id 'f0' repeats line 1"),
])
def test_a_faulty_line_is_refused_naming_its_line(tmp_path, text, why):
    message = _read(tmp_path, [text.encode("utf-8")])
    assert isinstance(message, str) and "answers.jsonl:2: " in message and why in message
