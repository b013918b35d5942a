"""Corpus, classes 2, 8 and 9 — files a user hands the project: replay files and predictions logs.

Every faulty file is refused before anything is scored with a message naming the file, the line
(and the column where there is one) and what to do; every readable oddity is judged per answer
(``invalid``, the raw line kept) with the view still scored; nothing answered is asked again.
"""

from __future__ import annotations

import pytest

from jevkedro.models import make_adapter
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError
from jevkedro.nodes.snapshot import SourceFormatError
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import synthetic_rows, synthetic_snapshot


@pytest.fixture
def snapshot(tmp_path):
    return synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))


def answers(noul="0.8", queue='{"billing": 0.5, "tech": 0.3, "other": 0.2}'):
    return ('{"is_billing": {"type": "noul", "noul": ' + noul + '}, "queue": {"type": "choice", "probabilities": ' + queue
            + '}, "anger": {"type": "score", "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}}}')


def line(rid="r00000", body=None):
    return '{"request_id": "' + rid + '", "response": {"answers": ' + (body or answers()) + '}}'


def replay(snapshot, tmp_path, text: str | bytes):
    path = tmp_path / "answers.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    summary = run_inference(snapshot, make_adapter({"adapter": "replay", "path": str(path)}), plog)
    plog = PredictionLog(plog.path)
    return summary, plog, build_question_table(snapshot, plog.records)


# -- replay files refused whole, before anything is scored -------------------------------------------

@pytest.mark.parametrize("text, where", [
    (line() + "\n{oops\n", r"answers.jsonl:2: not valid JSON: Expecting property name enclosed in double quotes at column 2"),
    (line() + "\n" + line()[:-5] + "\n", r"answers.jsonl:2: not valid JSON: .* at column"),
    (b"\xff\xfe" + line().encode() + b"\n", r"answers.jsonl:1: not valid JSON: not UTF-8 \(byte 0xff\) at byte 1"),
    ("[1, 2]\n", r"answers.jsonl:1: expected a JSON object, got a JSON list"),
    ('{"request_id": "r00000"}\n', r"answers.jsonl:1: a replay line needs request_id \(a string\) and response"),
    ('{"request_id": 7, "response": {}}\n', r"answers.jsonl:1: a replay line needs request_id \(a string\) and response"),
    ('{"request_id": "r00000", "request_id": "r00001", "response": {}}\n', r"answers.jsonl:1: the key request_id appears twice"),
    (line() + "\n" + line() + "\n", r"answers.jsonl:2: request_id 'r00000' repeats line 1"),
    ("[" * 5000 + "]" * 5000 + "\n", r"answers.jsonl:1: not valid JSON: nested too deeply to read"),
    ('{"request_id": "r00000", "response": NaN, }\n', r"answers.jsonl:1: not valid JSON"),
])
def test_a_faulty_replay_file_is_refused_naming_file_and_line(snapshot, tmp_path, text, where):
    with pytest.raises(SourceFormatError, match=where) as err:
        replay(snapshot, tmp_path, text)
    assert "model.path names this replay file" in str(err.value)
    assert not (tmp_path / "out" / "predictions.jsonl").exists() or not (tmp_path / "out" / "predictions.jsonl").read_text()


def test_a_missing_replay_file_names_the_setting(snapshot, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"replay file not found: .*nothere.jsonl \(model.path\)"):
        run_inference(snapshot, make_adapter({"adapter": "replay", "path": str(tmp_path / "nothere.jsonl")}),
                      PredictionLog(tmp_path / "out" / "predictions.jsonl"))


# -- readable oddities: judged answer by answer, the view scored ----------------------------------

@pytest.mark.parametrize("noul, reason", [
    ("9" * 5000, "got inf"), ("-" + "9" * 400, "got -inf"), ("1e400", "got inf"), ("NaN", "got nan"),
    ("Infinity", "got inf"), ("-Infinity", "got -inf"), ("true", "got True"), ("null", "got None"),
    ('"0.8"', "got '0.8'"), ("1.0000001", "got 1.0000001"), ("[0.8]", "got [0.8]"), ("{}", "got {}"),
])
def test_a_number_no_double_holds_or_not_a_number_is_an_invalid_answer(snapshot, tmp_path, noul, reason):
    summary, plog, table = replay(snapshot, tmp_path, line(body=answers(noul=noul)) + "\n")
    assert summary["statuses"] == {"ok": 1, "unattempted": 2}
    assert table.status.tolist()[:3] == ["invalid", "ok", "ok"] and reason in table.reason[0]
    rec = plog.records["r00000"]
    if len(noul) > 300 or "e400" in noul:  # reading changed the number: the line as written is kept
        assert noul in rec["raw_response"]


