"""Corpus, classes 2 and 10 and the HTTP faults already handled — what a server can send back.

The last part (issue 23, #3 and #16) talks to a server written with sockets: a reply pushed unasked
on a keep-alive connection is never another request's answer, a reply head trickled a byte at a
time ends at ``timeout_s``, and odd heads are judged as aiohttp reads them.

One loopback server for the module, scripted per request fault. Every case asserts the request's
record (status, failure) and, for replies that parse, how each question is judged: an answer a
double cannot hold or a repeated key is ``invalid`` (the view still scored), a reply over the body
cap is ``too_large`` with only an excerpt kept, and a failed request is asked again on a rerun
while nothing answered is.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import pytest
from hostile_support import ask, judged, lines, settings_for

from jevkedro.models.settings import EngineSettings
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.validate import question_records
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot, system_one_answers

pytest.importorskip("aiohttp")

CAP = 8000


def _answers(questions, **override):
    answers = system_one_answers(questions)
    answers.update(override)
    return answers


def _body(questions, **override) -> bytes:
    return json.dumps({"model": "jev-1.13.0", "answers": _answers(questions, **override)}).encode()


def responder(body, auth, fault):  # noqa: C901 -- one branch per scripted reply
    q = body.get("questions") or {}
    noul = '{"type": "noul", "noul": %s}'
    answers_with_noul = json.dumps({"model": "m", "answers": _answers(q, is_billing="@@")}).replace('"@@"', "%s")
    scripted = {
        "over-cap-declared": (200, [], b'{"pad": "' + b"x" * (CAP * 3) + b'"}'),
        "over-cap-chunked": (200, [], [b'{"pad": "'] + [b"x" * 65536] * 16 + [b'"}']),
        "gzip-not-gzip": (200, [("Content-Encoding", "gzip")], _body(q)),
        "gzip-bomb": (200, [("Content-Encoding", "gzip")],
                      gzip.compress(b'{"pad": "' + b"0" * 2_000_000 + b'"}')),
        "empty-200": (200, [], b""),
        "204": (204, [], b""),
        "301": (301, [("Location", "http://127.0.0.1:9/elsewhere")], b""),
        "json-array": (200, [], b"[1, 2, 3]"),
        "json-string": (200, [], b'"all good"'),
        "trailing-garbage": (200, [], _body(q) + b" and more"),
        "bom": (200, [], b"\xef\xbb\xbf" + _body(q)),
        "nested-too-deep": (200, [], b"[" * 1500 + b"]" * 1500),
        "not-utf8-in-a-string": (200, [], _body(q).replace(b'"jev-1.13.0"', b'"jev-\xff\xfe"')),
        "html-content-type": (200, [("Content-Type", "text/html")], _body(q)),
        # "\ud800" is valid JSON text for a string no UTF-8 can hold (a lone surrogate)
        "lone-surrogate-model": (200, [], _body(q).replace(b'"jev-1.13.0"', b'"jev-\\ud800"')),
        "lone-surrogate-key": (200, [], json.dumps({"answers": _answers(
            q, queue={"type": "choice", "probabilities": {"billing": 0.5, "\udc00": 0.25, "other": 0.25}})}).encode()),
        "noul-5000-digits": (200, [], (answers_with_noul % (noul % ("9" * 5000))).encode()),
        "noul-1e400": (200, [], (answers_with_noul % (noul % "1e400")).encode()),
        "noul-minus-1e400": (200, [], (answers_with_noul % (noul % "-1e400")).encode()),
        "noul-NaN": (200, [], (answers_with_noul % (noul % "NaN")).encode()),
        "noul-Infinity": (200, [], (answers_with_noul % (noul % "Infinity")).encode()),
        "noul-true": (200, [], (answers_with_noul % (noul % "true")).encode()),
        "noul-string": (200, [], (answers_with_noul % (noul % '"0.8"')).encode()),
        "noul-1.5": (200, [], (answers_with_noul % (noul % "1.5")).encode()),
        "noul-tiny-negative": (200, [], (answers_with_noul % (noul % "-1e-300")).encode()),
        "noul-repeated-key": (200, [], (answers_with_noul % '{"type": "noul", "noul": 0.1, "noul": 0.9}').encode()),
        "choice-repeated-candidate": (200, [], json.dumps(
            {"answers": _answers(q, queue={"type": "choice", "probabilities": {"billing": 0.5, "tech": 0.25, "other": 0.25}})})
            .replace('"tech": 0.25', '"tech": 0.25, "tech": 0.25').encode()),
        "answers-repeated": (200, [], b'{"answers": {}, ' + _body(q)[1:].replace(b'"model": "jev-1.13.0", ', b"", 1)),
        "decide-duplicate-ids": (200, [], json.dumps({"answers": [
            {"id": "queue", "type": "choice", "choice": "billing", "probabilities": {"billing": 1.0, "tech": 0.0, "other": 0.0}},
            {"id": "queue", "type": "choice", "choice": "tech", "probabilities": {"billing": 0.0, "tech": 1.0, "other": 0.0}},
            {"id": "is_billing", "type": "noul", "noul": 0.8}]}).encode()),
        "retry-after-date": (429, [("Retry-After", "Wed, 21 Oct 2099 07:28:00 GMT")], b'{"detail": "later"}'),
        "503": (503, [], b'{"detail": "overloaded"}'),
        "404-html": (404, [("Content-Type", "text/html")], b"<html>not here</html>"),
    }
    return scripted.get(fault)


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


@pytest.fixture
def settings(server):
    return settings_for(server, max_response_bytes=CAP, timeout_s=20)


# -- replies the client cannot use: an error for that request, never a crash ---------------------------

@pytest.mark.parametrize("fault, failure", [
    ("over-cap-declared", "too_large"), ("over-cap-chunked", "too_large"), ("gzip-bomb", "too_large"),
    ("gzip-not-gzip", "malformed"), ("empty-200", "malformed"), ("204", "malformed"), ("trailing-garbage", "malformed"),
    ("not-utf8-in-a-string", "malformed"),
    ("bom", "malformed"), ("nested-too-deep", "malformed"), ("301", "server"), ("503", "server"), ("404-html", "server"),
])
def test_an_unusable_reply_is_an_error_for_that_request_and_the_view_is_scored(tmp_path, settings, fault, failure):
    summary, plog, snapshot = ask(tmp_path, settings, {0: fault}, n=2)
    first, second = lines(plog)
    assert (first["status"], first["failure"], second["status"]) == ("error", failure, "ok")
    assert len(first.get("raw_response") or "") <= 2 * CAP  # a body over the cap is never stored whole
    table = judged(snapshot, plog)
    assert table.status.tolist() == ["error"] * 3 + ["ok"] * 3


def test_a_body_over_the_cap_keeps_only_a_short_excerpt_and_says_how_much_was_read(tmp_path, settings):
    _, plog, _ = ask(tmp_path, settings, {0: "over-cap-chunked"})
    rec = lines(plog)[0]
    assert len(rec["raw_response"]) <= 301 and rec["raw_response"].startswith('{"pad": "xxx')
    assert f"over model.max_response_bytes={CAP}" in rec["error"] and "read" in rec["error"]


def test_replies_over_the_cap_in_a_row_stop_the_run_as_infrastructure_failures(tmp_path, settings):
    summary, plog, _ = ask(tmp_path, settings, {0: "over-cap-declared", 1: "over-cap-declared", 2: "over-cap-declared"}, n=5)
    assert "3 consecutive infrastructure failures" in summary["stopped"]
    assert [r["status"] for r in lines(plog)] == ["error"] * 3 + ["unattempted"] * 2


def test_the_cap_is_a_typed_setting():
    from jevkedro.config import SettingsError
    from jevkedro.models.settings import ModelSettings

    with pytest.raises(SettingsError, match="model.max_response_bytes: 0 is not allowed; allowed: an integer ≥ 1"):
        ModelSettings.parse({"adapter": "systemone", "max_response_bytes": 0})
    with pytest.raises(SettingsError, match="model.max_response_bytes: a setting of the openai_compat, systemone adapter"):
        ModelSettings.parse({"adapter": "sparrow", "max_response_bytes": 10})


# -- replies that parse: each answer judged on its own ---------------------------------------------------

@pytest.mark.parametrize("fault, reason", [
    ("noul-5000-digits", "noul must be a number in [0, 1], got inf"),
    ("noul-1e400", "noul must be a number in [0, 1], got inf"),
    ("noul-minus-1e400", "noul must be a number in [0, 1], got -inf"),
    ("noul-NaN", "noul must be a number in [0, 1], got nan"),
    ("noul-Infinity", "noul must be a number in [0, 1], got inf"),
    ("noul-true", "noul must be a number in [0, 1], got True"),
    ("noul-string", "noul must be a number in [0, 1], got '0.8'"),
    ("noul-1.5", "noul must be a number in [0, 1], got 1.5"),
    ("noul-tiny-negative", "noul must be a number in [0, 1], got -1e-300"),
    ("noul-repeated-key", "repeated"),
])
def test_one_bad_number_or_repeated_key_makes_only_its_answer_invalid(tmp_path, settings, fault, reason):
    summary, plog, snapshot = ask(tmp_path, settings, {0: fault})
    assert summary["statuses"] == {"ok": 1}
    table = judged(snapshot, plog)
    assert table.status.tolist() == ["invalid", "ok", "ok"] and reason in str(table.reason[0])


@pytest.mark.parametrize("fault, statuses", [
    ("json-array", ["invalid"] * 3), ("json-string", ["invalid"] * 3),
    ("choice-repeated-candidate", ["ok", "invalid", "ok"]),
    ("answers-repeated", ["invalid"] * 3),
    ("html-content-type", ["ok"] * 3),
    ("lone-surrogate-model", ["ok"] * 3), ("lone-surrogate-key", ["ok", "invalid", "ok"]),
])
def test_odd_but_readable_bodies_are_judged_per_question(tmp_path, settings, fault, statuses):
    summary, plog, snapshot = ask(tmp_path, settings, {0: fault})
    assert summary["statuses"] == {"ok": 1}
    assert judged(snapshot, plog).status.tolist() == statuses


@pytest.mark.parametrize("fault, text, reason", [("lone-surrogate-model", "jev-\ud800", None),
                                                ("lone-surrogate-key", "\udc00", "extra ['\\udc00']")])
def test_a_lone_surrogate_in_a_reply_keeps_the_log_and_the_question_records_readable_utf8(tmp_path, settings, fault, text,
                                                                                         reason):
    """A string UTF-8 cannot hold is written escaped: the log reopens, and it and questions.jsonl
    read back as UTF-8 JSON with the very same string."""
    _, plog, snapshot = ask(tmp_path, settings, {0: fault})
    raw = plog.path.read_bytes()
    raw.decode("utf-8")  # the whole log is valid UTF-8
    (record,) = [rec for rec in map(json.loads, raw.splitlines()) if rec.get("request_id")]
    assert text in json.dumps(record["response"], ensure_ascii=False)
    records = [json.loads(line) for line in question_records(judged(snapshot, plog)).jsonl().decode("utf-8").splitlines()]
    assert len(records) == 3 and records[1].get("reason") == (reason and f"candidate keys differ (missing ['tech'], {reason})")


def test_a_decide_list_answering_one_question_twice_is_invalid(tmp_path, server):
    summary, plog, snapshot = ask(tmp_path, settings_for(server, flavour="decide"), {0: "decide-duplicate-ids"})
    table = judged(snapshot, plog)
    assert table.status.tolist() == ["ok", "invalid", "invalid"]  # queue twice; anger not answered
    assert "2 entries" in str(table.reason[1])


def test_a_retry_after_date_is_not_waited_for_and_the_429_stops_the_run(tmp_path, server):
    summary, plog, _ = ask(tmp_path, settings_for(server, retry={"max_attempts": 3, "backoff_s": 0.0}),
                           {0: "retry-after-date"}, n=3)
    assert "HTTP 429" in summary["stopped"] and summary["statuses"] == {"unattempted": 3}


# -- interleaved failures: counted, and asked again (only them) on a rerun -----------------------------

def test_interleaved_5xx_are_errors_and_a_rerun_asks_exactly_them_again(tmp_path, server):
    rows = synthetic_rows(8, {1: "flaky:1", 4: "flaky:1", 6: "flaky:1"}, prefix="flaky")  # a 500 the first time only
    snapshot = synthetic_snapshot(tmp_path / "snap", rows)
    settings = settings_for(server)
    path = tmp_path / "out" / "predictions.jsonl"
    from jevkedro.models import make_adapter

    first = run_inference(snapshot, make_adapter(settings), PredictionLog(path), EngineSettings.from_model(settings), settings)
    assert first["statuses"] == {"ok": 5, "error": 3} and first["stopped"] is None
    second = run_inference(snapshot, make_adapter(settings), PredictionLog(path), EngineSettings.from_model(settings), settings)
    assert (second["asked"], second["reused"], second["statuses"]) == (3, 5, {"ok": 8})
    asked = {t: server.counts[t] for t in (r.request_id for r in rows)}
    assert asked == {f"flaky{i:05d}": (2 if i in (1, 4, 6) else 1) for i in range(8)}


# -- issue 23 #3 and #16: replies not bound to their request, a trickling head, odd heads --------------

class RawServer:
    """A keep-alive HTTP/1.1 server on a real loopback socket, written with sockets so that it can
    send what no server library would: after each request it writes ``reply(ticket, questions)``
    (the request's ``state.ticket`` and questions), whatever those bytes are."""

    def __init__(self, reply):
        self.reply, self.connections, self.asked = reply, 0, []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:"))
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    body, buf = json.loads(buf[:length]), buf[length:]
                    self.asked.append(body["state"]["ticket"])
                    conn.sendall(self.reply(body["state"]["ticket"], body["questions"]))
            except OSError:  # the client hung up (a deadline, a connection it gave up)
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()


def _reply(body: bytes, head: bytes = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n") -> bytes:
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _answer(ticket: str, questions, model: str | None = None) -> bytes:
    return json.dumps({"model": model or f"jev-{ticket}", "answers": system_one_answers(questions)}).encode()


def _stray_after_each_answer(ticket, questions) -> bytes:
    # a well-formed reply of the same shape (it would score as a valid answer), pushed unasked
    return _reply(_answer(ticket, questions)) + _reply(_answer(ticket, questions, model="stray"))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_stray_reply_pushed_after_each_answer_is_never_the_next_requests_answer(tmp_path, concurrency):
    with RawServer(_stray_after_each_answer) as srv:
        summary, plog, _ = ask(tmp_path, settings_for(srv, concurrency=concurrency), n=20)
    records = lines(plog)
    # a stray racing the next request's write (a loaded machine) breaks that connection: the request
    # is a connection error, asked again on the rerun, never another request's answer
    assert set(summary["statuses"]) <= {"ok", "error"} and summary["statuses"].get("ok", 0) >= 18 and len(records) == 20
    assert all(rec["failure"] == "connection" for rec in records if rec["status"] == "error")
    for rec in (r for r in records if r["status"] == "ok"):  # every stored answer is its own request's
        assert rec["model"] == f"jev-{rec['request_id']}" and "stray" not in rec["raw_response"], rec["request_id"]
    # the stray made each reused connection broken: its request went again on a fresh connection
    assert srv.connections > concurrency and sorted(set(srv.asked)) == [r["request_id"] for r in records]


def test_a_stray_reply_that_arrives_while_the_connection_is_idle_is_never_an_answer():
    """The stray comes 50 ms after the answer, while the connection waits for its next request."""
    import asyncio

    from jevkedro.models import make_adapter

    class Late(RawServer):
        def _serve(self, conn):
            real = conn.sendall

            class Delayed:  # the real reply at once, the stray on its own 50 ms later
                def __getattr__(self, name):
                    return getattr(conn, name)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    conn.close()

                def sendall(self, data):
                    cut = data.index(b"HTTP/1.1", 1)
                    real(data[:cut])
                    time.sleep(0.05)
                    real(data[cut:])

            return RawServer._serve(self, Delayed())

    def request(ticket):
        return {"state": {"ticket": ticket}, "questions": {"q": {"type": "noul", "instructions": "?"}}}

    with Late(_stray_after_each_answer) as srv:
        adapter = make_adapter(settings_for(srv))
        adapter.setup()

        async def three():
            out = []
            for ticket in ("a", "b", "c"):
                out.append(await adapter.answer_async(ticket, request(ticket)))
                await asyncio.sleep(0.2)  # the stray arrives meanwhile
            await adapter.aclose()
            return out

        results = asyncio.run(three())
    assert [(r.status, r.model) for r in results] == [("ok", "jev-a"), ("ok", "jev-b"), ("ok", "jev-c")]
    assert srv.asked == ["a", "b", "c"] and srv.connections == 3  # each stray closed its connection


def test_bytes_past_a_bodys_length_in_its_own_read_make_that_reply_a_connection_error(tmp_path):
    """Bytes after the body that its ``Content-Length`` declares, in the same read, contradict the
    reply's framing: the request is a connection error, never an answer, and the next request goes
    on a fresh connection."""
    with RawServer(lambda ticket, q: _reply(_answer(ticket, q)) + b"xx") as srv:  # two bytes past Content-Length
        summary, plog, _ = ask(tmp_path, settings_for(srv, max_consecutive_failures=100), n=12)
    records = lines(plog)
    assert len(records) == 12 and not summary["stopped"]
    for rec in records:  # an answer is its own request's; a reply the leftover broke is a connection error
        if rec["status"] == "ok":
            assert rec["model"] == f"jev-{rec['request_id']}", rec
        else:
            assert (rec["status"], rec["failure"]) == ("error", "connection") and "Bad status line" in rec["error"]
    assert srv.connections >= summary["statuses"].get("error", 0)  # a broken reply was its connection's last


def test_bytes_past_a_bodys_length_that_come_later_break_the_idle_connection_never_the_next_reply():
    """The same two bytes, 50 ms after the reply: each answer is its request's, and each next request
    goes on a fresh connection, sent once."""
    import asyncio

    from jevkedro.models import make_adapter

    class LateTail(RawServer):
        def _serve(self, conn):
            real = conn.sendall

            class Delayed:  # the reply at once, its two extra bytes on their own 50 ms later
                def __getattr__(self, name):
                    return getattr(conn, name)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    conn.close()

                def sendall(self, data):
                    real(data[:-2])
                    time.sleep(0.05)
                    real(data[-2:])

            return RawServer._serve(self, Delayed())

    def request(ticket):
        return {"state": {"ticket": ticket}, "questions": {"q": {"type": "noul", "instructions": "?"}}}

    with LateTail(lambda ticket, q: _reply(_answer(ticket, q)) + b"xx") as srv:
        adapter = make_adapter(settings_for(srv))
        adapter.setup()

        async def three():
            out = []
            for ticket in ("a", "b", "c"):
                out.append(await adapter.answer_async(ticket, request(ticket)))
                await asyncio.sleep(0.2)  # the two bytes arrive meanwhile
            await adapter.aclose()
            return out

        results = asyncio.run(three())
    assert [(r.status, r.model) for r in results] == [("ok", "jev-a"), ("ok", "jev-b"), ("ok", "jev-c")]
    assert srv.asked == ["a", "b", "c"] and srv.connections == 3


@pytest.mark.parametrize("timeout_s", [1, 2])
def test_a_reply_head_trickled_a_byte_at_a_time_ends_at_the_deadline(tmp_path, timeout_s):
    def trickle(ticket, q):  # each byte well within any per-read timeout, the whole head never
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            yield bytes([byte])
            time.sleep(0.05)

    class Trickling(RawServer):
        def _serve(self, conn):
            with conn:
                try:
                    conn.recv(65536)
                    for part in trickle(None, None):
                        conn.sendall(part)
                except OSError:  # the client gave up at its deadline: what this case is for
                    return

    with Trickling(None) as srv:
        t0 = time.monotonic()
        summary, plog, _ = ask(tmp_path, settings_for(srv, timeout_s=timeout_s), n=1)
        took = time.monotonic() - t0
    (rec,) = lines(plog)
    assert (rec["status"], rec["failure"]) == ("error", "timeout") and f"{timeout_s}s" in rec["error"]
    assert timeout_s * 0.9 < took < 2.5 * timeout_s


BODY = b'{"model": "jev-odd", "answers": {}}'


@pytest.mark.parametrize("reply, status, text", [
    # what aiohttp's parser accepts is read (lines up to 100 KiB, 128 header fields); what it refuses is a
    # connection error — one behaviour
    (b"HTTP/1.1 200 OK\nContent-Length: %d\n\n%s" % (len(BODY), BODY), "ok", None),  # bare-LF head
    (b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n two\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY), "ok", None),
    (_reply(BODY, b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n"), "ok", None),  # a 100 KB header
    (_reply(BODY, b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 150_000 + b"\r\n"), "error", "Got more than 102400 bytes"),
    (_reply(BODY, b"HTTP/1.1 200 OK\r\n" + b"X-Many: a\r\n" * 20_000), "error", "Too many headers"),
    (_reply(BODY, b"HTTP/1.1 200 OK\r\nbad header line\r\n"), "error", "Invalid header token"),
    (b"HTTP/2 200\r\n\r\n" + BODY, "error", "Bad status line"),
])
def test_odd_reply_heads_are_judged_as_the_one_transport_reads_them(tmp_path, reply, status, text):
    with RawServer(lambda ticket, q: reply) as srv:
        summary, plog, _ = ask(tmp_path, settings_for(srv), n=1)
    (rec,) = lines(plog)
    assert rec["status"] == status, rec
    if status == "ok":
        assert rec["model"] == "jev-odd"
    else:
        assert rec["failure"] == "connection" and text in rec["error"], rec["error"]
