"""DecisionBench: source mapping, family rules, pins, synthetic releases and the Kedro view."""

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

from jevkedro.config import parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view, write_data_kind_marker
from jevkedro.nodes import metrics as M
from jevkedro.nodes.report import generic_metrics
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, commit_dataset, load_snapshot, render_tsv
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import decisionbench as db
from jevkedro.pipelines.decisionbench import synthetic as syn
from jevkedro.protocol import FORBIDDEN_REQUEST_KEYS

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "01_raw" / "decisionbench" / "sample"


def rec(primitive, candidates, gold, **kw):
    """A decoded upstream row (the dict ``read_standard_rows`` yields), hand-written."""
    return syn._row(kw.pop("row_id", "r1"), kw.pop("domain", "dom"), kw.pop("family", "fam"), primitive,
                    kw.pop("task_name", "task"), kw.pop("instruction", "Decide."), kw.pop("state", {"text": "s"}),
                    candidates, gold, **kw)


def db_prim(short):
    return {"binary": syn.BINARY, "choice": syn.CHOICE, "ordinal": syn.ORDINAL}[short]


C = syn._c
TOX = [C("high", "High", None, 2), C("none", "None", "No toxicity", 0), C("mild", "Mild", None, 1)]


def write_parquet(path: Path, rows: list[dict], extra_columns: dict[str, list] | None = None) -> Path:
    table = pa.Table.from_pylist(rows)
    for name, values in (extra_columns or {}).items():
        table = table.append_column(name, pa.array(values))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


# ---------------------------------------------------------------------------------------------
# mapping


def test_binary_first_candidate_is_noul_true_even_when_not_yes_no():
    row = db.map_row("t", rec(db_prim("binary"), [C("keep", "Keep", "useful later"), C("drop", "Drop")], [0.3, 0.7]))
    q = row.request["questions"]["decision"]
    assert q == {"type": "noul", "instructions": "Decide.", "criteria": {"true": "Keep: useful later", "false": "Drop"}}
    assert row.candidates == {"decision": ["true", "false"]}
    t = row.targets["decision"]
    assert (t.label, t.probabilities) == (1, (0.3, 0.7))  # gold "drop" = the second candidate = false
    assert t.extra["candidate_ids"] == ["keep", "drop"]


def test_choice_keeps_original_ids_and_order():
    cands = [C("zeta", "Zeta"), C("alpha", "Alpha", "first letter"), C("m", "Em")]
    row = db.map_row("t", rec(db_prim("choice"), cands, [0.0, 0.25, 0.75]))
    assert row.request["questions"]["decision"]["criteria"] == {"zeta": "Zeta", "alpha": "Alpha: first letter", "m": "Em"}
    assert row.candidates["decision"] == ["zeta", "alpha", "m"]
    assert row.targets["decision"].label == 2


def test_score_sorted_by_ordinal_value_with_inverse_map_outside_the_request():
    row = db.map_row("t", rec(db_prim("ordinal"), TOX, [0.1, 0.0, 0.9]))
    q = row.request["questions"]["decision"]
    assert q["criteria"] == ["None: No toxicity", "Mild", "High"]
    assert row.candidates["decision"] == ["2", "0", "1"]  # original order, each candidate's level key
    t = row.targets["decision"]
    assert t.label == 2 and t.probabilities == (0.1, 0.0, 0.9)  # original order kept
    assert t.extra["level_ids"] == ["none", "mild", "high"]
    assert t.extra["ordinal_values"] == [2, 0, 1]
    text = json.dumps(row.request)
    for leaked in ("level_ids", "high", "mild\"", "gold", "r1"):
        assert leaked not in text


def test_null_ordinal_value_sorts_as_zero_and_duplicates_fail():
    cands = [C("b", "B", None, 1), C("a", "A", None, None), C("c", "C", None, -1)]
    row = db.map_row("t", rec(db_prim("ordinal"), cands, [1.0, 0.0, 0.0]))
    assert row.request["questions"]["decision"]["criteria"] == ["C", "A", "B"]
    assert row.candidates["decision"] == ["2", "1", "0"]
    dup = [C("a", "A", None, None), C("b", "B", None, 0)]
    with pytest.raises(SourceFormatError, match="ordinal values are not unique"):
        db.map_row("f.parquet: row 3", rec(db_prim("ordinal"), dup, [1.0, 0.0]))


