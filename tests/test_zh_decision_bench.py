"""zh-decision-bench v0.2: the mapping on the real rows, pins, official report."""

import json
from collections import Counter

import numpy as np
import pytest

from jevkedro.family import prepare_view
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, load_snapshot
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import zh_decision_bench as zh
from jevkedro.protocol import FORBIDDEN_REQUEST_KEYS
from support import ZH_RAW


@pytest.fixture(scope="module")
def prepared():
    return prepare_view("zh_decision_bench", ZH_RAW)


def test_counts_match_the_release(prepared):
    rows = prepared.rows
    assert len(rows) == 378
    types = Counter(q["type"] for r in rows for q in r.request["questions"].values())
    assert types == {"choice": 357, "noul": 76, "score": 34}
    assert Counter(r.slices["file"] for r in rows) == {"voice_routing": 323, "business_scenarios": 55}
    assert Counter(r.slices["difficulty"] for r in rows if r.slices["file"] == "business_scenarios") == {
        "easy": 24, "mid": 20, "hard": 11}
    assert Counter(r.slices["version"] for r in rows if r.slices["file"] == "voice_routing") == {"1": 179, "2": 144}


def test_file_order_kept(prepared):
    assert prepared.rows[0].request_id == "mass_0030"  # not sorted by id
    assert prepared.rows[323].request_id == "syn_cs_0001"


def test_gold_distributions(prepared):
    def gold(question, domain=None):
        c = Counter()
        for r in prepared.rows:
            if question in r.targets and (domain is None or r.slices["domain"] == domain):
                c[r.candidates[question][r.targets[question].label]] += 1
        return c

    assert gold("route", "voice_assistant_routing") == {"日历安排": 60, "闹钟计时": 60, "天气查询": 60,
                                                         "交通出行": 60, "音乐点播": 54, "音量控制": 29}
    assert gold("route", "ecommerce_cs") == {"退换售后": 13, "物流配送": 10, "支付问题": 8, "账户安全": 3}
    # score labels are level positions: 不紧急 0, 一般 1, 紧急 2
    assert gold("urgency") == {"1": 21, "2": 9, "0": 4}
    assert gold("escalate") == {"false": 29, "true": 26}
    assert gold("scam") == {"true": 11, "false": 10}


def test_first_business_row_mapping(prepared):
    row = prepared.rows[323]
    assert row.candidates == {"route": ["物流配送", "退换售后", "支付问题", "账户安全"],
                              "urgency": ["0", "1", "2"], "escalate": ["true", "false"]}
    # gold: route 物流配送 -> 0, urgency 一般 -> 1, escalate false -> 1
    assert {q: t.label for q, t in row.targets.items()} == {"route": 0, "urgency": 1, "escalate": 1}
    assert row.request["questions"]["urgency"]["criteria"] == ["不紧急", "一般", "紧急"]
    assert list(row.request["questions"]["escalate"]["criteria"]) == ["true", "false"]


def test_no_request_carries_gold_ids_or_metadata(prepared):
    for row in prepared.rows:
        assert set(row.request) == {"state", "questions"}
        text = json.dumps(row.request, ensure_ascii=False)
        assert row.source["id"] not in text
        assert row.source["notes"] == "" or row.source["notes"] not in text
        for q in row.request["questions"].values():
            assert set(q) <= {"type", "instructions", "criteria"}
            assert not FORBIDDEN_REQUEST_KEYS & set(q)


def test_noul_tie_goes_to_true_and_choice_tie_to_first(prepared):
    row = next(r for r in prepared.rows if "scam" in r.targets)
    answers = {"scam": {"type": "noul", "noul": 0.5}, "escalate": {"type": "noul", "noul": 0.5}}
    t = build_question_table([row], {row.request_id: {"status": "ok", "response": {"answers": answers}}})
    assert np.argmax(t.P, axis=1).tolist() == [0, 0]  # index 0 = "true"
    labels = dict(zip(t.question_id, t.label))
    expected = {q: int(row.targets[q].label == 0) for q in ("scam", "escalate")}
    got = {q: int(np.argmax(t.P[i]) == labels[q]) for i, q in enumerate(t.question_id)}
    assert got == expected


