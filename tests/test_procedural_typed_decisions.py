"""Procedural Typed Decisions: source mapping on hand-written upstream rows, the soft
pure-posterior rule with hand-computed values, the Unknowns' decisions, count checks, the
full-scale synthetic release and ``kedro run`` on the shipped sample."""

from __future__ import annotations

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

import jevkedro.pipelines.procedural_typed_decisions as ptd
from jevkedro.config import parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view
from jevkedro.nodes import metrics as M
from jevkedro.nodes.parquet_source import DATA_KIND_KEY, write_release_parquet
from jevkedro.nodes.snapshot import Snapshot, SnapshotError, SourceFormatError, render_tsv, sha256_file
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines.procedural_typed_decisions import synthetic
from support import write_rows

ROOT = Path(__file__).resolve().parents[1]
FILE = "all/test-00000-of-00001.parquet"
GRADED = ptd.graded_nouls()
P = Path("all/test-00000-of-00001.parquet")


def _row(task="partial_observation_calibration", level=2, idx=7, state=None, questions=None, answers=None) -> dict:
    """A hand-written upstream ``all`` row (JSON-text cells)."""
    questions = questions or {"incident_real": {"type": "noul", "instructions": "Probability the incident is real?"}}
    answers = answers or {"incident_real": {"type": "noul", "noul": 0.3}}
    state = state if state is not None else json.dumps(
        {"prior": 0.1, "sensors": [{"name": "s1", "hit_rate": 0.9, "false_alarm": 0.2, "fired": True}]})
    return {"id": f"{task}:test:{idx}", "task": task, "level": level, "state": state,
            "questions": json.dumps(questions), "answers": json.dumps(answers)}


MIXED_Q = {
    "owner": {"type": "choice", "instructions": "Who owns it?", "criteria": {"ana": None, "bo": "Bo", "cy": None}},
    "is_open": {"type": "noul", "instructions": "It is open."},
    "severity": {"type": "score", "instructions": "Severity?", "criteria": ["low", "mid", "high"]},
}
MIXED_A = {
    "owner": {"type": "choice", "choice": "bo", "probabilities": {"ana": 0.0, "bo": 1.0, "cy": 0.0}, "confidence": 1.0},
    "is_open": {"type": "noul", "noul": 1.0},
    "severity": {"type": "score", "score": 2.0, "legend": {"0": "low", "1": "mid", "2": "high"},
                 "probabilities": {"0": 0.0, "1": 0.0, "2": 1.0}, "confidence": 1.0},
}


# --- source mapping -------------------------------------------------------------------------


def test_rule_questions_map_to_hard_labels_in_source_candidate_order():
    row = ptd.map_row(P, 0, _row("event_state_reconstruction", 3, questions=MIXED_Q, answers=MIXED_A), GRADED)
    assert row.request_id == "event_state_reconstruction:test:7"
    assert row.request["questions"] == MIXED_Q  # every question, as given
    sent = json.dumps(row.request)
    for hidden in ("answers", "event_state_reconstruction", "confidence", "legend"):
        assert hidden not in sent
    assert row.candidates == {"owner": ["ana", "bo", "cy"], "is_open": ["true", "false"], "severity": ["0", "1", "2"]}
    assert {q: (t.label, t.probabilities) for q, t in row.targets.items()} == {
        "owner": (1, None), "is_open": (0, None), "severity": (2, None)}
    assert row.slices["task"] == "event_state_reconstruction" and row.slices["difficulty"] == "3"
    assert row.slices["domain"] == "unknown" and row.slices["language"] == "en"  # Unknown 5
    assert row.slices["questions"]["is_open"] == {"target_kind": "rule"}
    assert row.source == {"id": "event_state_reconstruction:test:7", "file": P.name, "row": 1,
                          "task": "event_state_reconstruction", "level": 3}


