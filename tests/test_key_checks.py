"""The checks that keep a key a header value and out of settings (jevkedro.redaction)."""

from __future__ import annotations

import pytest

from jevkedro.redaction import header_problem, is_env_name, settings_holding

KEY = "sk-jev-4f1c9e0b7d2a8c3e"


@pytest.mark.parametrize("key, problem", [
    ("sk-abc\r\nX-Injected: yes", "a line break at character 7"),
    ("sk-abc\nX", "a line break at character 7"),
    ("sk-\x00abc", "a control character at character 4"),
    ("sk-clé-123", "a character outside printable ASCII at character 6"),
    ("sk-ключ", "a character outside printable ASCII at character 4"),
    ("sk abc", "a space at character 3"),
    ("", "nothing (it is empty)"),
])
def test_a_key_that_cannot_be_a_header_value_is_described_without_its_value(key, problem):
    assert header_problem(key) == problem
    assert key.strip() == "" or key[3:] not in problem


def test_an_ordinary_key_is_fine():
    assert header_problem(KEY) is None and header_problem("abc+/=_-.~") is None


@pytest.mark.parametrize("name, ok", [("TYPESAFE_API_KEY", True), ("_X1", True), ("$TYPESAFE_API_KEY", False),
                                      ("1KEY", False), (KEY, False), ("MY KEY", False)])
def test_env_names(name, ok):
    assert is_env_name(name) is ok


def test_settings_holding_a_key_are_named():
    values = {"endpoint": f"https://api.test/v1/{KEY}/", "api_key_env": KEY.upper(), "model": "jev-1.13.0",
              "concurrency": 8, "kinds": ["429", KEY], "name": "my-model"}
    assert settings_holding(values, [KEY]) == ["endpoint", "api_key_env", "kinds"]
    assert settings_holding({"x": 31415926535897932384}, ["31415926535897932384"]) == ["x"]
    assert settings_holding(values, ["short"]) == []
