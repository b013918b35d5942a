"""The engine: resume without asking twice, torn lines, stop rules, sparrow limits."""

import hashlib
import json
import threading

import pytest

from jevkedro.models import Adapter, AdapterResult, StopRun, make_adapter
from jevkedro.models.sparrow import SparrowAdapter
from jevkedro.nodes.infer import PredictionLog, PredictionLogError, run_inference
from jevkedro.nodes.snapshot import SnapshotError, load_snapshot, verify_snapshot_bytes
from jevkedro.pipelines import zh_decision_bench as zh
from support import ZH_RAW


class CountingAdapter(Adapter):
    """Answers uniformly; counts calls per request; stops the run after ``stop_after`` calls."""

    kind = "counting"

    def __init__(self, stop_after=None, **settings):
        super().__init__(**settings)
        self.calls: dict[str, int] = {}
        self.stop_after = stop_after

    def answer(self, request_id, request):
        if self.stop_after is not None and sum(self.calls.values()) >= self.stop_after:
            raise StopRun("HTTP 429 rate limited")
        self.calls[request_id] = self.calls.get(request_id, 0) + 1
        answers = {}
        for qid, q in request["questions"].items():
            if q["type"] == "noul":
                answers[qid] = {"type": "noul", "noul": 0.5}
            else:
                keys = list(q["criteria"]) if q["type"] == "choice" else [str(i) for i in range(len(q["criteria"]))]
                answers[qid] = {"type": q["type"], "probabilities": {k: 1 / len(keys) for k in keys}}
        return AdapterResult(status="ok", response={"model": "counting-1", "answers": answers}, model="counting-1")


@pytest.fixture
def snapshot(tmp_path):
    zh.prepare(root=tmp_path / "snap", source=ZH_RAW)
    return verify_snapshot_bytes(load_snapshot(tmp_path / "snap", "zh_decision_bench"))


def test_stop_then_resume_asks_only_what_is_missing(snapshot, tmp_path):
    path = tmp_path / "out" / "predictions.jsonl"
    first = CountingAdapter(stop_after=100)
    summary = run_inference(snapshot, first, PredictionLog(path))
    assert summary["stopped"] == "HTTP 429 rate limited"
    assert summary["statuses"] == {"ok": 100, "unattempted": 278}  # never recorded as wrong answers
    second = CountingAdapter()
    summary = run_inference(snapshot, second, PredictionLog(path))
    assert summary["reused"] == 100 and summary["asked"] == 278
    assert not set(first.calls) & set(second.calls)  # nothing asked twice
    assert set(first.calls) | set(second.calls) == {r.request_id for r in snapshot.rows}
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert [x["request_id"] for x in lines] == [r.request_id for r in snapshot.rows]  # one line each
    assert all(x["status"] == "ok" for x in lines)
    third = CountingAdapter()
    assert run_inference(snapshot, third, PredictionLog(path))["asked"] == 0 and not third.calls


def test_torn_last_line_is_dropped_and_asked_again(snapshot, tmp_path):
    path = tmp_path / "predictions.jsonl"
    run_inference(snapshot, CountingAdapter(stop_after=3), PredictionLog(path))
    lines = path.read_text(encoding="utf-8").splitlines(True)
    # simulate a kill mid-write: keep two whole lines and half of the third
    path.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2], encoding="utf-8")
    again = CountingAdapter()
    run_inference(snapshot, again, PredictionLog(path))
    assert len(again.calls) == 376 and lines[2].split('"')[3] in again.calls


def test_another_model_does_not_reuse_answers(snapshot, tmp_path):
    path = tmp_path / "predictions.jsonl"
    run_inference(snapshot, CountingAdapter(), PredictionLog(path))
    other = CountingAdapter(model="other-model")
    assert run_inference(snapshot, other, PredictionLog(path))["asked"] == 378


def test_unverified_snapshot_is_refused(tmp_path):
    zh.prepare(root=tmp_path, source=ZH_RAW)
    snap = load_snapshot(tmp_path, "zh_decision_bench")
    with pytest.raises(RuntimeError, match="unverified"):
        run_inference(snap, CountingAdapter(), PredictionLog(tmp_path / "p.jsonl"))


