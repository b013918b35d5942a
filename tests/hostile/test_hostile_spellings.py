"""Round 3, class 9 — the key re-spelt: reversed, ROT13, base32, base64 of UTF-16, hexadecimal with
colons, characters spaced by blanks or zero-width spaces, an all-digit key as a JSON number. A real
loopback server echoes each spelling inside a valid answer; neither the predictions log nor
``run.json`` may hold it (searched here after squeezing, independently of the redactor), and the
answers stay valid. docs/reliability.md lists exactly the spellings covered."""

from __future__ import annotations

import base64
import codecs
import json
import re

import pytest
from hostile_support import ask, judged, lines, settings_for

from jevkedro.redaction import REDACTED, Redactor
from jevkedro.testing import LoopbackServer, system_one_answers

pytest.importorskip("aiohttp")

KEY = "sk-jev/Test+4f1c9e0b7d2a=DO-NOT-LEAK"
DIGIT_KEY = "31415926535897932384"
KEY_ENV = "JEV_SPELLING_SECRET"
AUTH = {"key": KEY}


def spellings(key: str) -> dict[str, str]:
    raw = key.encode()
    return {
        "reversed": key[::-1],
        "rot13": codecs.encode(key, "rot13"),
        "base32": base64.b32encode(raw).decode(),
        "base32 of 'Bearer <key>'": base64.b32encode(b"Bearer " + raw).decode(),
        "base64 of UTF-16-LE": base64.b64encode(key.encode("utf-16-le")).decode(),
        "base64 of UTF-16-BE": base64.b64encode(key.encode("utf-16-be")).decode(),
        "upper-case hex with colons": ":".join(f"{b:02X}" for b in raw),
        "hex of UTF-16-LE": key.encode("utf-16-le").hex(),
        "spaces between characters": " ".join(key),
        "zero-width spaces between characters": "\u200b".join(key),
        "line breaks and tabs between pieces": "\n".join(key[i:i + 3] for i in range(0, len(key), 3)).replace("\n", "\t", 2),
    }


FORMS = spellings(KEY)
_SQUEEZE = re.compile(r"[\s\u200b-\u200f\u2060\ufeff:\-_./,;|]+")


def spelt_in(data: bytes, key: str) -> list[str]:
    """Which spellings of ``key`` ``data`` holds once squeezed (JSON escapes decoded first)."""
    text = data.decode("utf-8", "replace")
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text).replace("\\n", "").replace("\\t", "")
    squeezed = _SQUEEZE.sub("", text)
    found = []
    for name, form in spellings(key).items():
        needle = _SQUEEZE.sub("", form)
        case_kept = name.startswith("base64")
        if (needle in squeezed) if case_kept else (needle.casefold() in squeezed.casefold()):
            found.append(name)
    return found


def responder(body, auth, fault):
    if auth != f"Bearer {AUTH['key']}":
        return 401, [], b'{"detail": "unknown key"}'
    answers = system_one_answers(body.get("questions") or {})
    doc = {"model": "jev-1.13.0", "answers": answers, "usage": {"input_tokens": 1, "output_tokens": 0}}
    if fault == "number":
        return 200, [], json.dumps(doc)[:-1].encode() + b', "echo": ' + DIGIT_KEY.encode() + b"}"
    if fault in FORMS:
        doc["echo"] = FORMS[fault]
        doc["answers"]["queue"]["note"] = FORMS[fault]
    return 200, [], json.dumps(doc).encode()


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


@pytest.mark.parametrize("form", list(FORMS))
def test_a_re_spelt_key_reaches_no_file_and_the_answers_stay_valid(tmp_path, server, monkeypatch, form):
    AUTH["key"] = KEY
    monkeypatch.setenv(KEY_ENV, KEY)
    summary, plog, snapshot = ask(tmp_path, settings_for(server, api_key_env=KEY_ENV), {0: form})
    assert summary["statuses"] == {"ok": 1}
    for path in (plog.path, plog.meta_path):
        assert spelt_in(path.read_bytes(), KEY) == [], path
    assert REDACTED in lines(plog)[0]["raw_response"]
    assert judged(snapshot, plog).status.tolist() == ["ok", "ok", "ok"]


def test_an_all_digit_key_echoed_as_a_json_number_reaches_no_file(tmp_path, server, monkeypatch):
    AUTH["key"] = DIGIT_KEY
    monkeypatch.setenv(KEY_ENV, DIGIT_KEY)
    try:
        summary, plog, snapshot = ask(tmp_path, settings_for(server, api_key_env=KEY_ENV), {0: "number"})
    finally:
        AUTH["key"] = KEY
    assert summary["statuses"] == {"ok": 1}
    for path in (plog.path, plog.meta_path):
        assert DIGIT_KEY not in path.read_text(encoding="utf-8"), path
    assert lines(plog)[0]["response"]["echo"] == REDACTED
    assert judged(snapshot, plog).status.tolist() == ["ok", "ok", "ok"]


@pytest.mark.parametrize("form", list(FORMS))
def test_the_redactor_finds_each_spelling_in_free_text_and_in_values(form):
    red = Redactor(KEY)
    assert red.text(f"server said: {FORMS[form]} (end)") == REDACTED
    assert red.value({"echo": FORMS[form], "keep": "plain text"}) == {"echo": REDACTED, "keep": "plain text"}


def test_ordinary_text_is_not_taken_for_a_spelling():
    red = Redactor(KEY)
    text = "Which queue handles billing? Options: tech, sales; see https://example.test/a_b/c-d (v1.2)."
    assert red.text(text) == text
    assert Redactor(DIGIT_KEY).value({"n": 3141592, "p": 0.5}) == {"n": 3141592, "p": 0.5}
