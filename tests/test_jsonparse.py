"""parse_json: the one reader of JSON a model wrote (repeated keys, oversized numbers, located faults)."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevkedro.nodes.jsonparse import JSONTextError, parse_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10 ** 30), 10 ** 30) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_reads_what_the_standard_library_reads(value, ascii_only):
    """Fast (msgspec) or exact, the value is the standard library's and nothing is reported."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    parsed = parse_json(text.encode("utf-8"))
    assert parsed.value == json.loads(text) and parsed.exact and parsed.duplicate_keys == ()
    assert parse_json(text).value == parsed.value  # str or bytes alike


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(":\\\"ab", min_size=1, max_size=4), json_values, min_size=1, max_size=4), st.data())
def test_every_repeated_key_is_found_with_its_path(obj, data):
    key = data.draw(st.sampled_from(sorted(obj)))
    inner = json.dumps({"x": obj})[:-1]  # '{"x": {...}'
    text = inner[:-1] + f", {json.dumps(key)}: 1}}}}"  # the key once more, last, inside "x"
    parsed = parse_json(text)
    assert parsed.duplicate_keys == (("x", key),)
    assert parsed.value["x"][key] == 1  # the last value wins, as everywhere


def test_repeated_keys_at_every_depth_and_in_lists():
    parsed = parse_json(b'{"a": 1, "answers": [{"id": "q", "p": {"x": 1, "x": 2}}], "answers2": {"q": {"t": 1, "t": 2}}, "a": 3}')
    assert parsed.duplicate_keys == (("a",), ("answers", 0, "p", "x"), ("answers2", "q", "t"))
    # an escaped colon is the same key; an escaped backslash before "u003a" is not an escape
    assert parse_json(b'{"k\\u003a": 1, "k:": 2}').duplicate_keys == (("k:",),)
    assert parse_json(b'{"k\\\\u003a": 1, "k:": 2}').duplicate_keys == ()
    # a repeat inside a value that lost to a later repeat is gone with it
    assert parse_json(b'{"a": {"b": 1, "b": 2}, "a": 0}').duplicate_keys == (("a",),)


@pytest.mark.parametrize("digits", [310, 400, 4300, 5000, 20000])
def test_integers_beyond_the_double_range_are_infinite(digits):
    text = '{"noul": ' + "9" * digits + ', "neg": -' + "9" * digits + "}"
    parsed = parse_json(text)
    assert parsed.value == {"noul": math.inf, "neg": -math.inf}
    assert parsed.numbers_out_of_range == 2 and not parsed.exact


def test_numbers_within_range_stay_exact_and_literals_are_kept():
    assert parse_json(b"[" + b"1" * 300 + b"]").value == [int("1" * 300)]
    assert parse_json("1" + "0" * 308).value == 10 ** 308  # 309 digits, still a double's
    assert parse_json("[1e400, -1e400, NaN, Infinity]").value[:2] == [math.inf, -math.inf]
    parsed = parse_json("[NaN, Infinity]")
    assert math.isnan(parsed.value[0]) and parsed.value[1] == math.inf and parsed.exact  # as written


def test_faults_are_located():
    text = '{"request_id": "a", "response": {"answers": {"q": {"noul": 0.5,, }}}}'
    with pytest.raises(JSONTextError) as err:
        parse_json(text)
    assert (err.value.line, err.value.column) == (1, text.index(",,") + 2)
    assert err.value.within_line().endswith(f"column {text.index(',,') + 2}")
    with pytest.raises(JSONTextError) as err:
        parse_json(b'{"a": "\xff\xfe"}')
    assert "not UTF-8 (byte 0xff)" in str(err.value) and err.value.byte_column and err.value.column == 8
    with pytest.raises(JSONTextError) as err:
        parse_json("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in str(err.value) and err.value.line is None  # no made-up position
    with pytest.raises(JSONTextError, match="line 2 column 1"):
        parse_json('{"a": 1}\n{"b": 2}')