def test_changed_snapshot_byte_is_refused_naming_file_and_both_hashes(tmp_path):
    zh.prepare(root=tmp_path, source=ZH_RAW)
    tsv = tmp_path / "zh_decision_bench.tsv"
    data = bytearray(tsv.read_bytes())
    data[-3] = ord("X") if data[-3] != ord("X") else ord("Y")
    tsv.write_bytes(bytes(data))
    changed = hashlib.sha256(tsv.read_bytes()).hexdigest()
    manifest = json.loads((tmp_path / "zh_decision_bench.manifest.json").read_text())
    with pytest.raises(SnapshotError) as err:
        load_snapshot(tmp_path, "zh_decision_bench")
    msg = str(err.value)
    assert str(tsv) in msg and changed in msg and manifest["snapshot"]["sha256"] in msg


def test_change_after_loading_is_caught_by_verify(tmp_path):
    zh.prepare(root=tmp_path, source=ZH_RAW)
    snap = load_snapshot(tmp_path, "zh_decision_bench")
    tsv = tmp_path / "zh_decision_bench.tsv"
    tsv.write_bytes(tsv.read_bytes().replace(b"mass_0030", b"mass_0031", 1))
    with pytest.raises(SnapshotError, match="does not match its manifest"):
        verify_snapshot_bytes(snap)


def test_replay_adapter(snapshot, tmp_path):
    rid = snapshot.rows[0].request_id
    body = {"model": "jev-1.13.0", "answers": {"route": {"type": "choice", "probabilities": {"x": 1.0}}}}
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"request_id": rid, "response": body}) + "\n", encoding="utf-8")
    adapter = make_adapter({"adapter": "replay", "path": str(path), "name": "ignored"})
    summary = run_inference(snapshot, adapter, PredictionLog(tmp_path / "p.jsonl"))
    assert summary["statuses"] == {"ok": 1, "unattempted": 377}
    rec = PredictionLog(tmp_path / "p.jsonl").records[rid]
    assert rec["response"] == body and rec["model"] == "jev-1.13.0" and rec["latency_s"] is None


def test_replay_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text('{"request_id": "a", "response": {}}\n{"oops": 1}\n', encoding="utf-8")
    adapter = make_adapter({"adapter": "replay", "path": str(path)})
    with pytest.raises(ValueError, match=r"answers.jsonl:2: a replay line needs"):
        adapter.setup()


def test_sparrow_marks_media_and_limits_unsupported():
    adapter = SparrowAdapter()
    adapter.setup()
    image_state = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}]
    q = {"q": {"type": "noul", "instructions": "green?"}}
    assert adapter.answer("r", {"state": image_state, "questions": q}).status == "unsupported"
    many = {"type": "score", "instructions": "level?", "criteria": [str(i) for i in range(11)]}
    res = adapter.answer("r", {"state": "text", "questions": {"big": many, **q}})
    assert res.status == "ok" and res.unsupported_questions == ["big"] and set(res.response["answers"]) == {"q"}
    long_state = "word " * 5000  # far beyond a 512-token context: not truncated, unsupported
    res = adapter.answer("r", {"state": long_state, "questions": q})
    assert res.status == "unsupported"
    ok = adapter.answer("r", {"state": "short text", "questions": q})
    assert ok.status == "ok" and 0 <= ok.response["answers"]["q"]["noul"] <= 1


def test_progress_reports_rate_and_eta(caplog):
    from jevkedro.nodes.infer import Progress

    caplog.set_level("INFO")
    progress = Progress(total=4, label="view", every_s=0)
    for _ in range(4):
        progress.update()
    line = progress.line()
    assert line.startswith("view: 4/4 requests (100%)") and "req/s" in line and "ETA 0s" in line
    assert "view: 4/4 requests" in caplog.text  # logged at the end even without a terminal
    assert progress.bar.disable  # pytest's stderr is not a terminal: no bar drawn


class BrokenAdapter(Adapter):
    """A remote adapter with a bug on one request: it raises while three other requests are in flight."""

    kind = "broken"
    remote = True

    def __init__(self, **settings):
        super().__init__(**settings)
        self.raised = threading.Event()

    def answer(self, request_id, request):
        if request_id == BROKEN_ID:
            self.raised.set()
            raise RuntimeError("adapter bug")
        assert self.raised.wait(30)  # answer only after the bug fired: these are still in flight then
        return CountingAdapter().answer(request_id, request)


