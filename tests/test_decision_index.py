"""Decision Index 0.3: mapping, read-time rules, pins, unscored questions, official report, kedro run."""

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from jevkedro.config import parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, commit_dataset, load_snapshot, render_tsv
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import decision_index as di
from jevkedro.pipelines.decision_index.edition import edition_03
from jevkedro.pipelines.decision_index.official import official_report
from jevkedro.protocol import FORBIDDEN_REQUEST_KEYS
from support import ROOT

SAMPLE = ROOT / "data" / "01_raw" / "decision_index" / "sample"
VIEW = "decision_index"


def record(cid=57, run_id="candidates-v3:x1", track="MMLU-Pro", group="g1", **over):
    rec = {
        "id": "q17", "family": "mmlu_pro", "split": "test", "state": "A train leaves at 3 pm ...",
        "questions": {"q1": {"type": "choice", "instructions": "Which option is the correct answer?",
                             "criteria": {"C": "60 km", "A": "40 km", "B": "55 km"}}},
        "expected": {"q1": "B"}, "metadata": {"subject": "physics"},
        "scoring": {"candidate_decisions": {"primary_field": "q1", "unscored_fields": []}},
        "_evaluation": {"run_id": run_id, "catalog_id": cid, "dataset": "MMLU-Pro", "group_id": group,
                        "track": track, "payload_sha256": "ab" * 32},
    }
    rec.update(over)
    return rec


# ---------------------------------------------------------------------------------------------
# mapping of one record


def test_map_row_keeps_options_order_and_hides_everything_else():
    row = di.map_row("f:1", record())
    assert row.request_id == "candidates-v3:x1"
    assert row.request == {"state": "A train leaves at 3 pm ...",
                           "questions": {"q1": {"type": "choice", "instructions": "Which option is the correct answer?",
                                                "criteria": {"C": "60 km", "A": "40 km", "B": "55 km"}}}}
    assert row.candidates == {"q1": ["C", "A", "B"]}  # source order, not sorted
    assert row.targets["q1"].label == 2 and not row.targets["q1"].unscored
    assert row.slices["catalog_id"] == 57 and row.slices["area"] == "knowledge" and row.slices["in_index"]
    assert row.source["metadata"] == {"subject": "physics"} and row.source["_evaluation"]["group_id"] == "g1"
    assert row.source["line"] == "f:1" and "group_id" not in row.slices
    text = json.dumps(row.request)
    assert "candidates-v3" not in text and "physics" not in text and "expected" not in text


def test_structured_state_and_object_instructions_untouched():
    rec = record(state={"tools": [{"name": "t"}], "question": "?"})
    rec["questions"]["q1"]["instructions"] = {"task": "pick", "format": "letter"}
    row = di.map_row("f:1", rec)
    assert row.request["state"] == {"tools": [{"name": "t"}], "question": "?"}
    assert row.request["questions"]["q1"]["instructions"] == {"task": "pick", "format": "letter"}


def test_unscored_questions_stay_in_the_request():
    rec = record(cid=56, run_id="calibration-v1:p1", track="PhishNChips")
    rec["questions"] = {"verdict": {"type": "noul", "instructions": "Phishing?"},
                        "sig_a": {"type": "noul", "instructions": "Urgent tone?"},
                        "sig_b": {"type": "noul", "instructions": "Spoofed sender?"}}
    rec["expected"] = {"verdict": False, "sig_a": None, "sig_b": True}
    rec["scoring"] = {"calibration_decisions": {"primary_field": "verdict", "unscored_fields": ["sig_a", "sig_b"]}}
    row = di.map_row("f:1", rec)
    assert list(row.request["questions"]) == ["verdict", "sig_a", "sig_b"]
    assert row.candidates["verdict"] == ["true", "false"] and row.targets["verdict"].label == 1
    assert row.targets["sig_a"].unscored and row.targets["sig_a"].to_json() == {"unscored": True}
    assert row.targets["sig_b"].unscored  # gold present but listed unscored: only the verdict is scored
    rec["expected"] = {"verdict": True}  # a question without an expected key is unscored too
    assert di.map_row("f:1", rec).targets["sig_a"].unscored


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("_evaluation"), r"f:7: missing field\(s\) \['_evaluation'\]"),
    (lambda r: r["_evaluation"].pop("run_id"), "f:7: _evaluation must hold"),
    (lambda r: r.update(expected={"q1": "Z"}), "f:7: question 'q1': gold 'Z' is not one of the options"),
    (lambda r: r.update(expected={"q9": "A"}), "f:7: expected names question"),
    (lambda r: r["questions"]["q1"].update(criteria={"A": "x"}), "f:7: question 'q1': 1 options"),
    (lambda r: r["questions"]["q1"].update(type="score", criteria=["low", "high"]), "f:7: question 'q1': type 'score' is not used"),
])
def test_bad_records_fail_naming_file_and_line(change, message):
    rec = record()
    change(rec)
    with pytest.raises(SourceFormatError, match=message):
        di.map_row("f:7", rec)


