"""Test and benchmark support: a real loopback System One server and synthetic snapshots.

:class:`LoopbackServer` is an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (a free port) that
speaks the System One wire format (``POST /v1/systemone``, ``/v1/decide``, ``multipart`` image
requests) and the OpenAI chat-completions format (``POST /v1/chat/completions``). It answers every
question deterministically (noul 0.8; choice/score: 0.5 on the first candidate, the rest shared
evenly) after ``delay_s`` seconds, and counts requests per *ticket* (``state["ticket"]``), so a
test can check that nothing was asked twice.

Faults are injected per request by ``state["fault"]``:

``slow:<seconds>`` answer late; ``hang`` sleep ``hang_s`` (past any client timeout) then answer;
``401`` ``403`` ``404`` ``413`` ``422`` ``429`` ``500`` ``529`` that status with the documented
error body (429 with ``retry-after: 0``); ``malformed`` a 200 whose body is not JSON;
``missing`` a choice answer whose probabilities leave out the last option; ``drop`` a response
whose connection closes half-way through the promised body; ``trickle`` a 200 whose body comes
a byte every 0.2 s (each read is quick, the whole body takes seconds); ``echo`` a 200 whose body quotes
the ``Authorization`` header; ``prose`` (chat completions) a reply that is not the schema's JSON;
on the chat-completions route the fault is read from the state as rendered in the prompt;
``flaky:<n>`` a 500 for the first ``n`` calls of that ticket, then a normal answer.

Any other reply a test needs comes from ``responder``: a function of ``(body, authorization header,
fault)`` returning ``None`` (answer as usual) or ``(status, headers, payload)``: headers a list of
``(name, value)`` pairs (a name may repeat), payload bytes (sent with its ``Content-Length``) or an
iterable of bytes (sent chunked, without a length).

Nothing here is used by the pipelines; it is in the package so tests, subprocesses started by
tests and ``benchmarks/`` share one server.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import Counter
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jevkedro.protocol import SnapshotRow, Target, candidates_for

ERROR_BODIES = {
    401: {"detail": {"error_type": "authentication_error", "message": "unknown API key"}},
    403: {"detail": {"error_type": "authentication_error", "message": "missing API key"}},
    404: {"detail": {"error_type": "not_found", "message": "unknown model"}},
    413: {"detail": {"error_type": "too_long", "message": "input too long"}},
    422: {"detail": [{"loc": ["body", "questions"], "msg": "invalid question", "type": "value_error", "input": None}]},
    429: {"detail": {"error_type": "rate_limit_error", "message": "slow down"}},
    500: {"detail": {"error_type": "server_error", "message": "internal error"}},
    529: {"detail": {"error_type": "overloaded", "message": "overloaded"}},
}


def deterministic_probabilities(candidates: list[str]) -> dict[str, float]:
    """0.5 on the first candidate, 0.5 shared evenly by the others."""
    rest = 0.5 / (len(candidates) - 1)
    return {c: (0.5 if i == 0 else rest) for i, c in enumerate(candidates)}


def system_one_answers(questions: dict[str, Any]) -> dict[str, Any]:
    answers = {}
    for qid, q in questions.items():
        if q["type"] == "noul":
            answers[qid] = {"type": "noul", "noul": 0.8}
            continue
        probs = deterministic_probabilities(candidates_for(q))
        best = max(probs, key=probs.get)
        if q["type"] == "choice":
            answers[qid] = {"type": "choice", "choice": best, "confidence": 0.5, "probabilities": probs}
        else:
            answers[qid] = {"type": "score", "score": sum(int(k) * v for k, v in probs.items()),
                            "confidence": 0.5, "probabilities": probs,
                            "legend": {str(i): c for i, c in enumerate(q["criteria"])}}
    return answers


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without this, Nagle + delayed ACK add ~40 ms per answer.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
              content_length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body) if content_length is None else content_length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _scripted(self, status: int, headers: list[tuple[str, str]], payload: Any) -> None:
        self.send_response(status)
        names = {k.lower() for k, _ in headers}
        if "content-type" not in names:
            self.send_header("Content-Type", "application/json")
        chunked = not isinstance(payload, (bytes, bytearray))
        if "content-length" not in names:
            self.send_header(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(len(payload)))))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            if not chunked:
                self.wfile.write(payload)
            else:
                for part in payload:
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client stopped reading (a body over its cap): what such a reply tests
            self.close_connection = True

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), headers)

    def _read_body(self) -> tuple[dict[str, Any], int]:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            body, images = None, 0
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                if name == "request":
                    body = json.loads(part.get_content() if isinstance(part.get_content(), str)
                                      else part.get_payload(decode=True).decode("utf-8"))
                elif name == "image":
                    images += 1
                    self.server.image_bytes.append(part.get_payload(decode=True))
            return body or {}, images
        return json.loads(raw or b"{}"), 0

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"models": [{"name": "jev-1.13.0", "description": "loopback", "release_date": "2026-01-01"}]})
        else:
            self._json(404, ERROR_BODIES[404])

    def do_POST(self) -> None:  # noqa: N802
        srv = self.server
        with srv.lock:
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            self._post()
        finally:
            with srv.lock:
                srv.inflight -= 1

    def _post(self) -> None:
        srv = self.server
        body, n_images = self._read_body()
        path = self.path.rstrip("/")
        state = body.get("state")
        if path.endswith("/chat/completions"):
            content = body["messages"][-1]["content"]
            found = re.search(r'"ticket": "([^"]*)"', content)
            ticket = found.group(1) if found else "?"
            found = re.search(r'"fault": "([^"]*)"', content)
            fault = found.group(1) if found else ""
        else:
            ticket = str(state.get("ticket")) if isinstance(state, dict) else str(state)
            fault = str(state.get("fault", "")) if isinstance(state, dict) else ""
        with srv.lock:
            srv.counts[ticket] += 1
            srv.total += 1
            n_call = srv.counts[ticket]
            rid = f"srv-{srv.total:06d}"
            srv.bodies.append(body)
            srv.auth_headers.append(self.headers.get("Authorization"))
            srv.image_counts.append(n_images)
        headers = {"x-typesafe-request-id": rid}
        auth = self.headers.get("Authorization")
        if srv.required_key is not None:
            if auth is None:
                return self._json(403, ERROR_BODIES[403], headers)
            if auth != f"Bearer {srv.required_key}":
                return self._json(401, ERROR_BODIES[401], headers)
        scripted = srv.responder(body, auth, fault) if srv.responder is not None else None
        if scripted is not None:
            return self._scripted(*scripted)
        delay = srv.delay_s
        if fault.startswith("slow:"):
            delay = float(fault.split(":", 1)[1])
        elif fault == "hang":
            delay = srv.hang_s
        if delay:
            time.sleep(delay)
        if fault.startswith("flaky:") and n_call <= int(fault.split(":", 1)[1]):
            return self._json(500, ERROR_BODIES[500], headers)
        if fault.isdigit() and int(fault) in ERROR_BODIES:
            status = int(fault)
            return self._json(status, ERROR_BODIES[status], {**headers, **({"retry-after": "0"} if status == 429 else {})})
        if fault == "malformed":
            return self._send(200, b'{"model": "jev-1.13.0", "answers": {oops', headers)
        if fault == "drop":
            payload = json.dumps({"model": "jev-1.13.0", "answers": {}}).encode()
            self._send(200, payload[: len(payload) // 2], headers, content_length=len(payload))
            self.close_connection = True
            return
        if fault == "trickle":  # headers at once, then the body a byte at a time, 0.2 s apart
            payload = json.dumps({"model": "jev-1.13.0", "answers": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            try:
                for i in range(len(payload)):
                    self.wfile.write(payload[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:  # the client gave up: what this fault is for
                pass
            self.close_connection = True
            return
        if fault == "echo":
            return self._json(200, {"model": "jev-1.13.0", "answers": {}, "you_sent": auth}, headers)
        usage_in = len(json.dumps(body)) // 4
        if path.endswith("/chat/completions"):
            schema = body["response_format"]["json_schema"]["schema"]
            written = {qid: {"probabilities": deterministic_probabilities(list(spec["properties"]["probabilities"]["properties"]))}
                       for qid, spec in schema["properties"]["answers"]["properties"].items()}
            text = "I would say yes." if fault == "prose" else json.dumps({"answers": written})
            return self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": f"{body['model']}-2026",
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": usage_in, "completion_tokens": 20, "total_tokens": usage_in + 20}},
                              headers)
        answers = system_one_answers(body.get("questions") or {})
        if fault == "missing":
            for a in answers.values():
                if a["type"] == "choice":
                    a["probabilities"].popitem()
        model = body.get("model") or "loopback-1"
        resolved = "jev-1.13.0" if model == "jev-latest" else model
        if path.endswith("/decide"):
            out: Any = [{"id": qid, **a} for qid, a in answers.items()]
        else:
            out = answers
        self._json(200, {"model": resolved, "answers": out, "usage": {"input_tokens": usage_in, "output_tokens": 0}},
                   headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        # Clients hanging up (timeouts, dropped-connection faults) are the point of many tests;
        # anything else is still printed.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class LoopbackServer:
    """A real HTTP server on 127.0.0.1 in a background thread (use as a context manager)."""

    def __init__(self, delay_s: float = 0.0, required_key: str | None = None, hang_s: float = 3.0,
                 responder: Any = None) -> None:
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.delay_s, self.httpd.required_key, self.httpd.hang_s = delay_s, required_key, hang_s
        self.httpd.responder = responder
        self.httpd.lock = threading.Lock()
        self.httpd.counts = Counter()
        self.httpd.total = 0
        self.httpd.inflight = self.httpd.max_inflight = 0
        self.httpd.bodies, self.httpd.auth_headers, self.httpd.image_counts, self.httpd.image_bytes = [], [], [], []
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def counts(self) -> Counter:
        return self.httpd.counts

    def __getattr__(self, name: str) -> Any:  # bodies, auth_headers, image_counts, total, ...
        return getattr(self.httpd, name)

    def start(self) -> LoopbackServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def synthetic_rows(n: int, faults: dict[int, str] | None = None, prefix: str = "r") -> list[SnapshotRow]:
    """``n`` synthetic requests (one noul, one choice, one score question each); marked synthetic."""
    faults = faults or {}
    rows = []
    for i in range(n):
        state = {"ticket": f"{prefix}{i:05d}", "text": f"Synthetic ticket number {i}: I was billed twice."}
        if i in faults:
            state["fault"] = faults[i]
        questions = {
            "is_billing": {"type": "noul", "instructions": "Is `text` about a payment problem?",
                           "criteria": {"true": "mentions a charge", "false": "anything else"}},
            "queue": {"type": "choice", "instructions": "Which queue should take `text`?",
                      "criteria": {"billing": "charges and refunds", "tech": "bugs", "other": None}},
            "anger": {"type": "score", "instructions": "How upset is the customer?",
                      "criteria": ["calm", "annoyed", "furious"]},
        }
        rows.append(SnapshotRow(
            request_id=f"{prefix}{i:05d}",
            request={"state": state, "questions": questions},
            candidates={q: candidates_for(questions[q]) for q in questions},
            targets={"is_billing": Target(label=0), "queue": Target(label=0), "anger": Target(label=1)},
            slices={"domain": "synthetic"},
            source={"generator": "jevkedro.testing.synthetic_rows"},
        ))
    return rows


def synthetic_snapshot(root: str | Path, rows: list[SnapshotRow], view: str = "synthetic_view"):
    """Commit ``rows`` through the one snapshot writer, load and verify them; returns the Snapshot."""
    from jevkedro.nodes.snapshot import PreparedView, commit_dataset, load_snapshot, verify_snapshot_bytes

    commit_dataset(PreparedView(view=view, family="synthetic", data="synthetic", rows=rows, sources=[],
                                scoring={"note": "synthetic rows for engine tests"}), root)
    return verify_snapshot_bytes(load_snapshot(root, view))


def main(argv: list[str] | None = None) -> None:
    """``python -m jevkedro.testing --delay-s 0.02``: serve until killed, printing the endpoint first."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--delay-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    srv = LoopbackServer(delay_s=args.delay_s)
    print(srv.endpoint, flush=True)
    srv.httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()