def test_request_carries_no_gold_ids_or_metadata():
    row = db.map_row("t", rec(db_prim("choice"), [C("a", "A"), C("b", "B")], [1.0, 0.0], row_id="secret-row",
                              task_name="secret_task", kind="reasoning", reasoning_type="arithmetic"))
    assert set(row.request) == {"state", "questions"}
    text = json.dumps(row.request)
    for word in ("secret-row", "secret_task", "arithmetic", "jevkedro-synthetic", "gold"):
        assert word not in text
    assert not FORBIDDEN_REQUEST_KEYS & set(row.request["questions"]["decision"])
    assert row.slices["difficulty"] == "reasoning" and row.slices["language"] == "eng"
    assert row.source["reasoning_type"] == "arithmetic"


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.update(gold_candidate_id="b"), "not the first argmax"),
    (lambda r: r.update(gold_probabilities=[0.6, 0.6]), "sum to 1.2"),
    (lambda r: r.update(candidate_count=3), "candidate_count 3 but 2 candidates"),
    (lambda r: r.update(task_id="x/y/z/w"), "task_id 'x/y/z/w'"),
    (lambda r: r.update(primitive="ranking"), "unknown primitive 'ranking'"),
    (lambda r: r.update(state_json="{not json"), "state_json is not valid JSON"),
    (lambda r: r.update(candidates_json=json.dumps([{"id": "a", "label": "A"}, {"id": "a", "label": "B"}])),
     "not unique"),
])
def test_broken_rows_fail_naming_the_row(mutate, message):
    r = rec(db_prim("choice"), [C("a", "A"), C("b", "B")], [0.5, 0.5])
    mutate(r)
    with pytest.raises(SourceFormatError, match=message) as err:
        db.map_row("eval.parquet: row 7 (row_id 'r1')", r)
    assert "eval.parquet: row 7" in str(err.value)


def test_rows_beyond_the_model_limits_are_unsupported_not_truncated():
    from jevkedro.models.sparrow import SparrowAdapter

    levels = [C(f"p{v}", f"{v}%", None, v) for v in range(11)]
    row = db.map_row("t", rec(db_prim("ordinal"), levels, [1.0] + [0.0] * 10))
    q = row.request["questions"]["decision"]
    assert len(q["criteria"]) == 11  # nothing trimmed in the snapshot
    assert SparrowAdapter().unsupported_reason(row.request["state"], q) == "score questions need 2-10 levels"


def test_binary_needs_two_candidates():
    r = rec(db_prim("binary"), [C("a", "A"), C("b", "B"), C("c", "C")], [1.0, 0.0, 0.0])
    with pytest.raises(SourceFormatError, match="exactly 2 candidates"):
        db.map_row("t", r)


def test_compact_columns_are_never_read(tmp_path):
    rows = [rec(db_prim("ordinal"), TOX, [0.1, 0.0, 0.9], row_id="r1"),
            rec(db_prim("binary"), [C("y", "Yes"), C("n", "No")], [1.0, 0.0], row_id="r2")]
    plain = db.read_standard_rows(write_parquet(tmp_path / "plain.parquet", rows))
    with_compact = write_parquet(tmp_path / "compact.parquet", rows,
                                 {"compact_state_json": ["{not json", None], "compact_candidates": [1, 2]})
    read = db.read_standard_rows(with_compact)
    assert read == plain
    assert all(set(r) == set(db.STANDARD_COLUMNS) for r in read)
    assert db.other_columns(with_compact) == ["compact_state_json", "compact_candidates"]
    mapped = [db.map_row("x", r) for r in read]
    assert [m.request for m in mapped] == [db.map_row("x", r).request for r in plain]


def test_missing_standard_column_names_file_and_column(tmp_path):
    rows = [rec(db_prim("choice"), [C("a", "A"), C("b", "B")], [1.0, 0.0])]
    path = write_parquet(tmp_path / "eval.parquet", [{k: v for k, v in r.items() if k != "source_json"} for r in rows])
    with pytest.raises(SourceFormatError, match=r"eval\.parquet: missing standard column\(s\) \['source_json'\]"):
        db.read_standard_rows(path)


# ---------------------------------------------------------------------------------------------
# scoring rules


def score_rows(rows, predictions):
    """Snapshot rows + raw predictions -> (QuestionTable, official report)."""

    class Snapshot:
        data = "sample"

    Snapshot.rows = rows
    table = build_question_table(rows, predictions)
    return table, db.evaluate(Snapshot, table, predictions)


def ok(answer):
    return {"status": "ok", "response": {"answers": {"decision": answer}}}


