"""Corpus, class 1 — secrets: a server that sends the key back, in every place and encoding it could.

One loopback server for the module; it checks the ``Authorization`` header itself (the key of the
moment is in ``AUTH``) and answers per request fault with the key echoed where the case says. Every
case asserts the request's outcome and that neither the predictions log nor ``run.json`` holds the
key in any spelling (:func:`hostile_support.leaks`). The end-to-end search of every file a real
``kedro run`` writes is ``tests/test_secrets.py``.
"""

from __future__ import annotations

import base64
import json
import logging
from urllib.parse import quote, quote_plus

import numpy as np
import pytest
from hostile_support import ask, judged, leaks, lines, settings_for

from jevkedro.redaction import REDACTED, Redactor, public_strings, redact_registered, register_secret
from jevkedro.testing import LoopbackServer, system_one_answers

pytest.importorskip("aiohttp")

KEY = "sk-jev/Test+4f1c9e0b7d2a=DO-NOT-LEAK"  # '/', '+' and '=' have escapes of their own
KEY_ENV = "JEV_HOSTILE_SECRET"
AUTH = {"key": KEY}
ECHO = "@@ECHO@@"

# the key as a JSON string token, spelled as a server might spell it
TOKENS = {
    "as is": json.dumps(KEY),
    "upper case": json.dumps(KEY.upper()),
    "every character \\u-escaped": '"' + "".join(f"\\u{ord(c):04x}" for c in KEY) + '"',
    "\\u-escaped with upper hex": '"' + "".join(f"\\u{ord(c):04X}" for c in KEY) + '"',
    "one \\u escape": json.dumps(KEY).replace("s", "\\u0073", 1),
    "\\/ escapes": json.dumps(KEY).replace("/", "\\/"),
    "percent-encoded": json.dumps(quote(KEY, safe="")),
    "every byte %XX": json.dumps("".join(f"%{b:02X}" for b in KEY.encode())),
    "in a query string": json.dumps("https://x.test/?token=" + quote_plus(KEY) + "&a=1"),
    "base64": json.dumps(base64.b64encode(KEY.encode()).decode()),
    "base64 of 'Bearer <key>', no padding": json.dumps(base64.b64encode(f"Bearer {KEY}".encode()).decode().rstrip("=")),
    "urlsafe base64 of 'u:<key>'": json.dumps(base64.urlsafe_b64encode(f"u:{KEY}".encode()).decode()),
    "hex": json.dumps(KEY.encode().hex().upper()),
    "HTML entities": json.dumps("".join(f"&#{ord(c)};" for c in KEY)),
    "first 16 characters": json.dumps(KEY[:16]),
    "last 16 characters inside text": json.dumps(f"...{KEY[-16:]}..."),
    "inside prose": json.dumps(f"you sent Authorization: Bearer {KEY} - thanks"),
    "JSON inside a string, escaped twice": json.dumps(json.dumps({"auth": KEY}).replace("s", "\\u0073")),
}


def _answer_body(questions: dict, **extra) -> dict:
    return {"model": "jev-1.13.0", "answers": system_one_answers(questions), "usage": {"input_tokens": 10, "output_tokens": 0},
            **extra}


def _with_token(body: dict, token: str) -> bytes:
    return json.dumps(body).replace(json.dumps(ECHO), token).encode()