@pytest.mark.parametrize("queue, status", [
    ('{"billing": 0.5, "tech": 0.3, "other": 0.2, "billing": 0.9}', "invalid"),  # a repeated candidate
    ('{"billing": 0.5, "tech": 0.5}', "invalid"),  # one left out
    ('{"billing": 0.5, "tech": 0.3, "other": 0.2, "spam": 0.0}', "invalid"),  # one too many
    ('{"billing": 0.505, "tech": 0.3, "other": 0.2}', "ok"),  # within 1 ± 0.01: renormalised
    ('{"billing": 0.6, "tech": 0.3, "other": 0.2}', "invalid"),  # sums to 1.1
    ('{"billing": 1e-320, "tech": 0.5, "other": 0.5}', "ok"),  # subnormal: a number in [0, 1]
    ('{"billing": -0.0, "tech": 0.5, "other": 0.5}', "ok"),
])
def test_choice_probabilities_are_judged_by_the_contract(snapshot, tmp_path, queue, status):
    _, _, table = replay(snapshot, tmp_path, line(body=answers(queue=queue)) + "\n")
    assert table.status.tolist()[:3] == ["ok", status, "ok"]


def test_ids_the_snapshot_lacks_and_missing_ids_are_counted_never_scored_as_answers(snapshot, tmp_path):
    text = line("r00001") + "\n" + line("ghost") + "\n\n\r\n"
    summary, plog, table = replay(snapshot, tmp_path, text)
    assert summary["statuses"] == {"ok": 1, "unattempted": 2}
    assert plog.meta()["replay"]["unknown_request_ids"] == {"count": 1, "first": ["ghost"]}
    assert table.status.tolist() == ["unattempted"] * 3 + ["ok"] * 3 + ["unattempted"] * 3


def test_an_empty_replay_file_scores_every_request_unattempted(snapshot, tmp_path):
    summary, _, table = replay(snapshot, tmp_path, "")
    assert summary["statuses"] == {"unattempted": 3} and set(table.status.tolist()) == {"unattempted"}


# -- predictions logs: every line a record, or refused naming the line --------------------------------

GOOD = '{"request_id": "a", "status": "ok", "response": null}'


@pytest.mark.parametrize("bad, why", [
    ('{"request_id": "b"}', "no status"),
    ('{"request_id": "b", "status": "done"}', "status 'done' is not one of ok, unsupported, error, unattempted"),
    ('{"request_id": "b", "status": ["ok"]}', "is not one of"),
    ('{"status": "ok"}', "no request_id"),
    ('{"request_id": 3, "status": "ok"}', "request_id is int, not a string"),
    ('["b", "ok"]', "a JSON list, not an object"),
    ("not json at all", "not valid JSON"),
    ('{"request_id": "b", "status": "ok", "response": {"x": 1e999999999}}', None),  # readable: inf
])
def test_a_log_line_that_is_not_a_record_is_refused_naming_the_line(tmp_path, bad, why):
    path = tmp_path / "predictions.jsonl"
    path.write_text(GOOD + "\n" + bad + "\n" + GOOD.replace('"a"', '"c"') + "\n")
    if why is None:
        assert set(PredictionLog(path).records) == {"a", "b", "c"}
        return
    with pytest.raises(PredictionLogError) as err:
        PredictionLog(path)
    assert "predictions.jsonl:2: not a prediction record" in str(err.value) and why in str(err.value)
    assert "delete the log to start afresh" in str(err.value)


def test_a_torn_last_line_is_dropped_with_a_warning_not_refused(tmp_path, caplog):
    path = tmp_path / "predictions.jsonl"
    path.write_text(GOOD + "\n" + GOOD[:20])
    assert list(PredictionLog(path).records) == ["a"] and "dropping a torn last line" in caplog.text


@pytest.mark.parametrize("text", ['{"identity": {"adapter": "replay"', "", "[1]", "\xff"])
def test_a_damaged_run_json_names_the_file_and_the_fix(tmp_path, text):
    path = tmp_path / "predictions.jsonl"
    path.write_text(GOOD + "\n")
    (tmp_path / "run.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(PredictionLogError, match=r"run.json: .*delete (both files|it together with predictions.jsonl)"):
        PredictionLog(path).meta()


# -- shard files (model.shard_store): lines end only at \n ---------------------------------------------

UNICODE_BREAKS = "\u2028\u2029\x85\x1c\x1d\x1e\x0b\x0c\r"  # line ends to str.splitlines, characters to JSON


def test_a_shard_record_holding_unicode_line_breaks_reads_back_whole(tmp_path):
    """A model string holding U+2028 (or any break but ``\\n``) is part of its line: the shard's
    records come back as written, not cut in two and refused as damaged."""
    pytest.importorskip("fsspec")
    from jevkedro.nodes.distributed import read_shard, write_shard

    url = f"file://{tmp_path}/store/m/view/digest/shard-000000-abc-tok.jsonl"
    records = [{"request_id": f"r{i}", "status": "ok", "model": f"jev{ch}1.13", "response": {"note": f"a{ch}b"}}
               for i, ch in enumerate(UNICODE_BREAKS)]
    write_shard(url, records)
    assert read_shard(url) == records
