"""The fast snapshot cell encoder writes exactly what ``protocol.dumps`` writes (or raises what it raises)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevkedro.nodes.celljson import CellEncoder, exact_encoder, plain_json
from jevkedro.nodes.snapshot import SnapshotError, render_tsv, tsv_blocks
from jevkedro.protocol import ProtocolError, SnapshotRow, Target, dumps


class Str(str):
    pass


class Int(int):
    pass


class Float(float):
    pass


class Colour(enum.IntEnum):
    RED = 1


@dataclasses.dataclass
class Point:
    x: int


def expected(cell):
    """``dumps(cell)`` as UTF-8 bytes, or the exception it raises (type and message)."""
    try:
        return dumps(cell).encode("utf-8")
    except Exception as exc:  # noqa: BLE001 -- compared below
        return (type(exc), str(exc))


def encoded(cells):
    try:
        return CellEncoder().encode_all(cells)
    except Exception as exc:  # noqa: BLE001
        return (type(exc), str(exc))


def same_as_dumps(cells):
    want = [expected(c) for c in cells]
    errors = [w for w in want if isinstance(w, tuple)]
    got = encoded(cells)
    if errors:  # the batch raises the first failing cell's error, as a cell-by-cell loop does
        assert got == errors[0]
    else:
        assert got == want


# Every float kind: short reprs, exponent reprs (1e-05, 1e+16), subnormals, -0.0, nan, inf.
floats = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 1e-5, 2.5e-05, 1e16, 1e+22, 1e15, 123456789012345.6,
                                                 5e-324, 1.7976931348623157e308, 0.1, float("nan"), float("inf")]))
texts = st.text(alphabet=st.characters(codec=None))  # every code point: controls, U+2028, astral, lone surrogates
ints = st.one_of(st.integers(), st.integers(min_value=2**63 - 3, max_value=2**64 + 3),
                 st.integers(min_value=-(2**200), max_value=2**200))
plain_leaves = st.one_of(st.none(), st.booleans(), ints, floats, texts)
odd_leaves = st.one_of(
    st.builds(Str, texts), st.builds(Int, st.integers()), st.builds(Float, st.floats()), st.just(Colour.RED),
    st.builds(set, st.lists(st.integers(), max_size=2)), st.builds(Point, st.integers()),
    st.just(datetime.date(2026, 1, 2)), st.just(b"bytes"), st.just(decimal.Decimal("1.5")),
)
keys = st.one_of(texts, ints, floats, st.booleans(), st.none(), st.builds(Str, texts))


def json_like(leaves):
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
                                st.dictionaries(st.text(max_size=5), inner, max_size=4)),
        max_leaves=20,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(json_like(plain_leaves), min_size=1, max_size=6))
def test_plain_values_byte_for_byte(cells):
    same_as_dumps(cells)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_like(st.one_of(plain_leaves, odd_leaves)), min_size=1, max_size=6))
def test_every_kind_of_object_byte_for_byte_or_the_same_error(cells):
    same_as_dumps(cells)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(keys, json_like(plain_leaves), max_size=4), min_size=1, max_size=4))
def test_dict_keys_of_every_kind(cells):
    same_as_dumps(cells)


def test_known_differences_take_the_exact_path():
    # msgspec would write 0.000025, 1e16 and null where dumps writes 2.5e-05, 1e+16 or raises.
    for cell in (2.5e-05, [1e16], {"x": [1e-7]}, {1e-5: 1}, Str("a"), Colour.RED):
        assert not plain_json([cell])
        same_as_dumps([cell])
    for cell in ({True: 1}, {None: 1}, {"a": {False: [1]}}):  # keys msgspec refuses: the exact encoder writes them
        enc = CellEncoder()
        assert enc.encode_all([cell]) == [dumps(cell).encode("utf-8")]
        assert (enc.fast_batches, enc.exact_batches) == (0, 1)
    for cell in (float("nan"), [float("inf")], {1, 2}, Point(1), b"x", "\ud800"):
        same_as_dumps([cell])
        assert isinstance(expected(cell), tuple)


def test_plain_cells_use_the_fast_path():
    enc = CellEncoder()
    cells = [{"state": "é\u2028\x00", "questions": {"q": {"type": "noul", "criteria": [1, 0.5, None, True]}}}] * 3
    assert enc.encode_all(cells) == [dumps(c).encode("utf-8") for c in cells]
    assert (enc.fast_batches, enc.exact_batches) == (1, 0)


def test_cycles_and_deep_nesting_raise_what_dumps_raises():
    loop: list = []
    loop.append(loop)
    loop.append(loop)  # two references: a census walking it naively would double per level
    assert not plain_json([loop])
    same_as_dumps([loop])
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    same_as_dumps([deep])


def test_exact_encoder_is_dumps():
    enc = exact_encoder()
    for cell in ({"a": [1, 2.5e-05, "é"]}, "x\ty", 1e16, [None, True]):
        assert enc(cell) == dumps(cell)
    with pytest.raises(ValueError, match="Out of range float"):
        enc([float("nan")])


# ---------------------------------------------------------------------------------------------
# the snapshot TSV


def row_by_row(rows):
    """The snapshot TSV as the writer rendered it before blocks: one ``dumps`` per cell."""
    lines = ["\t".join(("request_id", "request", "candidates", "targets", "slices", "source"))]
    for r in rows:
        lines.append("\t".join((r.request_id, dumps(r.request), dumps(r.candidates),
                                dumps({q: t.to_json() for q, t in r.targets.items()}), dumps(r.slices), dumps(r.source))))
    return ("\n".join(lines) + "\n").encode("utf-8")


def make_row(i, state="s", slices=None):
    return SnapshotRow(
        request_id=f"r{i}",
        request={"state": state, "questions": {"q": {"type": "noul", "instructions": "?"}}},
        candidates={"q": ["true", "false"]},
        targets={"q": Target(label=i % 2) if i % 3 else Target(probabilities=(0.25, 0.75))},
        slices=slices if slices is not None else {"i": i, "x": i / 7},
        source={"line": f"f:{i}"},
    )


def test_tsv_blocks_equal_row_by_row(monkeypatch):
    import jevkedro.nodes.snapshot as snapshot

    monkeypatch.setattr(snapshot, "TSV_BATCH_ROWS", 7)
    rows = [make_row(i, state=f"é\u2028{i}", slices={"x": 10.0 ** -(i % 9)}) for i in range(50)]
    blocks = list(tsv_blocks(rows))
    assert len(blocks) == 1 + 8  # the header, then 7 blocks of 7 rows and one of 1
    assert b"".join(blocks) == render_tsv(rows) == row_by_row(rows)
    assert hashlib.sha256(render_tsv(rows)).hexdigest() == hashlib.sha256(row_by_row(rows)).hexdigest()


@pytest.mark.parametrize("bad, error", [
    (lambda i: make_row(i, slices={"x": float("nan")}), ValueError),
    (lambda i: make_row(i, slices={"x": {1, 2}}), TypeError),
    (lambda i: make_row(i - 1), SnapshotError),  # a duplicate id
    (lambda i: SnapshotRow(f"r{i}\t", make_row(i).request, make_row(i).candidates, make_row(i).targets), SnapshotError),
    (lambda i: SnapshotRow(f"r{i}", {"questions": {}}, {}, {}), ProtocolError),
])
def test_the_first_failing_rows_error_as_row_by_row(bad, error, monkeypatch):
    import jevkedro.nodes.snapshot as snapshot

    monkeypatch.setattr(snapshot, "TSV_BATCH_ROWS", 8)
    # a later row in the same block fails differently: the earlier row's error must win
    rows = [make_row(i) for i in range(10)] + [bad(10), make_row(11, slices={"x": float("inf")}), make_row(12)]
    with pytest.raises(error) as got:
        render_tsv(rows)
    with pytest.raises(error) as want:
        row_by_row_checked(rows)
    assert str(got.value) == str(want.value)


def row_by_row_checked(rows):
    seen = set()
    for r in rows:
        r.check()
        if r.request_id in seen:
            raise SnapshotError(f"duplicate request_id {r.request_id!r}")
        seen.add(r.request_id)
        if any(c in r.request_id for c in "\t\n\r"):
            raise SnapshotError(f"request_id {r.request_id!r} contains a tab or newline")
        row_by_row([r])


# Rows the writer's batch check must judge exactly as SnapshotRow.check and the id checks do: a
# passing batch is written as row by row writes it, a failing one raises the first failing row's error.
class QDict(dict):
    pass


SHARED = (Target(label=0), Target(label=1), Target(unscored=True), Target(probabilities=(0.5, 0.5)),
          Target(label=1, extra={"note": "kept"}))
VARIANTS = {
    "plain": lambda i: make_row(i),
    "shared target": lambda i: SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {"q": SHARED[i % len(SHARED)]}),
    "question a dict subclass": lambda i: SnapshotRow(
        f"r{i}", {"state": "s", "questions": {"q": QDict(type="noul", instructions="?")}}, {"q": ["true", "false"]}, {"q": SHARED[0]}),
    "question a list of field names": lambda i: SnapshotRow(
        f"r{i}", {"state": "s", "questions": {"q": ["type", "instructions"]}}, {"q": ["true", "false"]}, {"q": SHARED[1]}),
    "media": lambda i: SnapshotRow(f"r{i}", {**make_row(i).request, "media": []}, make_row(i).candidates, make_row(i).targets),
    "label out of range": lambda i: SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {"q": Target(label=2)}),
    "negative label": lambda i: SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {"q": Target(label=-1)}),
    "distribution too short": lambda i: SnapshotRow(
        f"r{i}", make_row(i).request, make_row(i).candidates, {"q": Target(probabilities=(1.0,))}),
    "no candidates": lambda i: SnapshotRow(f"r{i}", make_row(i).request, {}, make_row(i).targets),
    "no target": lambda i: SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {}),
    "forbidden key": lambda i: SnapshotRow(
        f"r{i}", {"state": "s", "questions": {"q": {"type": "noul", "gold": True}}}, {"q": ["true", "false"]}, {"q": SHARED[0]}),
    "extra question field": lambda i: SnapshotRow(
        f"r{i}", {"state": "s", "questions": {"q": {"type": "noul", "hint": 1}}}, {"q": ["true", "false"]}, {"q": SHARED[0]}),
    "extra request field": lambda i: SnapshotRow(f"r{i}", {**make_row(i).request, "extra": 1}, make_row(i).candidates, make_row(i).targets),
    "no state": lambda i: SnapshotRow(
        f"r{i}", {"questions": make_row(i).request["questions"]}, make_row(i).candidates, make_row(i).targets),
    "questions empty": lambda i: SnapshotRow(f"r{i}", {"state": "s", "questions": {}}, {}, {}),
    "duplicate id": lambda i: make_row(0),
    "newline in id": lambda i: SnapshotRow(f"r{i}\n", make_row(i).request, make_row(i).candidates, make_row(i).targets),
    "id not a string": lambda i: SnapshotRow(i, make_row(i).request, make_row(i).candidates, make_row(i).targets),
}


def outcome(render, rows):
    try:
        return render(rows)
    except Exception as exc:  # noqa: BLE001 -- the error itself is what is compared
        return type(exc), str(exc)


def render_checked_row_by_row(rows):
    row_by_row_checked(rows)
    return row_by_row(rows)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(sorted(VARIANTS)), min_size=1, max_size=12), st.integers(min_value=1, max_value=5))
def test_batch_checks_judge_as_row_by_row(kinds, batch_rows):
    import jevkedro.nodes.snapshot as snapshot

    rows = [VARIANTS[k](i + 1) for i, k in enumerate(kinds)]
    old = snapshot.TSV_BATCH_ROWS
    snapshot.TSV_BATCH_ROWS = batch_rows
    try:
        got = outcome(render_tsv, rows)
    finally:
        snapshot.TSV_BATCH_ROWS = old
    assert got == outcome(render_checked_row_by_row, rows)


def test_target_cells_each_target_converted_once_and_bounded(monkeypatch):
    import jevkedro.nodes.snapshot as snapshot

    calls = []
    real = Target.to_json

    def counted(self):
        calls.append(self)
        return real(self)

    monkeypatch.setattr(Target, "to_json", counted)
    rows = [SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {"q": SHARED[i % 2]}) for i in range(100)]
    assert render_tsv(rows) == row_by_row(rows)
    calls_rendered = len(calls) - 100  # row_by_row converts each row's target itself
    assert calls_rendered == 2
    monkeypatch.setattr(snapshot.TargetCells, "LIMIT", 3)  # one target per row: the cache is emptied and refilled
    rows = [SnapshotRow(f"r{i}", make_row(i).request, make_row(i).candidates, {"q": Target(label=i % 2)}) for i in range(20)]
    assert render_tsv(rows) == row_by_row(rows)
