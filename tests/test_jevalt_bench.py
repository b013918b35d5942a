"""JevAlt-Bench: source mapping, family rules, pins, synthetic releases and the Kedro view."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevkedro.config import parse_prepare_options
from jevkedro.family import DATA_KIND_MARKER, family_manifest, prepare_view
from jevkedro.nodes import metrics as M
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, load_snapshot, render_tsv
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import jevalt_bench as ja
from jevkedro.pipelines.jevalt_bench import synthetic as syn
from jevkedro.protocol import dumps

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "01_raw" / "jevalt_bench" / "sample"
P = Path("en/test.jsonl")


def item(**kw):
    """A hand-written JevOss item (English), overridable field by field."""
    base = {
        "id": "en-0001", "lang": "en", "state": "The parcel arrived damaged yesterday.",
        "questions": {"kind": {"type": "choice", "instructions": "What happened?",
                               "criteria": {"damage": "Damaged goods", "late": "Late delivery"}},
                      "refund": {"type": "noul", "instructions": "Is a refund due?"}},
        "targets": {"kind": {"label": "damage", "dist": {"damage": 0.99, "late": 0.01}},
                    "refund": {"label": "yes", "dist": {"no": 0.2, "yes": 0.8}}},
        "tags": ["group:g1"],
    }
    base.update(kw)
    return base


def mapped(obj, lang="en"):
    return ja.map_row(P, 3, obj, lang)


# ---------------------------------------------------------------------------------------------
# mapping


def test_plain_item_mapping():
    row = mapped(item())
    assert row.request_id == "en/en-0001"
    assert row.request == {"state": "The parcel arrived damaged yesterday.",
                           "questions": {"kind": {"type": "choice", "instructions": "What happened?",
                                                  "criteria": {"damage": "Damaged goods", "late": "Late delivery"}},
                                         "refund": {"type": "noul", "instructions": "Is a refund due?"}}}
    assert row.candidates == {"kind": ["damage", "late"], "refund": ["false", "true"]}
    assert row.targets["kind"].label == 0 and row.targets["kind"].probabilities == (0.99, 0.01)
    # noul: (no, yes) -> (false, true); gold yes is index 1
    assert row.targets["refund"].label == 1 and row.targets["refund"].probabilities == (0.2, 0.8)
    assert row.slices["language"] == "en" and row.slices["abstain"] == "no"
    assert row.source["id"] == "en-0001" and row.source["line"] == 3
    text = json.dumps(row.request)
    for word in ("en-0001", "group:g1", "targets", "0.99"):
        assert word not in text


def test_placeholder_train_field_is_ignored():
    plain, with_train = mapped(item()), mapped(item(train=True))
    assert with_train == plain
    assert mapped(item(train={"split": "train", "seed": 3})) == plain


def test_noul_criteria_keys_normalise_and_bad_keys_fail():
    q = {"type": "noul", "instructions": "?", "criteria": {"yes": "agree", "no": "disagree"}}
    row = mapped(item(questions={"n": q}, targets={"n": {"label": "no", "dist": {"no": 0.9, "yes": 0.1}}}))
    assert row.request["questions"]["n"]["criteria"] == {"true": "agree", "false": "disagree"}
    q["criteria"] = {"1": "agree", "0": "disagree"}
    assert mapped(item(questions={"n": q}, targets={"n": {"label": "no", "dist": {"no": 1.0}}})) \
        .request["questions"]["n"]["criteria"] == {"true": "agree", "false": "disagree"}
    q["criteria"] = {"maybe": "?"}
    with pytest.raises(SourceFormatError, match=r"en/test\.jsonl:3: question 'n': noul criteria keys"):
        mapped(item(questions={"n": q}, targets={"n": {"label": "no", "dist": {"no": 1.0}}}))


def test_abstain_flag_appends_unknown_to_choice_and_score_not_noul():
    obj = item(abstain=True, lang="de", id="de-7",
               questions={"c": {"type": "choice", "instructions": "Welche?", "criteria": {"a": "A", "b": "B"}},
                          "s": {"type": "score", "instructions": "Wie?", "criteria": ["low", "high"]},
                          "n": {"type": "noul", "instructions": "Ob?"}},
               targets={"c": {"label": "unknown", "dist": {"a": 0.05, "b": 0.05, "unknown": 0.9}},
                        "s": {"label": "1", "dist": {"0": 0.1, "1": 0.8, "unknown": 0.1}},
                        "n": {"label": "no", "dist": {"no": 0.7, "yes": 0.3}}})
    row = ja.map_row(Path("de/test.jsonl"), 1, obj, "de")
    text = ja.UNKNOWN_DESCRIPTION["de"]
    assert row.request["questions"]["c"]["criteria"] == {"a": "A", "b": "B", "unknown": text}
    assert row.request["questions"]["s"]["criteria"] == ["low", "high", text]
    assert "criteria" not in row.request["questions"]["n"]
    assert row.candidates == {"c": ["a", "b", "unknown"], "s": ["0", "1", "2"], "n": ["false", "true"]}
    assert row.targets["c"].label == 2 and row.targets["c"].probabilities == (0.05, 0.05, 0.9)
    assert row.targets["s"].label == 1 and row.targets["s"].probabilities == pytest.approx((0.1, 0.8, 0.1))
    assert row.slices["questions"] == {"c": {"unknown_candidate": "yes"}, "s": {"unknown_candidate": "yes"},
                                       "n": {"unknown_candidate": "no"}}
    assert row.targets["c"].extra["unknown_candidate"] is True
    assert ja.offers_unknown(row.request) and not ja.offers_unknown(mapped(item()).request)
    assert set(row.request) == {"state", "questions"}  # the abstain flag itself is never in the request


def test_targets_and_tags_never_change_the_request():
    base = item(abstain=True)
    gold_unknown = copy.deepcopy(base)
    gold_unknown["targets"]["kind"] = {"label": "unknown", "dist": {"damage": 0.1, "late": 0.1, "unknown": 0.8}}
    assert mapped(gold_unknown).request == mapped(base).request
    # an "abstain" tag (metadata) or unknown gold without the public flag adds no candidate
    tagged = item(tags=["group:g1", "abstain"])
    tagged["targets"]["kind"] = {"label": "damage", "dist": {"damage": 0.85, "late": 0.05, "unknown": 0.1}}
    assert mapped(tagged).request == mapped(item()).request


def test_unknown_mass_without_candidate_is_dropped_and_unknown_gold_is_unscored():
    obj = item()
    obj["targets"]["kind"] = {"label": "damage", "dist": {"damage": 0.85, "late": 0.05, "unknown": 0.1}}
    t = mapped(obj).targets["kind"]
    assert t.probabilities == pytest.approx((0.85 / 0.9, 0.05 / 0.9)) and t.label == 0
    assert t.extra["dropped_unknown_mass"] == 0.1
    obj["targets"]["kind"] = {"label": "unknown", "dist": {"damage": 0.1, "late": 0.1, "unknown": 0.8}}
    t = mapped(obj).targets["kind"]
    assert t.unscored and t.label is None and "no unknown candidate" in t.extra["unscored_reason"]


def test_score_unknown_mass_without_the_flag_is_dropped_and_with_it_kept_on_the_last_level():
    q = {"type": "score", "instructions": "Risk?", "criteria": {"low": "Low", "high": "High"}}
    target = {"label": "high", "dist": {"low": 0.2, "high": 0.6, "unknown": 0.2}}
    t = mapped(item(questions={"r": q}, targets={"r": target})).targets["r"]
    assert t.label == 1 and t.probabilities == pytest.approx((0.25, 0.75))  # 0.2/0.8, 0.6/0.8
    assert t.extra["dropped_unknown_mass"] == 0.2
    row = mapped(item(questions={"r": q}, targets={"r": target}, abstain=True))
    assert row.candidates["r"] == ["0", "1", "2"] and row.request["questions"]["r"]["criteria"][:2] == ["Low", "High"]
    t = row.targets["r"]
    assert t.label == 1 and t.probabilities == pytest.approx((0.2, 0.6, 0.2)) and "dropped_unknown_mass" not in t.extra


def test_abstain_must_be_a_boolean():
    with pytest.raises(SourceFormatError, match="abstain must be true or false, got 'yes'"):
        mapped(item(abstain="yes"))
    assert mapped(item(abstain=None)).slices["abstain"] == "no"


def test_dict_form_score_keeps_insertion_order_and_key_map():
    q = {"type": "score", "instructions": "Risk?", "criteria": {"high": "Hoch", "low": None, "mid": "Mittel"}}
    obj = item(questions={"r": q}, targets={"r": {"label": "mid", "dist": {"high": 0.1, "low": 0.2, "mid": 0.7}}})
    row = mapped(obj)
    assert row.request["questions"]["r"]["criteria"] == ["Hoch", "low", "Mittel"]  # null text -> key
    assert row.candidates["r"] == ["0", "1", "2"]
    t = row.targets["r"]
    assert t.label == 2 and t.probabilities == (0.1, 0.2, 0.7) and t.extra["level_keys"] == ["high", "low", "mid"]


def test_score_labels_by_position_or_list_dist_and_validation():
    q = {"type": "score", "instructions": "Level?", "criteria": ["a", "b", "c"]}
    t = mapped(item(questions={"s": q}, targets={"s": {"label": 2, "dist": [0.1, 0.1, 0.8]}})).targets["s"]
    assert t.label == 2 and t.probabilities == (0.1, 0.1, 0.8)
    with pytest.raises(SourceFormatError, match=r"en/test\.jsonl:3: question 's': label 'c' is not an option value"):
        mapped(item(questions={"s": q}, targets={"s": {"label": "c", "dist": {"0": 1.0}}}))
    with pytest.raises(SourceFormatError, match=r"dist keys \['x'\] are not option values"):
        mapped(item(questions={"s": q}, targets={"s": {"label": "0", "dist": {"0": 0.5, "x": 0.5}}}))
    with pytest.raises(SourceFormatError, match="dist sums to 0.5"):
        mapped(item(questions={"s": q}, targets={"s": {"label": "0", "dist": {"0": 0.5}}}))


def test_extra_question_fields_go_into_the_instruction():
    q = {"type": "choice", "instructions": {"task": "Pick"}, "criteria": {"a": "A", "b": "B"},
         "examples": [{"x": "é"}], "hint": "line1\nline2"}
    row = mapped(item(questions={"c": q}, targets={"c": {"label": "a", "dist": {"a": 1.0}}}))
    wire = row.request["questions"]["c"]
    assert set(wire) == {"type", "instructions", "criteria"}
    assert wire["instructions"] == '{"task":"Pick"}\n{"examples":[{"x":"é"}],"hint":"line1\\nline2"}'
    assert ja.split_instruction(wire["instructions"]) == ('{"task":"Pick"}', {"examples": [{"x": "é"}], "hint": "line1\nline2"})
    plain = item()
    assert mapped(plain).request["questions"]["kind"]["instructions"] == "What happened?"


def test_extra_fields_named_like_gold_ids_or_provenance_are_withheld():
    q = {"type": "choice", "instructions": "Pick", "criteria": {"a": "A", "b": "B"},
         "hint": "read twice", "Label": "b", "rationale": "b because", "id": "q-17", "source": "crowd"}
    row = mapped(item(questions={"c": q}, targets={"c": {"label": "b", "dist": {"a": 0.1, "b": 0.9}}}))
    assert row.request["questions"]["c"]["instructions"] == 'Pick\n{"hint":"read twice"}'
    text = json.dumps(row.request)
    for word in ("because", "q-17", "crowd", "Label"):
        assert word not in text
    assert row.source["withheld_question_fields"] == {
        "c": {"Label": "b", "rationale": "b because", "id": "q-17", "source": "crowd"}}
    assert "withheld_question_fields" not in mapped(item()).source


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(text=st.text(), fields=st.dictionaries(st.text(min_size=1), json_values, min_size=1, max_size=4))
def test_instruction_fields_round_trip(text, fields):
    serialised = ja.instruction_with_fields(text, fields)
    assert ja.split_instruction(serialised) == (text, fields)
    assert json.loads(dumps(serialised)) == serialised  # stable through a TSV cell
    assert list(ja.split_instruction(serialised)[1]) == list(fields)  # key order kept


@pytest.mark.parametrize("change, message", [
    (dict(lang="tr"), "lang 'tr' in the 'en' test file"),
    (dict(id=""), "id must be a non-empty string"),
    (dict(targets={"kind": {"label": "damage", "dist": {"damage": 1.0}}}), "do not match questions"),
    (dict(questions={"bad-id": {"type": "noul", "instructions": "?"}}, targets={"bad-id": {"label": "no", "dist": {"no": 1}}}),
     "does not match"),
    (dict(questions={"c": {"type": "choice", "instructions": "?", "criteria": {"a": 1, "unknown": 2}}},
          targets={"c": {"label": "a", "dist": {"a": 1.0}}}), "reserved"),
    (dict(questions={"c": {"type": "rank", "instructions": "?"}}, targets={"c": {"label": "a", "dist": {}}}),
     "unknown question type 'rank'"),
])
def test_malformed_items_name_file_and_line(change, message):
    with pytest.raises(SourceFormatError, match=message) as err:
        mapped(item(**change))
    assert str(err.value).startswith("en/test.jsonl:3")


# ---------------------------------------------------------------------------------------------
# scoring rules


def score(objs, predictions):
    class Snapshot:
        data = "sample"

    Snapshot.rows = [ja.map_row(Path(f"{o['lang']}/test.jsonl"), i, o, o["lang"]) for i, o in enumerate(objs, 1)]
    table = build_question_table(Snapshot.rows, predictions)
    return table, ja.evaluate(Snapshot, table, predictions)


@pytest.fixture
def scored():
    a = {"id": "a", "lang": "en", "abstain": True, "state": "A caller asks about insurance.",
         "questions": {"carrier": {"type": "choice", "instructions": "Carrier?", "criteria": {"dhl": "DHL", "ups": "UPS"}},
                       "insured": {"type": "noul", "instructions": "Insured?"}},
         "targets": {"carrier": {"label": "unknown", "dist": {"dhl": 0.05, "ups": 0.05, "unknown": 0.9}},
                     "insured": {"label": "yes", "dist": {"no": 0.01, "yes": 0.99}}}}
    b = {"id": "b", "lang": "tr", "state": "Fatura iki kez kesildi.",
         "questions": {"c": {"type": "choice", "instructions": "Hangisi?", "criteria": {"x": "X", "y": "Y"}},
                       "n": {"type": "noul", "instructions": "İade?"}},
         "targets": {"c": {"label": "x", "dist": {"x": 0.9, "y": 0.1}},
                     "n": {"label": "no", "dist": {"no": 0.99, "yes": 0.01}}}}
    predictions = {
        "en/a": {"status": "ok", "meta": {"abstain_flag_sent": True}, "response": {"answers": {
            "carrier": {"probabilities": {"dhl": 0.1, "ups": 0.1, "unknown": 0.8}},  # unknown, correct
            "insured": {"noul": 0.5}}}},  # a tie: false (= no) comes first -> wrong
        "tr/b": {"status": "ok", "response": {"answers": {
            "c": {"probabilities": {"x": 0.6, "y": 0.4}}, "n": {"noul": 0.2}}}},
    }
    return score([a, b], predictions)


def test_noul_tie_goes_to_no(scored):
    table, _ = scored
    i = list(table.question_id).index("insured")
    assert table.P[i, :2].tolist() == [0.5, 0.5] and M.top_label(table.P[i:i + 1])[0][0] == 0


def test_reference_report_hard_and_soft(scored):
    _, official = scored
    o = official["groups"]["overall"]
    assert o["accuracy"] == 0.75 and o["accuracy_n"] == 4
    # hard metrics use the label only (dist is smoothed, never one-hot)
    assert o["hard_nll"] == pytest.approx(-(math.log(0.8) + math.log(0.5) + math.log(0.6) + math.log(0.8)) / 4)
    assert o["hard_brier"] == pytest.approx(((0.01 + 0.01 + 0.04) + 0.5 + (0.16 + 0.16) + (0.04 + 0.04)) / 4)
    kl = [0.05 * math.log(0.05 / 0.1) * 2 + 0.9 * math.log(0.9 / 0.8),
          0.01 * math.log(0.01 / 0.5) + 0.99 * math.log(0.99 / 0.5),
          0.9 * math.log(0.9 / 0.6) + 0.1 * math.log(0.1 / 0.4),
          0.99 * math.log(0.99 / 0.8) + 0.01 * math.log(0.01 / 0.2)]
    assert o["soft_kl"] == pytest.approx(sum(kl) / 4)
    # equal-mass ECE, n = 4 < 15: four singleton bins, conf .8/.5/.6/.8, correct 1/0/1/1
    assert official["ece_method"] == "equal_frequency"
    assert o["reference_ece"] == pytest.approx((0.2 + 0.5 + 0.4 + 0.2) / 4)


def test_language_and_abstain_slices(scored):
    _, official = scored
    g = official["groups"]
    assert g["language"]["en"]["accuracy"] == 0.5 and g["language"]["tr"]["accuracy"] == 1.0
    assert set(g["language_type"]) == {"en/choice", "en/noul", "tr/choice", "tr/noul"}
    assert g["unknown_candidate"]["yes"]["n"] == 1 and g["abstain"]["yes"]["n"] == 2


def test_unknown_prediction_is_correct_when_gold_is_unknown_and_marked(scored):
    _, official = scored
    assert official["abstain"] | {"rule": None} == {
        "questions_with_unknown_candidate": 1, "gold_unknown": 1, "predicted_unknown": 1, "unknown_correct": 1,
        "unscored_gold_unknown_without_candidate": 0, "abstain_flag_sent": True, "rule": None}


def test_equal_mass_ece_follows_the_spec_bin_bounds():
    # 16 questions: bins b*16//15 -> 14 singletons, then the last two together
    conf = [0.6] * 14 + [0.9, 0.9]
    correct = [1] * 14 + [1, 0]
    assert M.ece_equal_frequency(conf, correct) == pytest.approx((14 * 0.4 + 2 * abs(0.9 - 0.5)) / 16)
    # sorting is by confidence (ascending, stable), whatever the input order
    assert M.ece_equal_frequency(conf[::-1], correct[::-1]) == pytest.approx(0.4)
    assert M.ece_equal_frequency([], []) is None


# ---------------------------------------------------------------------------------------------
# releases


def test_shipped_sample_prepares_to_its_pinned_snapshot(tmp_path):
    manifest = ja.prepare(root=tmp_path, source=SAMPLE, data="sample")[0]
    assert manifest["data"] == "sample" and manifest["counts"]["inputs"] == 12 and manifest["counts"]["questions"] == 25
    comp = manifest["notes"]["composition"]
    assert {k: v["inputs"] for k, v in comp["by_language"].items()} == {"de": 3, "en": 5, "tr": 4}
    assert (comp["abstain_requests"], comp["unknown_candidates"], comp["unscored_gold_unknown"],
            comp["dropped_unknown_mass"], comp["train_fields_ignored"]) == (3, 5, 1, 1, 1)
    assert comp["questions_with_withheld_fields"] == 0
    assert manifest["notes"]["splits_sha256"]["en/test.jsonl"] == manifest["sources"][0]["sha256"]
    rows = load_snapshot(tmp_path, "jevalt_bench").rows
    assert [r.request_id.split("/")[0] for r in rows] == ["en"] * 5 + ["tr"] * 4 + ["de"] * 3


def test_build_maps_the_release_without_touching_the_files(tmp_path):
    """Every file access is read_release's: build maps the same pinned rows once the folder is gone."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample")
    release = ja.read_release(parse_prepare_options("jevalt_bench", {"source": str(source), "data": "sample"}))
    assert [(lang, path.name, line) for lang, path, line, _ in release.content[:1]] == [("en", "test.jsonl", 1)]
    shutil.rmtree(source)
    prepared = ja.build(release, "jevalt_bench")
    assert hashlib.sha256(render_tsv(prepared.rows)).hexdigest() == family_manifest("jevalt_bench")["views"][
        "jevalt_bench"]["snapshot_sha256"]["sample"]
    assert prepared.notes["composition"]["train_fields_ignored"] == 1 and prepared.sources == list(release.files)