# ---------------------------------------------------------------------------------------------
# read-time rules


def test_read_rules_in_order_on_hand_written_rows():
    sel = [("s:1", record(cid=48, run_id="fb1", track="ForecastBench")),
           ("s:2", record(cid=30, run_id="old-g1", track="GSM8K-4", group="G:1")),
           ("s:3", record(cid=38, run_id="acos-keep", track="ACOS")),
           ("s:4", record(cid=38, run_id="acos-cut", track="ACOS")),
           ("s:5", record(cid=2, run_id="tr-keep", track="ToolRet", group="T:1")),
           ("s:6", record(cid=2, run_id="tr-cut", track="ToolRet")),
           ("s:7", record(cid=24, run_id="mmlu-1", track="MMLU", group="MMLU:test:389")),
           ("s:8", record(cid=24, run_id="mmlu-2", track="MMLU", group="MMLU:test:390"))]
    gsm = [("g:1", record(cid=30, run_id="v0.3-gsm8k:old-g1", track="GSM8K-4", group="G:1"))]
    add = [("a:1", record())]
    subsets = {38: {"acos-keep"}, 2: {"tr-keep"}, 36: set(), 9: set()}
    kept, steps = di.apply_read_rules(sel, gsm, add, subsets, {"24:MMLU:MMLU:test:389": {"q1": "duplicate_options"}})
    assert [w for w, _ in kept] == ["g:1", "s:3", "s:5", "s:8", "a:1"]  # GSM8K replaced in place
    assert steps["selected_rows"] == 8 and steps["after_retired"] == 7 and steps["after_acos"] == 6
    assert steps["after_subsets"] == 5 and steps["gsm8k_skipped"] == 1 and steps["gsm8k_rows"] == 1
    assert steps["excluded_rows"] == 1 and steps["after_exclusions"] == 4 and steps["requests"] == 5
    assert steps["exclusion_ids_unmatched"] == []


def test_counts_check_fails_naming_the_step():
    steps = {"selected_rows": 124_970, "requests": 140_178, "exclusion_ids_unmatched": ["9:x:y"]}
    with pytest.raises(SnapshotError, match=r"selected_rows: found 124970, pinned 124971; 1 excluded id\(s\) match no"):
        di.check_steps(steps, {"selected_rows": 124_971, "requests": 140_178}, Path("suite"))


def test_official_pins_are_the_edition_counts():
    m = json.loads((ROOT / "src/jevkedro/pipelines/decision_index/manifest.json").read_text())
    c = m["read_counts"]["official"]
    assert (c["selected_rows"], c["after_retired"], c["after_acos"], c["after_subsets"], c["after_exclusions"],
            c["added_rows"], c["requests"], c["datasets"]) == (124_971, 114_832, 110_918, 110_201, 109_759, 30_419,
                                                               140_178, 43)
    assert c["after_exclusions"] + c["added_rows"] == c["requests"] and c["excluded_rows"] == 442
    pins = {p["file"]: p for p in m["sources"]["official"]}
    assert pins["selected-rows.jsonl.gz"]["uncompressed_sha256"].startswith("b2b56d6f")
    assert pins["excluded-questions.json"]["sha256"].startswith("331df32d")