def test_prepare_writes_the_pinned_snapshot(tmp_path):
    manifest = zh.prepare(root=tmp_path, source=ZH_RAW)[0]
    pinned = zh.family_manifest("zh_decision_bench")["views"]["zh_decision_bench"]["snapshot_sha256"]["official"]
    assert manifest["snapshot"]["sha256"] == pinned
    assert manifest["counts"] == {"inputs": 378, "questions": 467, "by_type": {"choice": 357, "noul": 76, "score": 34}}
    assert [s["sha256"][:8] for s in manifest["sources"]] == ["cb5f7cc7", "d25d01b2"]
    snap = load_snapshot(tmp_path, "zh_decision_bench")
    assert len(snap.rows) == 378 and snap.sha256 == pinned
    # TSV cells hold no raw tabs/newlines: every line has exactly 6 columns
    lines = (tmp_path / "zh_decision_bench.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 379 and all(line.count("\t") == 5 for line in lines)


def _copy_release(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ZH_RAW.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    return src


def test_changed_source_is_refused_naming_file_and_hashes(tmp_path):
    src = _copy_release(tmp_path)
    path = src / "business_scenarios.jsonl"
    path.write_bytes(path.read_bytes().replace("物流".encode(), "物资".encode(), 1))
    with pytest.raises(SnapshotError) as err:
        zh.prepare(root=tmp_path / "snap", source=src)
    msg = str(err.value)
    assert "business_scenarios.jsonl" in msg and "d25d01b2ca40" in msg
    assert not (tmp_path / "snap" / "zh_decision_bench.tsv").exists()


def test_count_mismatch_names_both_values(tmp_path, monkeypatch):
    # unpinned (sample) data with the official counts expected: drop one row -> counts differ
    src = _copy_release(tmp_path)
    path = src / "voice_routing.jsonl"
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(True)[1:]), encoding="utf-8")
    monkeypatch.setitem(zh.family_manifest("zh_decision_bench")["sources"], "official",
                        [{"file": "voice_routing.jsonl"}, {"file": "business_scenarios.jsonl"}])
    with pytest.raises(SnapshotError, match=r"inputs: found 377, expected 378"):
        zh.prepare(root=tmp_path / "snap", source=src)


def test_malformed_line_names_file_and_line(tmp_path):
    bad = tmp_path / "voice_routing.jsonl"
    bad.write_text('{"id": "x"}\n{not json\n', encoding="utf-8")
    with pytest.raises(SourceFormatError, match=r"voice_routing.jsonl:1: missing field"):
        list(zh.map_row(bad, ln, obj) for ln, obj in [(1, {"id": "x"})])
    from jevkedro.nodes.sources import read_jsonl
    with pytest.raises(SourceFormatError, match=r"voice_routing.jsonl:2: not valid JSON"):
        list(read_jsonl(bad))


def test_gold_outside_options_is_a_clear_error(tmp_path):
    line = json.loads((ZH_RAW / "business_scenarios.jsonl").read_text(encoding="utf-8").splitlines()[0])
    line["gold"]["urgency"] = "超级紧急"
    with pytest.raises(SourceFormatError, match=r"x.jsonl:7: question 'urgency': gold level"):
        zh.map_row(tmp_path / "x.jsonl", 7, line)


def test_official_report_slices_and_right_closed_ece(prepared):
    rows = prepared.rows
    # an answer that puts 0.6 on the gold candidate for every question
    preds = {}
    for r in rows:
        answers = {}
        for q, question in r.request["questions"].items():
            cands, gold = r.candidates[q], r.targets[q].label
            rest = 0.4 / (len(cands) - 1)
            probs = {c: (0.6 if i == gold else rest) for i, c in enumerate(cands)}
            answers[q] = ({"type": "noul", "noul": probs["true"]} if question["type"] == "noul"
                          else {"type": question["type"], "probabilities": probs})
        preds[r.request_id] = {"status": "ok", "response": {"answers": answers}}
    table = build_question_table(rows, preds)
    off = zh.evaluate(None, table, preds)
    assert off["scorer"] == "jevalkit-decision-protocol-v1" and off["ece_method"] == "equal_width_right_closed"
    overall = off["groups"]["overall"]
    assert overall["accuracy"] == 1.0 and overall["n"] == 467
    # every confidence is 0.6 and every answer right: ECE = |1 - 0.6| = 0.4 ; NLL = -ln 0.6
    assert overall["reference_ece"] == pytest.approx(0.4)
    assert overall["hard_nll"] == pytest.approx(-np.log(0.6))
    assert overall["soft_kl"] == pytest.approx(-np.log(0.6))  # one-hot targets: KL = NLL
    assert set(off["groups"]["task"]) == {"route", "urgency", "escalate", "scam"}
    assert off["groups"]["task"]["route"]["n"] == 323 + 34
    assert set(off["groups"]["domain"]) == {"voice_assistant_routing", "ecommerce_cs", "content_moderation"}
    assert set(off["groups"]["language"]) == {"zh"}
    assert set(off["groups"]["difficulty"]) == {"easy", "mid", "hard"}
    assert off["groups"]["domain_task"]["content_moderation/escalate"]["n"] == 21