def test_sample_is_what_the_generator_writes(tmp_path):
    syn.write_release(syn.sample_items(), tmp_path, "sample")
    for rel in ja.release_files() + ["SPLITS.sha256"]:
        assert (tmp_path / rel).read_bytes() == (SAMPLE / rel).read_bytes()


def test_splits_file_mismatch_and_gaps_fail(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "rel")
    with open(tmp_path / "rel" / "tr" / "test.jsonl", "a", encoding="utf-8") as fh:
        fh.write("\n")
    with pytest.raises(SnapshotError, match=r"tr/test\.jsonl: sha256 \w+ does not match SPLITS\.sha256 \(21272a03"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")
    en_line = (SAMPLE / "SPLITS.sha256").read_text().splitlines()[0]
    (tmp_path / "rel" / "SPLITS.sha256").write_text(en_line + "\n")
    with pytest.raises(SnapshotError, match="lists no sha256 for tr/test.jsonl"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")
    shutil.copy(SAMPLE / "SPLITS.sha256", tmp_path / "rel" / "SPLITS.sha256")
    shutil.copy(SAMPLE / "tr" / "test.jsonl", tmp_path / "rel" / "tr" / "test.jsonl")
    (tmp_path / "rel" / "de" / "test.jsonl").unlink()
    with pytest.raises(SnapshotError, match=r"source file not found: .*de/test\.jsonl"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")
    (tmp_path / "rel" / "SPLITS.sha256").write_text("nonsense\n")
    with pytest.raises(SourceFormatError, match=r"SPLITS\.sha256:1: expected"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")


def test_pinned_sample_hash_and_data_kind_markers(tmp_path):
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("jevalt_bench", SAMPLE, data="official")
    shutil.copytree(SAMPLE, tmp_path / "rel")
    (tmp_path / "rel" / "SPLITS.sha256").unlink()
    (tmp_path / "rel" / "de" / "test.jsonl").write_text((SAMPLE / "de" / "test.jsonl").read_text() + "\n")
    with pytest.raises(SnapshotError, match=r"de/test\.jsonl: sha256 \w+ does not match the pinned d6dfacad"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")
    (tmp_path / "rel" / DATA_KIND_MARKER).unlink()
    with pytest.raises(SnapshotError, match="no JEVKEDRO_DATA_KIND.json"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="sample")


def test_items_of_ours_are_refused_as_official_even_without_the_folder_marker(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "rel")
    (tmp_path / "rel" / DATA_KIND_MARKER).unlink()  # official pins are null: no hash to catch it
    with pytest.raises(SnapshotError, match=r"en/test\.jsonl:1: record written by jevkedro .* cannot be prepared as data=official"):
        prepare_view("jevalt_bench", tmp_path / "rel", data="official")


def test_an_unmarked_item_in_our_folder_is_refused(tmp_path):
    items = syn.generate_items({"en": 2, "tr": 1, "de": 1}, questions=6)
    items["tr"][0]["source"] = "crowd"  # as if a real item had been copied in
    syn.write_release(items, tmp_path, "synthetic")
    with pytest.raises(SnapshotError, match=r"tr/test\.jsonl:1: prepared as 'synthetic' data, but the record is not marked"):
        prepare_view("jevalt_bench", tmp_path, data="synthetic")


def test_duplicate_ids_name_both_lines(tmp_path):
    items = syn.sample_items()
    items["en"].append(copy.deepcopy(items["en"][0]))
    syn.write_release(items, tmp_path, "synthetic")
    with pytest.raises(SourceFormatError, match=r"en/test\.jsonl:2: id 'en-syn-g0001-a' repeats line 1"):
        prepare_view("jevalt_bench", tmp_path, data="synthetic")


def test_a_short_release_fails_naming_the_counts(tmp_path):
    syn.write_release(syn.generate_items({"en": 10, "tr": 10, "de": 10}, questions=70), tmp_path / "rel", "synthetic")
    with pytest.raises(SnapshotError, match="counts differ from the manifest: inputs: found 30, expected 3116; "
                                            "questions: found 70, expected 8434"):
        ja.prepare(root=tmp_path / "snap", source=tmp_path / "rel", data="synthetic")


def test_full_scale_synthetic_release_reproduces_the_published_counts(tmp_path):
    syn.write_release(syn.generate_items(), tmp_path / "rel", "synthetic")
    manifest = ja.prepare(root=tmp_path / "snap", source=tmp_path / "rel", data="synthetic")[0]
    assert (manifest["counts"]["inputs"], manifest["counts"]["questions"]) == (3_116, 8_434)
    by_lang = manifest["notes"]["composition"]["by_language"]
    assert {k: v["inputs"] for k, v in by_lang.items()} == {"de": 1_008, "en": 1_100, "tr": 1_008}


# ---------------------------------------------------------------------------------------------
# the Kedro view, out of the box


@pytest.mark.e2e
def test_kedro_run_on_the_shipped_sample_with_sparrow_and_replay(tmp_path):
    from support import kedro_run, make_project, mlflow_tags, replay_file, reports

    project = make_project(tmp_path, ["jevalt_bench"])
    kedro_run(project, "jevalt_bench")
    report, official = reports(project, "sparrow-nano-general-v1.1", "jevalt_bench")
    assert report["data"] == "sample" and official["data"] == "sample"
    assert official["scorer"] == "jevalkit-decision-protocol-v1" and official["ece_method"] == "equal_frequency"
    assert report["coverage"]["questions"] == 25 and report["coverage"]["by_status"]["ok"] == 25
    assert official["groups"]["overall"]["n"] == 24  # the unscored gold-unknown question counts nowhere
    assert set(official["groups"]["language"]) == {"en", "tr", "de"}
    answers = replay_file(project, "sparrow-nano-general-v1.1", "jevalt_bench", tmp_path / "answers.jsonl")
    kedro_run(project, "jevalt_bench", f"model.adapter=replay,model.path={answers},model.name=replayed")
    replayed, replayed_official = reports(project, "replayed", "jevalt_bench")
    assert replayed["adapter"] == "replay"
    assert replayed_official["groups"] == official["groups"]
    assert [tags["data"] for tags in mlflow_tags(project)] == ["sample", "sample"]


def test_send_abstain_is_a_per_server_setting_recorded_per_request_and_run(tmp_path):
    """Unknown 8: only with ``model.send_abstain=true`` does a JevAlt-style server get the
    top-level ``"abstain": true``, and only for requests offering ``unknown`` (a choice option,
    or a score question ending in the unknown level, e.g. the score-only row de-syn-g0101-a)."""
    pytest.importorskip("aiohttp")
    from jevkedro.models import make_adapter
    from jevkedro.models.settings import EngineSettings
    from jevkedro.nodes.infer import run_inference
    from jevkedro.nodes.predictions_log import PredictionLog
    from jevkedro.testing import LoopbackServer, synthetic_snapshot

    rows = prepare_view("jevalt_bench", SAMPLE, data="sample").rows
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    abstain_rows = {"en/en-syn-g0003-a", "tr/tr-syn-g0042-a", "de/de-syn-g0101-a"}
    assert {r.request_id for r in rows if ja.offers_unknown(r.request)} == abstain_rows
    for send in (False, True):
        with LoopbackServer() as server:
            settings = {"adapter": "systemone", "endpoint": server.endpoint, "model": "jev-latest",
                        "api_key_env": "", "timeout_s": 5, "progress": 0, "send_abstain": send}
            plog = PredictionLog(tmp_path / f"preds-{send}" / "predictions.jsonl")
            summary = run_inference(snapshot, make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
            flagged = [b for b in server.bodies if b.get("abstain") is True]
        assert summary["identity"].get("send_abstain", False) is send
        sent = {rid for rid, rec in plog.records.items() if (rec.get("meta") or {}).get("abstain_flag_sent")}
        assert sent == (abstain_rows if send else set())
        assert len(flagged) == (3 if send else 0)
        official = ja.evaluate(type("D", (), {"data": "sample"}), build_question_table(rows, plog.records), plog.records)
        assert official["abstain"]["abstain_flag_sent"] is send
