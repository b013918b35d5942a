"""Corpus, class 3 and the snapshot checks already in place — tampered, forged, damaged snapshots.

The data kind a run asks for comes from its settings (``<view>.prepare.data``), never from the
manifest: the pins are looked up by it, the manifest must say the same, and the manifest's own
fields are covered by ``manifest_sha256``. Each case edits a committed snapshot the way an attacker
or a careless user would and asserts the refusal names the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from jevkedro.family import prepare_view
from jevkedro.nodes import steps
from jevkedro.nodes.infer import PredictionLog
from jevkedro.nodes.snapshot import SnapshotError, commit_dataset, load_snapshot, manifest_digest
from support import ROOT, ZH_RAW, copy_project, run_kedro

TYPED = ROOT / "data" / "01_raw" / "typed_decisions" / "sample"
SAMPLE = {"source": str(TYPED), "data": "sample"}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The shipped Typed-Decisions sample (its snapshot hash is pinned) and zh-decision-bench
    (official, pinned), committed once; each test edits a copy."""
    root = tmp_path_factory.mktemp("snapshots")
    commit_dataset(prepare_view("typed_decisions", TYPED, data="sample"), root)
    commit_dataset(prepare_view("zh_decision_bench", ZH_RAW, data="official"), root)
    return root


@pytest.fixture
def snaps(prepared, tmp_path):
    root = tmp_path / "snaps"
    shutil.copytree(prepared, root)
    return root


def manifest_of(root, view="typed_decisions"):
    return json.loads((root / f"{view}.manifest.json").read_text())


def write_manifest(root, manifest, view="typed_decisions", sign=True):
    """Write ``manifest`` back; ``sign``: with a recomputed manifest_sha256, as a forger would."""
    manifest = dict(manifest)
    if sign:
        manifest["manifest_sha256"] = manifest_digest(manifest)
    (root / f"{view}.manifest.json").write_text(json.dumps(manifest))


LABEL_0, LABEL_1 = b'{"label":0', b'{"label":1'


def forge_labels(root, view="typed_decisions"):
    """Flip every label 0 -> 1 in the TSV and record the new TSV hash consistently (a forgery)."""
    tsv = root / f"{view}.tsv"
    data = tsv.read_bytes()
    assert LABEL_0 in data
    data = data.replace(LABEL_0, LABEL_1)
    tsv.write_bytes(data)
    manifest = manifest_of(root, view)
    manifest["snapshot"] = {**manifest["snapshot"], "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    return manifest


def verify(root, view="typed_decisions", prepare=None):
    return steps.verify_snapshot(load_snapshot(root, view), prepare or (SAMPLE if view == "typed_decisions" else
                                                                         {"source": str(ZH_RAW), "data": "official"}))


def test_the_untouched_snapshots_verify(snaps):
    assert verify(snaps).verified and verify(snaps, "zh_decision_bench").verified


# -- the kind chooses the pin: it comes from the settings --------------------------------------------

@pytest.mark.parametrize("kind", ["synthetic", "official", "sampel", "Sample", "", None])
def test_forged_labels_with_the_kind_changed_are_refused(snaps, kind):
    manifest = forge_labels(snaps)
    manifest["data"] = kind
    write_manifest(snaps, manifest)
    with pytest.raises(SnapshotError) as err:
        verify(snaps)
    assert "typed_decisions.manifest.json" in str(err.value) and "typed_decisions.prepare.data" in str(err.value)
    assert f"records data kind {kind!r}" in str(err.value)


def test_forged_labels_under_the_asked_kind_fail_its_pin(snaps):
    write_manifest(snaps, forge_labels(snaps))
    with pytest.raises(SnapshotError, match=r"typed_decisions.tsv: sha256 \w+ does not match the family manifest.json"):
        verify(snaps)


def test_forged_labels_asked_for_as_another_kind_fail_on_the_sources_that_kind_pins(snaps):
    """Asking for official data with the sample's manifest relabelled official: the sources the
    official release pins do not match."""
    manifest = forge_labels(snaps)
    manifest["data"] = "official"
    write_manifest(snaps, manifest)
    with pytest.raises(SnapshotError, match="source test-00000-of-00001.parquet has sha256 .* but the typed_decisions "
                                            "official release pins"):
        verify(snaps, prepare={"source": str(TYPED), "data": "official"})


def test_a_kind_the_family_does_not_have_is_refused_naming_the_setting(snaps):
    with pytest.raises(SnapshotError, match="zh_decision_bench.prepare.data='sample': the zh_decision_bench family has "
                                            "no 'sample' data"):
        verify(snaps, "zh_decision_bench", prepare={"source": str(ZH_RAW), "data": "sample"})


def test_an_unknown_kind_in_the_settings_is_refused_before_anything_runs(snaps):
    from jevkedro.config import SettingsError

    with pytest.raises(SettingsError, match=r"typed_decisions.prepare.data: 'offical' is not allowed; allowed: one of: "
                                            r"official, sample, synthetic"):
        verify(snaps, prepare={"source": str(TYPED), "data": "offical"})


def test_a_snapshot_of_another_view_is_refused(snaps):
    for suffix in ("tsv", "manifest.json"):
        shutil.copy(snaps / f"typed_decisions.{suffix}", snaps / f"decisionbench.{suffix}")
    with pytest.raises(SnapshotError, match="decisionbench.manifest.json: is the manifest of view 'typed_decisions', "
                                            "not of 'decisionbench'"):
        load_snapshot(snaps, "decisionbench")


def test_a_manifest_naming_another_family_is_refused(snaps):
    manifest = manifest_of(snaps)
    manifest["family"] = "decisionbench"
    write_manifest(snaps, manifest)
    with pytest.raises(SnapshotError, match="of family 'decisionbench', not of 'typed_decisions'"):
        verify(snaps)


# -- the manifest's own fields are covered ------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("data", "official"), ("data", "synthetic"), ("view", "typed_decisions "),
                                          ("counts", {"inputs": 9}), ("sources", []), ("scoring", {}),
                                          ("snapshot", {"sha256": "0" * 64})])