def test_pure_posterior_noul_stays_soft():
    row = ptd.map_row(P, 0, _row(), GRADED)
    t = row.targets["incident_real"]
    assert t.label is None and t.probabilities == pytest.approx((0.3, 0.7))
    assert row.slices["questions"]["incident_real"] == {"target_kind": "posterior"}


def test_posterior_nouls_are_identified_by_task_and_key_not_by_value():
    """Unknown 2: a listed posterior with k/n = 1 stays soft; the same key in another task is a rule."""
    one = ptd.map_row(P, 0, _row(answers={"incident_real": {"noul": 1.0}}), GRADED).targets["incident_real"]
    assert (one.label, one.probabilities) == (None, (1.0, 0.0))
    q = {"access_allowed": {"type": "noul", "instructions": "Allowed?"}}
    rule = ptd.map_row(P, 0, _row("policy_applicability", questions=q, answers={"access_allowed": {"noul": 0.0}}),
                       GRADED).targets["access_allowed"]
    assert (rule.label, rule.probabilities) == (1, None)
    soft = ptd.map_row(P, 0, _row("policy_under_uncertainty", questions=q,
                                  answers={"access_allowed": {"noul": 0.25}}), GRADED).targets["access_allowed"]
    assert soft.label is None and soft.probabilities == (0.25, 0.75)
    with pytest.raises(SourceFormatError, match=r"row 1: question 'access_allowed'.*not a listed pure-posterior.*graded_nouls"):
        ptd.map_row(P, 0, _row("policy_applicability", questions=q, answers={"access_allowed": {"noul": 0.25}}), GRADED)


@pytest.mark.parametrize("text,sent,fmt", [
    ('{"prior": 0.1}', {"prior": 0.1}, "json"),
    ("name,team\nAda,ops", "name,team\nAda,ops", "text"),
    ("K1 = v1\nK2 = v2", "K1 = v1\nK2 = v2", "text"),
    ("{not json", "{not json", "text"),
    ("[1, 2]", "[1, 2]", "text"),
    ("42", "42", "text"),
])
def test_states_json_objects_decoded_everything_else_sent_verbatim(text, sent, fmt):
    """Unknown 7."""
    row = ptd.map_row(P, 0, _row(state=text), GRADED)
    assert row.request["state"] == sent and row.slices["state_format"] == fmt


@pytest.mark.parametrize("over,message", [
    ({"answers": {"severity": {"score": 1.5}}}, r"score 1.5 is not an integer level"),  # Unknown 4
    ({"answers": {"severity": {"score": 3.0}}}, r"score 3.0 is not an integer level in 0..2"),
    ({"answers": {"severity": {"score": 1.0, "probabilities": {"0": 0.0, "1": 0.0, "2": 1.0}}}}, r"not the one-hot of '1'"),
    ({"answers": {"owner": {"choice": "dee"}}}, r"choice 'dee' is not one of the options"),
    ({"answers": {"owner": {"choice": "bo", "probabilities": {"ana": 1.0, "bo": 0.0, "cy": 0.0}}}},
     r"question 'owner': probabilities .* are not the one-hot of 'bo'"),
    ({"answers": {"is_open": {"type": "score", "noul": 1.0}}}, r"question 'is_open': answer type 'score' for a noul"),
    # a fractional noul outside the documented pure-posterior list is never rounded
    ({"answers": {"is_open": {"noul": 0.5}}},
     r"noul 0.5 of task 'event_state_reconstruction' is fractional, but .* not a listed pure-posterior"),
    ({"answers": {"extra": {"noul": 1.0}}}, r"answer keys \['extra', 'is_open', 'owner', 'severity'\] are not the question keys"),
    ({"state": None}, r"state must be a string, got NoneType"),
    ({"answers": {"is_open": {"noul": 1.2}}}, r"noul 1.2 is not a probability"),
    ({"level": 5}, r"level 5 is not one of 0-4"),
    ({"id": "event_state_reconstruction:train:7"}, r"id .* is not '<task>:test:<index>'"),
])
def test_bad_rows_are_refused_naming_file_and_row(over, message):
    answers = {**MIXED_A, **over.get("answers", {})}
    raw = _row("event_state_reconstruction", questions=MIXED_Q, answers=answers)
    raw.update({k: v for k, v in over.items() if k != "answers"})
    with pytest.raises(SourceFormatError, match=rf"{P}:row 3: .*{message}"):
        ptd.map_row(P, 2, raw, GRADED)