def test_exclusion_file_shapes(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"id": "24:MMLU:a", "reasons": {"q1": "duplicate_options"}}, "2:ToolRet:b"]))
    assert di.read_exclusions(p) == {"24:MMLU:a": {"q1": "duplicate_options"}, "2:ToolRet:b": None}
    p.write_text(json.dumps({"24:MMLU:a": {"q1": "gold_duplicated"}}))
    assert di.read_exclusions(p) == {"24:MMLU:a": {"q1": "gold_duplicated"}}
    p.write_text(json.dumps([{"name": 1}]))
    with pytest.raises(SourceFormatError, match="entry 0 has no string 'id'"):
        di.read_exclusions(p)


# ---------------------------------------------------------------------------------------------
# the shipped sample


@pytest.fixture(scope="module")
def sample():
    return prepare_view("decision_index", SAMPLE, data="sample")


def test_sample_covers_43_datasets_and_every_rule(sample):
    steps = sample.notes["read_steps"]
    assert len(sample.rows) == 90 and steps["datasets"] == 43
    assert steps["subset_drops"] == {"38": 2, "2": 1, "36": 1, "9": 1} and steps["excluded_rows"] == 2
    cids = {r.slices["catalog_id"] for r in sample.rows}
    assert 48 not in cids and {6, 10, 24, 26, 27, 34} <= cids
    gsm = [r.request_id for r in sample.rows if r.slices["catalog_id"] == 30]
    assert gsm and all(x.startswith("v0.3-gsm8k:") for x in gsm)
    assert sample.notes["synthetic"] is True


def test_no_request_carries_gold_ids_or_metadata(sample):
    for row in sample.rows:
        assert set(row.request) == {"state", "questions"}
        text = json.dumps(row.request)
        assert row.request_id not in text and "expected" not in text and "qrels" not in text
        for q in row.request["questions"].values():
            assert set(q) <= {"type", "instructions", "criteria"} and not FORBIDDEN_REQUEST_KEYS & set(q)


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access (and every read-time rule) is read_release's: build maps the same pinned
    rows once the folder is gone, and counts the datasets on the mapped rows."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample")
    release = di.read_release(parse_prepare_options(VIEW, {"source": str(source), "data": "sample"}))
    assert len(release.content) == 90 and release.notes["read_steps"]["requests"] == 90
    assert "datasets" not in release.notes["read_steps"]
    shutil.rmtree(source)
    prepared = di.build(release, VIEW)
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest(VIEW)["views"][VIEW][
        "snapshot_sha256"]["sample"]
    assert prepared.notes["read_steps"]["datasets"] == 43 and prepared.sources == list(release.files)


def test_step_counts_are_checked_when_read_and_the_datasets_when_mapped(monkeypatch):
    pins = family_manifest(VIEW)["read_counts"]
    options = parse_prepare_options(VIEW, {"source": str(SAMPLE), "data": "sample"})
    monkeypatch.setitem(pins, "sample", {**pins["sample"], "after_retired": 1})
    with pytest.raises(SnapshotError, match=r"other counts than the edition pins: after_retired: found 83, pinned 1$"):
        di.read_release(options)
    monkeypatch.setitem(pins, "sample", {**pins["sample"], "after_retired": 83, "datasets": 42})
    release = di.read_release(options)
    with pytest.raises(SnapshotError, match=r"other counts than the edition pins: datasets: found 43, pinned 42$"):
        di.build(release, VIEW)


def test_tampered_suite_file_fails_with_both_hashes(tmp_path):
    bad = tmp_path / "sample"
    shutil.copytree(SAMPLE, bad)
    lines = gzip.open(bad / "added-rows.jsonl.gz", "rb").read().splitlines(keepends=True)
    with gzip.open(bad / "added-rows.jsonl.gz", "wb") as fh:
        fh.writelines(lines[:-1])
    with pytest.raises(SnapshotError, match=r"added-rows.jsonl.gz: uncompressed sha256 \w+ does not match the pinned"):
        prepare_view("decision_index", bad, data="sample")


def test_our_sample_is_never_official_and_a_missing_file_says_how_to_get_it(tmp_path):
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("decision_index", SAMPLE, data="official")
    empty = tmp_path / "suite"
    empty.mkdir()
    with pytest.raises(SnapshotError, match="suite file not found: .*selected-rows.jsonl.gz; rebuild the suite"):
        prepare_view("decision_index", empty, data="official")


