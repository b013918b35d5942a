"""Typed-Decisions: source mapping on hand-written upstream rows, the family rules with
hand-computed values, the Unknowns' decisions, count checks, the full-scale synthetic release and
``kedro run`` on the shipped sample."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import jevkedro.pipelines.typed_decisions as td
from jevkedro.config import parse_prepare_options
from jevkedro.family import family_manifest, prepare_view, write_data_kind_marker
from jevkedro.nodes import metrics as M
from jevkedro.nodes.parquet_source import DATA_KIND_KEY, write_release_parquet
from jevkedro.nodes.snapshot import Snapshot, SnapshotError, SourceFormatError, render_tsv, sha256_file
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines.typed_decisions import synthetic
from support import write_rows

ROOT = Path(__file__).resolve().parents[1]
FILE = "all/test-00000-of-00001.parquet"


def _row(**over) -> dict:
    """A hand-written upstream row (JSON-text cells, as in the Parquet file)."""
    questions = {
        "action": {"type": "choice", "instructions": "What next?",
                   "criteria": {"continue": "Go on.", "human_review": None, "observe": None, "stop": None}},
        "needs_review": {"type": "noul", "instructions": "This trace requires human review.",
                         "criteria": {"false": "No.", "true": "Yes."}},
        "outcome": {"type": "choice", "instructions": "Outcome?",
                    "criteria": {"failure": None, "harmful": None, "partial": None, "success": None}},
        "risk": {"type": "score", "instructions": "Risk?", "criteria": ["none", "low", "elevated", "high"]},
        "urgency": {"type": "score", "instructions": "Urgency?", "criteria": ["none", "low", "elevated", "high"]},
    }
    gold = {
        "action": {"type": "choice", "label": "human_review", "confidence": 0.4,
                   "probabilities": {"continue": 0.4, "human_review": 0.4, "observe": 0.1, "stop": 0.1}},
        "needs_review": {"type": "noul", "label": "true", "confidence": 0.75, "noul": 0.75,
                         "probabilities": {"false": 0.25, "true": 0.75}},
        "outcome": {"type": "choice", "label": "success", "confidence": 0.5,
                    "probabilities": {"failure": 0.1, "harmful": 0.0, "partial": 0.4, "success": 0.5}},
        "risk": {"type": "score", "label": "2", "confidence": 1.0, "score": 2.0,
                 "probabilities": {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.0}},
        "urgency": {"type": "score", "label": "1", "confidence": 0.5, "score": 1.5,
                    "probabilities": {"0": 0.0, "1": 0.5, "2": 0.498, "3": 0.0}},
    }
    row = {"id": "agent_trace_observability_000007", "workflow": "agent_trace_observability", "split": "test",
           "state": json.dumps({"trace": {"steps": 7, "tool_errors": 2}}), "questions": json.dumps(questions),
           "gold": json.dumps(gold), "factors": json.dumps({"steps": 7}),
           "label_agreement": json.dumps({q: {"argmax_agree": True} for q in questions}), "n_questions": 5}
    row.update(over)
    return row


@pytest.fixture
def pinned_to(monkeypatch):
    """Pin the 'official' source to a given file and drop the count pins (for hand-written files)."""

    def pin(path: Path, cases: dict | None = None, disagreements: int = 1):
        manifest = copy.deepcopy(family_manifest("typed_decisions"))
        manifest["sources"]["official"][0]["sha256"] = sha256_file(path)
        manifest["release"]["cases_per_workflow"] = cases or {"agent_trace_observability": 1}
        manifest["release"]["label_argmax_disagreements"] = disagreements  # _row(): action only
        monkeypatch.setattr(td, "family_manifest", lambda _family: manifest)
        monkeypatch.setattr(td, "expected_for", lambda *_: {})

    return pin


# --- source mapping -------------------------------------------------------------------------


def test_row_maps_to_one_request_with_all_five_questions_and_decoded_state():
    row = td.map_row(Path("x.parquet"), 0, _row())
    assert row.request_id == "agent_trace_observability_000007"
    assert row.request["state"] == {"trace": {"steps": 7, "tool_errors": 2}}  # decoded object, not text
    assert list(row.request["questions"]) == ["action", "needs_review", "outcome", "risk", "urgency"]
    assert row.request["questions"]["needs_review"] == {
        "type": "noul", "instructions": "This trace requires human review.", "criteria": {"false": "No.", "true": "Yes."}}
    sent = json.dumps(row.request)
    for hidden in ("gold", "factors", "label_agreement", "agent_trace_observability", "probabilities", "split"):
        assert hidden not in sent
    assert row.candidates["needs_review"] == ["false", "true"]
    assert row.candidates["risk"] == ["0", "1", "2", "3"]
    t = row.targets["needs_review"]
    assert (t.label, t.probabilities, t.extra["reference_argmax"]) == (1, (0.25, 0.75), 1)
    # tied gold maximum: the label keeps human_review (1), the card's first-key argmax is continue (0)
    assert row.targets["action"].label == 1 and row.targets["action"].extra["reference_argmax"] == 0
    assert row.slices == {"domain": "agent_trace_observability", "language": "en", "difficulty": "unknown"}
    assert row.source["factors"] == {"steps": 7} and row.source["row"] == 1


def test_reference_is_normalised_within_tolerance_and_rejected_beyond():
    row = td.map_row(Path("x.parquet"), 0, _row())
    # urgency sums to 0.998: divided by the sum
    assert row.targets["urgency"].probabilities == pytest.approx((0.0, 0.5 / 0.998, 0.498 / 0.998, 0.0))
    assert sum(row.targets["urgency"].probabilities) == pytest.approx(1.0)
    gold = json.loads(_row()["gold"])
    gold["urgency"]["probabilities"]["2"] = 0.48  # sum 0.98: beyond 1 ± 0.01
    with pytest.raises(SourceFormatError, match=r"x.parquet:row 4: question 'urgency'.*sum to 0.98"):
        td.map_row(Path("x.parquet"), 3, _row(gold=json.dumps(gold)))


@pytest.mark.parametrize("state", ['"a plain string"', "[1, 2]", "not json at all"])
def test_state_that_is_not_a_json_object_is_rejected(state):
    with pytest.raises(SourceFormatError, match=r"row 1: .*state"):
        td.map_row(Path("x.parquet"), 0, _row(state=state))


def test_bad_rows_name_file_and_row():
    with pytest.raises(SourceFormatError, match=r"row 2: split is 'train'"):
        td.map_row(Path("x.parquet"), 1, _row(split="train"))
    with pytest.raises(SourceFormatError, match=r"gold label 'maybe'"):
        gold = json.loads(_row()["gold"])
        gold["needs_review"]["label"] = "maybe"
        td.map_row(Path("x.parquet"), 0, _row(gold=json.dumps(gold)))
    with pytest.raises(SourceFormatError, match=r"n_questions is 4"):
        td.map_row(Path("x.parquet"), 0, _row(n_questions=4))


def _gold_edit(edit) -> dict:
    gold = json.loads(_row()["gold"])
    edit(gold)
    return _row(gold=json.dumps(gold))


@pytest.mark.parametrize("raw,message", [
    (_row(id="customer_service_000001"), r"id 'customer_service_000001' is not '<workflow>_<NNNNNN>'"),
    (_gold_edit(lambda g: g.pop("urgency")), r"gold keys \['action', 'needs_review', 'outcome', 'risk'\] are not"),
    (_gold_edit(lambda g: g["risk"].update(type="choice")), r"question 'risk': gold type 'choice' for a score"),
    (_gold_edit(lambda g: g["risk"].pop("probabilities")), r"question 'risk': gold needs both 'label' and 'probabilities'"),
    # the Intern-Decision re-encoding's noul keys: refused, never re-mapped
    (_gold_edit(lambda g: g["needs_review"].update(probabilities={"no": 0.25, "yes": 0.75})),
     r"question 'needs_review': gold probability keys \['no', 'yes'\] are not the candidates \['false', 'true'\]"),
    (_gold_edit(lambda g: g["outcome"]["probabilities"].update(harmful=-0.1, success=0.6)),
     r"question 'outcome': gold probabilities must be finite and >= 0"),
    (_gold_edit(lambda g: g["risk"].update(label=4)), r"question 'risk': gold label 4 is not one of"),
])
def test_malformed_rows_are_refused_naming_row_and_question(raw, message):
    with pytest.raises(SourceFormatError, match=rf"x.parquet:row 3: {message}"):
        td.map_row(Path("x.parquet"), 2, raw)


def test_score_label_may_be_an_integer_level():
    row = td.map_row(Path("x.parquet"), 0, _gold_edit(lambda g: g["risk"].update(label=2)))
    assert row.targets["risk"].label == 2


def test_other_workflows_accept_any_question_ids():
    """Unknown 4: the ids of three workflows are not known; any ids are mapped as given."""
    questions = {"pay": {"type": "noul", "instructions": "Pay now.", "criteria": {"false": "No", "true": "Yes"}}}
    gold = {"pay": {"type": "noul", "label": False, "probabilities": {"false": 0.8, "true": 0.2}}}
    row = td.map_row(Path("x.parquet"), 0, _row(id="invoice_processing_000042", workflow="invoice_processing",
                                                questions=json.dumps(questions), gold=json.dumps(gold), n_questions=1))
    assert row.targets["pay"].label == 0 and row.slices["domain"] == "invoice_processing"


def test_official_release_file_read_with_unknown_columns_ignored(tmp_path, pinned_to):
    """Unknown 2: required columns checked; factors/label_agreement optional; extra (flat answer)
    columns ignored and listed."""
    rows = [_row(action_label="human_review")]
    for r in rows:
        del r["label_agreement"]
    path = write_rows(tmp_path / FILE, rows)
    pinned_to(path)
    pv = prepare_view("typed_decisions", tmp_path, data="official")
    assert pv.notes["ignored_columns"] == ["action_label"]
    assert pv.notes["missing_optional_columns"] == ["label_agreement"]
    assert pv.sources[0].sha256 == sha256_file(path) and pv.sources[0].info["revision"] == td.family_manifest(
        "typed_decisions")["upstream"]["revision"]
    assert [r.request_id for r in pv.rows] == ["agent_trace_observability_000007"]
    bad = _row()
    del bad["gold"]
    write_rows(tmp_path / FILE, [bad])
    pinned_to(tmp_path / FILE)
    with pytest.raises(SourceFormatError, match=r"missing column\(s\) \['gold'\]"):
        prepare_view("typed_decisions", tmp_path, data="official")


def test_official_hash_mismatch_names_the_pinned_revision(tmp_path):
    """Unknown 1: the pinned revision's file hash is verified on every preparation."""
    write_rows(tmp_path / FILE, [_row()])
    with pytest.raises(SnapshotError, match=r"does not match the pinned 4f294f21.*pinned revision is d0e2f0c4"):
        prepare_view("typed_decisions", tmp_path, data="official")


