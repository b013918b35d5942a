"""Loading a snapshot: rows decoded on first use, the layout cache and its trust rule, located faults."""

import hashlib
import json
import logging

import numpy as np
import pytest

from jevkedro.nodes import layout as L
from jevkedro.nodes import metrics as M
from jevkedro.nodes.layout import cache_path, question_layout
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import (
    COLUMNS,
    PreparedView,
    SnapshotError,
    commit_dataset,
    each_row,
    load_snapshot,
    manifest_digest,
    verify_snapshot_bytes,
)
from jevkedro.nodes.validate import build_question_table
from jevkedro.pipelines import zh_decision_bench as zh
from jevkedro.protocol import SnapshotRow, Target
from support import ZH_RAW


def varied_rows():
    """Soft targets, unscored questions, question-level slices, non-string slice values, score
    questions in and out of level order, level names, a one-option choice."""
    rows = []
    for i in range(30):
        qs = {"n": {"type": "noul", "instructions": "?"},
              "c": {"type": "choice", "instructions": "?", "criteria": {"x": None} if i % 7 == 0 else {"x": None, "y": "why"}},
              "s": {"type": "score", "instructions": "?", "criteria": ["lo", "mid", "hi"]}}
        cands = {"n": ["false", "true"] if i % 2 else ["true", "false"], "c": list(qs["c"]["criteria"]),
                 "s": ["2", "1", "0"] if i % 3 == 0 else ["0", "1", "2"]}
        targets = {"n": Target(probabilities=(0.3, 0.7)) if i % 4 == 0 else Target(label=i % 2),
                   "c": Target(label=0, unscored=i % 5 == 0), "s": Target(label=2, extra={"ordinal_values": [1, 2, 3]})}
        slices = {"domain": ["a", "b", None][i % 3], "flag": [True, 1, "1"][i % 3], "year": 2000 + i % 2,
                  "questions": {"s": {"task": "scoring"}} if i % 2 else {}}
        rows.append(SnapshotRow(f"r{i:03d}", {"state": {"text": f"s{i}"}, "questions": qs}, cands, targets, slices,
                                {"line": i}))
    return rows


@pytest.fixture
def committed(tmp_path):
    rows = varied_rows()
    commit_dataset(PreparedView("v", "synthetic", "synthetic", rows, [], {}), tmp_path)
    return tmp_path, rows


