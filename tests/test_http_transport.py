"""The one HTTP transport of the remote adapters (aiohttp on the engine's event loop).

Everything runs against real loopback servers: how each kind of reply is recorded, keep-alive
connections and their bound, the whole-request deadline, the stop rules and retries on the loop, a
proxy named in the environment, TLS, and replies that are not HTTP.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
import socket
import threading
import zlib

import pytest

from jevkedro.models import make_adapter
from jevkedro.models.settings import EngineSettings
from jevkedro.models.systemone import SystemOneAdapter
from jevkedro.nodes.infer import run_inference
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.testing import LoopbackServer, synthetic_rows, synthetic_snapshot, system_one_answers

pytest.importorskip("aiohttp")

CAP = 8000


def _body(questions) -> bytes:
    return json.dumps({"model": "jev-1.13.0", "answers": system_one_answers(questions)}).encode()


def responder(body, auth, fault):
    q = body.get("questions") or {}
    return {
        "chunked": (200, [], [_body(q)[:10], _body(q)[10:]]),
        "gzip": (200, [("Content-Encoding", "gzip")], gzip.compress(_body(q))),
        "deflate-chunked": (200, [("Content-Encoding", "deflate")], [zlib.compress(_body(q))]),
        "gzip-not-gzip": (200, [("Content-Encoding", "gzip")], _body(q)),
        "gzip-truncated": (200, [("Content-Encoding", "gzip")], gzip.compress(_body(q))[:-8]),
        "over-cap-chunked": (200, [], [b'{"pad": "'] + [b"x" * 4096] * 8 + [b'"}']),
        "over-cap-declared": (200, [], b'{"pad": "' + b"x" * (CAP * 2) + b'"}'),
        "over-cap-gzip": (200, [("Content-Encoding", "gzip")], gzip.compress(b'{"pad": "' + b"0" * 100_000 + b'"}')),
        "request-id-twice": (200, [("x-typesafe-request-id", "a"), ("x-typesafe-request-id", "b")], _body(q)),
        "close": (200, [("Connection", "close")], _body(q)),
        "503": (503, [], b'{"detail": "overloaded"}'),
        "422": (422, [], b'{"detail": "bad question"}'),
    }.get(fault)


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


def _settings(srv, **extra):
    return {"adapter": "systemone", "endpoint": srv.endpoint, "model": "jev-1.13.0", "api_key_env": "",
            "timeout_s": 10, "max_response_bytes": CAP, "progress": 0, **extra}


def _run(tmp_path, settings, rows, name="out", adapter=None):
    snapshot = synthetic_snapshot(tmp_path / f"snap-{name}", rows)
    plog = PredictionLog(tmp_path / name / "predictions.jsonl")
    summary = run_inference(snapshot, adapter or make_adapter(settings), plog, EngineSettings.from_model(settings), settings)
    return summary, PredictionLog(plog.path).records


FAULTS = ["", "chunked", "gzip", "deflate-chunked", "gzip-not-gzip", "gzip-truncated", "over-cap-chunked",
          "over-cap-declared", "over-cap-gzip", "request-id-twice", "close", "503", "422", "malformed", "missing",
          "drop", "500", "413", "echo"]


def test_every_kind_of_reply_gets_its_record(server, tmp_path):
    # two of every fault, interleaved so no run of infrastructure failures stops the run
    faults = {}
    for i, fault in enumerate(FAULTS * 2):
        faults[2 * i] = fault
    rows = synthetic_rows(2 * len(FAULTS) * 2, faults)
    summary, records = _run(tmp_path, _settings(server, concurrency=8, max_consecutive_failures=100), rows)
    assert not summary["stopped"] and sorted(records) == [r.request_id for r in rows]
    kinds = {rows[i].request_id: f for i, f in faults.items()}
    failure = {f: records[rid].get("failure") for rid, f in kinds.items()}
    assert failure["gzip-not-gzip"] == failure["malformed"] == "malformed"
    assert failure["over-cap-chunked"] == failure["over-cap-declared"] == failure["over-cap-gzip"] == "too_large"
    assert failure["drop"] == "connection" and failure["503"] == failure["500"] == "server"
    assert failure["422"] == failure["413"] == "request"
    for fault in ("", "chunked", "gzip", "deflate-chunked", "close", "request-id-twice", "missing", "echo"):
        assert failure[fault] is None and records[next(r for r, f in kinds.items() if f == fault)]["status"] == "ok", fault
    answered = next(rid for rid, f in kinds.items() if f == "gzip")
    assert records[answered]["response"]["answers"] == system_one_answers(rows[int(answered[1:])].request["questions"])
    rid_twice = next(rid for rid, f in kinds.items() if f == "request-id-twice")
    assert records[rid_twice]["server_request_id"] == "a, b"


def _counting_connections(srv):
    """The client addresses of the connections ``srv`` accepts (a list that grows as it accepts)."""
    accepted, process = [], srv.httpd.process_request

    def counted(request, client_address):
        accepted.append(client_address)
        return process(request, client_address)

    srv.httpd.process_request = counted
    return accepted


def test_connections_are_kept_alive_and_bounded_by_the_concurrency(tmp_path):
    with LoopbackServer(delay_s=0.01) as srv:
        accepted = _counting_connections(srv)
        summary, records = _run(tmp_path, _settings(srv, concurrency=4), synthetic_rows(60))
        assert summary["statuses"] == {"ok": 60} and srv.total == 60 and srv.max_inflight <= 4
    assert 1 <= len(accepted) <= 4  # one keep-alive connection per request in flight, reused


def test_a_slow_body_ends_at_the_deadline(server, tmp_path):
    # trickle: headers at once, then a byte every 0.2 s; each read is quick, the whole body is not
    settings = _settings(server, timeout_s=0.6, concurrency=2, max_consecutive_failures=10)
    rows = synthetic_rows(3, {0: "trickle", 1: "hang"})
    summary, records = _run(tmp_path, settings, rows)
    for rid in ("r00000", "r00001"):
        assert (records[rid]["status"], records[rid]["failure"]) == ("error", "timeout")
        assert "0.6s" in records[rid]["error"]
    assert records["r00002"]["status"] == "ok"


def test_a_429_stops_the_run_and_keeps_what_was_in_flight(tmp_path):
    with LoopbackServer(delay_s=0.05) as srv:
        rows = synthetic_rows(40, {5: "429"})
        summary, records = _run(tmp_path, _settings(srv, concurrency=4), rows)
        asked = srv.total
    assert "429" in summary["stopped"]
    statuses = {rid: r["status"] for rid, r in records.items()}
    assert len(statuses) == 40 and statuses["r00005"] == "unattempted" and records["r00005"]["http_status"] == 429
    answered = [rid for rid, s in statuses.items() if s == "ok"]
    # everything sent got its answer recorded, and the run stopped sending at the 429: when r00005
    # was sent at most 3 others were in flight; each of the 3 other workers may have its reply
    # handled (and send once more) before the 429's, which arrives with theirs; then nothing more
    assert len(answered) + 1 == asked <= 6 + 3 + 3
    assert all(s == "unattempted" for rid, s in statuses.items() if rid not in answered and rid != "r00005")


def test_5xx_interleaved_never_stop_a_run_and_in_a_row_they_do(tmp_path):
    with LoopbackServer() as srv:
        interleaved = {i: "500" for i in range(0, 30, 2)}
        summary, records = _run(tmp_path, _settings(srv, concurrency=1), synthetic_rows(30, interleaved), name="a")
        assert summary["statuses"] == {"ok": 15, "error": 15} and not summary["stopped"]
        in_a_row = {i: "500" for i in range(3, 6)}
        summary, records = _run(tmp_path, _settings(srv, concurrency=1), synthetic_rows(10, in_a_row), name="b")
    assert "3 consecutive infrastructure failures" in summary["stopped"]
    assert [records[f"r{i:05d}"]["status"] for i in range(10)] == ["ok"] * 3 + ["error"] * 3 + ["unattempted"] * 4


def test_retries_wait_on_the_loop(tmp_path):
    with LoopbackServer() as srv:
        settings = _settings(srv, concurrency=4, retry={"max_attempts": 3, "kinds": ["5xx"], "backoff_s": 0.05})
        summary, records = _run(tmp_path, settings, synthetic_rows(6, {1: "flaky:2", 4: "flaky:5"}))
    assert (records["r00001"]["status"], records["r00001"]["attempts"]) == ("ok", 3)
    assert (records["r00004"]["status"], records["r00004"]["attempts"], records["r00004"]["http_status"]) == ("error", 3, 500)


class BuggySystemOne(SystemOneAdapter):
    """A remote adapter with a bug on one request, raised while other requests are in flight."""

    def prepare(self, request):
        if request["state"]["ticket"] == "r00003":
            raise RuntimeError("adapter bug")
        return super().prepare(request)


def test_an_adapter_bug_on_the_loop_keeps_the_answers_in_flight(tmp_path):
    with LoopbackServer(delay_s=0.2) as srv:
        settings = _settings(srv, concurrency=4)
        adapter = BuggySystemOne(**{k: v for k, v in settings.items() if k not in ("adapter", "progress")})
        with pytest.raises(RuntimeError, match="adapter bug"):
            _run(tmp_path, settings, synthetic_rows(12), adapter=adapter)
        sent = srv.total
    kept = PredictionLog(tmp_path / "out" / "predictions.jsonl").records
    # the three requests sent before the broken one were answered and kept; nothing more was sent
    assert sorted(kept) == ["r00000", "r00001", "r00002"] and sent == 3
    assert all(r["status"] == "ok" for r in kept.values())


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT goes to the main thread")
def test_ctrl_c_keeps_the_answers_in_flight(tmp_path):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is handled by someone else here")
    with LoopbackServer(delay_s=0.4) as srv:
        timer = threading.Timer(0.6, signal.raise_signal, (signal.SIGINT,))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                _run(tmp_path, _settings(srv, concurrency=3), synthetic_rows(30))
        finally:
            timer.cancel()
        sent = srv.total
    kept = PredictionLog(tmp_path / "out" / "predictions.jsonl").records
    # every request that was sent has its answer; the ones never sent have no line (asked on a rerun)
    assert len(kept) == sent and 3 <= sent < 30
    assert all(r["status"] == "ok" for r in kept.values())


def test_a_refused_connection_is_a_connection_failure(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = {"adapter": "systemone", "endpoint": f"http://127.0.0.1:{port}/v1", "api_key_env": "", "progress": 0,
                "concurrency": 2}
    summary, records = _run(tmp_path, settings, synthetic_rows(4))
    # two in flight at once: the fourth was sent before the third failure came back
    assert {r["failure"] for r in records.values()} == {"connection"} and "3 consecutive" in summary["stopped"]
    assert "ConnectionRefusedError" in records["r00000"]["error"] or "Connect" in records["r00000"]["error"]


def _read_request(conn: socket.socket) -> bytes:
    """One whole request (head and Content-Length body) from ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = lengths[0] if lengths else 0
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _serve_once(reply: bytes) -> tuple[socket.socket, int]:
    """A listening socket whose first connection gets ``reply`` (whatever it is) and is closed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        with conn:
            _read_request(conn)  # all of it: closing with unread bytes would reset the connection
            conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def _ask_once(port: int):
    adapter = make_adapter({"adapter": "systemone", "endpoint": f"http://127.0.0.1:{port}/v1", "api_key_env": "",
                            "timeout_s": 10})
    adapter.setup()
    try:
        return adapter.answer("r", {"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}})
    finally:
        adapter.close()


@pytest.mark.parametrize("reply, text", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "ClientResponseError: Bad status line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "ClientPayloadError: Response payload is not completed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n{}", "ClientResponseError: Invalid character in Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "ClientResponseError: Invalid character in chunk size"),
    (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", "ClientResponseError: Invalid header token"),
    (b"", "ServerDisconnectedError: Server disconnected"),
])
def test_replies_that_are_not_http_are_connection_failures(reply, text):
    listener, port = _serve_once(reply)
    with listener:
        result = _ask_once(port)
    assert (result.status, result.failure) == ("error", "connection") and text in result.error


def test_a_reply_read_until_close_and_interim_replies():
    body = b'{"answers": {}}'
    listener, port = _serve_once(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\n" + body)
    with listener:
        result = _ask_once(port)
    assert (result.status, result.http_status, result.raw) == ("ok", 200, body.decode())


def test_dask_workers_ask_on_their_own_loops(tmp_path):
    distributed = pytest.importorskip("distributed")
    with LoopbackServer() as srv, distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                                           dashboard_address=None) as cluster:
        settings = _settings(srv, executor="dask", scheduler=cluster.scheduler_address, shard_size=5, concurrency=4)
        summary, records = _run(tmp_path, settings, synthetic_rows(20, {7: "500"}))
        assert srv.total == 20
    assert summary["statuses"] == {"ok": 19, "error": 1}
    assert records["r00007"]["failure"] == "server"


def test_asked_from_a_thread_that_already_runs_an_event_loop(tmp_path):
    """A notebook cell (or any async caller) runs inside an event loop: the run still works."""
    with LoopbackServer() as srv:
        async def inside_a_loop():
            return _run(tmp_path, _settings(srv, concurrency=3), synthetic_rows(9))

        summary, records = asyncio.run(inside_a_loop())
    assert summary["statuses"] == {"ok": 9} and len(records) == 9


def _self_signed(folder):
    """A certificate for 127.0.0.1 and its key (PEM files), made for the test."""
    import datetime

    pytest.importorskip("cryptography")
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_and_an_untrusted_certificate(tmp_path, monkeypatch):
    import ssl

    cert, key = _self_signed(tmp_path)
    srv = LoopbackServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv.httpd.socket = context.wrap_socket(srv.httpd.socket, server_side=True)
    with srv:
        settings = {**_settings(srv, concurrency=2), "endpoint": srv.endpoint.replace("http://", "https://")}
        # not trusted (the system's CAs): a connection failure, nothing answered
        summary, records = _run(tmp_path, settings, synthetic_rows(2), name="untrusted")
        assert {r["failure"] for r in records.values()} == {"connection"}
        assert "CERTIFICATE_VERIFY_FAILED" in records["r00000"]["error"]
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted the way OpenSSL is told to trust it
        summary, records = _run(tmp_path, settings, synthetic_rows(8, {2: "500"}), name="trusted")
        assert summary["statuses"] == {"ok": 7, "error": 1}
        assert records["r00002"]["failure"] == "server" and records["r00002"]["http_status"] == 500


def test_a_proxy_named_in_the_environment_carries_the_requests(tmp_path, monkeypatch):
    """HTTP_PROXY is honoured as aiohttp's trust_env reads it: the endpoint itself (nobody listens there) is
    reached only through the proxy, which receives every request in absolute form."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        unreachable = s.getsockname()[1]
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with LoopbackServer() as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.httpd.server_address[1]}")
        settings = {**_settings(proxy, concurrency=2), "endpoint": f"http://127.0.0.1:{unreachable}/v1"}
        summary, records = _run(tmp_path, settings, synthetic_rows(4))
        assert summary["statuses"] == {"ok": 4} and proxy.total == 4