# --- scoring rules ---------------------------------------------------------------------------


def _snapshot(rows, data="official") -> Snapshot:
    return Snapshot("procedural_typed_decisions", Path("x.tsv"), {"data": data}, rows, "0" * 64)


def test_posterior_nouls_count_in_probability_loss_and_mae_only():
    """Hand-computed. Row a: rule noul (true) p=.8, posterior p*=.3 answered .5, score label 2
    answered (.1,.2,.7). Row b: a posterior noul left unanswered."""
    qa = {"is_open": MIXED_Q["is_open"], "incident_real": {"type": "noul", "instructions": "P(real)?"},
          "severity": MIXED_Q["severity"]}
    aa = {"is_open": MIXED_A["is_open"], "incident_real": {"noul": 0.3}, "severity": MIXED_A["severity"]}
    a = ptd.map_row(P, 0, _row(questions=qa, answers=aa, level=1), GRADED)
    b = ptd.map_row(P, 1, _row(idx=8, level=4), GRADED)
    preds = {a.request_id: {"status": "ok", "response": {"answers": {
        "is_open": {"noul": 0.8}, "incident_real": {"noul": 0.5},
        "severity": {"probabilities": {"0": 0.1, "1": 0.2, "2": 0.7}}}}}}
    table = build_question_table([a, b], preds)

    generic = M.summarize_table(table)
    assert (generic["accuracy"], generic["accuracy_n"]) == (1.0, 2)  # posteriors never in accuracy
    assert generic["ece"] == pytest.approx(0.25) and generic["ece_n"] == 2  # |1-.8|/2 + |1-.7|/2
    nll_post = -(0.3 * math.log(0.5) + 0.7 * math.log(0.5))
    assert generic["nll"] == pytest.approx((-math.log(0.8) + nll_post - math.log(0.7)) / 3)
    assert generic["brier"] == pytest.approx((0.08 + 0.08 + (0.01 + 0.04 + 0.09)) / 3)
    assert generic["probability_n"] == 3

    off = ptd.evaluate(_snapshot([a, b]), table, preds)
    assert off["scorer"] == "jevalkit-decision-protocol-v1" and off["data"] == "official"
    assert off["upstream_program_ran"] is False and "rounds them to yes/no" in off["posterior_note"]
    assert off["data_kind"] == "the upstream 18-task release (file hashes not yet pinned)"
    assert "SYNTHETIC" in ptd.evaluate(_snapshot([a, b], data="synthetic"), table, preds)["data_kind"]
    assert off["posterior_mae"]["overall"] == {"mae": pytest.approx(0.2), "n": 1, "questions": 2}
    assert off["posterior_mae"]["by_difficulty"]["1"]["mae"] == pytest.approx(0.2)
    assert off["posterior_mae"]["by_difficulty"]["4"] == {"mae": None, "n": 0, "questions": 1}
    assert off["posterior_mae"]["by_task_question"]["partial_observation_calibration/incident_real"]["n"] == 1
    post = off["groups"]["target_kind"]["posterior"]
    assert (post["accuracy"], post["accuracy_n"], post["reference_ece"], post["hard_n"]) == (None, 0, None, 0)
    assert post["soft_kl"] == pytest.approx(0.3 * math.log(0.3 / 0.5) + 0.7 * math.log(0.7 / 0.5))
    assert post["soft_brier"] == pytest.approx(0.08)
    overall = off["groups"]["overall"]
    assert (overall["accuracy"], overall["accuracy_n"], overall["ece_n"]) == (1.0, 2, 2)
    assert overall["reference_ece"] == pytest.approx(0.25) and off["ece_method"] == "equal_width"  # Unknown 6
    assert overall["hard_nll"] == pytest.approx((-math.log(0.8) - math.log(0.7)) / 2)
    assert overall["hard_n"] == 2 and overall["soft_n"] == 3
    assert set(off["groups"]["task_difficulty"]) == {"partial_observation_calibration/1", "partial_observation_calibration/4"}
    assert set(off["groups"]["difficulty"]) == {"1", "4"}
    # Unknown 5 and the README's slices: domain "unknown", language en, question type, task x question
    assert list(off["groups"]["domain"]) == ["unknown"] and list(off["groups"]["language"]) == ["en"]
    assert set(off["groups"]["type"]) == {"noul", "score"} and list(off["groups"]["task"]) == [
        "partial_observation_calibration"]
    assert off["groups"]["type"]["noul"]["accuracy_n"] == 1  # the rule noul only; both posteriors left out
    assert set(off["groups"]["task_question"]) == {f"partial_observation_calibration/{q}"
                                                   for q in ("incident_real", "is_open", "severity")}