def responder(body, auth, fault):
    if auth != f"Bearer {AUTH['key']}":
        return 401, [], b'{"detail": "unknown key"}'
    questions = body.get("questions") or {}
    place, _, form = fault.partition(":")
    token = TOKENS.get(form, json.dumps(KEY))
    if place == "value":  # a top-level field of a valid answer
        return 200, [], _with_token(_answer_body(questions, echo=ECHO), token)
    if place == "key":  # an object key
        text = json.dumps(_answer_body(questions))[:-1] + f", {token}: 1}}"
        return 200, [], text.encode()
    if place == "answer":  # a field inside an answer
        doc = _answer_body(questions)
        doc["answers"]["queue"]["note"] = ECHO
        return 200, [], _with_token(doc, token)
    if place == "header":
        value = json.loads(token)
        return 200, [("x-typesafe-request-id", value)], json.dumps(_answer_body(questions)).encode()
    if place == "header-split":  # two values of the stored header, each half of the key
        return 200, [("x-typesafe-request-id", KEY[:18]), ("x-typesafe-request-id", KEY[18:])], \
            json.dumps(_answer_body(questions)).encode()
    if place == "header-spaced":  # the key with spaces in it, in small pieces
        return 200, [("x-typesafe-request-id", " ".join(KEY[i:i + 5] for i in range(0, len(KEY), 5)))], \
            json.dumps(_answer_body(questions)).encode()
    if place in ("500", "422"):
        return int(place), [], _with_token({"detail": {"message": ECHO}}, token)
    if place == "401":
        return 401, [], _with_token({"detail": {"message": "bad key", "you_sent": ECHO}}, token)
    if place == "malformed":  # 2xx, not JSON, the key in it
        return 200, [], b"<html>error: token " + KEY.encode() + b" rejected"
    if place == "huge":  # over the body cap, sent chunked (no length): the key in the excerpt that is kept
        return 200, [], [b'{"echo": ' + token.encode() + b', "pad": "', b"x" * 5000, b'"}']
    return None


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


@pytest.fixture
def keyed(server, monkeypatch):
    AUTH["key"] = KEY
    monkeypatch.setenv(KEY_ENV, KEY)
    return settings_for(server, api_key_env=KEY_ENV, max_response_bytes=4000)


def _no_leak(plog, key=KEY):
    for path in (plog.path, plog.meta_path):
        assert leaks(path.read_bytes(), key) == [], path


# -- the key echoed in a valid answer: redacted where it stands, the answer still valid ----------------

@pytest.mark.parametrize("place", ["value", "key", "answer"])
@pytest.mark.parametrize("form", list(TOKENS))
def test_a_key_echoed_in_a_valid_body_is_stored_nowhere_and_the_answer_stays_valid(tmp_path, keyed, place, form):
    summary, plog, snapshot = ask(tmp_path, keyed, {0: f"{place}:{form}"})
    assert summary["statuses"] == {"ok": 1}
    _no_leak(plog)
    rec = lines(plog)[0]
    assert REDACTED in rec["raw_response"]
    table = judged(snapshot, plog)
    assert table.status.tolist() == ["ok", "ok", "ok"]  # noul, choice, score: all still valid


@pytest.mark.parametrize("place, form", [("header", "as is"), ("header", "base64 of 'Bearer <key>', no padding"),
                                         ("header", "every byte %XX"), ("header-split", ""), ("header-spaced", "")])
def test_a_key_in_the_stored_response_header_is_redacted(tmp_path, keyed, place, form):
    summary, plog, _ = ask(tmp_path, keyed, {0: f"{place}:{form}"})
    assert summary["statuses"] == {"ok": 1}
    _no_leak(plog)
    assert REDACTED in lines(plog)[0]["server_request_id"]


@pytest.mark.parametrize("place, status, failure", [("500", "error", "server"), ("422", "error", "request"),
                                                    ("malformed", "error", "malformed"), ("huge", "error", "too_large")])
@pytest.mark.parametrize("form", ["as is", "every character \\u-escaped", "base64 of 'Bearer <key>', no padding"])
def test_a_key_in_an_error_body_is_kept_out_of_the_error_text_and_the_raw_body(tmp_path, keyed, place, status, failure, form):
    summary, plog, _ = ask(tmp_path, keyed, {0: f"{place}:{form}"})
    rec = lines(plog)[0]
    assert (rec["status"], rec["failure"]) == (status, failure)
    _no_leak(plog)


def test_a_key_echoed_in_a_401_body_is_kept_out_of_the_stop_reason(tmp_path, keyed, caplog):
    summary, plog, _ = ask(tmp_path, keyed, {0: "401:as is"}, n=3)
    assert summary["statuses"] == {"unattempted": 3} and "HTTP 401" in summary["stopped"]
    assert KEY not in summary["stopped"] and KEY not in caplog.text
    _no_leak(plog)