def test_bad_line_in_gzip_names_file_and_line(tmp_path):
    p = tmp_path / "rows.jsonl.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(b'{"a": 1}\n{broken\n')
    with pytest.raises(SourceFormatError, match=r"rows.jsonl.gz:2: not valid JSON"):
        di.read_jsonl_gz(p)


# ---------------------------------------------------------------------------------------------
# the official report on the sample snapshot


@pytest.fixture(scope="module")
def snapshot(sample, tmp_path_factory):
    root = tmp_path_factory.mktemp("snap")
    commit_dataset(sample, root)
    return load_snapshot(root, VIEW)


def oracle(row, qid, skip=False):
    """All probability on the gold option (retrieval: on 'yes' exactly for the judged-relevant fields)."""
    t = row.targets[qid]
    cands = row.candidates[qid]
    if skip:
        return None
    if t.unscored:
        best = cands.index("no") if "no" in cands else 1
    else:
        best = t.label
    q = row.request["questions"][qid]
    if q["type"] == "noul":
        return {"type": "noul", "noul": 1.0 if cands[best] == "true" else 0.0}
    return {"type": "choice", "probabilities": {c: float(i == best) for i, c in enumerate(cands)}}


def run_official(snapshot, drop_requests=(), drop_questions=()):
    preds = {}
    for row in snapshot.rows:
        if row.request_id in drop_requests:
            continue
        answers = {q: oracle(row, q) for q in row.request["questions"] if (row.request_id, q) not in drop_questions}
        preds[row.request_id] = {"status": "ok", "response": {"answers": answers}}
    table = build_question_table(snapshot.rows, preds)
    return official_report(snapshot, table)


def test_oracle_answers_give_a_perfect_index(snapshot):
    off = run_official(snapshot)
    assert off["balanced_skill"] == pytest.approx(100.0) and off["balanced_raw"] == pytest.approx(100.0)
    assert off["breadth_skill"] == pytest.approx(100.0) and off["complete"]
    assert off["main_metric"] == {"name": "balanced_skill", "value": off["balanced_skill"]}
    assert len(off["benchmarks"]) == 37 and set(off["shown_not_counted"]) == {"6", "10", "24", "26", "27", "34"}
    assert off["requests"]["line"] == "Requests 90 of 90 scoreable"
    assert off["synthetic"] and off["data"] == "sample"


def test_coverage_first_then_chance(snapshot):
    mmlu_pro = [r.request_id for r in snapshot.rows if r.slices["catalog_id"] == 57]
    off = run_official(snapshot, drop_requests={mmlu_pro[0]})
    b = off["benchmarks"]["57"]
    assert (b["requests"], b["answered"], b["native"], b["raw"]) == (2, 1, 1.0, 0.5)
    s = (0.5 - 0.1109) / (1 - 0.1109)
    assert b["skill"] == pytest.approx(s)
    assert off["balanced_skill"] == pytest.approx(100 * (1 - 0.258494 * 1.2 * (1 - s) / 12.0))
    assert off["balanced_raw"] == pytest.approx(100 * (1 - 0.258494 * 1.2 * 0.5 / 12.0))


def test_shown_only_benchmarks_never_move_the_index(snapshot):
    mmlu = {r.request_id for r in snapshot.rows if r.slices["catalog_id"] == 24}
    off = run_official(snapshot, drop_requests=mmlu)
    assert off["shown_not_counted"]["24"]["raw"] == 0.0 and "skill" not in off["shown_not_counted"]["24"]
    assert off["balanced_skill"] == pytest.approx(100.0)


def test_linked_case_counts_only_when_every_request_answered(snapshot):
    gsm = [r for r in snapshot.rows if r.slices["catalog_id"] == 30]
    assert len({r.source["_evaluation"]["group_id"] for r in gsm}) == 1 and {r.slices["track"] for r in gsm} == {"GSM8K-4", "GSM8K-10"}
    off = run_official(snapshot, drop_requests={gsm[0].request_id})
    b = off["benchmarks"]["30"]
    assert b["answered"] == 0 and b["raw"] == 0.0 and set(b["tracks"]) == {"GSM8K-4", "GSM8K-10"}