def test_intern_decision_reencoding_is_not_accepted(tmp_path, pinned_to):
    row = _row()
    row["targets"] = row.pop("gold")
    pinned_to(write_rows(tmp_path / FILE, [row]))
    with pytest.raises(SourceFormatError, match="Intern-Decision"):
        prepare_view("typed_decisions", tmp_path, data="official")
    jsonl_only = tmp_path / "jsonl"
    jsonl_only.mkdir()
    (jsonl_only / "test.jsonl").write_text("{}\n")
    with pytest.raises(SnapshotError, match="Intern-Decision"):
        prepare_view("typed_decisions", jsonl_only, data="official")


def test_synthetic_files_are_never_taken_for_the_release(tmp_path, pinned_to):
    # a stamped file copied out of its marked folder: the in-file stamp still refuses it
    marked = write_rows(tmp_path / "a" / FILE, [_row()], stamp="synthetic")
    pinned_to(marked)
    with pytest.raises(SnapshotError, match="not the upstream release"):
        prepare_view("typed_decisions", tmp_path / "a", data="official")
    # the folder marker is the first check; a marked folder must hold files stamped with its kind
    write_rows(tmp_path / "b" / FILE, [_row()])
    with pytest.raises(SnapshotError, match="has no JEVKEDRO_DATA_KIND.json"):
        prepare_view("typed_decisions", tmp_path / "b", data="synthetic")
    write_data_kind_marker(tmp_path / "b", "typed_decisions", "synthetic", "test")
    with pytest.raises(SnapshotError, match="carries no jevkedro marker"):
        prepare_view("typed_decisions", tmp_path / "b", data="synthetic")
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("typed_decisions", tmp_path / "b", data="official")