# -- a short key that happens to be ordinary text of a valid body -------------------------------------

@pytest.mark.parametrize("short_key", ["0.5", "true", "answers", "jev", "billing", "noul", "model", "0.25"])
def test_a_short_key_that_occurs_in_valid_bodies_changes_no_answer(tmp_path, server, monkeypatch, short_key):
    monkeypatch.setenv(KEY_ENV, short_key)
    AUTH["key"] = short_key
    try:
        summary, plog, snapshot = ask(tmp_path, settings_for(server, api_key_env=KEY_ENV), n=3, name="short")
    finally:
        AUTH["key"] = KEY
    assert summary["statuses"] == {"ok": 3}
    table = judged(snapshot, plog)
    assert set(table.status.tolist()) == {"ok"}  # never malformed, never invalid
    # the same probabilities as the server's answers: noul 0.8; 0.5 on the first candidate
    first = table.P[:, 0]
    assert np.allclose(first[table.qtype == "noul"], 0.8) and np.allclose(first[table.qtype != "noul"], 0.5)


def test_noul_probabilities_keyed_true_survive_a_key_spelled_true(tmp_path, server, monkeypatch):
    def noul_probs(body, auth, fault):
        if auth != "Bearer true":
            return 401, [], b"{}"
        answers = system_one_answers(body["questions"])
        answers["is_billing"] = {"type": "noul", "probabilities": {"true": 0.7, "false": 0.3}}
        return 200, [], json.dumps({"model": "m", "answers": answers, "flag": True, "note": "it is true"}).encode()

    server.httpd.responder, before = noul_probs, server.httpd.responder
    monkeypatch.setenv(KEY_ENV, "true")
    try:
        summary, plog, snapshot = ask(tmp_path, settings_for(server, api_key_env=KEY_ENV))
    finally:
        server.httpd.responder = before
    table = judged(snapshot, plog)
    assert table.status.tolist() == ["ok", "ok", "ok"] and np.isclose(table.P[0, 0], 0.7)
    stored = lines(plog)[0]["response"]
    assert stored["answers"]["is_billing"]["probabilities"] == {"true": 0.7, "false": 0.3}  # public text: kept
    assert stored["note"] == f"it is {REDACTED}"  # not public text: redacted


# -- the redactor itself, and the log backstop ----------------------------------------------------------

@pytest.mark.parametrize("form", list(TOKENS))
def test_the_redactor_finds_every_spelling_in_free_text(form):
    text = f"error: {TOKENS[form]} was rejected"
    out = Redactor(KEY).text(text)
    assert leaks(out.encode(), KEY) == [] and REDACTED in out


def test_public_text_is_kept_and_only_a_copy_is_made_where_something_changed():
    red = Redactor("billing")
    body = {"answers": {"queue": {"probabilities": {"billing": 0.5, "tech": 0.5}}}, "why": "a billing issue"}
    public = public_strings({"questions": {"queue": {"type": "choice", "criteria": {"billing": "", "tech": ""}}}})
    out = red.value(body, public)
    assert out["answers"] is body["answers"] and out["why"] == f"a {REDACTED} issue"
    assert red.value({"a": [1, 2]}, public) == {"a": [1, 2]}


def test_log_lines_of_any_logger_are_scrubbed_once_a_key_is_registered(caplog):
    register_secret(KEY)
    caplog.set_level(logging.INFO)
    logging.getLogger("some.library").warning("sent %s", base64.b64encode(f"Bearer {KEY}".encode()).decode())
    try:
        raise RuntimeError(f"server said {quote(KEY, safe='')}")
    except RuntimeError:
        logging.getLogger("jevkedro.anything").exception("request failed")
    assert leaks(caplog.text.encode(), KEY) == []
    assert caplog.text.count(REDACTED) >= 2
    assert redact_registered(f"x {KEY.upper()} y") == f"x {REDACTED} y"


def test_short_keys_are_not_registered_process_wide(caplog):
    register_secret("true")
    caplog.set_level(logging.INFO)
    logging.getLogger("some.library").info("it is true")
    assert "it is true" in caplog.text
