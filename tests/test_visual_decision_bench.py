"""VisualDecisionBench: source mapping, release checks, the official report and the Kedro views."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from jevkedro.config import SettingsError, parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view
from jevkedro.nodes import metrics as M
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, commit_dataset, load_snapshot, render_tsv
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import visual_decision_bench as vdb
from jevkedro.pipelines.visual_decision_bench import synthetic as syn

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "01_raw" / "visual_decision_bench" / "sample"
# Valen's smoke set lives in the project's shared/ folder beside the repository (CI lays it there too)
SMOKE = ROOT.parent / "shared" / "upstream" / "visualdecisionbench" / "valen-smoke" / "train.jsonl"
P = Path("eval.jsonl")
IMG_URL = "assets/visualdecisionbench_image/x-0001.png"
SHA = "a" * 64


def record(**kw):
    """A hand-written image record in the release's format (invented), overridable by field."""
    base = {
        "request": {"state": {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "A desk with a lamp."},
            {"type": "image_url", "image_url": {"url": IMG_URL}}]}]},
            "questions": {
                "pick": {"type": "choice", "instructions": "Which object is on the left?",
                         "criteria": {"lamp": "The lamp", "book": "The book"}},
                "lit": {"type": "noul", "instructions": "The lamp is on.", "criteria": {"true": "on", "false": "off"}},
                "tidy": {"type": "score", "instructions": "How tidy is the desk?",
                         "criteria": ["Messy", "Fair", "Tidy"]}}},
        "targets": {"pick": {"probabilities": {"lamp": 1, "book": 0}},
                    "lit": {"probabilities": {"true": 0.0, "false": 1.0}},
                    "tidy": {"probabilities": {"0": 0.0, "1": 0.25, "2": 0.75}, "label_source": "votes", "votes": 4}},
        "assets": [{"path": IMG_URL, "sha256": SHA}],
        "group_id": "grp-secret-17",
        "meta": {"benchmark": "VisualDecisionBench", "benchmark_subset": "visualdecisionbench_image",
                 "benchmark_record_id": "visualdecisionbench_image:000000", "source": "upstream-src-9",
                 "license": "cc-by-4.0", "domain": "office", "language_bucket": "en"},
    }
    base.update(kw)
    return base


def mapped(obj, lineno=3):
    return vdb.map_record(P, lineno, obj)


# ---------------------------------------------------------------------------------------------
# mapping


def test_record_mapping():
    row = mapped(record())
    assert row.request_id == "visualdecisionbench_image:000000"
    assert row.request == {
        "state": record()["request"]["state"],
        "questions": {"pick": {"type": "choice", "instructions": "Which object is on the left?",
                               "criteria": {"lamp": "The lamp", "book": "The book"}},
                      "lit": {"type": "noul", "instructions": "The lamp is on."},  # noul criteria dropped
                      "tidy": {"type": "score", "instructions": "How tidy is the desk?",
                               "criteria": ["Messy", "Fair", "Tidy"]}},
        "media": [{"path": IMG_URL, "sha256": SHA, "modality": "image"}],
    }
    assert row.candidates == {"pick": ["lamp", "book"], "lit": ["true", "false"], "tidy": ["0", "1", "2"]}
    assert row.targets["pick"].label == 0 and row.targets["pick"].probabilities == (1.0, 0.0)
    assert row.targets["lit"].label == 1  # gold false, second candidate
    soft = row.targets["tidy"]
    assert soft.label is None and soft.probabilities == (0.0, 0.25, 0.75)
    assert soft.extra == {"label_source": "votes", "votes": 4, "target_kind": "soft"}
    assert row.slices == {"modality": "image", "subset": "visualdecisionbench_image", "domain": "office",
                          "language": "en", "questions": {"pick": {"target": "hard"}, "lit": {"target": "hard"},
                                                          "tidy": {"target": "soft"}}}
    assert row.source["group_id"] == "grp-secret-17" and row.source["noul_criteria_dropped"] == ["lit"]
    row.check()