# --- scoring rules ---------------------------------------------------------------------------


def _snapshot(rows, data="official") -> Snapshot:
    return Snapshot("typed_decisions", Path("x.tsv"), {"data": data}, rows, "0" * 64)


def _three_question_case():
    row = _row()
    keep = ("needs_review", "action", "risk")
    q, g = json.loads(row["questions"]), json.loads(row["gold"])
    return td.map_row(Path("x.parquet"), 0, _row(questions=json.dumps({k: q[k] for k in keep}),
                                                 gold=json.dumps({k: g[k] for k in keep}), n_questions=3))


def test_noul_half_half_tie_goes_to_false():
    """Unknown 8: candidates false, true; P = 0.5 -> argmax false."""
    row = _three_question_case()
    answers = {"needs_review": {"noul": 0.5},
               "action": {"probabilities": {"continue": 0.5, "human_review": 0.3, "observe": 0.1, "stop": 0.1}},
               "risk": {"probabilities": {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.0}}}
    table = build_question_table([row], {row.request_id: {"status": "ok", "response": {"answers": answers}}})
    i = table.question_id.tolist().index("needs_review")
    assert table.P[i, :2].tolist() == [0.5, 0.5] and table.label[i] == 1  # label true, argmax false: a miss
    report = td.evaluate(_snapshot([row]), table, {row.request_id: {"model": "m"}})
    assert report["groups"]["task"]["needs_review"]["accuracy"] == 0.0
    # the other side: with the label false, the same P = 0.5 answer is a hit
    gold = json.loads(_row()["gold"])
    gold["needs_review"].update(label="false", probabilities={"false": 0.6, "true": 0.4})
    row = td.map_row(Path("x.parquet"), 0, _row(questions=json.dumps({"needs_review": json.loads(
        _row()["questions"])["needs_review"]}), gold=json.dumps({"needs_review": gold["needs_review"]}), n_questions=1))
    table = build_question_table([row], {row.request_id: {"status": "ok", "response": {"answers": {
        "needs_review": {"noul": 0.5}}}}})
    assert (table.label[0], M.summarize_table(table)["accuracy"]) == (0, 1.0)


