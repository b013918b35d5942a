"""The fast paths of replay reading and of the predictions log give exactly what the strict ones do.

Replay files: setting up vouches for chunks of lines with msgspec's typed pass and falls back to
the strict reader line by line; every file here is read both ways (the chunk pass switched off
for the reference) and must give the same refusal (message and all) or the same answers. The
log: ``encode_record`` writes one encoding where it used to write two, stamps the identity without
copying the record and ``compact`` copies with the collector paused; the bytes must be those of
the plain reference (``json.dumps`` where msgspec cannot say it, msgspec where it can).
"""

from __future__ import annotations

import json
import math
import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevkedro.models import replay as replay_module
from jevkedro.models.replay import ReplayAdapter
from jevkedro.nodes import infer
from jevkedro.nodes.infer import IDENTITY_FIELD, PredictionLog, PredictionLogError, _has_non_finite, _json_safe, encode_record
from jevkedro.nodes.snapshot import SourceFormatError

# -- replay files ------------------------------------------------------------------------------------


def outcome(path, monkeypatch, fast: bool, chunk_bytes: int) -> object:
    """What reading the file gives: the refusal's message, or the answers, line count and ids."""
    with monkeypatch.context() as m:
        m.setattr(replay_module, "CHUNK_BYTES", chunk_bytes)
        if not fast:  # the reference: every line read by the strict reader
            m.setattr(replay_module, "_vouched_ids", lambda chunk, lines: None)
        adapter = ReplayAdapter(path=str(path))
        try:
            adapter.setup()
        except SourceFormatError as exc:
            return ("refused", str(exc))
        answers = {}
        for rid in adapter._loaded():
            r = adapter.answer(rid, {})
            answers[rid] = (r.status, json.dumps(r.response, sort_keys=True, allow_nan=True), r.model, r.usage, r.meta, r.raw)
        return ("read", adapter._n_lines, list(adapter._loaded()), answers)


def body(i: int) -> dict:
    return {"model": f"m{i}", "answers": {"q": {"type": "noul", "noul": 0.25}}, "usage": {"input_tokens": i}}


def line(rid: str, response: object = None, **dumps) -> str:
    return json.dumps({"request_id": rid, "response": body(0) if response is None else response}, **dumps)


# lines a user may hand over: fine, odd but accepted, or refused (each must be refused the same way)
ODD_LINES = [
    line("a"),
    line("b", {"note": "é 中文 \u2028"}, ensure_ascii=False),
    line("c", {"note": "é 中文"}),  # \u escapes
    '{"request_id": "d", "request_id": "e", "response": {}}',  # a repeated request_id key: refused
    '{"request_id": "f", "request\\u005fid": "g", "response": {}}',  # the same, escaped: refused
    '{"request_id": "h", "request\\u005Fid": "h", "response": {}}',
    '{"\\u0072equest_id": "i", "response": {}}',  # an escaped key, alone: fine
    '{"request_id": "j", "response": {"a": 1}, "response": {"a": 2}}',  # a repeated response: carried
    '{"request_id": "k", "response": {"answers": {"q": {"noul": 0.1, "noul": 0.9}}}}',
    '{"request_id": "l", "response": {"answers": {"q": {"noul": ' + "9" * 400 + '}}}}',  # beyond a double
    '{"request_id": "m", "response": {"noul": NaN, "x": Infinity, "y": -Infinity, "z": 1e400}}',
    '{"request_id": "n", "response": "\\ud800"}',  # a lone surrogate: the strict reader takes it
    '{"request_id": "o", "response": {"a\\u003ab": "x:y", "c": "\\\\u003a"}}',  # escaped colons, escaped backslash
    '{"request_id": "p", "response": {"request_id": "q"}}',  # request_id inside the response
    '{"request_id": "r", "response": null, "note": "request_id"}',
    '{"request_id": "s", "response": {}} ',
    '{"request_id": "t", "response": {}}\r',
    '{"request_id": "u", "response": {"a": 1,}}',  # bad JSON: refused
    '{"request_id": "v", "response": "tab\there"}',  # a control character in a string: refused
    '{"request_id": "w", "response": 01}',
    '{"request_id": 7, "response": {}}',
    '{"request_id": "x"}',
    '["request_id", "response"]',
    '"request_id"',
    "",
    "   ",
    "\r",
    "\ufeff" + line("y"),  # a byte-order mark inside the file: refused
    '{"request_id": "z", "response": ' + "[" * 5000 + "]" * 5000 + "}",  # nested too deeply: refused
    line("a"),  # a request id again: refused naming both lines
]
BAD_BYTES = [b'{"request_id": "nb", "response": "\xe9t\xe9"}', b'{"request_id": "nc", "response": "\xed\xa0\x80"}']