def test_no_gold_group_or_meta_reaches_the_request():
    obj = record()
    request_text = json.dumps(mapped(obj).request)
    for secret in ("grp-secret-17", "upstream-src-9", "cc-by-4.0", "office", "visualdecisionbench_image:000000",
                   "probabilities", "label_source", "votes", "meta", "targets", "group_id"):
        assert secret not in request_text
    # changing gold, group or meta never changes the request
    other = record(targets={"pick": {"probabilities": {"lamp": 0, "book": 1}},
                            "lit": {"probabilities": {"true": 1, "false": 0}},
                            "tidy": {"probabilities": {"0": 1, "1": 0, "2": 0}}},
                   group_id="g2", meta={**obj["meta"], "domain": "x", "source": "y"})
    assert mapped(other).request == mapped(obj).request


def test_missing_domain_and_language_fall_back_to_unknown_and_meta_modality_wins():
    meta = {k: v for k, v in record()["meta"].items() if k not in ("domain", "language_bucket")}
    row = mapped(record(meta=meta))
    assert (row.slices["domain"], row.slices["language"], row.slices["modality"]) == ("unknown", "unknown", "image")
    row = mapped(record(meta={**meta, "modality": "video", "domain": ""}))
    assert row.slices["modality"] == "video" and row.slices["domain"] == "unknown"


def test_hard_means_exactly_one_candidate_at_one():
    def kind(probs):
        return vdb.map_target("w", "q", list(probs), {"probabilities": probs})

    assert kind({"a": 1, "b": 0, "c": 0}).label == 0
    assert kind({"a": 0.0, "b": 1.0}).label == 1
    assert kind({"a": 0.999999, "b": 0.000001}).label is None  # near one-hot is still soft
    assert kind({"a": 0.5, "b": 0.5}).label is None
    unl = vdb.map_target("w", "q", ["true", "false"], {"probabilities": None})
    assert unl.unscored and unl.extra["target_kind"] == "unlabelled"


def test_valen_smoke_set_maps_as_a_schema_fixture():
    """Valen's own smoke records (Apache-2.0, synthetic, no meta): given a meta, every record maps;
    plain string states have no media; the unlabelled noul (probabilities null) is unscored."""
    if not SMOKE.is_file():
        pytest.skip("shared upstream smoke set not present")
    rows = []
    for i, line in enumerate(SMOKE.read_text(encoding="utf-8").splitlines()):
        obj = json.loads(line)
        modality = "video" if "video" in obj["group_id"] else "image"
        obj["meta"] = {"benchmark_subset": f"visualdecisionbench_{modality}",
                       "benchmark_record_id": f"visualdecisionbench_{modality}:{i:06d}"}
        rows.append(mapped(obj, i + 1))
    by_group = {r.source["group_id"]: r for r in rows}
    assert "media" not in by_group["synthetic-text-0"].request
    assert by_group["synthetic-image"].request["media"][0]["path"] == "green.png"
    assert by_group["synthetic-video"].request["media"][0]["modality"] == "video"
    assert by_group["synthetic-text-0"].candidates["category"] == ["red", "green", "unknown"]
    soft = by_group["synthetic-soft"].targets["soft"]
    assert soft.label is None and soft.probabilities == pytest.approx((2 / 3, 1 / 3, 0.0))
    assert by_group["synthetic-unlabeled"].targets["missing"].unscored