# --- counts, synthetic releases, shipped sample -----------------------------------------------


def test_full_scale_synthetic_release_reproduces_the_published_counts(tmp_path):
    synthetic.write_release(tmp_path / "rel")
    (manifest,) = ptd.prepare(tmp_path / "snap", tmp_path / "rel", data="synthetic")
    assert manifest["data"] == "synthetic"
    assert (manifest["counts"]["inputs"], manifest["counts"]["questions"]) == (18000, 57016)
    assert len(manifest["notes"]["rows_by_task"]) == 18
    assert manifest["notes"]["rows_by_level"] == {str(lv): 3600 for lv in range(5)}  # every level kept
    assert manifest["notes"]["files_pinned"] is False


def test_count_checks_fail_naming_what_differs(tmp_path):
    synthetic.write_release(tmp_path / "small", rows_per_task=2)
    with pytest.raises(SnapshotError, match=r"inputs: found 36, expected 18000; questions: found 113, expected 57016"):
        ptd.prepare(tmp_path / "snap", tmp_path / "small", data="synthetic")
    rows = [r for r in synthetic.generate_rows(2) if r["task"] != "table_lookup"]
    schema = pa.Table.from_pylist(rows).schema
    write_release_parquet(tmp_path / "missing", FILE, rows, schema, "procedural_typed_decisions", "synthetic", "test release")
    with pytest.raises(SnapshotError, match=r"task table_lookup: missing; tasks: found 17, expected 18"):
        ptd.prepare(tmp_path / "snap", tmp_path / "missing", data="synthetic")
    assert not (tmp_path / "snap" / "procedural_typed_decisions.tsv").exists()


def test_release_without_pins_records_the_hashes_and_refuses_marked_files(tmp_path):
    """Unknown 1: no file hash of the 18-task release is known; preparing it records the hash of
    every file read (to pin at first download); counts and tasks are still checked."""
    path = write_rows(tmp_path / "rel" / FILE, synthetic.generate_rows(1))  # unmarked, like a download
    pv = prepare_view("procedural_typed_decisions", tmp_path / "rel", data="official")
    assert [s.sha256 for s in pv.sources] == [sha256_file(path)] and pv.notes["files_pinned"] is False
    with pytest.raises(SnapshotError, match="inputs: found 18, expected 18000"):
        ptd.prepare(tmp_path / "snap", tmp_path / "rel", data="official")
    write_rows(tmp_path / "one" / FILE, [_row()])
    with pytest.raises(SnapshotError, match="tasks: found 1, expected 18"):
        prepare_view("procedural_typed_decisions", tmp_path / "one", data="official")
    synthetic.write_release(tmp_path / "syn", rows_per_task=1)
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("procedural_typed_decisions", tmp_path / "syn", data="official")
    (tmp_path / "syn" / DATA_KIND_MARKER).unlink()  # the file's own stamp still refuses it
    with pytest.raises(SnapshotError, match="not the upstream release"):
        prepare_view("procedural_typed_decisions", tmp_path / "syn", data="official")
    with pytest.raises(SnapshotError, match="source files not found"):
        prepare_view("procedural_typed_decisions", tmp_path / "nothing", data="official")


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access is read_release's: build maps the same pinned rows once the folder is gone."""
    view = "procedural_typed_decisions"
    source = shutil.copytree(ROOT / "data/01_raw/procedural_typed_decisions/sample", tmp_path / "sample")
    release = ptd.read_release(parse_prepare_options(view, {"source": str(source), "data": "sample"}))
    assert [(path.name, index) for path, index, _ in release.content[:2]] == [(P.name, 0), (P.name, 1)]
    shutil.rmtree(source)
    prepared = ptd.build(release, view)
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest("procedural_typed_decisions")["views"][view][
        "snapshot_sha256"]["sample"]
    assert len(prepared.notes["rows_by_task"]) == 18 and prepared.sources == list(release.files)