@pytest.mark.parametrize("chunk_bytes", [1, 64, 1 << 18])
@pytest.mark.parametrize("index", range(len(ODD_LINES) + len(BAD_BYTES)))
def test_each_odd_line_is_read_or_refused_as_the_strict_reader_does(tmp_path, monkeypatch, index, chunk_bytes):
    odd = (ODD_LINES + BAD_BYTES)[index]
    odd = odd if isinstance(odd, bytes) else odd.encode("utf-8", "surrogatepass")
    fine = [line(f"r{i}").encode() for i in range(40)]
    path = tmp_path / "answers.jsonl"
    path.write_bytes(b"\n".join([*fine[:20], odd, *fine[20:]]) + b"\n")
    assert outcome(path, monkeypatch, True, chunk_bytes) == outcome(path, monkeypatch, False, chunk_bytes)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(range(len(ODD_LINES) + len(BAD_BYTES))) | st.integers(100, 140), max_size=30),
       st.sampled_from([1, 200, 1 << 18]), st.booleans(), st.booleans())
def test_any_mix_of_lines_is_read_or_refused_as_the_strict_reader_does(tmp_path, monkeypatch, picks, chunk_bytes, bom, last_newline):
    """Faults anywhere, repeats across chunks, blank lines: the first fault of the file is named the same way."""
    lines = []
    for p in picks:
        if p >= 100:  # a fine line; ids may repeat across the file
            lines.append(line(f"id{p % 17}").encode())
        else:
            odd = (ODD_LINES + BAD_BYTES)[p]
            lines.append(odd if isinstance(odd, bytes) else odd.encode("utf-8", "surrogatepass"))
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + (b"\n" if last_newline else b"")
    path = tmp_path / "answers.jsonl"
    path.write_bytes(data)
    assert outcome(path, monkeypatch, True, chunk_bytes) == outcome(path, monkeypatch, False, chunk_bytes)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10 ** 30), 10 ** 30) | st.floats()
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=8) | st.sampled_from(["null", ":", "\\u003a", '"request_id"']),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4) | st.just("request_id"), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(json_values, min_size=1, max_size=12), st.booleans())
def test_any_recorded_body_is_answered_as_the_strict_reader_answers_it(tmp_path, monkeypatch, bodies, ascii_only):
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(line(f"b{i}", b, ensure_ascii=ascii_only) + "\n" for i, b in enumerate(bodies)), encoding="utf-8")
    fast = outcome(path, monkeypatch, True, 1 << 18)
    assert fast == outcome(path, monkeypatch, False, 1 << 18) and fast[0] == "read"


def test_fine_chunks_are_vouched_for_without_the_strict_reader(tmp_path, monkeypatch):
    """The point of the fast pass: a file of ordinary lines never reaches the strict reader at setup."""
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(line(f"r{i}", body(i)) + "\n" for i in range(3000)))
    adapter = ReplayAdapter(path=str(path))
    monkeypatch.setattr(adapter, "_read", lambda *a: pytest.fail("the strict reader was called"))
    adapter.setup()
    assert adapter._n_lines == 3000 and adapter.answer("r2999", {}).response == body(2999)


# -- the predictions log --------------------------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()


