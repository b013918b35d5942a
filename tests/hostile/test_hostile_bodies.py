"""Hostile: the answer scored is the body received, and what is kept of a body is bounded.

Issue 23 class 2 (a record's parsed copy edited while its stored body stays) and class 15 (replies
of megabytes that grew the log past what could be read back).
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hostile_support import ask, judged, lines, settings_for

from jevkedro.nodes import predictions_log
from jevkedro.nodes.predictions_log import PredictionLog, PredictionLogError
from jevkedro.testing import LoopbackServer, system_one_answers


def gold_of(snapshot) -> dict[str, dict]:
    """Every request's answers with all probability on its labelled candidate."""
    out = {}
    for row in snapshot.rows:
        answers = {}
        for qid, t in row.targets.items():
            cands = row.candidates[qid]
            answers[qid] = {"probabilities": {c: float(i == t.label) for i, c in enumerate(cands)}}
        out[row.request_id] = answers
    return out


def rewrite(path, change) -> None:
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in recs), encoding="utf-8")


def with_answers(rec, answers):
    return {**rec, "response": {**rec["response"], "answers": answers}}


EDITS = {
    "response": lambda rec, gold: with_answers(rec, gold[rec["request_id"]]),
    "usage": lambda rec, gold: {**rec, "usage": {"input_tokens": 0, "output_tokens": 0}},
    "model": lambda rec, gold: {**rec, "model": "a-better-model"},
    "body dropped": lambda rec, gold: {k: v for k, v in with_answers(rec, gold[rec["request_id"]]).items()
                                       if k != "raw_response"},
    "body and reader dropped": lambda rec, gold: {k: v for k, v in with_answers(rec, gold[rec["request_id"]]).items()
                                                  if k not in ("raw_response", "body_reader")},
    "reader unknown": lambda rec, gold: {**with_answers(rec, gold[rec["request_id"]]), "body_reader": "minilm"},
    "status flipped": lambda rec, gold: {**rec, "status": "ok", "response": {"answers": gold[rec["request_id"]]}},
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_record_whose_parsed_copy_is_not_its_body_is_refused_naming_file_and_line(tmp_path, edit):
    """Class 23.2: any field a scorer trusts that disagrees with the body received is refused, on
    every read of the log (a rerun, the score node, compare), naming file and line."""
    faults = {1: "500"} if edit == "status flipped" else None
    with LoopbackServer() as srv:
        settings = settings_for(srv, max_consecutive_failures=10, retry={"max_attempts": 1})
        _, plog, snapshot = ask(tmp_path, settings, faults=faults, n=3)
        gold = gold_of(snapshot)
        target = (lambda r: r["status"] == "error") if edit == "status flipped" else (lambda r: True)
        rewrite(plog.path, lambda r: EDITS[edit](r, gold) if target(r) else r)
        with pytest.raises(PredictionLogError) as err:  # every read: a rerun, the score node, compare
            PredictionLog(plog.path)
        line = "2" if edit == "status flipped" else "1"
        assert f"{plog.path}:{line}:" in str(err.value)
        assert "what is scored must be the answer received" in str(err.value)


def test_a_repeated_key_note_removed_is_refused(tmp_path):
    """The note that a key was repeated (which makes the answer invalid) is the body's to say."""
    def responder(body, auth, fault):
        answers = json.dumps(system_one_answers(body["questions"]))
        text = '{"model": "jev-1.13.0", "answers": ' + answers[:-1] + ', "queue": {"probabilities": {}}}}'
        return 200, [], text.encode()

    with LoopbackServer(responder=responder) as srv:
        _, plog, snapshot = ask(tmp_path, settings_for(srv), n=1)
    table = judged(snapshot, plog)
    assert "repeats the key" in dict(zip(table.question_id, table.reason))["queue"]
    rewrite(plog.path, lambda r: {**r, "meta": {}})
    with pytest.raises(PredictionLogError, match=r"predictions.jsonl:1: .*meta.duplicate_keys"):
        PredictionLog(plog.path)


def test_openai_compat_answers_are_derived_from_the_chat_body(tmp_path):
    with LoopbackServer() as srv:
        settings = {"adapter": "openai_compat", "endpoint": srv.endpoint, "model": "gpt-x", "api_key_env": "",
                    "progress": 0}
        _, plog, snapshot = ask(tmp_path, settings, n=2)
    assert PredictionLog(plog.path).records  # the log as written reads back
    gold = gold_of(snapshot)
    rewrite(plog.path, lambda r: with_answers(r, gold[r["request_id"]]))
    with pytest.raises(PredictionLogError, match="predictions.jsonl:1: .*response is not what its stored body"):
        PredictionLog(plog.path)


def big_reply(pad: int, repeat_pad: bool = False, repeat_answer: bool = False):
    """A responder answering every request properly, plus ``pad`` extra top-level keys."""
    def responder(body, auth, fault):
        answers = system_one_answers(body["questions"])
        head = json.dumps({"model": "jev-1.13.0", "answers": answers, "usage": {"input_tokens": 7, "output_tokens": 0}})
        if repeat_answer:  # the choice question's probabilities written twice
            probs = json.dumps(answers["queue"]["probabilities"])
            head = head.replace(f'"probabilities": {probs}', f'"probabilities": {probs}, "probabilities": {probs}', 1)
        extra = "".join(f', "pad{i:06d}": {i}' for i in range(pad))
        if repeat_pad:
            extra += ', "pad000000": 0'
        return 200, [], (head[:-1] + extra + "}").encode()
    return responder


@pytest.mark.parametrize("variant", ["plain", "repeated pad key", "repeated answer key"])
def test_replies_of_megabytes_keep_what_the_protocol_reads_and_say_so(tmp_path, variant):
    """Class 23.15: 4 MB replies (200,000 extra keys) keep a bounded record that says it was
    bounded, with the full body's size and digest, and score exactly as the full body does."""
    n, pad = 3, 200_000
    kw = {"repeat_pad": variant == "repeated pad key", "repeat_answer": variant == "repeated answer key"}
    with LoopbackServer(responder=big_reply(pad, **kw)) as srv:
        summary, plog, snapshot = ask(tmp_path, settings_for(srv), n=n)
        sent = big_reply(pad, **kw)({"questions": snapshot.rows[0].request["questions"]}, None, "")[2]
    assert summary["statuses"] == {"ok": n}
    assert len(sent) > 4_000_000
    assert plog.path.stat().st_size < n * 64_000  # a few KB a record, not megabytes
    for rec in lines(plog):
        assert rec["raw_truncated"] is True and rec["raw_bytes"] == len(sent)
        assert rec["raw_sha256"] == hashlib.sha256(sent).hexdigest()
        assert rec["raw_excerpt"] == sent.decode()[:len(rec["raw_excerpt"])]
        assert rec["usage"] == {"input_tokens": 7, "output_tokens": 0}
    # the same replies without the padding: the same verdicts
    with LoopbackServer(responder=big_reply(2, **kw)) as srv:
        _, small, _ = ask(tmp_path, settings_for(srv), n=n, name="small")
    big_t, small_t = judged(snapshot, plog), judged(snapshot, small)
    assert list(big_t.status) == list(small_t.status)
    if variant == "plain":
        assert set(big_t.status) == {"ok"}
    elif variant == "repeated pad key":
        assert set(big_t.status) == {"invalid"}
    else:
        by_q = dict(zip(big_t.question_id, big_t.status))
        assert by_q["queue"] == "invalid" and by_q["is_billing"] == "ok"
    gold = gold_of(snapshot)  # the bounded body binds the parsed copy as a whole one does
    rewrite(plog.path, lambda r: with_answers(r, gold[r["request_id"]]))
    with pytest.raises(PredictionLogError, match="predictions.jsonl:1: "):
        PredictionLog(plog.path)


def test_a_log_of_any_size_reads_whole(tmp_path, monkeypatch):
    """Class 23.15: a log is read in as many reads as it takes (each read is capped, as Linux caps
    one read at 2,147,479,552 bytes): with the cap made tiny, every record still reads back."""
    with LoopbackServer() as srv:
        _, plog, snapshot = ask(tmp_path, settings_for(srv), n=5)
    whole = PredictionLog(plog.path).records
    assert plog.path.stat().st_size > 20 * 97
    monkeypatch.setattr(predictions_log, "READ_LIMIT", 97)  # no read returns more than 97 bytes
    again = PredictionLog(plog.path).records
    assert dict(again) == dict(whole) and len(again) == 5
    assert bytes(predictions_log.read_file(plog.path)) == plog.path.read_bytes()
