"""The Decision Index's block reader of gzipped JSON lines gives what a line-by-line ``json.loads`` gives."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jevkedro.pipelines.decision_index as di
from jevkedro.nodes.snapshot import SourceFormatError


def line_by_line(path):
    """The reader before blocks: ``json.loads`` per line, blank lines skipped, objects only."""
    out, raw_all = [], gzip.decompress(path.read_bytes())
    parts = raw_all.split(b"\n")
    for lineno, raw in enumerate(parts, start=1):
        raw += b"\n" if lineno < len(parts) else b""  # lines as iterating the file gives them
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SourceFormatError(f"{path}:{lineno}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise SourceFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out, hashlib.sha256(raw_all).hexdigest(), len(raw_all)


# Lines msgspec reads like json.loads, and lines only json.loads reads (NaN, 1e400, a lone surrogate
# escape, CESU-8 bytes, a UTF-8 byte-order mark, UTF-16), blank lines and whitespace.
GOOD = [b'{"a":1,"a":2}', b'{"x":[1.5,-0,1e5,0.1000000000000000055511151231257827]}', b' {"k":"\\u00e9\\ud83d\\ude00"}\r',
        b'{"n":123456789012345678901234567890}', b'{"v":NaN}', b'{"v":1e400,"w":-Infinity}', b'{"s":"\\ud800"}',
        b'{"s":"\xed\xa0\x80"}', b'\xef\xbb\xbf{"bom":1}', b"", b"   ", b"{}"]
BAD = [b'{"a":', b"[1,2]", b'"text"', b"\xff{}", b'{"a":1} x', '{"u":16}'.encode("utf-16")]


def write(tmp_path, lines, final_newline=True):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + (b"\n" if final_newline else b"")))
    return path


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(GOOD), min_size=1, max_size=30), st.booleans(), st.integers(min_value=1, max_value=64))
def test_same_rows_hash_and_size(tmp_path_factory, lines, final_newline, block):
    path = write(tmp_path_factory.mktemp("gz"), lines, final_newline)
    old = di.GZIP_BLOCK
    di.GZIP_BLOCK = block  # tiny blocks: lines cut across block boundaries
    try:
        got = di.read_jsonl_gz(path)
    finally:
        di.GZIP_BLOCK = old
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