def reference_encode(record: dict) -> bytes:
    """The log line as it was written before: msgspec, unless the response holds a non-finite float
    (then json.dumps, which writes NaN/Infinity) or msgspec cannot write it."""
    try:
        data = _ENCODER.encode(record)
        response = record.get("response")
        if response is None or b"null" not in _ENCODER.encode(response) or not _has_non_finite(response):
            return data + b"\n"
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        pass
    try:
        text = json.dumps(record, ensure_ascii=False)
    except ValueError:
        record = _json_safe(record)
        text = json.dumps(record, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: every non-ASCII character escaped
        return (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")


odd_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats() | st.sampled_from([10 ** 400, "null", "\ud800", "nullnull"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.just("null"), inner, max_size=3),
    max_leaves=12,
)


def record_of(rid: str, response, top: dict) -> dict:
    return {"request_id": rid, "status": "ok", "response": response, "latency_s": None, "model": "m", "usage": None,
            "error": None, "snapshot_sha256": "s" * 64, "cost_usd": None, **top}


top_fields = st.dictionaries(st.sampled_from(["latency_s", "error", "cost_usd", "meta", "raw_response", "usage"]),
                             odd_values, max_size=3)


@settings(max_examples=400, deadline=None)
@given(odd_values, top_fields, st.sampled_from([None, "digest1", "null"]))
def test_a_record_is_written_byte_for_byte_as_the_reference_writes_it(response, top, stamp):
    record = record_of("r", response, top)
    assert encode_record(record) == reference_encode(record)
    if stamp is not None:
        assert encode_record(record, stamp) == reference_encode({**record, IDENTITY_FIELD: stamp})
        restamp = {**record, IDENTITY_FIELD: "other"}  # stamped by another identity: restamped in place
        assert encode_record(restamp, stamp) == reference_encode({**restamp, IDENTITY_FIELD: stamp})


def test_a_stamp_on_a_record_with_no_other_field_is_still_json():
    assert encode_record({}, "d") == reference_encode({IDENTITY_FIELD: "d"}) == b'{"run_identity":"d"}\n'


@pytest.mark.parametrize("response", [math.nan, {"p": math.inf}, [1, -math.inf], {"a": None, "b": math.nan}, {"null": 1},
                                      {"x": 10 ** 5000}, {"s": "\udc80"}, {"n": None}, "null"])
def test_non_finite_and_odd_values_are_written_as_before(response):
    record = record_of("r", response, {"error": "annulled"})
    assert encode_record(record) == reference_encode(record)
    assert encode_record(record, "d") == reference_encode({**record, IDENTITY_FIELD: "d"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 12), odd_values, st.sampled_from([None, "other", "mine"])), max_size=25),
       st.lists(st.integers(0, 15), max_size=20), st.integers(1, 600))
def test_appending_and_compacting_keep_exactly_each_requests_latest_line(tmp_path_factory, monkeypatch, appends, order, cap):
    """Lines appended (stamped or restamped), then compacted in any order with a tiny copy cap:
    the file is the latest line of each kept request, in that order, and the index says where."""
    monkeypatch.setattr(infer, "COMPACT_RUN_BYTES", cap)
    path = tmp_path_factory.mktemp("log") / "predictions.jsonl"
    plog = PredictionLog(path)
    plog.bind_identity("mine")
    latest: dict[str, bytes] = {}
    for i, response, stamped in appends:
        record = record_of(f"r{i}", response, {IDENTITY_FIELD: stamped} if stamped else {})
        plog.append(record)
        latest[record["request_id"]] = reference_encode({**record, IDENTITY_FIELD: "mine"})
    ids = list(dict.fromkeys(f"r{i}" for i in order))
    plog.compact(ids)
    kept = [rid for rid in ids if rid in latest]
    assert (path.read_bytes() if path.exists() else b"") == b"".join(latest[rid] for rid in kept)
    assert list(plog.index) == kept
    assert plog.index == PredictionLog(path).index  # the index is the one a reader builds from the file