@pytest.fixture
def scored():
    rows = [
        db.map_row("t", rec(db_prim("binary"), [C("y", "Yes"), C("n", "No")], [1.0, 0.0], row_id="bin",
                            task_name="gate", domain="d1")),
        db.map_row("t", rec(db_prim("choice"), [C("a", "A"), C("b", "B"), C("c", "C")], [0.0, 1.0, 0.0],
                            row_id="cho", task_name="route", domain="d1")),
        db.map_row("t", rec(db_prim("ordinal"), TOX, [0.3, 0.1, 0.6], row_id="ord", task_name="tox", domain="d2")),
        db.map_row("t", rec(db_prim("choice"), [C("a", "A"), C("b", "B")], [1.0, 0.0], row_id="uns",
                            task_name="route", domain="d2")),
    ]
    predictions = {
        "bin": ok({"noul": 0.0}),  # certain and wrong: P(gold) = 0 hits the NLL floor
        "cho": ok({"probabilities": {"a": 0.1, "b": 0.8, "c": 0.1}}),
        # levels none=0.1, mild=0.45, high=0.45: a tie between high (first in the ORIGINAL order)
        # and mild (first in level order); the original order wins, so the answer is wrong
        "ord": ok({"probabilities": {"0": 0.1, "1": 0.45, "2": 0.45}}),
        "uns": {"status": "unsupported", "error": "too many levels"},
    }
    return score_rows(rows, predictions)


def test_score_answers_are_restored_to_the_original_candidate_order(scored):
    table, _ = scored
    i = list(table.request_id).index("ord")
    assert table.P[i, :3].tolist() == [0.45, 0.1, 0.45]  # high, none, mild
    assert table.label[i] == 2


def test_all_sample_accuracy_counts_unsupported_as_misses(scored):
    _, official = scored
    o = official["groups"]["overall"]
    assert official["primary_accuracy"] == o["primary_accuracy"] == 0.25  # 1 correct of 4 rows
    assert o["accuracy"] == 0.25 and o["accuracy_n"] == 4
    assert o["supported_accuracy"] == pytest.approx(1 / 3)
    assert o["coverage"] == 0.75 and o["successful_rows"] == 3 and o["unsupported_rows"] == 1


def test_reference_nll_floor_beside_the_generic_one(scored):
    _, official = scored
    o = official["groups"]["overall"]
    binary = -math.log(1e-15)
    choice = -math.log(0.8)
    ordinal = -(0.3 * math.log(0.45) + 0.1 * math.log(0.1) + 0.6 * math.log(0.45))
    assert o["nll_upstream_floor_1e-15"] == pytest.approx((binary + choice + ordinal) / 3)
    assert o["nll_generic_floor_1e-12"] == pytest.approx((-math.log(1e-12) + choice + ordinal) / 3)
    assert official["nll_floor"] == 1e-15
    assert o["hard_nll"] == pytest.approx((binary + choice - math.log(0.45)) / 3)  # vs the gold label


def test_ordinal_error_uses_ordinal_values_and_rps_value_order(scored):
    table, official = scored
    o = official["groups"]["overall"]
    # values high=2, none=0, mild=1; P = (.45, .1, .45), gold dist (.3, .1, .6), gold mild (1)
    assert o["expected_ordinal_score"] == pytest.approx(0.45 * 2 + 0.45 * 1)
    assert o["ordinal_error"] == pytest.approx(abs(1.35 - (0.3 * 2 + 0.6 * 1)))
    assert o["ordinal_error_vs_gold_value"] == pytest.approx(0.35)
    # by value: none, mild, high -> P (.1, .45, .45), Y (.1, .6, .3); cumulative gaps 0, -.15; /(K-1)
    assert o["ordinal_rps"] == pytest.approx(0.15**2 / 2)
    generic = generic_metrics(table)["by_type"]["score"]
    assert generic["rps"] == pytest.approx(0.15**2 / 2)  # the generic RPS also in level order
    assert generic["ordinal_mae"] == pytest.approx(abs((0.45 + 0.9) - (0.6 + 0.6)))


def test_reference_ece_equal_width_15_bins(scored):
    _, official = scored
    # valid rows: conf 1.0 wrong (bin 14), 0.8 right (bin 12), 0.45 wrong (bin 6): singleton bins
    assert official["ece_method"] == "equal_width"
    assert official["groups"]["overall"]["reference_ece"] == pytest.approx((1.0 + 0.2 + 0.45) / 3)


