"""The helper thread beside the prepare stages (jevkedro.nodes.background) and the collector pause
that keeps a stage's result (jevkedro.nodes.gcpause): real threads, real gzip files, real errors."""

from __future__ import annotations

import gc
import gzip
import hashlib
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jevkedro.pipelines.decision_index as di
from jevkedro.nodes.background import handed_off, read_ahead
from jevkedro.nodes.gcpause import gc_paused
from jevkedro.nodes.snapshot import SourceFormatError


def helpers_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("jevkedro-")]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers()), st.integers(min_value=1, max_value=4))
def test_read_ahead_yields_every_item_in_order(items, depth):
    assert list(read_ahead(iter(items), depth=depth)) == items
    assert helpers_alive() == []


def test_read_ahead_raises_the_helpers_error_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for x in read_ahead(source()):
            got.append(x)
    assert got == [1, 2]
    assert helpers_alive() == []


def test_read_ahead_closed_early_stops_the_helper_and_closes_the_source():
    closed, produced = threading.Event(), []

    def source():
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    blocks = read_ahead(source(), depth=1)
    assert next(blocks) == 0
    blocks.close()
    assert closed.is_set()  # closed in the helper, before close() returned
    assert len(produced) <= 3  # one handed over, at most one waiting, one being put
    assert helpers_alive() == []


def test_handed_off_handles_every_item_in_order_in_another_thread():
    seen, threads = [], set()

    def handle(x):
        threads.add(threading.get_ident())
        seen.append(x)

    with handed_off(handle, depth=2) as put:
        for i in range(500):
            put(i)
    assert seen == list(range(500))  # all handled when the block ends
    assert threads and threading.get_ident() not in threads
    assert helpers_alive() == []


def test_handed_off_raises_the_handlers_error_at_put_or_on_leaving():
    def handle(x):
        if x == 3:
            raise OSError("no space left")

    puts = 0
    with pytest.raises(OSError, match="no space left"), handed_off(handle, depth=1) as put:
        for i in range(1000):
            put(i)
            puts += 1
    assert puts < 1000  # the caller stopped early
    assert helpers_alive() == []

    with pytest.raises(OSError, match="no space left"), handed_off(handle) as put:
        for i in range(4):  # the error is found only after the last put
            put(i)


def test_handed_off_leaving_on_an_error_drops_the_rest_and_waits_for_the_helper():
    seen = []

    def slow(x):
        time.sleep(0.01)
        seen.append(x)

    with pytest.raises(ValueError, match="render failed"), handed_off(slow, depth=4) as put:
        for i in range(5):
            put(i)
        raise ValueError("render failed")
    after = len(seen)
    time.sleep(0.05)
    assert len(seen) == after  # nothing handled once the block is left
    assert helpers_alive() == []


def test_gzip_read_error_names_the_file_and_leaves_no_helper(tmp_path):
    whole = gzip.compress(b"".join(b'{"a":%d}\n' % i for i in range(20_000)))
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])  # truncated
    with pytest.raises(SourceFormatError, match=f"{path}: not a readable gzip file"):
        di.read_jsonl_gz(path)
    assert helpers_alive() == []


def test_gzip_bad_line_in_a_later_block_stops_the_helper(tmp_path, monkeypatch):
    monkeypatch.setattr(di, "GZIP_BLOCK", 64)
    lines = [b'{"a":%d}' % i for i in range(200)]
    lines[150] = b'{"a":1,"a":2}'
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    with pytest.raises(SourceFormatError, match=f"{path}:151:"):
        di.read_jsonl_gz(path)
    assert helpers_alive() == []
    lines[150] = b'{"a":150}'
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    rows, sha, size = di.read_jsonl_gz(path)
    text = b"\n".join(lines) + b"\n"
    assert [o["a"] for _, o in rows] == list(range(200))
    assert (sha, size) == (hashlib.sha256(text).hexdigest(), len(text))


def test_gc_paused_keep_moves_the_result_out_of_the_collectors_walks():
    try:
        before = gc.get_freeze_count()
        with gc_paused(keep=True):
            kept = [{"i": [i]} for i in range(10_000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + 20_000  # the dicts and lists made inside
        with pytest.raises(RuntimeError), gc_paused(keep=True):
            frozen = gc.get_freeze_count()
            raise RuntimeError("a failed stage keeps nothing")
        assert gc.get_freeze_count() == frozen
        assert gc.isenabled()
        del kept
    finally:
        gc.unfreeze()