def test_official_report_hand_computed():
    row = _three_question_case()
    answers = {"needs_review": {"noul": 0.5},
               "action": {"probabilities": {"continue": 0.5, "human_review": 0.3, "observe": 0.1, "stop": 0.1}},
               "risk": {"probabilities": {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.0}}}
    preds = {row.request_id: {"status": "ok", "response": {"answers": answers}, "model": "some-general-model"}}
    table = build_question_table([row], preds)
    off = td.evaluate(_snapshot([row]), table, preds)
    assert off["scorer"] == "jevalkit-decision-protocol-v1" and off["upstream_program_ran"] is False
    assert off["data"] == "official" and "agreement with the teacher" in off["teacher_agreement"]["note"]
    assert off["data_kind"] == "the pinned upstream release"
    assert "31 of 2,000" in off["label_basis"]
    assert "SYNTHETIC" in td.evaluate(_snapshot([row], data="sample"), table, preds)["data_kind"]
    # needs_review: y=(.25,.75), p=(.5,.5), label true -> miss
    kl_nr = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    ce_nr = math.log(2)
    # action: y=(.4,.4,.1,.1), p=(.5,.3,.1,.1), label human_review -> miss; card (first key continue) -> hit
    kl_ac = 0.4 * math.log(0.4 / 0.5) + 0.4 * math.log(0.4 / 0.3)
    ce_ac = -(0.4 * math.log(0.5) + 0.4 * math.log(0.3) + 0.2 * math.log(0.1))
    # risk: y = p = one-hot level 2 -> hit, KL 0, Brier 0, CE 0
    ta = off["teacher_agreement"]["overall"]
    assert ta["label_accuracy"] == pytest.approx(1 / 3)
    assert ta["kl_to_reference"] == pytest.approx((kl_nr + kl_ac) / 3)
    assert ta["brier"] == pytest.approx((0.125 + 0.02) / 3)
    assert ta["cross_entropy"] == pytest.approx((ce_nr + ce_ac) / 3)
    overall = off["groups"]["overall"]
    assert overall["accuracy"] == pytest.approx(1 / 3)
    assert overall["hard_nll"] == pytest.approx((math.log(2) - math.log(0.3)) / 3)  # against the explicit label
    assert overall["hard_brier"] == pytest.approx((0.5 + 0.76) / 3)
    assert overall["soft_kl"] == pytest.approx((kl_nr + kl_ac) / 3)
    # reference ECE (Unknown 3): 15 equal-width bins, explicit-label correctness:
    # conf .5 (miss), .5 (miss) share a bin -> 2/3 * .5; conf 1 (hit) -> 0
    assert overall["reference_ece"] == pytest.approx(1 / 3) and off["ece_method"] == "equal_width"
    # card-compatible secondary (Unknown 9): first-key argmax; 10 bins; .5 bin has 1 hit of 2 -> 0
    card = off["card_compatible"]["overall"]
    assert card["argmax_accuracy"] == pytest.approx(2 / 3) and card["ece_10_bins"] == pytest.approx(0.0)
    assert off["label_differs_from_reference_argmax"] == 1
    # Unknown 6: task = question id, difficulty "unknown", domain = workflow, language en
    assert set(off["groups"]["task"]) == {"action", "needs_review", "risk"}
    assert list(off["groups"]["difficulty"]) == ["unknown"] and list(off["groups"]["language"]) == ["en"]
    assert list(off["groups"]["domain"]) == ["agent_trace_observability"]
    assert off["exposure"]["class"] == "general"


