"""Round 3, class 19 — unclear errors: each input gets its rule and a message naming it.

- A folder, a FIFO, a symlink to ``/dev/zero`` or a broken symlink where a file is read (every
  family's release files, optional ones included; ``model.path``; a snapshot's TSV and manifest) is
  refused naming the path and what is there (``is a FIFO, not a regular file``), never "not found",
  never taken for an absent optional file, never read (a FIFO would block, /dev/zero never ends).
- One rule for a byte-order mark: no JSON text starts with one (RFC 8259 §8.1), the same in an HTTP
  reply (``malformed``), a replay file and a release file (refused naming file and line).
- Bytes that are not UTF-8 inside a reply's strings make the reply ``malformed`` (raw kept,
  the byte named), never answers holding U+FFFD.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from hostile_support import ask, judged, lines, settings_for

from jevkedro.family import prepare_view
from jevkedro.models import make_adapter
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, load_snapshot, snapshot_paths
from jevkedro.nodes.sources import read_jsonl
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot, system_one_answers

RAW = Path(__file__).resolve().parents[2] / "data" / "01_raw"


@pytest.fixture(autouse=True)
def no_hang():
    """A reader that opens a FIFO blocks for ever: fail the case instead."""
    def hung(*_):
        raise AssertionError("blocked reading: a FIFO or a device was opened")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _put(path: Path, kind: str) -> None:
    """Replace whatever is at ``path`` by ``kind``: a folder, a FIFO, a symlink to /dev/zero or a broken symlink."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(path.parent / "gone.jsonl")


WHAT = {"folder": r"is a folder, not a regular file", "fifo": r"is a FIFO, not a regular file",
        "zero": r", a symlink to /dev/zero, is a character device, not a regular file",
        "broken": r"is a symlink to .*gone\.jsonl, which does not exist"}

# (view, release folder under data/01_raw, file inside it, data kind): every file prepare reads,
# the optional ones (read when the release has them) included
RELEASE_FILES = [
    ("zh_decision_bench", "zh_decision_bench", "voice_routing.jsonl", None),
    ("jevalt_bench", "jevalt_bench/sample", "en/test.jsonl", "sample"),
    ("jevalt_bench", "jevalt_bench/sample", "SPLITS.sha256", "sample"),
    ("jevalt_bench", "jevalt_bench/sample", "JEVKEDRO_DATA_KIND.json", "sample"),
    ("jevbench", "jevbench/sample", "easy.jsonl", "sample"),
    ("decision_index", "decision_index/sample", "selected-rows.jsonl.gz", "sample"),
    ("decision_index", "decision_index/sample", "acos-subset.json", "sample"),
    ("typed_decisions", "typed_decisions/sample", "all/test-00000-of-00001.parquet", "sample"),
    ("decisionbench", "decisionbench/sample", "data/eval-00000-of-00001.parquet", "sample"),
    ("procedural_typed_decisions", "procedural_typed_decisions/sample", "all/test-00000-of-00001.parquet", "sample"),
    ("visual_decision_bench", "visual_decision_bench/sample", "eval.jsonl", "sample"),
    ("visual_decision_bench", "visual_decision_bench/sample", "assets_manifest.jsonl", "sample"),
    ("visual_decision_bench", "visual_decision_bench/sample", "statistics.json", "sample"),
    ("visual_decision_bench", "visual_decision_bench/sample", "assets/visualdecisionbench_video/syn-0001.mp4", "sample"),
]


@pytest.mark.parametrize("kind", sorted(WHAT))
@pytest.mark.parametrize("view, folder, rel, data", RELEASE_FILES, ids=[f"{v}:{r}" for v, _, r, _ in RELEASE_FILES])
def test_a_release_file_that_is_no_regular_file_is_named_for_what_it_is(tmp_path, view, folder, rel, data, kind):
    root = tmp_path / "release"
    shutil.copytree(RAW / folder, root)
    _put(root / rel, kind)
    with pytest.raises((SnapshotError, SourceFormatError), match=WHAT[kind]) as err:
        prepare_view(view, root, **({"data": data} if data else {}))
    assert str(root / rel) in str(err.value) and "not found" not in str(err.value)


@pytest.fixture
def snapshot(tmp_path):
    return synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))