def test_no_proxy_reaches_the_endpoint_directly(tmp_path, monkeypatch):
    """NO_PROXY naming the endpoint's host wins over HTTP_PROXY (a proxy nobody listens on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    for name in ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with LoopbackServer() as srv:
        summary, _ = _run(tmp_path, _settings(srv, concurrency=2), synthetic_rows(4))
        assert summary["statuses"] == {"ok": 4} and srv.total == 4


def test_a_netrc_entry_for_the_endpoint_changes_nothing_that_is_sent(tmp_path, monkeypatch):
    """~/.netrc is not read for the endpoint: an open endpoint gets no Authorization header, a keyed
    one exactly ``Bearer <key>`` (no netrc password, no clash between the two)."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".netrc").write_text(netrc.read_text())
    (tmp_path / ".netrc").chmod(0o600)
    monkeypatch.setenv("JEVKEDRO_NETRC_TEST_KEY", "sk-netrc-test-0123456789")
    with LoopbackServer() as srv:
        summary, _ = _run(tmp_path, _settings(srv, concurrency=2), synthetic_rows(2), name="open")
        assert summary["statuses"] == {"ok": 2} and srv.auth_headers == [None, None]
        keyed = _settings(srv, concurrency=2, api_key_env="JEVKEDRO_NETRC_TEST_KEY")
        summary, _ = _run(tmp_path, keyed, synthetic_rows(2), name="keyed")
        assert summary["statuses"] == {"ok": 2}
        assert srv.auth_headers[2:] == ["Bearer sk-netrc-test-0123456789"] * 2


def test_openai_compat_records(tmp_path):
    with LoopbackServer() as srv:
        settings = {"adapter": "openai_compat", "endpoint": srv.endpoint, "model": "gpt-test", "api_key_env": "",
                    "progress": 0, "concurrency": 4, "max_consecutive_failures": 10}
        rows = synthetic_rows(8, {1: "prose", 3: "500", 5: "malformed", 6: "413"})
        _, records = _run(tmp_path, settings, rows)
    assert sorted(records) == [r.request_id for r in rows]
    assert records["r00001"]["status"] == "ok" and records["r00001"]["meta"]["verbalized_problem"]
    assert [records[f"r0000{i}"].get("failure") for i in (3, 5, 6)] == ["server", "malformed", "request"]
    assert records["r00000"]["probability_source"] == "verbalized" and records["r00000"]["usage"]["output_tokens"] == 20
    assert records["r00000"]["model"] == "gpt-test-2026"
