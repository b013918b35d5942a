"""The Decision Index's reader of gzipped JSON lines: every line read by the strict source reader
(:func:`jevkedro.nodes.snapshot.read_source_json`), so its rows, hash and size are what reading the
file line by line gives, and a bad line (repeated keys and numbers no double holds included, which
msgspec alone would let through) is refused with the source reader's error naming file and line."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jevkedro.pipelines.decision_index as di
from jevkedro.nodes.snapshot import SourceFormatError
from jevkedro.nodes.sources import SourceJSONError, read_source_json


def line_by_line(path):
    """One line at a time: UTF-8, then the strict source reader; blank lines skipped, objects only."""
    out, raw_all = [], gzip.decompress(path.read_bytes())
    parts = raw_all.split(b"\n")
    for lineno, raw in enumerate(parts, start=1):
        raw += b"\n" if lineno < len(parts) else b""  # lines as iterating the file gives them
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceFormatError(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})") from None
        try:
            obj = read_source_json(text)
        except SourceJSONError as exc:
            raise SourceFormatError(f"{path}:{lineno}: {exc}") from None
        if not isinstance(obj, dict):
            raise SourceFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out, hashlib.sha256(raw_all).hexdigest(), len(raw_all)


# Lines msgspec reads, lines only the exact reader reads (NaN, -Infinity, a lone surrogate escape, a
# colon written as an escape beside an escaped backslash), blank lines and whitespace.
GOOD = [b'{"x":[1.5,-0,1e5,0.1000000000000000055511151231257827]}', b' {"k":"\\u00e9\\ud83d\\ude00"}\r',
        b'{"n":123456789012345678901234567890}', b'{"v":NaN}', b'{"w":-Infinity}', b'{"s":"\\ud800"}',
        b'{"a\\u003ab":1,"c":"\\\\"}', b'{"ls":"a\xe2\x80\xa8b\xc2\x85c"}', b'{"p":{"q":{"r":[{"s":1},{"t":2}]}}}', b"", b"   ", b"{}"]
# Bad lines: not JSON, not an object, not UTF-8 (incl. CESU-8 surrogates, UTF-16), a byte-order
# mark, a key repeated (at any depth), a number beyond a double's range.
BAD = [b'{"a":', b"[1,2]", b'"text"', b"\xff{}", b'{"a":1} x', '{"u":16}'.encode("utf-16"), b'{"s":"\xed\xa0\x80"}',
       b'\xef\xbb\xbf{"bom":1}', b'{"a":1,"a":2}', b'{"p":{"q":[{"r":1,"r":1}]}}', b'{"v":1e400}', b'{"a\\u003a":1,"a:":2}']


def write(tmp_path, lines, final_newline=True):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + (b"\n" if final_newline else b"")))
    return path


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(GOOD), min_size=1, max_size=30), st.booleans())
def test_same_rows_hash_and_size(tmp_path_factory, lines, final_newline):
    path = write(tmp_path_factory.mktemp("gz"), lines, final_newline)
    got = di.read_jsonl_gz(path)
    want = line_by_line(path)
    assert got[1:] == want[1:]
    assert [(n, json.dumps(o, allow_nan=True)) for n, o in got[0]] == [(n, json.dumps(o, allow_nan=True)) for n, o in want[0]]


@pytest.mark.parametrize("bad", BAD)
def test_bad_line_same_error(tmp_path, bad):
    path = write(tmp_path, [b'{"a":1}', b"", b'{"v":NaN}', bad, b"[]"])
    with pytest.raises(SourceFormatError) as got:
        di.read_jsonl_gz(path)
    with pytest.raises(SourceFormatError) as want:
        line_by_line(path)
    assert str(got.value) == str(want.value)
    assert f"{path}:4:" in str(got.value)
