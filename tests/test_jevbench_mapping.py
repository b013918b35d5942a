"""JevBench source mapping: pins, counts, load order, what reaches the model, clear rejections."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from jevkedro.config import parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, load_snapshot, render_tsv
from jevkedro.pipelines import jevbench
from jevkedro.pipelines.jevbench import official
from jevkedro.registry import VIEWS
from support import jevbench_snapshot_of as snapshot_of
from support import task

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "01_raw" / "jevbench" / "sample"
COMMIT = "bb05a335bc809e61b20c0f745d25499a82b326fc"


def test_manifest_pins_the_release_and_its_counts():
    m = family_manifest("jevbench")
    assert m["upstream"]["repo"] == "fstandhartinger/jevbench" and m["upstream"]["commit"] == COMMIT
    pins = m["sources"]["official"]
    assert [p["tier"] for p in pins] == ["original", "easy", "hard"]  # Unknown 5: load order
    assert {p["tier"]: p["rows"] for p in pins} == {"original": 72, "easy": 48, "hard": 111}
    assert {p["tier"]: p["sha256"] for p in pins} == {
        "easy": "231df3c2c8e88a1a8c137ebe85de96ba70fabd330849098ac7b3c52c70b7172b",
        "original": "5c2414edb3006b8bfcb70fda433f0f9ca015759433849f8d3104328a1f7c4180",
        "hard": "89e9e6becb33ed88c1de7d42dcc87531b2fb64cfaef4e1986faf7c37b3f80ebb",
    }
    assert all(p["commit"] == COMMIT and p["path"] == f"datasets/public/{p['file']}" for p in pins)
    counts = m["views"]["jevbench"]["counts"]["official"]
    assert counts["inputs"] == counts["questions"] == 231 == sum(counts["by_type"].values())
    assert counts["by_type"] == {"choice": 139, "noul": 74, "score": 18}
    assert sum(m["tiers"]["easy"]["option_counts"].values()) == 48
    assert "jevbench" in VIEWS


def test_sample_builds_to_its_pinned_snapshot(tmp_path):
    manifests = jevbench.prepare(root=tmp_path, source=SAMPLE, data="sample")
    man = manifests[0]
    assert man["data"] == "sample" and man["notes"]["synthetic"] is True
    assert man["snapshot"]["sha256"] == family_manifest("jevbench")["views"]["jevbench"]["snapshot_sha256"]["sample"]
    assert man["notes"]["tasks_by_tier"] == {"original": 8, "easy": 6, "hard": 8}
    assert man["notes"]["expected_null"] == ["hard-sol-b-ambiguous-01"]  # Unknown 7: counted at build
    assert man["notes"]["excluded"] == ["hard-opus-c-trap-01"]
    snap = load_snapshot(tmp_path, "jevbench")
    ids = [r.request_id for r in snap.rows]
    assert ids[0] == "original-policy-01-0" and ids[8] == "easy-intent-01" and ids[-1] == "hard-sol-b-ambiguous-01"


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access is read_release's: build maps the same pinned rows once the folder is gone."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample")
    release = jevbench.read_release(parse_prepare_options("jevbench", {"source": str(source), "data": "sample"}))
    assert release.notes["tasks_by_tier"] == {"original": 8, "easy": 6, "hard": 8}
    shutil.rmtree(source)
    prepared = jevbench.build(release, "jevbench")
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest("jevbench")["views"]["jevbench"][
        "snapshot_sha256"]["sample"]
    assert prepared.notes["tasks_by_tier"] == release.notes["tasks_by_tier"] and prepared.sources == list(release.files)


def test_tasks_per_tier_are_checked_when_the_release_is_read(monkeypatch):
    easy = family_manifest("jevbench")["sources"]["sample"][1]
    monkeypatch.setitem(easy, "rows", 7)
    with pytest.raises(SnapshotError, match=r"easy.jsonl: 6 tasks, pinned 7"):
        jevbench.read_release(parse_prepare_options("jevbench", {"source": str(SAMPLE), "data": "sample"}))


def test_request_holds_state_and_question_only():
    path = SAMPLE / "hard.jsonl"
    line = path.read_text(encoding="utf-8").splitlines()[2]
    obj = json.loads(line)
    row = jevbench.map_row(path, 3, obj, "hard")
    assert row.request == {"state": obj["state"], "questions": {"decision": {
        "type": "choice", "instructions": obj["question"]["instructions"], "criteria": obj["question"]["criteria"]}}}
    text = json.dumps(row.request)
    for secret in (obj["id"], obj["group"], "gold_probs", "author_model", obj["provenance"]["rationale"], "expected"):
        assert secret not in text
    # the gold distribution is a target (candidate order), the label its index
    assert row.targets["decision"].probabilities == (0.7, 0.3) and row.targets["decision"].label == 0
    assert row.source["provenance"]["gold_probs"] == {"approve": 0.7, "deny": 0.3}


def test_noul_keeps_its_criteria_as_written_and_choice_keeps_label_order(tmp_path):
    snap = snapshot_of(tmp_path, [
        task("easy-fact-01", "noul", ["no", "yes"], "yes", criteria={"true": "PASS RUBRIC", "false": "FAIL RUBRIC"}),
        task("easy-tool_selection-01", "choice", ["web", "calc", "atlas"], "calc"),
        task("easy-intent-01", "choice", ["x", "y"], "y", criteria=None),
        task("original-ordinal-01-0", "score", ["0", "1", "2"], 2, group="original-ordinal-01"),
    ])
    noul_row, choice_row, bare_row, score_row = snap.rows
    assert noul_row.request["questions"]["decision"]["criteria"] == {"true": "PASS RUBRIC", "false": "FAIL RUBRIC"}
    assert noul_row.targets["decision"].label == 1  # yes = "true", second candidate
    assert choice_row.candidates["decision"] == ["web", "calc", "atlas"] and choice_row.targets["decision"].label == 1
    assert "criteria" not in bare_row.request["questions"]["decision"]  # null criteria omitted on the wire
    assert score_row.candidates["decision"] == ["0", "1", "2"] and score_row.targets["decision"].label == 2
    assert score_row.slices["variant"] == "0" and score_row.source["group"] == "original-ordinal-01"


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("labels"), "missing field(s) ['labels']"),
    (lambda t: t.update(expected=True, labels=["0", "1"], question={"type": "score", "instructions": "q",
                                                                    "criteria": ["a", "b"]}), "integer level"),
    (lambda t: t.update(expected=2, labels=["0", "1"], question={"type": "score", "instructions": "q",
                                                                 "criteria": ["a", "b"]}), "outside 0..1"),
    (lambda t: t.update(expected="maybe"), "is not one of the labels"),
    (lambda t: t.update(labels=["yes", "no"], question={"type": "noul", "instructions": "q"}), "noul labels must be"),
    (lambda t: t.update(labels=["a", "c"]), "differ from the labels"),
    (lambda t: t.update(state={"text": "x", "answer_key": "a"}), "structured state carries ['answer_key']"),
    (lambda t: t.update(id="hard-opus-a-intent-01"), "does not belong to the easy tier"),
    (lambda t: t["provenance"].update(gold_probs={"a": 0.5, "b": 0.4}), "gold_probs sums to"),
    (lambda t: t["question"].update(type="rank"), "unknown question type"),
])
def test_malformed_tasks_are_rejected_naming_file_and_line(change, message):
    obj = task("easy-intent-01", "choice", ["a", "b"], "a")
    change(obj)
    with pytest.raises(SourceFormatError) as err:
        jevbench.map_row(Path("easy.jsonl"), 7, obj, "easy")
    assert str(err.value).startswith("easy.jsonl:7: ") and message in str(err.value)


def test_another_jevbench_projects_record_is_refused():
    # a PyPI-jevbench-style coherence item: no labels or gold
    obj = {"id": "easy-c-1", "prompt": "Is A bigger than B?", "variants": ["B smaller than A?"], "relation": "equiv"}
    with pytest.raises(SourceFormatError, match="not a JevBench \\(fstandhartinger\\) task"):
        jevbench.map_row(Path("easy.jsonl"), 1, obj, "easy")


def test_official_files_are_checked_against_the_pins(tmp_path):
    src = tmp_path / "public"
    shutil.copytree(SAMPLE, src)
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):  # marked as ours
        prepare_view("jevbench", src, data="official")
    (src / DATA_KIND_MARKER).unlink()
    with pytest.raises(SnapshotError) as err:  # unmarked, its files still are not the upstream release
        prepare_view("jevbench", src, data="official")
    assert str(src / "original.jsonl") in str(err.value) and "5c2414edb3006b8b" in str(err.value)


def test_a_changed_sample_byte_is_refused(tmp_path):
    src = tmp_path / "sample"
    shutil.copytree(SAMPLE, src)
    path = src / "easy.jsonl"
    path.write_bytes(path.read_bytes().replace(b"blender", b"Blender"))
    with pytest.raises(SnapshotError, match="does not match the pinned"):
        prepare_view("jevbench", src, data="sample")


def test_duplicate_ids_and_bad_json_name_file_and_line(tmp_path):
    first = (SAMPLE / "easy.jsonl").read_text(encoding="utf-8").splitlines()[0]
    dup = tmp_path / "easy.jsonl"
    dup.write_text(first + "\n" + first + "\n", encoding="utf-8")
    records, _ = jevbench.read_tiers([("easy", dup)])
    with pytest.raises(SourceFormatError, match=r"easy.jsonl:2: task id 'easy-intent-01' repeats"):
        jevbench.map_tasks(records)
    dup.write_text(first + "\n{not json\n", encoding="utf-8")
    with pytest.raises(SourceFormatError, match=r"easy.jsonl:2: not valid JSON"):
        jevbench.read_tiers([("easy", dup)])
    records, per_tier = jevbench.read_tiers([("easy", SAMPLE / "easy.jsonl"), ("hard", SAMPLE / "hard.jsonl")])
    rows = jevbench.map_tasks(records)
    assert per_tier == {"easy": 6, "hard": 8} and len(rows) == 14


def test_official_summary_refuses_a_snapshot_from_another_repository(tmp_path):
    snap = snapshot_of(tmp_path, [task("easy-fact-01", "noul", ["no", "yes"], "yes")], data="official")
    snap.manifest["sources"] = [{"file": "easy.jsonl", "repo": "JevBench/jevbench", "commit": "0" * 40}]
    with pytest.raises(SnapshotError, match="other JevBench projects are never mixed in"):
        official.official_summary(snap, {})


def test_official_summary_says_which_jevbench_and_that_a_sample_is_synthetic(tmp_path):
    jevbench.prepare(root=tmp_path, source=SAMPLE, data="sample")
    out = official.official_summary(load_snapshot(tmp_path, "jevbench"), {})
    b = out["benchmark"]
    assert b["repository"] == "github:fstandhartinger/jevbench" and b["commit"] == COMMIT
    assert b["synthetic"] is True and "not JevBench results" in b["note"] and "PyPI" in b["not_the_same_as"]
    assert out["overall"]["n_attempted"] == 0 and out["overall"]["accuracy"] == 0.0
    assert out["overall"]["n_scorable"] == 20 and len(out["items"]) == 22


def test_choice_without_criteria_is_unsupported_by_the_embedded_model_and_counts_wrong(tmp_path):
    from jevkedro.models.sparrow import SparrowAdapter
    from support import record

    snap = snapshot_of(tmp_path, [task("easy-intent-01", "choice", ["x", "y"], "y", criteria=None)])
    question = snap.rows[0].request["questions"]["decision"]
    assert SparrowAdapter().unsupported_reason("some state", question) == "choice questions need at least two options"
    preds = {"easy-intent-01": record(None, status="unsupported", error="no question fits the model's limits")}
    item = official.official_summary(snap, preds)["items"][0]
    assert item["valid"] is False and item["correct"] is False and item["error"].startswith("unsupported")


def test_missing_release_points_to_the_download_step(tmp_path):
    with pytest.raises(SnapshotError, match="jevkedro.pipelines.jevbench.download --dest"):
        prepare_view("jevbench", tmp_path / "public", data="official")
