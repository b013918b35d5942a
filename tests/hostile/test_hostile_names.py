"""Round 3, classes 10-12 and 19 (compare part): names and the readers of reports and logs.

Class 10: ``compare`` and ``summary`` take model and view names under the rule of ``model.name``, never
a path. Class 11: output names never collide (a comparison's folder is one per pair; ``model.name``
cannot be a name the project's own outputs use beside the model folders). Class 12: a report edited or
copied by hand is skipped (summary) or refused (compare) naming the file and the field, never a
traceback; a damaged predictions log is a message; a reader never writes the log it reads.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jevkedro import summary
from jevkedro.compare import main as compare_main
from jevkedro.config import RESERVED_RUN_NAMES, RUN_NAME, SettingsError
from jevkedro.datasets import ANY, ComparisonsDataset, pair_folder, pair_of_folder, project_catalog
from jevkedro.models.settings import ModelSettings
from support import jevbench_snapshot_of, project_conf, task

ROOT = Path(__file__).resolve().parents[2]
VIEW = "jevbench"


def write_model(root: Path, name: str, probs: list[float], snapshot, report: dict | None = None) -> Path:
    """Answers of model ``name`` on the snapshot's tasks (P(label) per task) and a report in its place."""
    folder = root / "data" / "07_model_output" / name / VIEW
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"request_id": row.request_id, "status": "ok", "latency_s": None, "first": False, "model": name,
                         "response": {"answers": {"decision": {"type": "choice", "probabilities": {"a": p, "b": 1 - p}}}},
                         "error": None}) for row, p in zip(snapshot.rows, probs)]
    (folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    path = root / "data" / "08_reporting" / name / VIEW / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report or {"model": name, "view": VIEW, "snapshot_sha256": snapshot.sha256,
                                          "probability_source": "native", "model_id": name}))
    return path


@pytest.fixture
def project(tmp_path):
    project_conf(tmp_path)
    tasks = [task(f"easy-{i}", "choice", ["a", "b"], "a", group=f"g{i // 2}") for i in range(6)]
    snapshot = jevbench_snapshot_of(tmp_path / "data" / "02_snapshots", tasks)
    for name, probs in (("a", [0.8] * 6), ("b", [0.3] * 6)):
        write_model(tmp_path, name, probs, snapshot)
    return tmp_path, snapshot


def compare(root: Path, *args: str) -> int:
    return compare_main(["--root", str(root), "--view", VIEW, "--no-plots", "--resamples", "20", *args])


# -- class 10: names, never paths ----------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [("a", "a/"), ("a", "../../../X/b"), ("a/.", "b"), ("./a", "b"), ("a", "/abs/b")])
def test_compare_takes_model_names_never_paths(project, a, b, capsys):
    root, _ = project
    outside = root.parent / "X"
    assert compare(root, a, b) == 2
    err = capsys.readouterr().err
    assert "is not allowed; allowed: 1-128 characters" in err and "Traceback" not in err
    assert not (root / "data" / "08_reporting" / "compare").exists() and not outside.exists()


@pytest.mark.parametrize("view", ["../a", "a/../../x", "*", "jevbench/../jevbench"])
def test_summary_takes_a_view_name_never_a_path(project, view, capsys):
    root, _ = project
    # a report where `--view ../a` would find one: data/08_reporting/*/../a/report.json
    shutil.copy(root / "data/08_reporting/a/jevbench/report.json", root / "data/08_reporting/a/report.json")
    assert summary.main(["--root", str(root), "--view", view]) == 2
    err = capsys.readouterr().err
    assert f"--view {view}: no such view" in err and "views: " in err


def test_the_project_catalog_is_made_only_for_a_model_name(tmp_path):
    project_conf(tmp_path)
    for name in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(SettingsError, match="is not allowed"):
            project_catalog(tmp_path, name)
    assert project_catalog(tmp_path, ANY) is not None and project_catalog(tmp_path, "good-1.0") is not None


# -- class 11: output names never collide --------------------------------------------------------------

def test_two_pairs_whose_names_join_alike_write_two_comparisons(project):
    root, snapshot = project
    for name, p in (("x__vs__y", 0.8), ("z", 0.3), ("x", 0.6), ("y__vs__z", 0.4)):
        write_model(root, name, [p] * 6, snapshot)
    assert compare(root, "x__vs__y", "z") == 0
    assert compare(root, "x", "y__vs__z") == 0
    docs = ComparisonsDataset(str(root / "data/08_reporting/compare")).load()
    assert {(a, b) for a, b, _ in docs} == {("x__vs__y", "z"), ("x", "y__vs__z")}
    assert docs[("x__vs__y", "z", VIEW)]["metrics"]["accuracy"]["a"] == 1.0
    assert docs[("x", "y__vs__z", VIEW)]["metrics"]["accuracy"]["b"] == 0.0