@pytest.mark.parametrize("change, message", [
    (lambda o: o.pop("targets"), r"eval\.jsonl:3: missing field\(s\) \['targets'\]"),
    (lambda o: o["request"]["state"]["messages"][0]["content"][1]["image_url"].update(url="https://x/y.png"),
     r"eval\.jsonl:3: media URL 'https://x/y\.png' is not a relative asset path"),
    (lambda o: o.update(assets=[]), r"eval\.jsonl:3: media URL '.*' is not one of the record's assets"),
    (lambda o: o["targets"].pop("tidy"), r"eval\.jsonl:3: targets .* do not match questions"),
    (lambda o: o["targets"]["pick"].update(probabilities={"lamp": 0.7, "book": 0.2}),
     r"eval\.jsonl:3: target of 'pick': probabilities sum to 0\.9, not 1 within 1e-6"),
    (lambda o: o["targets"]["pick"].update(probabilities={"lamp": 1}), r"eval\.jsonl:3: target of 'pick' must have exactly"),
    (lambda o: o["targets"]["pick"].update(probabilities={"lamp": 1.5, "book": -0.5}), r"finite numbers >= 0"),
    (lambda o: o["request"]["questions"]["pick"].update(criteria={}), r"eval\.jsonl:3: question 'pick': choice criteria"),
    (lambda o: o["request"]["questions"]["tidy"].update(criteria=["only"]), r"eval\.jsonl:3: question 'tidy': score criteria"),
    (lambda o: o["request"]["questions"]["tidy"].update(type="rank"), r"unknown type 'rank'"),
    (lambda o: o["request"]["questions"]["pick"].update(instructions=""), r"instructions must be a non-empty string"),
    (lambda o: o["request"]["questions"]["pick"].update(answer="lamp"), r"fields beyond type/instructions/criteria: \['answer'\]"),
    (lambda o: o["request"].update(media=[]), r"eval\.jsonl:3: request must hold exactly state and questions"),
    (lambda o: o["meta"].update(benchmark_record_id="visualdecisionbench_video:000000"),
     r"eval\.jsonl:3: meta\.benchmark_record_id .* is not 'visualdecisionbench_image:<index:06d>'"),
    (lambda o: o["meta"].update(benchmark_subset="other"), r"eval\.jsonl:3: meta\.benchmark_subset 'other'"),
    (lambda o: o["request"]["state"]["messages"][0].update(role="robot"), r"eval\.jsonl:3: message 0 needs a role"),
    (lambda o: o["assets"].append({"path": "b.png", "sha256": "nothex"}), r"eval\.jsonl:3: asset .* lowercase hex sha256"),
])
def test_malformed_records_name_file_and_line(change, message):
    obj = copy.deepcopy(record())
    change(obj)
    with pytest.raises(SourceFormatError, match=message):
        mapped(obj)


# ---------------------------------------------------------------------------------------------
# releases: pins, counts, media, statistics, data kind


def copy_sample(tmp_path) -> Path:
    return Path(shutil.copytree(SAMPLE, tmp_path / "rel"))


def test_shipped_sample_prepares_to_its_pinned_snapshots(tmp_path):
    manifests = vdb.prepare(root=tmp_path, source=SAMPLE, data="sample")
    counts = {m["view"]: (m["counts"]["inputs"], m["counts"]["questions"]) for m in manifests}
    assert counts == {"visual_decision_bench": (5, 15), "visual_decision_bench_image": (3, 9),
                      "visual_decision_bench_video": (2, 6)}
    full = manifests[0]["notes"]
    assert full["hard_label_questions"] == 13 and full["noul_criteria_dropped"] == 1
    assert full["media"] | {"missing_examples": None} == {
        "assets": 6, "files_hashed": 6, "files_missing": 0, "missing_examples": None, "verify_media": "present",
        "assets_manifest": True}
    assert full["statistics_json"] == "checked" and full["synthetic"]["data_kind"] == "sample"
    # the image and video views are the combined view's records, split by subset, in source order
    rows = {m["view"]: load_snapshot(tmp_path, m["view"]).rows for m in manifests}
    ids = [r.request_id for r in rows["visual_decision_bench"]]
    assert ids == [r.request_id for r in rows["visual_decision_bench_image"] + rows["visual_decision_bench_video"]]
    assert ids[0] == "visualdecisionbench_image:000000" and ids[-1] == "visualdecisionbench_video:000001"


def test_sample_is_what_the_generator_writes(tmp_path):
    syn.write_release(*syn.sample_release(), tmp_path, "sample")
    ours = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*") if p.is_file() and p.name != "README.md")
    assert ours == shipped
    for rel in ours:
        assert (tmp_path / rel).read_bytes() == (SAMPLE / rel).read_bytes(), rel