def test_generic_metrics_use_the_label_for_accuracy_and_ece_and_the_reference_for_probability_scores():
    """docs/protocol.md §4 on the hand-computed case of test_official_report_hand_computed: accuracy and
    ECE against the explicit label, NLL and Brier against the normalised soft reference."""
    row = _three_question_case()
    answers = {"needs_review": {"noul": 0.5},
               "action": {"probabilities": {"continue": 0.5, "human_review": 0.3, "observe": 0.1, "stop": 0.1}},
               "risk": {"probabilities": {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.0}}}
    table = build_question_table([row], {row.request_id: {"status": "ok", "response": {"answers": answers}}})
    generic = M.summarize_table(table)
    assert generic["accuracy"] == pytest.approx(1 / 3)  # label basis; the card's basis gives 2/3
    assert generic["ece"] == pytest.approx(1 / 3)  # two misses at conf .5 share a bin, one hit at 1
    # soft reference: needs_review -(.25 ln .5 + .75 ln .5) = ln 2; action -(.4 ln .5 + .4 ln .3 + .2 ln .1);
    # risk one-hot answered exactly: 0. Against the labels it would be (ln 2 - ln .3) / 3 instead.
    ce = math.log(2) - (0.4 * math.log(0.5) + 0.4 * math.log(0.3) + 0.2 * math.log(0.1))
    assert generic["nll"] == pytest.approx(ce / 3)
    assert generic["brier"] == pytest.approx((0.125 + 0.02) / 3)


def test_kl_floors_the_prediction_at_1e_12():
    """Unknown 3: KL(y || p) with p floored at 1e-12 (not the card scorers' 1e-9 or +1e-6)."""
    row = _three_question_case()
    answers = {"needs_review": {"noul": 1.0},  # p = (0, 1) over (false, true); y = (.25, .75)
               "action": {"probabilities": {"continue": 0.4, "human_review": 0.4, "observe": 0.1, "stop": 0.1}},
               "risk": {"probabilities": {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.0}}}
    preds = {row.request_id: {"status": "ok", "response": {"answers": answers}, "model": "m"}}
    table = build_question_table([row], preds)
    off = td.evaluate(_snapshot([row]), table, preds)
    kl_nr = 0.25 * (math.log(0.25) + 12 * math.log(10)) + 0.75 * math.log(0.75)  # 6.4136...
    nr = off["teacher_agreement"]["by_type"]["noul"]
    assert nr["kl_to_reference"] == pytest.approx(kl_nr)
    assert nr["cross_entropy"] == pytest.approx(0.25 * 12 * math.log(10))
    assert off["groups"]["task"]["needs_review"]["soft_kl"] == pytest.approx(kl_nr)
    assert off["teacher_agreement"]["by_type"]["choice"]["kl_to_reference"] == pytest.approx(0.0)