def test_equal_width_bins_match_upstream_int_conf_times_15():
    conf = np.array([k / 15 for k in range(16)] + [0.0, 0.999999, 0.5])
    _, bins = M.ece(conf, np.ones(len(conf)), 15, return_bins=True)
    upstream = np.bincount(np.minimum((conf * 15).astype(int), 14), minlength=15)
    assert [b["n"] for b in bins] == upstream.tolist()


def test_official_slices(scored):
    _, official = scored
    g = official["groups"]
    assert official["scorer"] == "jevalkit-decision-protocol-v1" and official["upstream_program_ran"] is False
    assert set(g["primitive"]) == {"binary_classification", "candidate_selection", "ordinal_scoring"}
    assert set(g["task"]) == {"gate", "route", "tox"} and set(g["domain"]) == {"d1", "d2"}
    assert set(g["candidate_count"]) == {"2", "3"} and set(g["language"]) == {"eng"}
    assert g["task"]["route"]["primary_accuracy"] == 0.5  # cho right, uns unsupported
    assert g["domain"]["d2"]["unsupported_rows"] == 1


# ---------------------------------------------------------------------------------------------
# releases: sample, pins, data kinds, full scale


def test_shipped_sample_prepares_to_its_pinned_snapshot(tmp_path):
    manifest = db.prepare(root=tmp_path, source=SAMPLE, data="sample")[0]
    assert manifest["data"] == "sample" and manifest["notes"]["synthetic"]["data_kind"] == "sample"
    assert manifest["counts"] == {"inputs": 16, "questions": 16, "by_type": {"choice": 7, "noul": 5, "score": 4}}
    comp = manifest["notes"]["composition"]
    assert comp["by_primitive"] == {"binary_classification": 5, "candidate_selection": 7, "ordinal_scoring": 4}
    assert comp["gold"] == {"soft": 10, "one_hot": 6}  # s01, s05, s08, s10, s12, s14 one-hot
    assert comp["by_source_dataset"] == {"jevkedro-synthetic": 16}  # per-source licence trail
    assert manifest["notes"]["revision"] == "071b7b2d2e1504c89e1e5a811a3f82e1bfe3aedb"
    snap = load_snapshot(tmp_path, "decisionbench")
    assert all(r.request_id.startswith("synthetic-") for r in snap.rows)


def test_sample_is_what_the_generator_writes(tmp_path):
    syn.write_release(syn.sample_rows(), tmp_path, "sample")
    assert pq.read_table(tmp_path / syn.DATA_FILE).equals(pq.read_table(SAMPLE / syn.DATA_FILE))
    assert db.file_data_kind(SAMPLE / syn.DATA_FILE) == "sample"


def test_official_needs_the_pinned_file_hash(tmp_path):
    # an unmarked, unstamped file in the upstream layout (as a user's download would be)
    write_parquet(tmp_path / "rel" / syn.DATA_FILE, syn.sample_rows())
    with pytest.raises(SnapshotError, match=r"eval-00000-of-00001\.parquet: sha256 \w+ does not match the pinned d9dd5be8"):
        prepare_view("decisionbench", tmp_path / "rel", data="official")


def test_our_releases_are_never_taken_for_the_official_one(tmp_path):
    with pytest.raises(SnapshotError, match="jevkedro 'sample' release .* cannot be prepared as data=official"):
        prepare_view("decisionbench", SAMPLE, data="official")
    with pytest.raises(SnapshotError, match="marks a 'decisionbench' 'sample' release, not a 'decisionbench' 'synthetic'"):
        prepare_view("decisionbench", SAMPLE, data="synthetic")
    shutil.copytree(SAMPLE, tmp_path / "rel")
    (tmp_path / "rel" / DATA_KIND_MARKER).unlink()
    with pytest.raises(SnapshotError, match="no JEVKEDRO_DATA_KIND.json"):
        prepare_view("decisionbench", tmp_path / "rel", data="sample")