def _names() -> list[str]:
    """Every run name made of up to three of these pieces: enough underscores to meet the separator."""
    pieces = ["x", "_", "__", "vs", "__vs__", "_vs_", "%5F", "v"]
    joined = {"".join(p) for k in (1, 2, 3) for p in itertools.product(pieces, repeat=k)}
    return sorted(n for n in joined if RUN_NAME.fullmatch(n))


def test_comparison_folders_are_one_per_pair():
    names = _names()
    assert len(names) > 150 and any("__vs__" in n for n in names) and any(n.endswith("_") for n in names)
    folders: dict[str, tuple[str, str]] = {}
    for a, b in itertools.product(names, repeat=2):
        folder = pair_folder(a, b)
        assert folders.setdefault(folder, (a, b)) == (a, b), f"{(a, b)} and {folders[folder]} share {folder}"
        assert pair_of_folder(folder) == (a, b)


@pytest.mark.parametrize("name", [*RESERVED_RUN_NAMES, "LEADERBOARD.CSV", "Leaderboard.md", "Compare"])
def test_a_model_name_the_project_uses_for_its_own_outputs_is_refused(name):
    with pytest.raises(SettingsError, match=rf"model.name: '{name}' is not allowed: the project's own outputs"):
        ModelSettings.parse({"adapter": "replay", "name": name})


def _location(catalog, name: str) -> Path | None:
    dataset = catalog.get(name)
    for attr in ("filepath", "folder", "root"):
        if getattr(dataset, attr, None) is not None:
            return Path(getattr(dataset, attr))
    return None


def test_the_reserved_names_are_every_output_beside_the_model_folders():
    """Each catalog entry that is not a model's own but lies in a folder holding the model folders is
    named there by a reserved name (so a new one in conf/base/catalog.yml needs one too)."""
    import yaml

    entries = [k.replace("{view}", VIEW) for k in yaml.safe_load((ROOT / "conf/base/catalog.yml").read_text())]
    one, other = project_catalog(ROOT, "m1"), project_catalog(ROOT, "m2")
    model_parents, shared = set(), {}
    for name in entries:
        here, there = _location(one, name), _location(other, name)
        if here is None:
            continue
        if here != there:  # a model's own output: the folder above the model's name holds every model's
            model_parents.add(Path(*here.parts[: here.parts.index("m1")]))
        else:
            shared[name] = here
    assert len(model_parents) == 2 and "leaderboard_csv" in shared and "comparisons" in shared
    beside = {name: path.relative_to(parent).parts[0] for name, path in shared.items()
              for parent in model_parents if path.is_relative_to(parent)}
    assert beside and all(first.lower() in RESERVED_RUN_NAMES for first in beside.values()), beside


# -- class 12: reports edited or copied by hand ---------------------------------------------------------

def _good_report(model: str) -> dict:
    return {"model": model, "view": "zh_decision_bench", "data": "official", "snapshot_sha256": "0" * 64,
            "metrics": {"overall": {"accuracy": 0.5, "accuracy_n": 4, "nll": 0.7, "ece": 0.1}},
            "coverage": {"by_status": {"ok": 4}, "questions": 4}, "latency": {"p50": 0.2}, "official": None,
            "run": {"complete": True}, "errors": {"requests": 0}, "gates": {"failed": []},
            "intervals": {"overall": {"accuracy": [0.4, 0.6]}}}


def _drop(*path):
    def edit(rep):
        for part in path[:-1]:
            rep = rep[part]
        del rep[path[-1]]
    return edit


def _set(value, *path):
    def edit(rep):
        for part in path[:-1]:
            rep = rep[part]
        rep[path[-1]] = value
    return edit