def test_shipped_sample_is_pinned_marked_and_covers_every_task_and_level(tmp_path):
    params = yaml.safe_load((ROOT / "conf/base/parameters_procedural_typed_decisions.yml").read_text())
    opts = params["procedural_typed_decisions"]["prepare"]
    assert opts["data"] == "sample"
    (manifest,) = ptd.prepare(tmp_path, ROOT / opts["source"], data="sample")
    assert manifest["data"] == "sample" and "SYNTHETIC" in manifest["notes"]["data_kind"]
    assert manifest["snapshot"]["sha256"] == family_manifest("procedural_typed_decisions")["views"][
        "procedural_typed_decisions"]["snapshot_sha256"]["sample"]
    assert len(manifest["notes"]["rows_by_task"]) == 18 and set(manifest["notes"]["rows_by_level"]) == set("01234")
    shipped = pq.read_table(ROOT / opts["source"] / FILE)
    assert shipped.schema.metadata[DATA_KIND_KEY.encode()] == b"sample"
    assert shipped.to_pylist() == synthetic.generate_rows(2)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_kedro_run_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, mlflow_tags, report, write_replay

    project = make_project(tmp_path, ["procedural_typed_decisions"])
    view = "procedural_typed_decisions"
    kedro_run(project, view)
    rep = report(project, "sparrow-nano-general-v1.1", view)
    assert rep["data"] == "sample" and rep["coverage"]["questions"] == 113
    assert rep["official"]["posterior_mae"]["overall"]["questions"] == 5

    def half(question, candidates):  # noul 0.5 everywhere, uniform otherwise
        if question["type"] == "noul":
            return {"noul": 0.5}
        return {"probabilities": {c: 1 / len(candidates) for c in candidates}}

    replay = write_replay(project, view, half, tmp_path / "answers.jsonl")
    kedro_run(project, view, f"model.adapter=replay,model.path={replay},model.name=uniform")
    rep = report(project, "uniform", view)
    pv = prepare_view("procedural_typed_decisions", project / "data/01_raw/procedural_typed_decisions/sample", data="sample")
    posteriors = [t.probabilities[0] for r in pv.rows for t in r.targets.values() if t.label is None]
    assert rep["official"]["posterior_mae"]["overall"]["mae"] == pytest.approx(np.mean(np.abs(np.array(posteriors) - 0.5)))
    labels = [t.label for r in pv.rows for t in r.targets.values() if t.label is not None]
    # uniform answers: argmax is the first candidate, so accuracy = share of labels at index 0
    assert rep["metrics"]["overall"]["accuracy"] == pytest.approx(np.mean([lab == 0 for lab in labels]))
    assert rep["metrics"]["overall"]["accuracy_n"] == len(labels) == 108
    assert {t["data"] for t in mlflow_tags(project)} == {"sample"}