def test_unanswered_questions_count_as_misses_and_fitted_models_are_marked():
    row = _three_question_case()
    preds = {row.request_id: {"status": "unsupported", "model": "convaiinnovations/laya-typed-decisions"}}
    table = build_question_table([row], preds)
    off = td.evaluate(_snapshot([row]), table, preds)
    ta = off["teacher_agreement"]["overall"]
    assert (ta["label_accuracy"], ta["label_accuracy_n"], ta["probability_n"], ta["kl_to_reference"]) == (0.0, 3, 0, None)
    assert off["exposure"]["class"] == "fitted"


# --- counts, synthetic releases, shipped sample -----------------------------------------------


def test_full_scale_synthetic_release_reproduces_the_published_counts(tmp_path):
    synthetic.write_release(tmp_path / "rel")
    (manifest,) = td.prepare(tmp_path / "snap", tmp_path / "rel", data="synthetic")
    assert manifest["data"] == "synthetic"
    assert manifest["counts"] == {"inputs": 400, "questions": 2000,
                                  "by_type": {"choice": 800, "noul": 400, "score": 800}}
    assert manifest["notes"]["label_argmax_disagreements"] == 31  # the published count (the family README)


def test_label_argmax_disagreements_are_checked_against_the_published_31(tmp_path):
    rows = synthetic.generate_rows(100, ties=30)
    schema = pa.Table.from_pylist(rows).schema
    write_release_parquet(tmp_path / "rel", FILE, rows, schema, "typed_decisions", "synthetic", "test release")
    with pytest.raises(SnapshotError, match=r"differs from the first-key argmax .* on 30 questions, expected 31"):
        prepare_view("typed_decisions", tmp_path / "rel", data="synthetic")
    # a sample is not held to it: its own number is recorded, counted here straight from the gold cells
    sample = ROOT / "data/01_raw/typed_decisions/sample"
    golds = [g for r in pq.read_table(sample / FILE).to_pylist() for g in json.loads(r["gold"]).values()]
    by_hand = sum(g["label"] != max(g["probabilities"], key=g["probabilities"].get) for g in golds)
    assert by_hand >= 1
    assert prepare_view("typed_decisions", sample, data="sample").notes["label_argmax_disagreements"] == by_hand


def test_count_checks_fail_naming_what_differs(tmp_path):
    synthetic.write_release(tmp_path / "small", cases_per_workflow=2)
    with pytest.raises(SnapshotError, match=r"agent_trace_observability: found 2, expected 100"):
        td.prepare(tmp_path / "snap", tmp_path / "small", data="synthetic")
    rows = synthetic.generate_rows(100, ties=31)  # no tie in row 0's questions (the first is question 65)
    q, g = json.loads(rows[0]["questions"]), json.loads(rows[0]["gold"])
    del q["urgency"], g["urgency"]
    rows[0].update(questions=json.dumps(q), gold=json.dumps(g), n_questions=4)
    schema = pa.Table.from_pylist(rows).schema
    write_release_parquet(tmp_path / "short", FILE, rows, schema, "typed_decisions", "synthetic", "test release")
    with pytest.raises(SnapshotError, match=r"counts differ from the manifest: questions: found 1999, expected 2000"):
        td.prepare(tmp_path / "snap", tmp_path / "short", data="synthetic")
    assert not (tmp_path / "snap" / "typed_decisions.tsv").exists()


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access is read_release's: build maps the same pinned rows once the folder is gone."""
    source = shutil.copytree(ROOT / "data/01_raw/typed_decisions/sample", tmp_path / "sample")
    release = td.read_release(parse_prepare_options("typed_decisions", {"source": str(source), "data": "sample"}))
    shutil.rmtree(source)
    prepared = td.build(release, "typed_decisions")
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest("typed_decisions")["views"][
        "typed_decisions"]["snapshot_sha256"]["sample"]
    assert prepared.notes["label_argmax_disagreements"] >= 1 and prepared.sources == list(release.files)