def test_sample_media_are_a_real_png_and_an_mp4_type_box():
    png = (SAMPLE / "assets/visualdecisionbench_image/syn-0000.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 100
    mp4 = (SAMPLE / "assets/visualdecisionbench_video/syn-0000.mp4").read_bytes()
    assert mp4[4:8] == b"ftyp" and len(mp4) == 24


def test_data_kind_markers_and_record_stamps(tmp_path):
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("visual_decision_bench", SAMPLE, data="official")
    rel = copy_sample(tmp_path)
    (rel / DATA_KIND_MARKER).unlink()
    with pytest.raises(SnapshotError, match="no JEVKEDRO_DATA_KIND.json"):
        prepare_view("visual_decision_bench", rel, data="sample")
    with pytest.raises(SnapshotError, match=r"eval\.jsonl:1: record written by jevkedro .* cannot be prepared as data=official"):
        prepare_view("visual_decision_bench", rel, data="official")
    records, media = syn.sample_release()
    records["visualdecisionbench_video"][0]["meta"]["source"] = "crowd"  # as if a real record were copied in
    syn.write_release(records, media, tmp_path / "mixed", "synthetic")
    with pytest.raises(SnapshotError, match=r"eval\.jsonl:4: prepared as 'synthetic' data, but the record is not marked"):
        prepare_view("visual_decision_bench", tmp_path / "mixed", data="synthetic")


def test_pinned_sample_source_hash(tmp_path):
    rel = copy_sample(tmp_path)
    (rel / "eval.jsonl").write_text((SAMPLE / "eval.jsonl").read_text() + "\n")
    with pytest.raises(SnapshotError, match=r"eval\.jsonl: sha256 \w+ does not match the pinned 51f885aa"):
        prepare_view("visual_decision_bench", rel, data="sample")


def test_bad_json_and_duplicate_ids_name_the_line(tmp_path):
    records, media = syn.sample_release()
    records["visualdecisionbench_image"].append(copy.deepcopy(records["visualdecisionbench_image"][0]))
    syn.write_release(records, media, tmp_path, "synthetic")
    with pytest.raises(SourceFormatError, match=r"eval\.jsonl:4: benchmark_record_id 'visualdecisionbench_image:000000' repeats line 1"):
        prepare_view("visual_decision_bench", tmp_path, data="synthetic")
    with open(tmp_path / "eval.jsonl", "w", encoding="utf-8") as fh:
        fh.write(json.dumps(records["visualdecisionbench_image"][0]) + "\n{not json\n")
    with pytest.raises(SourceFormatError, match=r"eval\.jsonl:2: not valid JSON"):
        prepare_view("visual_decision_bench", tmp_path, data="synthetic")


def test_changed_or_missing_media_and_assets_manifest(tmp_path):
    rel = copy_sample(tmp_path)
    clip = rel / "assets/visualdecisionbench_video/syn-0001.mp4"
    clip.write_bytes(b"changed")
    with pytest.raises(SnapshotError, match=r"syn-0001\.mp4: sha256 \w+ does not match the record's asset sha256 \w+ \(.*eval\.jsonl:5\)"):
        prepare_view("visual_decision_bench_video", rel, data="sample")
    prepare_view("visual_decision_bench_image", rel, data="sample")  # only the view's media are checked
    assert prepare_view("visual_decision_bench_video", rel, data="sample", verify_media="none").notes["media"]["files_hashed"] == 0
    clip.unlink()
    notes = prepare_view("visual_decision_bench_video", rel, data="sample").notes["media"]
    assert (notes["files_missing"], notes["missing_examples"]) == (1, ["assets/visualdecisionbench_video/syn-0001.mp4"])
    with pytest.raises(SnapshotError, match=r"eval\.jsonl:5: media file not found: .*syn-0001\.mp4"):
        prepare_view("visual_decision_bench_video", rel, data="sample", verify_media="all")
    # the assets manifest disagrees with a record (the eval.jsonl pin still holds)
    lines = (rel / "assets_manifest.jsonl").read_text().splitlines()
    entry = json.loads(lines[0])
    lines[0] = json.dumps({**entry, "sha256": "b" * 64})
    (rel / "assets_manifest.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=r"pinned 94134476"):
        prepare_view("visual_decision_bench", rel, data="sample")


def small_scale(image_states=4, video_states=2):
    return {"visualdecisionbench_image": {"states": image_states, "types": {"choice": 3, "noul": 2, "score": 2}, "soft_score": 1},
            "visualdecisionbench_video": {"states": video_states, "types": {"choice": 2, "noul": 2, "score": 1}, "soft_score": 0}}


def test_assets_manifest_and_statistics_mismatches_reject(tmp_path):
    records, media = syn.generate_release(1, small_scale())
    syn.write_release(records, media, tmp_path, "synthetic")
    built = prepare_view("visual_decision_bench_image", tmp_path, data="synthetic")
    assert built.notes["subsets"]["visualdecisionbench_image"]["hard_label_questions"] == 6
    path = tmp_path / "assets_manifest.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "sha256": "b" * 64})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=r"eval\.jsonl:1: asset 'assets/visualdecisionbench_image/gen-000000\.png' "
                                            r"sha256 \w+ differs from assets_manifest\.jsonl:1 \(bbbb"):
        prepare_view("visual_decision_bench", tmp_path, data="synthetic")
    syn.write_release(records, media, tmp_path, "synthetic")
    stats = json.loads((tmp_path / "statistics.json").read_text())
    stats["visualdecisionbench_image"]["hard_label_questions"] = 7
    stats["visualdecisionbench_video"]["types"]["noul"] = 3
    (tmp_path / "statistics.json").write_text(json.dumps(stats))
    with pytest.raises(SnapshotError, match=r"statistics\.json: counts differ from the release statistics: "
                                            r"visualdecisionbench_image\.hard_label_questions: found 6, listed 7; "
                                            r"visualdecisionbench_video\.types: found .*'noul': 2.*, listed .*'noul': 3"):
        prepare_view("visual_decision_bench", tmp_path, data="synthetic")


def test_a_short_release_fails_naming_the_counts(tmp_path):
    syn.write_release(*syn.generate_release(2, small_scale()), tmp_path / "rel", "synthetic")
    with pytest.raises(SnapshotError, match=r"visual_decision_bench from .*eval\.jsonl.*: counts differ from the manifest: "
                                            r"inputs: found 6, expected 1696; questions: found 12, expected 9143"):
        vdb.prepare(root=tmp_path / "snap", source=tmp_path / "rel", data="synthetic")
    image = prepare_view("visual_decision_bench_image", tmp_path / "rel", data="synthetic")
    with pytest.raises(SnapshotError, match=r"visual_decision_bench_image .*by_type\.choice: found 3, expected 1200"):
        commit_dataset(image, tmp_path / "s2")


@pytest.mark.parametrize("view", vdb.VIEWS)
def test_build_maps_the_release_without_touching_the_files(tmp_path, view):
    """Every file access (media hashing included) is read_release's: build maps the same pinned
    rows once the folder is gone."""
    source = copy_sample(tmp_path)
    release = vdb.read_release(parse_prepare_options(view, {"source": str(source), "data": "sample"}), view)
    assert release.notes["media"]["files_hashed"] == release.notes["media"]["assets"] > 0
    shutil.rmtree(source)
    prepared = vdb.build(release, view)
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest(vdb.FAMILY)["views"][view][
        "snapshot_sha256"]["sample"]
    assert prepared.notes["statistics_json"] == "checked" and prepared.sources == list(release.files)


def test_verify_media_is_a_typed_prepare_option_and_a_release_is_read_for_one_view(tmp_path):
    options = parse_prepare_options("visual_decision_bench_video", {"source": str(SAMPLE), "data": "sample"})
    assert isinstance(options, vdb.PrepareOptions) and options.verify_media == "present"
    with pytest.raises(SettingsError, match=r"visual_decision_bench_image\.prepare\.verify_media: 'always' is not allowed; "
                                            r"allowed: one of: present, all, none"):
        parse_prepare_options("visual_decision_bench_image", {"source": str(SAMPLE), "data": "sample", "verify_media": "always"})
    release = vdb.read_release(options, "visual_decision_bench_video")
    assert release.notes["media"]["assets"] == 2  # the video records' media only
    with pytest.raises(ValueError, match="read for view 'visual_decision_bench_video' cannot be built as 'visual_decision_bench'"):
        vdb.build(release, "visual_decision_bench")


def test_hard_label_count_is_checked(monkeypatch, tmp_path):
    built = prepare_view("visual_decision_bench", SAMPLE, data="sample")
    assert built.notes["hard_label_questions"] == 13
    manifest = copy.deepcopy(vdb.family_manifest(vdb.FAMILY))
    manifest["views"]["visual_decision_bench"]["hard_label_questions"]["sample"] = 14
    monkeypatch.setattr(vdb, "family_manifest", lambda family: manifest)
    with pytest.raises(SnapshotError, match="hard_label_questions: found 13, expected 14"):
        prepare_view("visual_decision_bench", SAMPLE, data="sample")


def test_full_scale_synthetic_release_reproduces_the_published_counts(tmp_path):
    syn.write_release(*syn.generate_release(), tmp_path / "rel", "synthetic")
    manifests = vdb.prepare(root=tmp_path / "snap", source=tmp_path / "rel", data="synthetic", verify_media="all")
    got = {m["view"]: (m["counts"]["inputs"], m["counts"]["questions"], m["notes"]["hard_label_questions"]) for m in manifests}
    assert got == {"visual_decision_bench": (1696, 9143, 8843), "visual_decision_bench_image": (1402, 2000, 1700),
                   "visual_decision_bench_video": (294, 7143, 7143)}


# ---------------------------------------------------------------------------------------------
# scoring


def video_record():
    return {
        "request": {"state": {"messages": [{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": "assets/visualdecisionbench_video/c.mp4"}}]}]},
            "questions": {"n1": {"type": "noul", "instructions": "A door opens."},
                          "n2": {"type": "noul", "instructions": "A dog barks."},
                          "n3": {"type": "noul", "instructions": "It rains."},
                          "lvl": {"type": "score", "instructions": "Loudness on 12 levels?",
                                  "criteria": [str(i) for i in range(12)]}}},
        "targets": {"n1": {"probabilities": {"true": 1, "false": 0}},
                    "n2": {"probabilities": {"true": 0, "false": 1}},
                    "n3": {"probabilities": {"true": 1, "false": 0}},
                    "lvl": {"probabilities": {str(i): (0.25 if i == 0 else 0.75 if i == 11 else 0) for i in range(12)}}},
        "assets": [{"path": "assets/visualdecisionbench_video/c.mp4", "sha256": SHA}],
        "group_id": "g-v",
        "meta": {"benchmark_subset": "visualdecisionbench_video", "benchmark_record_id": "visualdecisionbench_video:000000",
                 "domain": "street"},
    }


def score(objs, predictions):
    class Snapshot:
        data = "sample"

    rows = [mapped(o, i) for i, o in enumerate(objs, 1)]
    table = build_question_table(rows, predictions)
    return table, vdb.evaluate(Snapshot, table, predictions)


@pytest.fixture
def scored():
    predictions = {
        "visualdecisionbench_image:000000": {"status": "ok", "response": {"answers": {
            "pick": {"probabilities": {"lamp": 0.8, "book": 0.2}},  # correct
            "lit": {"noul": 0.5},  # a tie: true comes first -> predicted true, gold false: wrong
            "tidy": {"probabilities": {"0": 0.2, "1": 0.3, "2": 0.5}}}}},  # soft target
        "visualdecisionbench_video:000000": {"status": "ok", "unsupported_questions": ["lvl"], "response": {"answers": {
            "n1": {"noul": 0.9},  # gold true, predicted true
            "n2": {"noul": 0.3},  # gold false, predicted false
            "n3": {"noul": 1.2}}}},  # invalid (> 1): unanswered, gold true
    }
    return score([record(), video_record()], predictions)


def test_noul_tie_goes_to_true(scored):
    table, _ = scored
    i = list(table.question_id).index("lit")
    assert table.P[i, :2].tolist() == [0.5, 0.5] and M.top_label(table.P[i:i + 1])[0][0] == 0


def test_reference_groups_hand_computed(scored):
    table, official = scored
    g = official["groups"]
    assert official["scorer"] == "jevalkit-decision-protocol-v1" and official["ece_method"] == "equal_width"
    # Unknowns 3 and 4 are stated in every report
    assert official["nll_floor"] == 1e-12 and official["upstream_program_ran"] is False
    assert "1e-12" in official["assumptions"]["nll_floor"] and "first candidate" in official["assumptions"]["argmax_ties"]
    o = g["overall"]
    # hard: pick (ok), lit (wrong), n1 (ok), n2 (ok), n3 (invalid), lvl is soft -> 3/5
    assert (o["n"], o["accuracy"], o["accuracy_n"]) == (7, 0.6, 5)
    assert o["hard_nll"] == pytest.approx(-(math.log(0.8) + math.log(0.5) + math.log(0.9) + math.log(0.7)) / 4)
    assert set(g) >= {"modality", "type", "type_modality", "domain", "language", "subset", "target"}
    assert g["modality"]["image"]["accuracy"] == 0.5 and g["modality"]["video"]["accuracy"] == pytest.approx(2 / 3)
    assert set(g["type_modality"]) == {"choice/image", "noul/image", "score/image", "noul/video", "score/video"}
    assert g["domain"]["office"]["n"] == 3 and g["language"]["unknown"]["n"] == 4  # video meta: no language
    assert g["target"]["soft"]["n"] == 2 and g["target"]["soft"]["accuracy"] is None
    assert g["subset"]["visualdecisionbench_video"]["accuracy_n"] == 3


def test_valen_summary_and_macro_f1_hand_computed(scored):
    _, official = scored
    valen = official["valen"]
    noul = valen["groups"]["task/noul"]
    # lit: gold false, pred true -> FP; n1: TP; n2: TN; n3: gold true unanswered
    assert noul["confusion"] == {"true_positive": 1, "false_negative": 0, "false_positive": 1, "true_negative": 1,
                                 "unanswered_true": 1, "unanswered_false": 0}
    f_true = 2 * 1 / (2 * 1 + 1 + 1)  # TP 1, FP 1, FN 0 + 1 unanswered
    f_false = 2 * 1 / (2 * 1 + 0 + 1)  # TN 1 as TP of false, FP = FN_pred 0, FN = FP 1
    assert noul["macro_f1"] == pytest.approx((f_true + f_false) / 2)
    assert official["noul_macro_f1"]["overall"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert noul["accuracy"] == 0.5 and noul["metric_counts"]["macro_f1"] == 4
    # video noul only: TP 1, TN 1, unanswered true 1 -> F1_true = 2/3, F1_false = 1
    assert valen["subsets"]["visualdecisionbench_video"]["task/noul"]["macro_f1"] == pytest.approx((2 / 3 + 1) / 2)
    # score: only the soft image tidy question is valid (lvl unsupported)
    score_g = valen["groups"]["task/score"]
    assert score_g["expected_score_mae"] == pytest.approx(abs((0.3 + 1.0) - (0.25 + 1.5)))
    assert score_g["rps"] == pytest.approx(((0.2 - 0) ** 2 + (0.5 - 0.25) ** 2) / 2)
    assert score_g["metric_counts"]["rps"] == 1 and score_g["accuracy"] is None and score_g["macro_f1"] is None
    assert set(valen["groups"]) >= {"overall", "task/choice", "modality/image", "task_modality/noul/video",
                                    "language/en", "language/unknown", "domain/street"}
    assert valen["headline"]["hard_label_accuracy"] == {
        "visualdecisionbench_image": {"accuracy": 0.5, "n": 2},
        "visualdecisionbench_video": {"accuracy": pytest.approx(2 / 3), "n": 3}}
    o = valen["groups"]["overall"]
    assert o["metric_counts"]["nll"] == 5  # pick, lit, tidy, n1, n2
    assert o["brier"] == pytest.approx((0.08 + 0.5 + (0.04 + 0.0025 + 0.0625) + 0.02 + 0.18) / 5)


def test_macro_f1_zero_denominator_is_zero():
    assert vdb.f1(0, 0, 0) == 0.0
    counts = {"true_positive": 0, "false_negative": 0, "false_positive": 0, "true_negative": 3,
              "unanswered_true": 0, "unanswered_false": 0}
    assert vdb.macro_f1(counts) == {"macro_f1": 0.5, "f1_true": 0.0, "f1_false": 1.0}


def test_worked_check_twelve_level_uniform_prediction():
    """Spec §5: 12 levels, uniform prediction vs target {0: .25, 11: .75} -> expected-score MAE 2.75."""
    obj = video_record()
    predictions = {"visualdecisionbench_video:000000": {"status": "ok", "response": {"answers": {
        "n1": {"noul": 0.9}, "n2": {"noul": 0.1}, "n3": {"noul": 0.9},
        "lvl": {"probabilities": {str(i): 1 / 12 for i in range(12)}}}}}}
    _, official = score([obj], predictions)
    assert official["valen"]["groups"]["task/score"]["expected_score_mae"] == pytest.approx(2.75)


def test_scores_beyond_ten_levels_are_unsupported_for_jev_class_adapters():
    """Unknown 6: the request keeps all 12 levels; Jev-class adapters (2-10 levels) mark the question unsupported."""
    from jevkedro.models.sparrow import SparrowAdapter
    from jevkedro.models.systemone import SystemOneAdapter

    q = mapped(video_record()).request["questions"]["lvl"]
    assert len(q["criteria"]) == 12
    assert SparrowAdapter().unsupported_reason("s", q) == "score questions need 2-10 levels"
    assert SystemOneAdapter(endpoint="https://api.example/v1", api_key_env="").question_problem(q) == "score questions need 2-10 levels"


def test_media_requests_are_unsupported_for_text_only_adapters_and_images_go_multipart():
    """Unknown 8: the request carries media paths/hashes only; sparrow and a text-only System One
    server record image and video requests unsupported; an image server gets the image parts."""
    from jevkedro.models.sparrow import SparrowAdapter
    from jevkedro.models.systemone import SystemOneAdapter

    image = mapped(record()).request
    video = mapped(video_record()).request
    sparrow = SparrowAdapter()
    for request in (image, video):
        result = sparrow.answer("r", request)
        assert result.status == "unsupported" and "text only" in result.error
    # even a plain-string state with media listed is refused (the media field alone is enough)
    assert sparrow.answer("r", {**image, "state": "text"}).status == "unsupported"
    text_server = SystemOneAdapter(endpoint="https://api.example/v1", api_key_env="")
    assert text_server.build(image)[3].startswith("image input on a text-only server")
    image_server = SystemOneAdapter(endpoint="https://api.example/v1", api_key_env="", images="multipart")
    body, urls, skipped, why = image_server.build(image)
    assert why is None and urls == [IMG_URL] and "media" not in body and set(body) == {"state", "questions"}
    assert image_server.build(video)[3] == "video input: no System One server takes video"


# ---------------------------------------------------------------------------------------------
# the Kedro views, out of the box


@pytest.mark.e2e
def test_kedro_runs_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, reports, write_replay

    project = make_project(tmp_path, ["visual_decision_bench"])
    kedro_run(project, "visual_decision_bench")
    report, official = reports(project, "sparrow-nano-general-v1.1", "visual_decision_bench")
    assert report["data"] == "sample" and official["data"] == "sample"
    assert report["coverage"]["questions"] == 15 and report["coverage"]["by_status"]["unsupported"] == 15
    assert official["groups"]["overall"]["accuracy"] == 0.0 and official["groups"]["overall"]["accuracy_n"] == 13
    kedro_run(project, "visual_decision_bench_image")
    image, image_official = reports(project, "sparrow-nano-general-v1.1", "visual_decision_bench_image")
    assert image["coverage"]["by_status"]["unsupported"] == 9 and set(image_official["groups"]["modality"]) == {"image"}

    def gold_first(question, candidates):  # every answer puts 0.7 on the first candidate
        if question["type"] == "noul":
            return {"noul": 0.7}
        rest = 0.3 / (len(candidates) - 1)
        return {"probabilities": {c: (0.7 if i == 0 else rest) for i, c in enumerate(candidates)}}

    answers = write_replay(project, "visual_decision_bench", gold_first, tmp_path / "answers.jsonl")
    kedro_run(project, "visual_decision_bench_video", f"model.adapter=replay,model.path={answers},model.name=replayed")
    replayed, replayed_official = reports(project, "replayed", "visual_decision_bench_video")
    assert replayed["coverage"]["by_status"]["ok"] == 6
    # video sample golds: first=cup (0), safe=true (0), speed=1, stops=false, lights=true, turn=right
    o = replayed_official["groups"]["overall"]
    assert (o["accuracy"], o["accuracy_n"]) == (0.5, 6)
    assert replayed_official["valen"]["headline"]["hard_label_accuracy"] == {
        "visualdecisionbench_video": {"accuracy": 0.5, "n": 6}}
    # noul: safe TP, stops FP, lights TP -> F1_true = 4/5, F1_false = 0
    assert replayed_official["noul_macro_f1"]["overall"] == pytest.approx(0.4)


def test_a_view_of_one_option_choices_scores_without_noul_groups():
    obj = record()
    obj["request"]["questions"] = {"only": {"type": "choice", "instructions": "Pick it.", "criteria": {"it": "It"}}}
    obj["targets"] = {"only": {"probabilities": {"it": 1}}}
    table, official = score([obj], {"visualdecisionbench_image:000000": {"status": "ok", "response": {
        "answers": {"only": {"probabilities": {"it": 1.0}}}}}})
    assert table.P.shape == (1, 1)
    assert official["groups"]["overall"]["accuracy"] == 1.0 and official["noul_macro_f1"] == {}
    assert official["valen"]["groups"]["overall"]["confusion"] is None
