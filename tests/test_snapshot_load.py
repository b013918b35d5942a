"""Writing and loading a snapshot: the one TSV writer and its refusals, rows decoded on first use, the
layout built from the rows, located faults, nothing written beside the snapshot."""

import hashlib
import json

import numpy as np
import pytest

from jevkedro.nodes import metrics as M
from jevkedro.nodes.layout import question_layout
from jevkedro.nodes.reference import reference_report
from jevkedro.nodes.snapshot import (
    COLUMNS,
    PreparedView,
    SnapshotError,
    commit_dataset,
    each_cell,
    each_row,
    load_snapshot,
    manifest_digest,
    render_tsv,
)
from jevkedro.nodes.validate import build_question_table
from jevkedro.protocol import ProtocolError, SnapshotRow, Target, dumps


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


def test_a_pass_over_some_columns_decodes_only_their_cells_and_keeps_nothing(committed):
    root, rows = committed
    snap = load_snapshot(root, "v")
    kept = snap.rows[7]
    want = [(r.slices, r.source, r.candidates) for r in rows]
    assert list(each_cell(snap.rows, "slices", "source", "candidates")) == want
    assert list(each_cell(snap.rows, "request")) == [(r.request,) for r in rows]
    assert list(each_cell(rows, "slices", "source", "candidates")) == want  # a plain list: the rows' values
    assert snap.rows._rows.count(None) == len(rows) - 1 and snap.rows[7] is kept
    with pytest.raises(ValueError, match="not row values"):
        list(each_cell(snap.rows, "targets"))


def test_the_layout_of_a_loaded_snapshot_equals_the_layout_of_its_rows(committed):
    root, rows = committed
    assert_same_layout(load_snapshot(root, "v").layout, question_layout(rows))


def test_loading_writes_nothing_beside_the_snapshot(committed):
    root, rows = committed
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    assert sorted(before) == ["v.manifest.json", "v.tsv"]
    load_snapshot(root, "v").rows[0]
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


def test_each_cell_is_the_standard_librarys_compact_json(committed):
    root, rows = committed
    lines = (root / "v.tsv").read_bytes().decode("utf-8").split("\n")
    assert lines[0] == "\t".join(COLUMNS) and lines[-1] == ""
    for row, line in zip(rows, lines[1:]):
        cells = [row.request, row.candidates, {q: t.to_json() for q, t in row.targets.items()}, row.slices, row.source]
        assert line == "\t".join([row.request_id] + [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cells])
    assert dumps({"x": 1e-05, "y": "é\u2028"}) == '{"x":1e-05,"y":"é\u2028"}'


def plain_row(i, slices=None):
    return SnapshotRow(f"r{i}", {"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}},
                       {"q": ["true", "false"]}, {"q": Target(label=i % 2)}, slices if slices is not None else {"i": i})


@pytest.mark.parametrize("bad, error, message", [
    (lambda i: plain_row(i, {"x": float("nan")}), ValueError, "Out of range float values are not JSON compliant"),
    (lambda i: plain_row(i, {"x": {1, 2}}), TypeError, "Object of type set is not JSON serializable"),
    (lambda i: plain_row(i - 1), SnapshotError, "duplicate request_id 'r9'"),
    (lambda i: SnapshotRow(f"r{i}\t", plain_row(i).request, plain_row(i).candidates, plain_row(i).targets), SnapshotError,
     "contains a tab or newline"),
    (lambda i: SnapshotRow(f"r{i}", {"questions": {}}, {}, {}), ProtocolError, "needs a state and at least one question"),
])
def test_the_writer_refuses_a_bad_row_with_the_first_failing_rows_error(tmp_path, bad, error, message):
    rows = [plain_row(i) for i in range(10)] + [bad(10), plain_row(11, {"x": float("inf")})]
    with pytest.raises(error, match=message):
        render_tsv(rows)
    with pytest.raises(error, match=message):
        commit_dataset(PreparedView("v", "synthetic", "synthetic", rows, [], {}), tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written, no temp file left


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


@pytest.mark.parametrize("old, new, message", [
    (b'"c":{"label":0', b'"c":{"label":7', r"v.tsv:3: r001/c: label index 7 outside 2 candidates"),
    (b'"c":{"label":0', b'"c":{"label":"0"', r"v.tsv:3: column targets: label must be an integer, got .0."),
    (b'{"n":{"probabilities":[0.3,0.7]}', b'{"n":{"probabilities":[0.3]}', r"v.tsv:2: r000/n: target distribution length"),
    (b'"n":["true","false"],', b'', r"v.tsv:2: r000/n: no candidates or target"),
    (b'"n":{"type":"noul","instructions":"?"}', b'"n":{"instructions":"?"}', r"v.tsv:2: question 'n' is not an object with a type"),
])
def test_a_row_that_breaks_the_protocol_is_refused_naming_the_line(committed, old, new, message):
    root, _ = committed
    rewrite(root, old, new)
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(root, "v")


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
    from jevkedro.nodes.snapshot import SourceFormatError
    from jevkedro.nodes.sources import read_jsonl

    path = tmp_path / "src.jsonl"
    path.write_bytes(content)
    with pytest.raises(SourceFormatError, match=message):
        list(read_jsonl(path))