def test_shipped_sample_is_pinned_marked_and_reproducible(tmp_path):
    params = yaml.safe_load((ROOT / "conf/base/parameters_typed_decisions.yml").read_text())["typed_decisions"]
    assert params["prepare"]["data"] == "sample"
    (manifest,) = td.prepare(tmp_path, ROOT / params["prepare"]["source"], data="sample")
    assert manifest["data"] == "sample" and "SYNTHETIC" in manifest["notes"]["data_kind"]
    assert manifest["snapshot"]["sha256"] == family_manifest("typed_decisions")["views"]["typed_decisions"][
        "snapshot_sha256"]["sample"]
    shipped = pq.read_table(ROOT / params["prepare"]["source"] / FILE)
    assert shipped.schema.metadata[DATA_KIND_KEY.encode()] == b"sample"
    assert shipped.to_pylist() == synthetic.generate_rows(2, ties_at_least=1)
    sample_rows = prepare_view("typed_decisions", ROOT / params["prepare"]["source"], data="sample").rows
    ref = [t.extra["reference_argmax"] != t.label for r in sample_rows for t in r.targets.values()]
    assert any(ref)  # the sample exercises a label/argmax disagreement


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_kedro_run_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, mlflow_tags, report, write_replay

    project = make_project(tmp_path, ["typed_decisions"])
    kedro_run(project, "typed_decisions")
    rep = report(project, "sparrow-nano-general-v1.1", "typed_decisions")
    assert rep["data"] == "sample" and rep["coverage"]["questions"] == 40
    assert rep["coverage"]["by_status"]["ok"] + rep["coverage"]["by_status"]["unsupported"] == 40
    assert rep["official"]["scorer"] == "jevalkit-decision-protocol-v1"

    def first_candidate(question, candidates):  # all mass on the first candidate (noul: false)
        if question["type"] == "noul":
            return {"noul": 0.0}
        return {"probabilities": {c: float(i == 0) for i, c in enumerate(candidates)}}

    replay = write_replay(project, "typed_decisions", first_candidate, tmp_path / "answers.jsonl")
    kedro_run(project, "typed_decisions", f"model.adapter=replay,model.path={replay},model.name=first-candidate")
    rep = report(project, "first-candidate", "typed_decisions")
    pv = prepare_view("typed_decisions", project / "data/01_raw/typed_decisions/sample", data="sample")
    labels = [t.label for r in pv.rows for t in r.targets.values()]
    assert rep["metrics"]["overall"]["accuracy"] == pytest.approx(np.mean([lab == 0 for lab in labels]))
    assert rep["official"]["teacher_agreement"]["overall"]["label_accuracy"] == rep["metrics"]["overall"]["accuracy"]
    tags = mlflow_tags(project)
    assert {t["model"] for t in tags} == {"sparrow-nano-general-v1.1", "first-candidate"}
    assert {t["data"] for t in tags} == {"sample"}


def test_reference_argmax_of_a_loaded_snapshot_equals_the_rows_own(tmp_path):
    """The column read from the targets cells alone equals the decoded rows' ``reference_argmax``."""
    from jevkedro.nodes.snapshot import commit_dataset, load_snapshot

    params = yaml.safe_load((ROOT / "conf/base/parameters_typed_decisions.yml").read_text())["typed_decisions"]
    prepared = prepare_view("typed_decisions", ROOT / params["prepare"]["source"], data="sample")
    commit_dataset(prepared, tmp_path)
    snapshot = load_snapshot(tmp_path, "typed_decisions")
    table = build_question_table(snapshot, {})
    from_cells = td.reference_argmax_column(snapshot, table)
    from_rows = td.reference_argmax_column(_snapshot(list(prepared.rows)), table)
    assert from_cells.tolist() == from_rows.tolist() and (from_cells >= 0).all()