def test_failing_only_on_unscored_questions_keeps_the_request_answered(snapshot):
    phish = next(r for r in snapshot.rows if r.slices["catalog_id"] == 56)
    drop = {(phish.request_id, q) for q in phish.request["questions"] if q.startswith("sig_")}
    off = run_official(snapshot, drop_questions=drop)
    assert off["benchmarks"]["56"]["answered"] == 2 and off["benchmarks"]["56"]["native"] == 1.0
    off = run_official(snapshot, drop_questions={(phish.request_id, "verdict")})
    assert off["benchmarks"]["56"]["answered"] == 1 and off["benchmarks"]["56"]["raw"] == 0.5


def test_every_counted_benchmark_has_a_native_metric_and_chance(snapshot):
    off = run_official(snapshot)
    ed = edition_03()
    for cid, b in off["benchmarks"].items():
        assert b["chance"] == ed.chance[int(cid)] and b["area"] == ed.area_of[int(cid)] and "error" not in b
    assert off["benchmarks"]["2"]["metric"] == "ndcg@10" and off["benchmarks"]["38"]["metric"] == "review_f1"


# ---------------------------------------------------------------------------------------------
# kedro run, out of the box


@pytest.mark.e2e
def test_kedro_run_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, reports

    project = make_project(tmp_path, ["decision_index"])
    assert (project / "data/01_raw/decision_index/sample" / DATA_KIND_MARKER).is_file()
    kedro_run(project, VIEW)
    report, official = reports(project, "sparrow-nano-general-v1.1", VIEW)
    assert report["data"] == "sample" and official["data"] == "sample" and official["synthetic"]
    assert official["main_metric"]["name"] == "balanced_skill" and 0 <= official["balanced_skill"] <= 100
    assert official["requests"]["total"] == 90
    snap = load_snapshot(project / "data" / "02_snapshots", VIEW)
    answers = tmp_path / "oracle.jsonl"
    with open(answers, "w") as fh:
        for row in snap.rows:
            fh.write(json.dumps({"request_id": row.request_id,
                                 "response": {"answers": {q: oracle(row, q) for q in row.request["questions"]}}}) + "\n")
    kedro_run(project, VIEW, f"model.adapter=replay,model.path={answers},model.name=oracle")
    _, replayed = reports(project, "oracle", VIEW)
    assert replayed["balanced_skill"] == pytest.approx(100.0)


@pytest.mark.slow
def test_full_scale_synthetic_suite_reproduces_the_edition_counts(tmp_path):
    from jevkedro.pipelines.decision_index.synthetic import write_suite

    suite = write_suite(tmp_path / "suite", "synthetic")
    prepared = prepare_view("decision_index", suite, data="synthetic")  # checks every pinned step of read_counts.synthetic
    steps = prepared.notes["read_steps"]
    assert len(prepared.rows) == 140_178 and steps["datasets"] == 43
    assert steps["subset_drops"] == {"38": 3_914, "2": 315, "36": 330, "9": 72}
    assert (steps["after_retired"], steps["after_acos"], steps["after_subsets"], steps["after_exclusions"]) == (
        114_832, 110_918, 110_201, 109_759)


def test_a_question_table_out_of_step_with_the_snapshot_is_refused(snapshot):
    from types import SimpleNamespace

    layout = snapshot.layout
    rid, qid = layout.request_id, layout.question_id
    swapped = list(range(len(rid)))
    swapped[3], swapped[4] = 4, 3
    with pytest.raises(SnapshotError, match=rf"out of step with the snapshot at {re.escape(rid[3] + '/' + qid[3])}$"):
        official_report(snapshot, SimpleNamespace(request_id=rid[swapped], question_id=qid[swapped]))
    with pytest.raises(SnapshotError, match=rf"out of step with the snapshot at {re.escape(rid[-1] + '/' + qid[-1])}$"):
        official_report(snapshot, SimpleNamespace(request_id=rid[:-1], question_id=qid[:-1]))
    extra = SimpleNamespace(request_id=list(rid) + ["x"], question_id=list(qid) + ["y"])
    with pytest.raises(SnapshotError, match=rf"question table has {len(rid) + 1} questions, snapshot {len(rid)}"):
        official_report(snapshot, extra)