def test_a_shuffled_log_is_compacted_in_order_with_every_line_read_once(tmp_path, monkeypatch):
    """A log written in completion order (every line its own run) comes back in snapshot order."""
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    rids = [f"r{i:04d}" for i in range(500)]
    shuffled = rids[:]
    random.Random(3).shuffle(shuffled)
    for rid in shuffled:
        plog.append(record_of(rid, body(int(rid[1:])), {}))
    reads = []
    real_pread = infer.os.pread
    monkeypatch.setattr(infer.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    plog.compact(rids)
    assert [json.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == rids
    assert sum(reads) == path.stat().st_size  # each line copied once


def test_a_log_cut_short_before_compaction_is_refused_naming_the_line_and_left_as_it_was(tmp_path):
    path = tmp_path / "predictions.jsonl"
    plog = PredictionLog(path)
    for i in (3, 0, 4, 1, 2):
        plog.append(record_of(f"r{i}", body(i), {}))
    plog.close()
    cut = path.read_bytes()[:-10]  # the file changed under the index (the last line written is r2's)
    path.write_bytes(cut)
    with pytest.raises(infer.PredictionLogError, match=r"changed while it was being compacted \(line of r2 at byte \d+\)"):
        plog.compact([f"r{i}" for i in range(5)])
    assert path.read_bytes() == cut and [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]


def test_records_items_and_values_read_in_runs_equal_reading_each_record(tmp_path):
    """``records.items()`` / ``values()`` (one open, one read per run of lines) give exactly what
    ``records[rid]`` gives, in log order, also after compaction and with rewritten requests."""
    plog = PredictionLog(tmp_path / "p.jsonl")
    for i in range(40):
        plog.append({"request_id": f"r{i % 25}", "status": "ok", "response": {"answers": {"q": {"noul": i / 40}}, "model": "m\u00e9"},
                     "n": i, "odd": float("nan") if i == 7 else None})
    plog.close()
    for log in (PredictionLog(plog.path), None):
        if log is None:
            PredictionLog(plog.path).compact([f"r{i}" for i in reversed(range(25))])
            log = PredictionLog(plog.path)
        recs = log.records
        one_by_one = [(rid, recs[rid]) for rid in recs]
        assert json.dumps(list(recs.items())) == json.dumps(one_by_one)
        assert json.dumps(list(recs.values())) == json.dumps([r for _, r in one_by_one])
    with open(plog.path, "r+b") as fh:  # the file changed under an opened log: refused, not misread
        log = PredictionLog(plog.path)
        fh.seek(5)
        fh.write(b"X")
    with pytest.raises(PredictionLogError, match="changed since"):
        list(log.records.values())


def test_the_log_index_is_never_walked_by_the_cycle_collector(tmp_path):
    """Index entries, however made (appended, read when a log is opened, rewritten by compaction),
    are not tracked by the cycle collector: a tracked entry per request used to set off full
    collections of the whole heap while a long log was written."""
    import gc

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


def test_a_log_cut_short_after_it_was_opened_is_refused_when_scored_or_read(tmp_path):
    """Every reader of an opened log (items/values) refuses a file whose
    lines are no longer where the index put them, naming a request, instead of cutting lines by length."""
    plog = PredictionLog(tmp_path / "p.jsonl")
    for i in range(30):
        plog.append({"request_id": f"r{i}", "status": "ok", "response": {"answers": {"q": {"noul": 0.5}}}})
    plog.close()
    log = PredictionLog(plog.path)
    size = plog.path.stat().st_size
    with open(plog.path, "r+b") as fh:
        fh.truncate(size - 10)
    with pytest.raises(PredictionLogError, match="changed since"):
        list(log.records.items())


def _five_rows_and_their_opened_log(tmp_path):
    """Five noul requests and a log answering each, opened (indexed) as a run opens it."""
    from jevkedro.protocol import SnapshotRow, Target

    rows = [SnapshotRow(f"r{i}", {"state": "s", "questions": {"q": {"type": "noul"}}}, {"q": ["true", "false"]},
                        {"q": Target(label=0)}, {}, {}) for i in range(5)]
    plog = PredictionLog(tmp_path / "p.jsonl")
    for i in range(5):
        plog.append({"request_id": f"r{i}", "status": "ok", "response": {"answers": {"q": {"noul": 0.25}}}})
    plog.close()
    return rows, PredictionLog(plog.path)


def test_a_line_damaged_after_the_log_was_opened_is_refused_by_the_scorer_naming_it(tmp_path):
    """The same length, no longer JSON: the scorer's reader (which reads such a line exactly) names
    the file and line, as the other readers do, instead of a bare parse error from validation."""
    from jevkedro.nodes.validate import build_question_table

    rows, log = _five_rows_and_their_opened_log(tmp_path)
    data = log.path.read_bytes()
    at = data.index(b"0.25", data.index(b'"r2"'))
    log.path.write_bytes(data[:at] + b"0.#5" + data[at + 4:])
    with pytest.raises(PredictionLogError, match=r"p\.jsonl:3: .*changed since the log was opened"):
        build_question_table(rows, log.records)


@pytest.mark.parametrize("change", ["not a record", "another request", "another status"])
def test_a_line_replaced_by_valid_json_of_the_same_length_is_refused_by_every_reader(tmp_path, change):
    """Still JSON and the same length, but no longer what the index holds for that line: an object
    without a status, another request's record (two lines swapped), or the same request with
    another status. Scoring (typed batches), items() and one record's reading all refuse it."""
    from jevkedro.nodes.validate import build_question_table

    rows, log = _five_rows_and_their_opened_log(tmp_path)
    lines = log.path.read_bytes().split(b"\n")
    if change == "not a record":
        lines[2] = b'{"note":"' + b"x" * (len(lines[2]) - 11) + b'"}'
    elif change == "another request":
        lines[1], lines[2] = lines[2], lines[1]
    else:
        lines[2] = lines[2].replace(b'"status":"ok"', b'"status":"no"')
    changed = b"\n".join(lines)
    assert len(changed) == log.path.stat().st_size and changed != log.path.read_bytes()
    log.path.write_bytes(changed)
    for read in (lambda: build_question_table(rows, log.records), lambda: list(log.records.items()),
                 lambda: log.records["r2"]):
        with pytest.raises(PredictionLogError, match=r"p\.jsonl:[23]: .*changed since the log was opened"):
            read()