def assert_same_layout(a, b):
    for name in ("request_ids", "question_ids", "qtypes", "level_names"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("q_start", "K", "cand_start", "Y", "has_target", "label", "unscored", "noul_true_first", "qtype_code"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.cand_flat.tolist() == b.cand_flat.tolist()
    assert (a.level_order is None) == (b.level_order is None)
    if a.level_order is not None:
        assert np.array_equal(a.level_order, b.level_order)
    assert sorted(a.slice_columns) == sorted(b.slice_columns)
    for k in a.slice_columns:
        assert a.slices()[k].tolist() == b.slices()[k].tolist(), k


def test_rows_are_decoded_on_first_use_and_equal_what_was_committed(committed):
    root, rows = committed
    snap = load_snapshot(root, "v")
    assert snap.rows._rows.count(None) == len(rows)  # nothing decoded by loading
    assert len(snap.rows) == 30 and snap.rows[3] == rows[3] and snap.rows[-1] == rows[-1]
    assert snap.rows == rows and list(snap.rows) == rows and snap.rows[:2] == rows[:2]
    assert snap.rows + [] == rows and [] + snap.rows == rows
    assert dict(snap.requests()) == {r.request_id: r.request for r in rows}


def test_a_single_pass_decodes_rows_without_keeping_them(committed):
    root, rows = committed
    snap = load_snapshot(root, "v")
    kept = snap.rows[4]  # decoded before the pass: the pass hands out this very object
    assert list(each_row(snap.rows)) == rows
    assert snap.rows._rows.count(None) == len(rows) - 1  # the pass kept nothing it decoded
    assert next(r for r in each_row(snap.rows) if r.request_id == kept.request_id) is kept
    assert list(each_row(rows)) == rows  # rows that are a plain list: as they are


def test_the_layout_from_the_tsv_cells_equals_the_layout_from_the_rows(committed):
    root, rows = committed
    assert_same_layout(load_snapshot(root, "v").layout, question_layout(rows))  # built from cells, cached
    assert_same_layout(load_snapshot(root, "v").layout, question_layout(rows))  # read from the cache


def test_the_cache_is_used_only_for_the_tsv_hash_it_was_made_from(committed, monkeypatch, caplog):
    root, rows = committed
    load_snapshot(root, "v")
    cache = cache_path(root / "v.tsv")
    assert cache.is_file()
    monkeypatch.setattr(L, "layout_of_shapes", lambda shapes: pytest.fail("rebuilt although cached"))
    assert load_snapshot(root, "v").layout.request_ids == [r.request_id for r in rows]
    monkeypatch.undo()
    # a new snapshot (other rows, other hash): the old cache is not used, a new one replaces it
    commit_dataset(PreparedView("v", "synthetic", "synthetic", rows[:5], [], {}), root)
    assert load_snapshot(root, "v").layout.request_ids == [r.request_id for r in rows[:5]]
    # a damaged cache is ignored (and said so), the layout rebuilt from the TSV
    data = bytearray(cache.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cache.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING)
    assert load_snapshot(root, "v").layout.request_ids == [r.request_id for r in rows[:5]]
    assert "layout cache ignored" in caplog.text
    # and the TSV itself still has to match its manifest, cache or not
    tsv = root / "v.tsv"
    tsv.write_bytes(tsv.read_bytes().replace(b"r000", b"r999", 1))
    with pytest.raises(SnapshotError, match="does not match its manifest"):
        load_snapshot(root, "v")


def test_a_verified_snapshot_is_scored_the_same_with_or_without_the_cache(tmp_path):
    zh.prepare(root=tmp_path, source=ZH_RAW)
    snap = verify_snapshot_bytes(load_snapshot(tmp_path, "zh_decision_bench"))
    cached = load_snapshot(tmp_path, "zh_decision_bench")
    def uniform(row, q):
        return {"probabilities": {c: 1 / len(row.candidates[q]) for c in row.candidates[q]}}

    preds = {r.request_id: {"status": "ok", "response": {"answers": {q: uniform(r, q) for q in r.request["questions"]}}}
             for r in snap.rows}
    a, b = build_question_table(snap, preds), build_question_table(cached, preds)
    assert a.status.tolist() == b.status.tolist() and np.array_equal(a.P, b.P)
    assert zh.evaluate(snap, a, preds) == zh.evaluate(cached, b, preds)


@pytest.mark.parametrize("text", ['{"view": "v", "snapshot": {"sha256": "ab', "", '["not", "a manifest"]'])
def test_a_damaged_manifest_names_the_file_and_the_fix(committed, text):
    root, _ = committed
    (root / "v.manifest.json").write_text(text)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(root, "v")
    assert str(root / "v.manifest.json") in str(err.value) and "prepare the snapshot again" in str(err.value)


def rewrite(root, old: bytes, new: bytes):
    """Edit the TSV and record the new hash, as if the writer had written it: only the content is wrong."""
    tsv, manifest_path = root / "v.tsv", root / "v.manifest.json"
    data = tsv.read_bytes().replace(old, new, 1)
    tsv.write_bytes(data)
    manifest = json.loads(manifest_path.read_text())
    manifest["snapshot"]["sha256"] = hashlib.sha256(data).hexdigest()
    manifest["manifest_sha256"] = manifest_digest(manifest)  # what the writer records over its own fields
    manifest_path.write_text(json.dumps(manifest))


def test_a_malformed_cell_names_line_column_and_position(committed):
    root, _ = committed
    rewrite(root, b'{"n":{"label":0}', b'{"n":{"label":0,}')  # row r002, on line 4 (after the header)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(root, "v")
    fault = len('{"n":{"label":0,}')  # the brace after the comma: the field's 17th character
    assert "v.tsv:4: column targets (TSV field 4) is not valid JSON: Expecting property name enclosed in double quotes " \
           f"at character {fault} of the field" in str(err.value)


def test_a_cell_of_the_wrong_shape_names_line_and_column(committed):
    root, _ = committed
    rewrite(root, b'{"n":["true","false"]', b'{"n":"true"')
    with pytest.raises(SnapshotError, match=r"v.tsv:2: column candidates \(TSV field 3\) must be an object of lists of strings"):
        load_snapshot(root, "v")


def test_slices_grouped_by_codes_equal_np_unique_over_strings(committed):
    root, rows = committed
    snap = load_snapshot(root, "v")
    preds = {r.request_id: {"status": "ok", "response": {"answers": {"n": {"noul": 0.6}}}} for r in rows}
    coded = build_question_table(snap, preds)
    plain = build_question_table(snap, preds)
    plain.slice_codes = {}  # as a table built by hand: grouped by sorting the strings
    for name in coded.slices:
        assert M.by_slice(coded, name) == M.by_slice(plain, name), name
    groups = {"domain": "domain", "task": "task", "joint": ("domain", "flag"), "joint3": ("year", "domain", "question")}
    assert reference_report(coded, groups, "equal_width") == reference_report(plain, groups, "equal_width")
    assert list(M.by_slice(coded, "flag")) == ["1", "True"]  # 1 and "1" one value, True another


@pytest.mark.parametrize("content, message", [
    (b'{"a": 1}\n{"b": "caf\xe9"}\n', r"src.jsonl:2: not UTF-8 \(byte 0xe9 at byte 11\)"),
    (b'{"a": 1}\n{"b": ' + b"9" * 5000 + b"}\n", r"src.jsonl:2: 1 number\(s\) beyond the range of a double"),
    (b'{"a": 1}\n\n{"b": 1,}\n', r"src.jsonl:3: not valid JSON \(Expecting property name enclosed in double quotes at column 9\)"),
])
def test_upstream_jsonl_faults_name_file_line_and_position(tmp_path, content, message):
    from jevkedro.nodes.snapshot import SourceFormatError, read_jsonl

    path = tmp_path / "src.jsonl"
    path.write_bytes(content)
    with pytest.raises(SourceFormatError, match=message):
        list(read_jsonl(path))


@pytest.mark.parametrize("batch", [1, 7, 4096])
def test_one_column_of_every_row_is_its_cells_decoded_one_by_one(committed, batch):
    """``cells``: batches decoded as one array give what decoding each cell alone gives, for every
    column and for a decoder of part of a cell; a batch not giving one value per cell (a cell
    holding two values, which a one-array decode would split) falls back to the cells one by one
    and names the bad one."""
    import msgspec

    root, rows = committed
    snap = load_snapshot(root, "v")
    whole = msgspec.json.Decoder()
    for column in ("request", "candidates", "targets", "slices", "source"):  # the JSON columns
        at = COLUMNS.index(column)
        one_by_one = [whole.decode(snap.rows.line(i).split(b"\t")[at]) for i in range(len(rows))]
        assert snap.rows.cells(column, whole, batch) == one_by_one, column
    class Label(msgspec.Struct):
        label: int = -1
    labels = snap.rows.cells("targets", msgspec.json.Decoder(dict[str, Label]), batch)
    assert [{q: t.label for q, t in cell.items()} for cell in labels] == \
        [{q: (t.label if t.label is not None else -1) for q, t in r.targets.items()} for r in rows]
    raw = snap.rows._raw
    bad = raw.replace(b'\t{"line":3}', b'\t{"line":3},{"line":3}', 1)  # a source cell holding two values
    assert bad != raw
    snap.rows._raw = bad
    snap.rows._ends = [e + (len(bad) - len(raw)) * (i >= 3) for i, e in enumerate(snap.rows._ends)]
    snap.rows._starts = [s + (len(bad) - len(raw)) * (i > 3) for i, s in enumerate(snap.rows._starts)]
    with pytest.raises(SnapshotError, match=r"v\.tsv:5: column source"):
        snap.rows.cells("source", whole, batch)
