"""The predictions log: what is written reads back as written, compaction keeps each request's
latest line, the index stays small, and a line that is not a record is refused naming it."""

from __future__ import annotations

import gc
import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevkedro.nodes import predictions_log
from jevkedro.nodes.predictions_log import IDENTITY_FIELD, PredictionLog, PredictionLogError, encode_record


def body(i: int) -> dict:
    return {"model": f"m{i}", "answers": {"q": {"type": "noul", "noul": 0.25}}, "usage": {"input_tokens": i}}


def record_of(rid: str, response, top: dict) -> dict:
    return {"request_id": rid, "status": "ok", "response": response, "latency_s": None, "model": "m", "usage": None,
            "error": None, "snapshot_sha256": "s" * 64, "cost_usd": None, **top}


odd_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False)
    | st.sampled_from([math.inf, -math.inf, "null", "\ud800", "a\u2028b", "c\u0085d\re\x1cf", "nullnull"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.just("null"), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(odd_values, st.dictionaries(st.sampled_from(["latency_s", "error", "meta", "raw_excerpt"]), odd_values, max_size=3))
def test_a_record_reads_back_as_it_was_written(tmp_path_factory, response, top):
    """Any value a model may send (infinities, lone surrogates, U+2028 and the other line breaks
    that are not ``\\n``) is one line and reads back equal."""
    path = tmp_path_factory.mktemp("log") / "p.jsonl"
    record = record_of("r", response, top)
    plog = PredictionLog(path)
    plog.append(record)
    plog.close()
    assert path.read_bytes().count(b"\n") == 1 and path.read_bytes() == encode_record(record)
    assert PredictionLog(path).records == {"r": record}


@pytest.mark.parametrize("response, read", [
    (math.nan, None), ({"x": 10 ** 5000}, {"x": math.inf}), ({"x": -(10 ** 400)}, {"x": -math.inf}),
    ({"s": "\udc80"}, {"s": "\udc80"}), ((1, 2), [1, 2]),
])
def test_numbers_no_double_holds_and_odd_values_read_back_as_the_reader_reads_them(tmp_path, response, read):
    plog = PredictionLog(tmp_path / "p.jsonl")
    plog.append(record_of("r", response, {}))
    got = PredictionLog(plog.path).records["r"]["response"]
    assert math.isnan(got) if read is None else got == read


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 12), odd_values, st.sampled_from([None, "other", "mine"])), max_size=25),
       st.lists(st.integers(0, 15), max_size=20))
def test_appending_and_compacting_keep_exactly_each_requests_latest_line(tmp_path_factory, appends, order):
    """Lines appended (stamped or restamped), then compacted in any order: the file is the latest
    line of each kept request, in that order, and the index says where."""
    path = tmp_path_factory.mktemp("log") / "predictions.jsonl"
    plog = PredictionLog(path)
    plog.bind_identity("mine")
    latest: dict[str, bytes] = {}
    for i, response, stamped in appends:
        record = record_of(f"r{i}", response, {IDENTITY_FIELD: stamped} if stamped else {})
        plog.append(record)
        latest[record["request_id"]] = encode_record({**record, IDENTITY_FIELD: "mine"})
    ids = list(dict.fromkeys(f"r{i}" for i in order))
    plog.compact(ids)
    kept = [rid for rid in ids if rid in latest]
    assert (path.read_bytes() if path.exists() else b"") == b"".join(latest[rid] for rid in kept)
    assert list(plog.index) == kept
    assert plog.index == PredictionLog(path).index  # the index is the one a reader builds from the file