def test_a_manifest_field_edited_by_hand_is_refused_at_load(snaps, field, value):
    manifest = manifest_of(snaps)
    manifest[field] = value
    write_manifest(snaps, manifest, sign=False)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(snaps, "typed_decisions")
    assert "typed_decisions.manifest.json: its fields were edited after it was written" in str(err.value)


def test_a_manifest_without_its_digest_is_refused(snaps):
    manifest = manifest_of(snaps)
    del manifest["manifest_sha256"]
    write_manifest(snaps, manifest, sign=False)
    with pytest.raises(SnapshotError, match="has no manifest_sha256 .* prepare the snapshot again"):
        load_snapshot(snaps, "typed_decisions")


# -- bytes: the checks already in place -------------------------------------------------------------

def test_an_edited_tsv_byte_is_refused_naming_both_hashes(snaps):
    tsv = snaps / "typed_decisions.tsv"
    tsv.write_bytes(tsv.read_bytes().replace(LABEL_0, LABEL_1, 1))
    with pytest.raises(SnapshotError, match=r"typed_decisions.tsv: sha256 \w{64} does not match its manifest \(\w{64}\)"):
        load_snapshot(snaps, "typed_decisions")


def test_a_half_written_tsv_is_refused(snaps):
    tsv = snaps / "typed_decisions.tsv"
    data = tsv.read_bytes()
    tsv.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError, match="typed_decisions.tsv: sha256 .* does not match its manifest"):
        load_snapshot(snaps, "typed_decisions")


def test_a_change_after_loading_is_caught_by_verification(snaps):
    snapshot = load_snapshot(snaps, "typed_decisions")
    tsv = snaps / "typed_decisions.tsv"
    tsv.write_bytes(tsv.read_bytes() + b"\n")
    with pytest.raises(SnapshotError, match="refusing to run inference on a changed snapshot"):
        steps.verify_snapshot(snapshot, SAMPLE)


def test_a_missing_snapshot_names_the_folder_and_the_node(snaps):
    (snaps / "typed_decisions.tsv").unlink()
    with pytest.raises(SnapshotError, match="no snapshot for typed_decisions in .*: run its prepare_snapshot node first"):
        load_snapshot(snaps, "typed_decisions")


# -- only the pinned TSV decides labels: nothing beside it is read (issue 23 #1) ----------------------

def first_candidate_answers(root, path):
    """A replay file answering every zh question with 0.7 on its first candidate."""
    with open(path, "w", encoding="utf-8") as fh:
        for row in load_snapshot(root, "zh_decision_bench").rows:
            answers = {}
            for q in row.request["questions"]:
                cands = row.candidates[q]
                answers[q] = {"probabilities": {c: (0.7 if i == 0 else 0.3 / (len(cands) - 1)) for i, c in enumerate(cands)}}
            fh.write(json.dumps({"request_id": row.request_id, "response": {"answers": answers}}) + "\n")
    return path


