"""Corpus, classes 6, 7 and 9 — what the project writes and the settings that name it.

Class 6: ``model.name`` names output folders and MLflow runs, so anything that is not a plain name
(a path, a hidden name, an empty or over-long one) is refused naming the setting and the rule.
Class 7: every output is written atomically (a failure or a kill mid-write leaves the previous
file whole and no temp file in the way), and a reader that meets a broken report names the file
and goes on with the others (``read_reports``, ``python -m jevkedro.summary``, ``compare``).
Class 9: a bad setting is refused before any node runs, naming the key, the value and what is
allowed (or, for a misspelt key, the key it was probably meant to be).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jevkedro.config import ModelSettings, SettingsError, parse_gates, parse_prepare_options
from jevkedro.datasets import BrokenFileError, read_json_document, read_reports
from jevkedro.models import make_adapter
from jevkedro.nodes.infer import PredictionLog, run_inference
from jevkedro.nodes.report import build_report
from jevkedro.nodes.snapshot import atomic_write_bytes, atomic_write_json, atomic_writer
from jevkedro.nodes.validate import build_question_table
from jevkedro.testing import synthetic_rows, synthetic_snapshot

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


# -- class 6: model.name is a name, never a path ------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "../escape", "../../etc/passwd", "/abs/path", "a/b", "a\\b", "..", ".hidden", "", "two words", "x" * 129,
    "nul\x00byte", "-leading-dash", "name\n", "名前",
])
def test_a_model_name_that_is_not_a_plain_name_is_refused_naming_the_setting(name):
    with pytest.raises(SettingsError) as err:
        ModelSettings.parse({"adapter": "replay", "name": name})
    assert f"model.name: {name!r} is not allowed" in str(err.value)
    assert "it names output folders and MLflow runs" in str(err.value)


@pytest.mark.parametrize("name", ["jev-1.13.0", "gpt-4o+cot", "A_b.c", "x" * 128])
def test_plain_names_are_kept_as_written(name):
    assert ModelSettings.parse({"adapter": "replay", "name": name}).name == name


# -- class 7: outputs written whole or not at all ----------------------------------------------------------------

def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "report.json"
    atomic_write_json(path, {"good": True})
    with pytest.raises(RuntimeError), atomic_writer(path) as fh:
        fh.write(b'{"half": ')
        raise RuntimeError("disk went away")
    assert json.loads(path.read_text()) == {"good": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_value_that_cannot_be_serialised_leaves_the_old_file(tmp_path):
    path = tmp_path / "official.json"
    atomic_write_json(path, {"good": True})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"good": True} and len(list(tmp_path.iterdir())) == 1


KILLED_WRITE = r"""
import os, signal, sys
from jevkedro.nodes.snapshot import atomic_writer
with atomic_writer(sys.argv[1]) as fh:
    fh.write(b'{"new": "half of it')
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("name", ["report.json", "questions.jsonl", "leaderboard.csv"])
def test_a_kill_in_the_middle_of_a_write_leaves_the_previous_file_whole(tmp_path, name):
    path = tmp_path / "out" / name
    atomic_write_bytes(path, b'{"old": "whole"}\n')
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path)], env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == b'{"old": "whole"}\n'
    # the kill leaves its temp file beside it; it is hidden and no reader looks at it
    assert [p.name.startswith(f".{name}.") for p in path.parent.iterdir() if p != path] == [True]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One real report (replayed answers scored on a synthetic snapshot)."""
    tmp = tmp_path_factory.mktemp("report")
    snapshot = synthetic_snapshot(tmp / "snap", synthetic_rows(2))
    body = json.dumps({"answers": {"is_billing": {"type": "noul", "noul": 0.9},
                                   "queue": {"type": "choice", "probabilities": {"billing": 0.8, "tech": 0.1, "other": 0.1}},
                                   "anger": {"type": "score", "probabilities": {"0": 0.1, "1": 0.8, "2": 0.1}}}})
    (tmp / "answers.jsonl").write_text("".join(f'{{"request_id": "r{i:05d}", "response": {body}}}\n' for i in range(2)))
    plog = PredictionLog(tmp / "out" / "predictions.jsonl")
    run_inference(snapshot, make_adapter({"adapter": "replay", "path": str(tmp / "answers.jsonl")}), plog)
    plog = PredictionLog(plog.path)
    table = build_question_table(snapshot, plog.records)
    return build_report(snapshot, table, plog.records, {"adapter": "replay", "name": "good"}, plog.checked_meta(), None)


BROKEN = {
    "truncated": (lambda good: good[: len(good) // 2], r"not valid JSON \(.* at line \d+ column \d+\)"),
    "empty": (lambda good: b"", r": empty; write it again"),
    "not-utf8": (lambda good: b"\xff" + good, r": not UTF-8 \(byte 1\)"),
    "nul-bytes": (lambda good: b"\x00" * 64, r"not valid JSON"),
    "a-list": (lambda good: b"[1, 2]", r"not a report \(expected an object with view, model and metrics\)"),
    "no-metrics": (lambda good: json.dumps({"view": "synthetic_view", "model": "broken"}).encode(), r"not a report"),
}


def reporting(project: Path) -> Path:
    """A project's reporting folder: its conf (the catalog, which says where reports are) copied in."""
    shutil.copytree(ROOT / "conf" / "base", project / "conf" / "base")
    (project / "conf" / "local").mkdir()
    return project / "data" / "08_reporting"


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_report_is_named_and_skipped_and_the_others_are_read(tmp_path, report, kind):
    good = json.dumps(report).encode()
    atomic_write_bytes(reporting(tmp_path) / "good" / "synthetic_view" / "report.json", good)
    broken = tmp_path / "data" / "08_reporting" / "broken" / "synthetic_view" / "report.json"
    breaker, message = BROKEN[kind]
    atomic_write_bytes(broken, breaker(good))
    found, problems = read_reports(tmp_path)
    assert [r["model"] for r in found] == ["good"]
    assert len(problems) == 1 and problems[0].startswith(f"skipped {broken}")
    import re

    assert re.search(message, problems[0]), problems[0]