def test_a_shuffled_log_is_compacted_in_order_with_every_line_read_once(tmp_path, monkeypatch):
    """A log written in completion order comes back in snapshot order."""
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    rids = [f"r{i:04d}" for i in range(500)]
    shuffled = rids[:]
    random.Random(3).shuffle(shuffled)
    for rid in shuffled:
        plog.append(record_of(rid, body(int(rid[1:])), {}))
    reads = []
    real_pread = predictions_log.os.pread
    monkeypatch.setattr(predictions_log.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    plog.compact(rids)
    assert [json.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == rids
    assert sum(reads) == path.stat().st_size  # each line copied once
    assert list(PredictionLog(path).records) == rids  # records come in log order


def test_a_log_cut_short_before_compaction_is_refused_naming_the_line_and_left_as_it_was(tmp_path):
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    for i in (3, 0, 4, 1, 2):
        plog.append(record_of(f"r{i}", body(i), {}))
    plog.close()
    cut = path.read_bytes()[:-10]  # the file changed under the index (the last line written is r2's)
    path.write_bytes(cut)
    with pytest.raises(PredictionLogError, match=r"changed while it was being compacted \(line of r2 at byte \d+\)"):
        plog.compact([f"r{i}" for i in range(5)])
    assert path.read_bytes() == cut and [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]


def test_the_log_index_is_never_walked_by_the_cycle_collector(tmp_path):
    """Index entries, however made (appended, read when a log is opened, rewritten by compaction),
    are not tracked by the cycle collector."""
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    rids = [f"r{i:04d}" for i in range(300)]
    for rid in rids[::-1]:
        plog.append({**record_of(rid, body(int(rid[1:])), {}), "snapshot_sha256": "0" * 64, "cost_usd": 0.25})
    appended = list(plog.index.values())
    plog.close()
    opened = PredictionLog(path)
    reread = list(opened.index.values())
    opened.compact(rids)
    entries = appended + reread + list(opened.index.values())
    assert len(entries) == 900 and not any(map(gc.is_tracked, entries))
    first = opened.index["r0000"]
    assert (first.status, first.snapshot_sha256, first.cost_usd, first.offset) == ("ok", "0" * 64, 0.25, 0)


def _five_rows_and_their_log(tmp_path):
    """Five noul requests and the path of a log answering each."""
    from jevkedro.protocol import SnapshotRow, Target

    rows = [SnapshotRow(f"r{i}", {"state": "s", "questions": {"q": {"type": "noul"}}}, {"q": ["true", "false"]},
                        {"q": Target(label=0)}, {}, {}) for i in range(5)]
    plog = PredictionLog(tmp_path / "p.jsonl")
    for i in range(5):
        plog.append({"request_id": f"r{i}", "status": "ok", "response": {"answers": {"q": {"noul": 0.25}}}})
    plog.close()
    return rows, plog.path


@pytest.mark.parametrize("damage, why", [
    (lambda line: line.replace(b"0.25", b"0.#5"), "not valid JSON"),
    (lambda line: b'{"note":"' + b"x" * (len(line) - 11) + b'"}', "no request_id"),
    (lambda line: line.replace(b'"status":"ok"', b'"status":"no"'), "status 'no' is not one of"),
])
def test_a_damaged_line_is_refused_by_the_scorer_naming_file_and_line(tmp_path, damage, why):
    """The scorer's log is read once, as it is on disk: a line that is no record is refused naming
    the file and the line, never scored by guesswork."""
    from jevkedro.nodes.validate import build_question_table

    rows, path = _five_rows_and_their_log(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = damage(lines[2])
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(PredictionLogError, match=rf"p\.jsonl:3: not a prediction record: {why}"):
        build_question_table(rows, PredictionLog(path).records)


def test_a_reader_never_cuts_a_torn_tail_only_the_writer_does(tmp_path, caplog):
    path = tmp_path / "p.jsonl"
    plog = PredictionLog(path)
    plog.append(record_of("a", body(0), {}))
    plog.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"request_id": "b", "sta')
    reader = PredictionLog(path)
    assert list(reader.records) == ["a"] and "dropping a torn last line" in caplog.text
    assert path.read_bytes() == whole + b'{"request_id": "b", "sta'  # reading left the file as it was
    reader.append(record_of("c", body(2), {}))
    reader.close()
    assert path.read_bytes() == whole + encode_record(record_of("c", body(2), {}))


def test_the_records_of_an_opened_log_follow_its_writes(tmp_path):
    """The records read at opening serve a reader until the log is written; after a write (an
    answer appended, a compaction) they are the file's again."""
    plog = PredictionLog(tmp_path / "p.jsonl")
    plog.append(record_of("a", body(0), {}))
    plog.close()
    opened = PredictionLog(plog.path)
    assert list(opened.records) == ["a"]
    opened.append(record_of("b", body(1), {}))
    assert list(opened.records) == ["a", "b"]
    opened.append({**record_of("a", body(2), {}), "status": "error"})
    opened.compact(["b", "a"])
    assert [(rid, r["status"]) for rid, r in opened.records.items()] == [("b", "ok"), ("a", "error")]


def _dumps_line(record) -> bytes:
    """What every record line was before msgspec wrote them: ``json.dumps`` (UTF-8, compact)."""
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


@settings(max_examples=300, deadline=None)
@given(odd_values | st.floats() | st.lists(st.floats(), max_size=4))
def test_a_record_is_written_as_json_dumps_writes_it(value):
    """The writer's bytes are ``json.dumps``'s whatever the record holds: floats in its notation
    (``1e-05``, ``1e+16``), NaN and infinities as ``NaN``/``Infinity``, lone surrogates escaped, a
    tuple as a list."""
    record = record_of("r", value, {"meta": {"t": (1, 2.5e-07), "x": [1e16, 0.0001, 5e-324]}})
    assert encode_record(record) == _dumps_line(record)


def test_floats_of_every_magnitude_are_written_as_json_dumps_writes_them():
    rng = random.Random(7)
    floats = [rng.random() * 10.0 ** rng.randint(-30, 30) * rng.choice((1, -1)) for _ in range(3000)]
    floats += [math.ldexp(rng.random(), rng.randint(-1074, 1023)) for _ in range(3000)]
    floats += [1e-4, 9.99e-5, 1e15, 1e16, 9999999999999998.0, 0.0, -0.0]
    for x in floats:
        assert encode_record(record_of("r", x, {})) == _dumps_line(record_of("r", x, {})), x


def test_opening_decodes_each_record_once_and_the_writer_keeps_none(tmp_path, monkeypatch):
    """``records`` are the records decoded while opening (a dict in log order, not decoded again);
    once the log is written they are let go, and asked for again the file is read anew."""
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    for rid in ("b", "a", "c"):
        plog.append(record_of(rid, body(1), {}))
    plog.close()
    decoded = []
    real = predictions_log.decode_record
    monkeypatch.setattr(predictions_log, "decode_record", lambda line: decoded.append(line) or real(line))
    opened = PredictionLog(path)
    records = opened.records
    assert isinstance(records, dict) and list(records) == ["b", "a", "c"] and len(decoded) == 3
    assert records["a"] is opened.records["a"] and len(decoded) == 3
    opened.append(record_of("d", body(2), {}))
    assert opened._records is None and list(records) == ["b", "a", "c"]  # a dict handed out keeps its records
    assert list(opened.records) == ["b", "a", "c", "d"] and len(decoded) == 7


def test_a_log_written_in_order_is_compacted_in_large_reads(tmp_path, monkeypatch):
    """Lines that lie one after another are copied as one run; a torn tail is cut."""
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    rids = [f"r{i:04d}" for i in range(2000)]
    for rid in rids:
        plog.append(record_of(rid, body(int(rid[1:])), {}))
    plog.close()
    with open(path, "ab") as f:
        f.write(b'{"request_id":')  # a torn tail: the writer cuts it
    whole = path.read_bytes()[: -len(b'{"request_id":')]
    reads = []
    real_pread = predictions_log.os.pread
    monkeypatch.setattr(predictions_log.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    opened = PredictionLog(path)
    opened.compact(rids)
    assert path.read_bytes() == whole and sum(reads) == len(whole)
    assert len(whole) < predictions_log.COPY_BYTES and len(reads) == 1
    assert [opened.index[r].offset for r in rids[:2]] == [0, opened.index["r0000"].length]
    assert list(PredictionLog(path).records) == rids


def test_the_dataset_opens_the_log_once_for_all_its_readers_in_a_kedro_run(tmp_path, monkeypatch):
    """In a Kedro run the writer and every reader of ``{view}.predictions`` get the one log opened
    first: what the writer appended is decoded once, by the first reader, and the log is let go
    after the last reader (Kedro releases the dataset); a load after the folder's lock was let go
    and taken again opens the file afresh (another process may have written it meanwhile)."""
    from kedro.framework.hooks.manager import _create_hook_manager
    from kedro.io import DataCatalog
    from kedro.pipeline import Pipeline, node
    from kedro.runner import SequentialRunner

    from jevkedro.datasets import PredictionsDataset
    from jevkedro.hooks import ReleaseOutputFolders
    from jevkedro.nodes import output_lock

    decoded = []
    real = predictions_log.decode_record
    monkeypatch.setattr(predictions_log, "decode_record", lambda line: decoded.append(line) or real(line))
    dataset = PredictionsDataset(str(tmp_path / "m" / "v" / "predictions.jsonl"))
    seen: list[PredictionLog] = []

    def write(plog):
        seen.append(plog)
        for rid in ("a", "b"):
            plog.append(record_of(rid, body(1), {}))
        plog.close()
        return 1

    def read(plog, _):
        seen.append(plog)
        return list(plog.records)

    pipeline = Pipeline([node(write, "p", "written"), node(read, ["p", "written"], "r1", name="r1"),
                         node(read, ["p", "r1"], "r2", name="r2")])
    hooks = _create_hook_manager()
    hooks.register(ReleaseOutputFolders())  # the project's hook: Kedro itself never releases a pipeline's input
    catalog = DataCatalog({"p": dataset})
    try:  # as a KedroSession runs a pipeline
        hooks.hook.before_pipeline_run(run_params={}, pipeline=pipeline, catalog=catalog)
        SequentialRunner().run(pipeline, catalog, hooks)
        assert seen[0] is seen[1] is seen[2] and list(seen[2].records) == ["a", "b"]
        assert len(decoded) == 2  # the two appended records, decoded once for both readers
        assert dataset._opened is None  # released after its last reader
        output_lock.claim(dataset.filepath.parent)  # as held during a pipeline (the hook let it go at its end)
        again = dataset.load()
        assert dataset.load() is again and again is not seen[0]
        output_lock.release_claims()
        assert dataset.load() is not again
    finally:
        output_lock.release_claims()