def replayed(root, answers, out):
    """Verify, infer (replay) and score the zh view through the pipeline's own node functions."""
    snapshot = verify(root, "zh_decision_bench")
    model = {"adapter": "replay", "path": str(answers), "name": "first-candidate"}
    run = steps.infer(snapshot, PredictionLog(out / "predictions.jsonl"), model)
    report, official, questions = steps.score(snapshot, PredictionLog(out / "predictions.jsonl"), run, model)
    return report["metrics"], report["coverage"], official, questions


def forged_layout(root):
    """``<view>.layout.npz`` in the format the old loader cached and trusted (bound to the real TSV's
    hash), with every label set to the first candidate and its internal checksum recomputed."""
    import msgspec
    import numpy as np

    layout = load_snapshot(root, "zh_decision_bench").layout
    names = sorted(layout.slice_columns)
    strings = msgspec.msgpack.encode({
        "request_ids": layout.request_ids, "question_ids": layout.question_ids, "qtypes": layout.qtypes,
        "cand_flat": layout.cand_flat.tolist(), "level_names": {str(k): v for k, v in layout.level_names.items()},
        "slices": [[k, layout.slice_columns[k].values] for k in names]})
    n = len(layout)
    arrays = {"q_start": layout.q_start, "K": layout.K, "cand_start": layout.cand_start,
              "has_target": np.ones(n, dtype=bool), "label": np.zeros(n, dtype=np.int64),
              "unscored": np.zeros(n, dtype=bool), "strings": np.frombuffer(strings, dtype=np.uint8),
              "y_hot": np.zeros(n, dtype=np.int64), "y_rows": np.zeros(0, dtype=np.int64),
              "y_values": np.zeros((0, layout.kmax)), "kmax": np.array([layout.kmax]),
              **{f"slice_{j}": layout.slice_columns[k].codes for j, k in enumerate(names)}}
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        digest.update(a.tobytes())
    tsv_sha = manifest_of(root, "zh_decision_bench")["snapshot"]["sha256"]
    meta = msgspec.json.encode({"format": 1, "tsv_sha256": tsv_sha, "checksum": digest.hexdigest()})
    np.savez(root / "zh_decision_bench.layout.npz", meta=np.frombuffer(meta, dtype=np.uint8), **arrays)


STRAY = {
    "a forged layout cache": forged_layout,
    "a damaged layout cache": lambda root: (root / "zh_decision_bench.layout.npz").write_bytes(b"PK\x03\x04" + b"\0" * 200),
    "other files beside the snapshot": lambda root: [
        (root / name).write_text(text) for name, text in (
            ("zh_decision_bench.tsv.orig", "request_id\tforged\n"), ("zh_decision_bench.labels.json", '{"label": 0}'),
            ("zh_decision_bench.layout.npz.tmp", "x"))],
}


@pytest.mark.parametrize("stray", sorted(STRAY))
def test_files_beside_the_snapshot_change_nothing_in_the_scored_result(snaps, tmp_path, stray):
    answers = first_candidate_answers(snaps, tmp_path / "answers.jsonl")
    clean = snaps.parent / "clean"
    shutil.copytree(snaps, clean)
    want = replayed(clean, answers, tmp_path / "clean_out")
    assert 0 < want[0]["overall"]["accuracy"] < 0.5  # the first candidate is right only sometimes
    STRAY[stray](snaps)
    before = {p.name: p.read_bytes() for p in snaps.iterdir()}
    assert replayed(snaps, answers, tmp_path / "out") == want
    assert {p.name: p.read_bytes() for p in snaps.iterdir()} == before  # and the run wrote nothing there


# -- through Kedro: the node reads the kind from the run's settings ---------------------------------

@pytest.mark.e2e
def test_kedro_refuses_a_relabelled_snapshot_reused_with_from_nodes(tmp_path, monkeypatch):
    project = copy_project(tmp_path / "p", ["typed_decisions"])
    monkeypatch.chdir(project)
    run_kedro(project, "typed_decisions")  # prepares the pinned sample snapshot
    root = project / "data" / "02_snapshots"
    manifest = forge_labels(root)
    manifest["data"] = "synthetic"  # no pin for synthetic data: the manifest used to choose "no pin"
    write_manifest(root, manifest)
    with pytest.raises(Exception) as err:
        run_kedro(project, "typed_decisions", from_nodes=["typed_decisions.verify_snapshot"])
    assert "records data kind 'synthetic', but this run asks for 'sample' (typed_decisions.prepare.data)" in str(err.value)