def test_the_in_file_stamp_is_checked_too(tmp_path):
    # an unstamped (upstream-like) file in a folder marked as ours is refused ...
    rows = syn.generate_rows(n_rows=43)
    write_parquet(tmp_path / "rel" / syn.DATA_FILE, rows)
    write_data_kind_marker(tmp_path / "rel", db.FAMILY, "synthetic", "test")
    unstamped = r"eval-00000-of-00001\.parquet: prepared as 'synthetic' data, but the file carries no jevkedro marker"
    with pytest.raises(SnapshotError, match=unstamped):
        prepare_view("decisionbench", tmp_path / "rel", data="synthetic")
    # ... and a file of ours copied out of its marked folder is still refused as official
    syn.write_release(rows, tmp_path / "ours", "synthetic")
    (tmp_path / "ours" / DATA_KIND_MARKER).unlink()
    assert db.file_data_kind(tmp_path / "ours" / syn.DATA_FILE) == "synthetic"
    with pytest.raises(SnapshotError, match=r"eval-00000-of-00001\.parquet: this file was written by jevkedro as 'synthetic'"):
        prepare_view("decisionbench", tmp_path / "ours", data="official")


def test_changed_sample_bytes_are_refused(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "rel")
    rows = syn.sample_rows()[:-1]
    syn.write_release(rows, tmp_path / "rel", "sample")
    with pytest.raises(SnapshotError, match="does not match the pinned a04d5d76"):
        prepare_view("decisionbench", tmp_path / "rel", data="sample")


def test_a_short_release_fails_naming_the_counts(tmp_path):
    syn.write_release(syn.generate_rows(n_rows=430), tmp_path, "synthetic")
    with pytest.raises(SnapshotError, match="structure differs from the manifest: rows: found 430, expected 23900"):
        prepare_view("decisionbench", tmp_path, data="synthetic")


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access is read_release's: build maps the same pinned rows once the folder is gone."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample")
    release = db.read_release(parse_prepare_options("decisionbench", {"source": str(source), "data": "sample"}))
    assert [(file, i) for _, file, i, _ in release.content[:2]] == [(syn.DATA_FILE, 0), (syn.DATA_FILE, 1)]
    shutil.rmtree(source)
    prepared = db.build(release, "decisionbench")
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest("decisionbench")["views"][
        "decisionbench"]["snapshot_sha256"]["sample"]
    assert prepared.notes["synthetic"]["data_kind"] == "sample" and prepared.sources == list(release.files)


def test_commit_refuses_counts_that_differ(tmp_path):
    prepared = prepare_view("decisionbench", SAMPLE, data="sample")
    prepared.rows = prepared.rows[:-1]
    with pytest.raises(SnapshotError, match="counts differ from the manifest: inputs: found 15, expected 16"):
        commit_dataset(prepared, tmp_path)


def test_full_scale_synthetic_release_reproduces_the_published_counts(tmp_path):
    syn.write_release(syn.generate_rows(), tmp_path / "rel", "synthetic")
    manifest = db.prepare(root=tmp_path / "snap", source=tmp_path / "rel", data="synthetic")[0]
    assert manifest["counts"]["inputs"] == manifest["counts"]["questions"] == 23_900
    comp = manifest["notes"]["composition"]
    assert (comp["tasks"], comp["primitives"], comp["families"], comp["domains"]) == (43, 3, 27, 28)
    assert min(comp["by_candidate_count"]) == 2 and max(comp["by_candidate_count"]) == 255
    assert comp["reasoning_required"] == 1_200


# ---------------------------------------------------------------------------------------------
# the Kedro view, out of the box


@pytest.mark.e2e
def test_kedro_run_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, mlflow_tags, replay_file, reports

    project = make_project(tmp_path, ["decisionbench"])
    kedro_run(project, "decisionbench")
    report, official = reports(project, "sparrow-nano-general-v1.1", "decisionbench")
    assert report["data"] == "sample" and official["data"] == "sample"
    assert official["scorer"] == "jevalkit-decision-protocol-v1"
    assert report["coverage"]["by_status"]["unsupported"] == 1  # the 11-level row exceeds the model's 10
    assert official["groups"]["overall"]["unsupported_rows"] == 1

    answers = replay_file(project, "sparrow-nano-general-v1.1", "decisionbench", tmp_path / "answers.jsonl")
    kedro_run(project, "decisionbench", f"model.adapter=replay,model.path={answers},model.name=replayed")
    replayed, replayed_official = reports(project, "replayed", "decisionbench")
    assert replayed["adapter"] == "replay"
    assert replayed_official["groups"]["overall"]["primary_accuracy"] == official["groups"]["overall"]["primary_accuracy"]
    # the 11-level row has no recorded answer: unattempted on replay, still a miss
    assert replayed_official["groups"]["overall"]["unattempted_rows"] == 1
    assert [tags["data"] for tags in mlflow_tags(project)] == ["sample", "sample"]