def test_the_summary_command_names_a_broken_report_on_stderr_and_reports_the_rest(tmp_path, report, capsys):
    from jevkedro import summary

    folder = reporting(tmp_path)
    atomic_write_bytes(folder / "good" / "synthetic_view" / "report.json", json.dumps(report).encode())
    atomic_write_bytes(folder / "half" / "synthetic_view" / "report.json", json.dumps(report).encode()[:100])
    assert summary.main(["--root", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"skipped {folder / 'half' / 'synthetic_view' / 'report.json'}: not valid JSON" in err
    assert "good" in out and "half" not in out
    assert "good" in (folder / "leaderboard.csv").read_text()


def test_the_summary_command_says_every_report_was_skipped_when_none_can_be_read(tmp_path, capsys):
    from jevkedro import summary

    folder = reporting(tmp_path)
    atomic_write_bytes(folder / "a" / "v" / "report.json", b"42")
    atomic_write_bytes(folder / "b" / "v" / "report.json", b'{"model": "b"')
    assert summary.main(["--root", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert f"no readable report in {tmp_path}: 2 skipped" in out and "run `kedro run` first" not in out
    assert err.count("skipped ") == 2


@pytest.mark.parametrize("text, message", [
    (None, r"cannot be read \(No such file or directory\)"),
    (b'{"a": 1', r"not valid JSON \(Expecting ',' delimiter at line 1 column 8\); write it again"),
    (b"  \n", r"empty; write it again"),
    (b'{"a": "\xe9"}', r"not UTF-8 \(byte 8\)"),
])
def test_reading_a_damaged_json_output_names_the_file_and_the_place(tmp_path, text, message):
    path = tmp_path / "official.json"
    if text is not None:
        path.write_bytes(text)
    with pytest.raises(BrokenFileError, match=rf"{path}: {message}"):
        read_json_document(path)


def test_compare_names_a_broken_report_instead_of_crashing(tmp_path):
    from jevkedro.compare import CompareError, compare_view

    folder = reporting(tmp_path)
    for model, text in (("a", b'{"view": "jevalt_bench"'), ("b", b"{}")):
        atomic_write_bytes(folder / model / "jevalt_bench" / "report.json", text)
    with pytest.raises(CompareError, match=r"08_reporting/a/jevalt_bench/report.json: not valid JSON"):
        compare_view(tmp_path, "jevalt_bench", "a", "b")


# -- class 9: settings refused naming the key, the value and the rule ----------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"adapter": "systemone", "concurency": 2}, "model.concurency: unknown setting; did you mean model.concurrency?"),
    ({"adapter": "systemone", "concurrency": 0}, "model.concurrency: 0 is not allowed; allowed: an integer ≥ 1 and ≤ 1024"),
    ({"adapter": "systemone", "timeout_s": "fast"}, "model.timeout_s: 'fast' is not allowed; allowed: a number > 0"),
    ({"adapter": "nosuch"}, "model.adapter: unknown adapter 'nosuch' (known: "),
    ({"adapter": "systemone", "retry": {"max_attempts": "x"}}, "model.retry.max_attempts: 'x' is not allowed"),
    ({"adapter": "systemone", "fsync": "sometimes"}, "model.fsync: 'sometimes' is not allowed; allowed: one of: always, interval, never"),
    ({"adapter": "systemone", "shard_store": "s3://user:secret@bucket/x"}, "model.shard_store: must not carry a password"),
    ({"adapter": "systemone", "price_input_per_1m": -1}, "model.price_input_per_1m: -1 is not allowed; allowed: a number ≥ 0"),
    ({"adapter": "replay", "endpoint": "http://x"}, "model.endpoint"),
])
def test_a_bad_model_setting_is_refused_naming_the_key_and_the_rule(settings, message):
    with pytest.raises(SettingsError) as err:
        ModelSettings.parse(settings)
    assert message in str(err.value)
    assert "secret" not in str(err.value)  # a credential in a refused value is not repeated


@pytest.mark.parametrize("values, message", [
    ({"data": "offical"}, "jevalt_bench.prepare.data: 'offical' is not allowed"),
    ({"dat": "sample"}, "jevalt_bench.prepare.dat: unknown setting"),
])
def test_a_bad_prepare_setting_is_refused_naming_the_view_and_key(values, message):
    with pytest.raises(SettingsError, match=message.replace(".", r"\.")):
        parse_prepare_options("jevalt_bench", values)


@pytest.mark.parametrize("values, message", [
    ({"no_such_view": {"min_accuracy": 0.5}}, "gates.no_such_view"),
    ({"all": {"min_acuracy": 0.5}}, "gates.all.min_acuracy: unknown setting"),
    ({"all": {"min_accuracy": 1.5}}, "gates.all.min_accuracy: 1.5 is not allowed"),
])
def test_a_bad_gate_is_refused_naming_the_gate(values, message):
    with pytest.raises(SettingsError, match=message.replace(".", r"\.")):
        parse_gates(values)


@pytest.mark.parametrize("endpoint", ["ftp://127.0.0.1:9/x", "localhost:8000", "http://", "not a url"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_anything_is_asked(endpoint):
    with pytest.raises(ValueError, match=rf"model.endpoint must be an http\(s\) URL, got '{endpoint}'"):
        make_adapter({"adapter": "systemone", "endpoint": endpoint, "api_key_env": ""})


@pytest.mark.parametrize("adapter", ["systemone", "openai_compat"])
def test_a_key_variable_that_is_not_set_is_named_with_the_fix(adapter, monkeypatch):
    monkeypatch.delenv("JEV_HOSTILE_UNSET_KEY", raising=False)
    with pytest.raises(ValueError, match="model.api_key_env names JEV_HOSTILE_UNSET_KEY, which is not set: export it"):
        make_adapter({"adapter": adapter, "endpoint": "http://127.0.0.1:9", "model": "m",
                      "api_key_env": "JEV_HOSTILE_UNSET_KEY"}).setup()