BROKEN_ID = "r00000"


def test_an_adapter_bug_keeps_the_answers_already_in_flight(tmp_path):
    from jevkedro.nodes.infer import EngineSettings
    from jevkedro.testing import synthetic_rows, synthetic_snapshot

    snap = synthetic_snapshot(tmp_path / "snap", synthetic_rows(8))
    path = tmp_path / "out" / "predictions.jsonl"
    with pytest.raises(RuntimeError, match="adapter bug"):
        run_inference(snap, BrokenAdapter(), PredictionLog(path), EngineSettings(concurrency=4, progress=0.0))
    kept = PredictionLog(path).records
    # the three requests in flight beside the broken one were answered and are kept; nothing
    # after the failure was sent
    assert sorted(kept) == ["r00001", "r00002", "r00003"]
    assert all(r["status"] == "ok" for r in kept.values())


class BulkyAdapter(Adapter):
    """Answers instantly with a ~4 kB raw body, like a remote model: what a log could pile up."""

    kind = "bulky"
    remote = True

    def answer(self, request_id, request):
        body = {"model": "bulky-1", "answers": {"q": {"type": "noul", "noul": 0.5}}, "pad": "x" * 4000}
        return AdapterResult(status="ok", response=body, raw=json.dumps(body), model="bulky-1",
                             usage={"input_tokens": 10, "output_tokens": 0})


def test_memory_stays_flat_while_a_view_is_asked(tmp_path):
    import tracemalloc

    from jevkedro.nodes.infer import EngineSettings
    from jevkedro.nodes.snapshot import Snapshot
    from jevkedro.testing import synthetic_rows

    n = 1500
    snap = Snapshot(view="v", path=tmp_path / "v.tsv", manifest={}, rows=synthetic_rows(n), sha256="0" * 64,
                    verified=True)
    plog = PredictionLog(tmp_path / "out" / "predictions.jsonl")
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        summary = run_inference(snap, BulkyAdapter(), plog, EngineSettings(concurrency=4, progress=0.0, fsync="never"))
        end, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary["statuses"] == {"ok": n}
    # each record is > 8 kB of text (parsed + raw); what stays per request is a small index entry,
    # and neither the run nor the final compaction ever holds all records at once
    assert (end - start) / n < 1000 and (peak - start) / n < 2000
    assert len(plog.path.read_bytes()) > n * 8000
    # the records are still all there for scoring, read back from the compacted file
    assert list(plog.records) == [r.request_id for r in snap.rows]
    assert plog.records["r00007"]["response"]["pad"] == "x" * 4000


class ShortBatchAdapter(CountingAdapter):
    """A local adapter whose batch call loses a result."""

    kind = "short"

    def answer_batch(self, items):
        return [self.answer(rid, r) for rid, r in items][:-1]


def test_a_batch_with_a_missing_result_is_an_error_not_a_silently_dropped_request(snapshot, tmp_path):
    from jevkedro.nodes.infer import EngineSettings

    with pytest.raises(RuntimeError, match="returned 3 results for 4 requests"):
        run_inference(snapshot, ShortBatchAdapter(), PredictionLog(tmp_path / "p.jsonl"), EngineSettings(batch_size=4))


# -- the log read back: every line a record, numbers as the reader reads them ---------------------

@pytest.mark.parametrize("line, why", [
    ('{"request_id": "b", "response": {}}', "no status"),
    ('{"request_id": "b", "status": "done"}', "status 'done' is not one of ok, unsupported, error, unattempted"),
    ('{"status": "ok"}', "no request_id"),
    ('{"request_id": 7, "status": "ok"}', "request_id is int, not a string"),
    ('["b", "ok"]', "a JSON list, not an object"),
    ('{"request_id": "b", "status": "ok", "response": {"answers": {"q": {"noul": 0.5}}}', "not valid JSON"),
])
def test_a_line_that_is_not_a_record_is_refused_naming_the_line(tmp_path, line, why):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"request_id": "a", "status": "ok"}\n' + line + '\n{"request_id": "c", "status": "ok"}\n')
    with pytest.raises(PredictionLogError) as err:
        PredictionLog(path)
    assert f"predictions.jsonl:2: not a prediction record: {why}" in str(err.value)
    assert "fix or delete that line" in str(err.value)


