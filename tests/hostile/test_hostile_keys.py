"""Round 3, classes 7 and 8 — a key is a header value, and only ever in the environment.

Whole `kedro run` sessions (in-process) of zh_decision_bench against a loopback System One server
that counts requests: a key holding a line break or a non-ASCII letter (in credentials.yml or the
environment), a key's value where model.api_key_env wants a variable's NAME, a key inside another
setting, a mapping or an unquoted number (YAML reads 0123 as 83) where credentials.yml wants a key,
a credentials.yml that is a folder, a FIFO or /dev/zero (which kedro passes over as if absent).
Each is refused before any request, naming the setting, variable or file, and the key is in no
message and no file."""

from __future__ import annotations

import pytest

from jevkedro.config import SettingsError
from jevkedro.testing import LoopbackServer
from support import copy_project, run_kedro

pytest.importorskip("aiohttp")

VIEW = "zh_decision_bench"
KEY = "hk-Zq81Lm07Wx55Pt3Rv"  # shares no 8-character piece with the other tests' keys (registered process-wide)


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


@pytest.fixture
def project(tmp_path):
    return copy_project(tmp_path / "p", [VIEW])


def _run(project, server, **model):
    return run_kedro(project, VIEW, {"model": {"adapter": "systemone", "endpoint": server.endpoint, "name": "keyed", **model}})


def _refused(excinfo, *expected: str, secret: str = KEY) -> str:
    text = str(excinfo.value)
    for part in expected:
        assert part in text, text
    assert secret not in text and secret.upper() not in text
    return text


def _no_file_holds(project, secret: str = KEY) -> None:
    for path in project.rglob("*"):
        if path.is_file() and path.suffix not in (".yml",):
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("key, problem", [
    (KEY + "\r\nX-Injected: yes", f"a line break at character {len(KEY) + 1}"),
    ("hk-clé-Yp42Nn93Bb", "a character outside printable ASCII at character 6"),
])
def test_a_credentials_key_that_is_no_header_value_is_refused_before_any_request(project, server, monkeypatch, key, problem):
    monkeypatch.delenv("JEV_KEYS_TEST", raising=False)
    (project / "conf" / "local" / "credentials.yml").write_text(
        f"model_api_keys:\n  JEV_KEYS_TEST: {key!r}\n".replace("'", '"'), encoding="utf-8")
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST")
    _refused(excinfo, "model_api_keys.JEV_KEYS_TEST", problem, secret=key.split("\r")[0])
    assert server.total == before


def test_a_key_in_the_environment_that_is_no_header_value_is_refused_naming_the_variable(project, server, monkeypatch):
    monkeypatch.setenv("JEV_KEYS_TEST", KEY + "\nX-Injected: yes")
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST")
    _refused(excinfo, "$JEV_KEYS_TEST", f"a line break at character {len(KEY) + 1}")
    assert server.total == before


def test_the_keys_value_where_its_variables_name_belongs_is_refused_unprinted(project, server, monkeypatch):
    monkeypatch.setenv("TYPESAFE_API_KEY", KEY)
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env=f"${KEY}")
    _refused(excinfo, "model.api_key_env: must NAME the environment variable")
    assert server.total == before
    _no_file_holds(project)


def test_a_setting_holding_the_key_is_refused_unprinted(project, server, monkeypatch):
    monkeypatch.setenv("JEV_KEYS_TEST", KEY)
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST", model=f"jev-{KEY}")
    _refused(excinfo, "model.model: holds the value of the API key in $JEV_KEYS_TEST")
    assert server.total == before
    _no_file_holds(project)


def test_a_mapping_where_credentials_want_a_key_is_refused(project, server, monkeypatch):
    monkeypatch.delenv("JEV_KEYS_TEST", raising=False)
    (project / "conf" / "local" / "credentials.yml").write_text(
        f"model_api_keys:\n  JEV_KEYS_TEST:\n    key: {KEY}\n", encoding="utf-8")
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST")
    _refused(excinfo, "model_api_keys.JEV_KEYS_TEST: must be the key itself (a string), not a dict")


@pytest.mark.parametrize("written", ["0123", "12_345", "12:30:45", "0x1F", "1e5", "20240131"])
def test_an_unquoted_key_yaml_reads_as_a_number_is_refused_not_sent_changed(project, server, monkeypatch, written):
    # YAML 1.1 reads 0123 as 83, 12:30:45 as 45045: the key sent would not be the key written
    monkeypatch.delenv("JEV_KEYS_TEST", raising=False)
    (project / "conf" / "local" / "credentials.yml").write_text(f"model_api_keys:\n  JEV_KEYS_TEST: {written}\n",
                                                                 encoding="utf-8")
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST")
    _refused(excinfo, "model_api_keys.JEV_KEYS_TEST: must be the key itself as a quoted string", secret=written)
    assert server.total == before


@pytest.mark.parametrize("kind, what", [("folder", "is a folder"), ("fifo", "is a FIFO"),
                                        ("zero", "a symlink to /dev/zero, is a character device")])
def test_a_credentials_file_that_is_no_regular_file_is_named_not_passed_over(project, server, monkeypatch, kind, what):
    # kedro skips it as if there were none: the run would only say later that the key's variable is unset
    import os

    monkeypatch.delenv("JEV_KEYS_TEST", raising=False)
    path = project / "conf" / "local" / "credentials.yml"
    {"folder": path.mkdir, "fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero")}[kind]()
    before = server.total
    with pytest.raises(SettingsError) as excinfo:
        _run(project, server, api_key_env="JEV_KEYS_TEST")
    _refused(excinfo, f"credentials file {path}", what)
    assert server.total == before