@pytest.mark.parametrize("kind", sorted(WHAT))
def test_model_path_that_is_no_regular_file_is_named_with_the_setting(snapshot, tmp_path, kind):
    path = tmp_path / "answers.jsonl"
    _put(path, kind)
    with pytest.raises(SourceFormatError, match=WHAT[kind].replace("regular file", "replay file")) as err:
        run_inference(snapshot, make_adapter({"adapter": "replay", "path": str(path)}),
                      PredictionLog(tmp_path / "out" / "predictions.jsonl"))
    assert f"{path} (model.path)" in str(err.value)


@pytest.mark.parametrize("kind", ["folder", "fifo", "zero"])
@pytest.mark.parametrize("which", [0, 1], ids=["tsv", "manifest"])
def test_a_snapshot_file_that_is_no_regular_file_is_named(tmp_path, kind, which):
    synthetic_snapshot(tmp_path / "snap", synthetic_rows(2), view="v")
    path = snapshot_paths(tmp_path / "snap", "v")[which]
    _put(path, kind)
    with pytest.raises(SnapshotError, match=WHAT[kind]) as err:
        load_snapshot(tmp_path / "snap", "v")
    assert f"snapshot file {path}" in str(err.value)


# -- a byte-order mark: one rule for every JSON text --------------------------------------------------

BOM_RULE = r"a byte-order mark \(U\+FEFF\) before the JSON text"
GOOD_LINE = '{"request_id": "r00000", "response": {"answers": {}}}'


def responder(body, auth, fault):
    reply = json.dumps({"model": "jev-1.13.0", "answers": system_one_answers(body.get("questions") or {})}).encode()
    scripted = {
        "bom": b"\xef\xbb\xbf" + reply,
        "ff-in-model": reply.replace(b'"jev-1.13.0"', b'"jev-\xff\xfe"'),
        "overlong-slash-in-model": reply.replace(b'"jev-1.13.0"', b'"jev\xc0\xaf1"'),
        "cesu-surrogate-in-model": reply.replace(b'"jev-1.13.0"', b'"jev\xed\xa0\x80"'),
        "latin1-in-a-candidate": reply.replace(b'"billing"', b'"b\xe9lling"', 1),
        "cut-sequence-in-a-key": reply.replace(b'"answers"', b'"answers\xe2\x82"', 1),
    }
    return (200, [], scripted[fault]) if fault in scripted else None


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


def test_a_bom_is_refused_alike_in_a_reply_a_replay_file_and_a_release_file(tmp_path, server, snapshot):
    pytest.importorskip("httpx")
    _, plog, snap = ask(tmp_path, settings_for(server), {0: "bom"})
    record = lines(plog)[0]
    assert (record["status"], record["failure"]) == ("error", "malformed") and "byte-order mark" in record["error"]
    assert judged(snap, plog).status.tolist() == ["error"] * 3

    replay_file = tmp_path / "answers.jsonl"
    replay_file.write_bytes(b"\xef\xbb\xbf" + GOOD_LINE.encode() + b"\n")
    with pytest.raises(SourceFormatError, match=r"answers\.jsonl:1: not valid JSON: " + BOM_RULE):
        run_inference(snapshot, make_adapter({"adapter": "replay", "path": str(replay_file)}),
                      PredictionLog(tmp_path / "out" / "predictions.jsonl"))

    source = tmp_path / "voice_routing.jsonl"  # a release file: read_jsonl is every family's JSONL reader
    source.write_bytes(b"\xef\xbb\xbf" + (RAW / "zh_decision_bench" / "voice_routing.jsonl").read_bytes())
    with pytest.raises(SourceFormatError, match=rf"voice_routing\.jsonl:1: not valid JSON \({BOM_RULE}"):
        list(read_jsonl(source))


@pytest.mark.parametrize("fault, byte", [("ff-in-model", "0xff"), ("overlong-slash-in-model", "0xc0"),
                                         ("cesu-surrogate-in-model", "0xed"), ("latin1-in-a-candidate", "0xe9"),
                                         ("cut-sequence-in-a-key", "0xe2")])
def test_bytes_that_are_not_utf8_in_a_reply_make_it_malformed_the_raw_body_kept(tmp_path, server, fault, byte):
    pytest.importorskip("httpx")
    summary, plog, snap = ask(tmp_path, settings_for(server), {0: fault}, n=2)
    first, second = lines(plog)
    assert (first["status"], first["failure"], second["status"]) == ("error", "malformed", "ok")
    assert f"not UTF-8 (byte {byte})" in first["error"]
    assert first["raw_response"] and "\ufffd" in first["raw_response"]  # kept for a human, never scored
    assert not first.get("response")
    assert judged(snap, plog).status.tolist() == ["error"] * 3 + ["ok"] * 3