DAMAGED = {  # edit -> the field the message must name
    "overall-removed": (_drop("metrics", "overall"), "metrics.overall is missing"),
    "accuracy-a-string": (_set("0.5", "metrics", "overall", "accuracy"), "metrics.overall.accuracy is a string"),
    "accuracy-true": (_set(True, "metrics", "overall", "accuracy"), "metrics.overall.accuracy is true/false"),
    "ece-removed": (_drop("metrics", "overall", "ece"), "metrics.overall.ece is missing"),
    "coverage-null": (_set(None, "coverage"), "coverage is null, expected an object"),
    "questions-a-string": (_set("4", "coverage", "questions"), "coverage.questions is a string"),
    "by-status-a-list": (_set([4], "coverage", "by_status"), "coverage.by_status is a list"),
    "latency-a-string": (_set("fast", "latency"), "latency is a string"),
    "p50-a-string": (_set("0.2", "latency", "p50"), "latency.p50 is a string"),
    "interval-a-number": (_set(0.5, "intervals", "overall", "accuracy"), "intervals.overall.accuracy is a number"),
    "incomplete-without-count": (_set({"complete": False}, "run"), "run says complete: false without a count"),
    "errors-a-string": (_set("3", "errors", "requests"), "errors.requests is a string"),
    "gates-failed-a-string": (_set("yes", "gates", "failed"), "gates.failed is a string"),
    "official-value-a-string": (_set({"main_metric": {"name": "balanced_skill", "value": "24"}}, "official"),
                                "official.main_metric value is a string"),
    "model-a-number": (_set(7, "model"), "model is 7, expected a plain name"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_hand_edited_report_is_skipped_naming_the_file_and_the_field(tmp_path, kind, capsys):
    reporting = project_conf(tmp_path) / "data" / "08_reporting"
    good, bad = reporting / "m" / "zh_decision_bench" / "report.json", reporting / "odd" / "zh_decision_bench" / "report.json"
    for path, model in ((good, "m"), (bad, "odd")):
        path.parent.mkdir(parents=True)
        rep = _good_report(model)
        if path == bad:
            DAMAGED[kind][0](rep)
        path.write_text(json.dumps(rep))
    assert summary.main(["--root", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"skipped {bad}: field {DAMAGED[kind][1]}" in err, err
    assert "0.500" in out and "odd" not in out
    assert (reporting / "leaderboard.csv").read_text().splitlines()[1].startswith("m,")


@pytest.mark.parametrize("edit, message", [
    (_drop("snapshot_sha256"), "field snapshot_sha256 is missing"),
    (_set(12345, "snapshot_sha256"), "field snapshot_sha256 is a number, expected a sha256"),
    (_set(["x"], "probability_source"), "field probability_source is a list"),
    (_set(None, "model"), "field model is None, expected a plain name"),
])
def test_compare_refuses_a_hand_edited_report_naming_the_file_and_the_field(project, edit, message, capsys):
    root, _ = project
    path = root / "data/08_reporting/b/jevbench/report.json"
    rep = json.loads(path.read_text())
    edit(rep)
    path.write_text(json.dumps(rep))
    assert compare(root, "a", "b") == 2
    err = capsys.readouterr().err
    assert f"compare: {path}: {message}" in err, err


def test_compare_refuses_a_report_folder_copied_under_another_name(project, capsys):
    root, _ = project
    for layer in ("07_model_output", "08_reporting"):
        shutil.copytree(root / "data" / layer / "a", root / "data" / layer / "c")
    assert compare(root, "c", "b") == 2
    err = capsys.readouterr().err
    assert f"{root / 'data/08_reporting/c/jevbench/report.json'}: the report of model 'a' on view 'jevbench' is not in " \
           "its place (that of model 'c' on view 'jevbench')" in err
    assert not (root / "data/08_reporting/compare").exists()


# -- class 19 (compare part): a damaged predictions log is a message --------------------------------------

LOG_DAMAGE = {
    "not-json": (b"garbage{\n", "not valid JSON"),
    "not-utf8": (b"\xff\xfe\n", "not valid JSON (not UTF-8"),
    "a-list": (b"[1, 2]\n", "a JSON list, not an object"),
    "no-status": (b'{"request_id": "easy-3"}\n', "no status"),
}


@pytest.mark.parametrize("kind", sorted(LOG_DAMAGE))
def test_compare_on_a_damaged_log_names_the_file_and_line(project, kind, capsys):
    root, _ = project
    log = root / "data/07_model_output/b/jevbench/predictions.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]) + LOG_DAMAGE[kind][0] + b"".join(lines[3:]))
    assert compare(root, "a", "b") == 2
    err = capsys.readouterr().err
    assert f"predictions.jsonl:4: not a prediction record: {LOG_DAMAGE[kind][1]}" in err, err


def test_compare_on_a_damaged_log_prints_no_traceback_on_the_console(project):
    root, _ = project
    log = root / "data/07_model_output/a/jevbench/predictions.jsonl"
    log.write_bytes(log.read_bytes() + b"not a record\n" + b'{"request_id": "easy-0", "status": "ok"}\n')
    proc = subprocess.run([sys.executable, "-m", "jevkedro.compare", "--view", VIEW, "--no-plots", "a", "b"], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("compare: data/07_model_output/a/jevbench/predictions.jsonl:7:")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compare_reads_a_log_with_a_torn_last_line_and_never_writes_it(project):
    """Readers never write: a torn tail is left to the writer (who cuts it holding the folder's lock)."""
    root, _ = project
    log = root / "data/07_model_output/b/jevbench/predictions.jsonl"
    log.write_bytes(log.read_bytes() + b'{"request_id": "easy-0", "sta')
    folder_before = sorted(p.name for p in log.parent.iterdir())
    before, stat = log.read_bytes(), log.stat()
    assert compare(root, "a", "b") == 0
    assert log.read_bytes() == before and log.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in log.parent.iterdir()) == folder_before  # no lock, run.json or temp file made