def flattened_replay(predictions: Path, out: Path) -> Path:
    """A second, worse model made from a recorded one (comparisons in tests and screenshots): a
    replay file of the answers in ``predictions`` (a predictions.jsonl) with every probability
    vector flattened (p^0.5, renormalised) and, on every third request, the choice probabilities
    reversed."""
    lines = []
    for k, line in enumerate(Path(predictions).read_text(encoding="utf-8").splitlines()):
        rec = json.loads(line)
        answers = {}
        for qid, ans in rec["response"]["answers"].items():
            ans = dict(ans)
            if isinstance(ans.get("probabilities"), dict):
                keys = list(ans["probabilities"])
                vals = [max(float(v), 0.0) ** 0.5 for v in ans["probabilities"].values()]
                if k % 3 == 0:
                    vals = vals[::-1]
                total = sum(vals)
                ans["probabilities"] = {key: v / total for key, v in zip(keys, vals)}
                ans.pop("choice", None)
            elif isinstance(ans.get("noul"), (int, float)):
                p = float(ans["noul"])
                ans["noul"] = p ** 0.5 / (p ** 0.5 + (1 - p) ** 0.5)
            answers[qid] = ans
        lines.append(json.dumps({"request_id": rec["request_id"], "response": {**rec["response"], "answers": answers}}))
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(out)