def test_a_fault_is_located_at_its_column(tmp_path):
    path = tmp_path / "predictions.jsonl"
    bad = '{"request_id": "b", "status": "ok", "response": {"answers": {"q": {"noul": 0.5,}}}}'
    path.write_text('{"request_id": "a", "status": "ok"}\n' + bad + "\n")
    with pytest.raises(PredictionLogError, match=rf"predictions.jsonl:2: .* at column {bad.index(',}') + 2}"):
        PredictionLog(path)


@pytest.mark.parametrize("text", ['{"identity": {"adapter": "replay", "model"', "", "[1, 2]"])
def test_a_damaged_run_json_names_the_file_and_what_to_do(tmp_path, text):
    plog = PredictionLog(tmp_path / "predictions.jsonl")
    plog.meta_path.write_text(text)
    with pytest.raises(PredictionLogError) as err:
        plog.meta()
    assert str(plog.meta_path) in str(err.value) and "delete" in str(err.value) and "predictions.jsonl" in str(err.value)


def test_numbers_no_float_holds_are_written_and_read_back_as_infinity(tmp_path):
    """A local adapter's answer with a 5,000-digit integer (past json.dumps' own limit) and a NaN:
    the run goes on, the log reads back, and the answers are judged invalid."""
    from jevkedro.nodes.validate import build_question_table
    from jevkedro.testing import synthetic_rows, synthetic_snapshot

    snap = synthetic_snapshot(tmp_path / "snap", synthetic_rows(3))

    class Wild(CountingAdapter):
        def answer(self, request_id, request):
            result = super().answer(request_id, request)
            result.response["answers"]["is_billing"]["noul"] = {"r00000": 10 ** 5000, "r00001": float("nan")}.get(request_id, 0.5)
            return result

    path = tmp_path / "p.jsonl"
    assert run_inference(snap, Wild(), PredictionLog(path))["statuses"] == {"ok": 3}
    plog = PredictionLog(path)
    assert plog.records["r00000"]["response"]["answers"]["is_billing"]["noul"] == float("inf")
    table = build_question_table(snap, plog.records)
    assert table.status.tolist() == ["invalid", "ok", "ok", "invalid", "ok", "ok", "ok", "ok", "ok"]
    assert table.reason[0] == "noul must be a number in [0, 1], got inf" and table.reason[3].endswith("got nan")


def test_an_uncompacted_log_is_scored_by_each_requests_latest_line(snapshot, tmp_path):
    path = tmp_path / "p.jsonl"
    plog = PredictionLog(path)
    rows = snapshot.rows[:3]
    for row in rows:  # first every request as an error, then answered; blank lines between
        plog.append({"request_id": row.request_id, "status": "error", "error": "HTTP 500"})
    plog.close()
    with open(path, "a") as fh:
        fh.write("\n  \n")
    plog = PredictionLog(path)
    for row in rows[1:]:
        plog.append({"request_id": row.request_id, "status": "ok",
                     "response": CountingAdapter().answer(row.request_id, row.request).response})
    plog.close()
    from jevkedro.nodes.validate import build_question_table

    table = build_question_table(snapshot, PredictionLog(path).records)
    by_request = dict(zip(table.request_id, table.status))
    assert by_request[rows[0].request_id] == "error" and by_request[rows[1].request_id] == "ok"
    assert table.requests.status[:3] == ["error", "ok", "ok"]  # one record per request, in log order
    assert table.requests.unattempted == len(snapshot.rows) - 3


def test_appending_a_record_the_log_would_refuse_is_an_error(tmp_path):
    plog = PredictionLog(tmp_path / "p.jsonl")
    with pytest.raises(PredictionLogError, match="no status"):
        plog.append({"request_id": "a"})
    assert not plog.path.exists()


def test_lines_that_do_not_decode_keep_their_place():
    """A line msgspec cannot read (a NaN literal) costs only itself and never shifts the others."""
    from jevkedro.nodes.infer import _INDEX_DECODER, decode_each

    lines = [b'{"request_id": "%d", "status": "ok"}' % i if i % 97 else b'{"request_id": NaN}' for i in range(1000)]
    out = decode_each(_INDEX_DECODER, lines, chunk=64)
    assert [f.request_id if f else None for f in out] == [str(i) if i % 97 else None for i in range(1000)]
