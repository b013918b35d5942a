"""The leaderboard (``python -m jevkedro.summary``) as a new user reads it (issue 20, items 3 and 5):
headers broken only between words, rows best first, views not run said so, numbers alone in the CSV's
number columns, sample results marked with their meaning said once, a filtered table that leaves the
files alone, a misspelt filter named with the closest value, and ``make run`` printing each line once."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jevkedro import summary
from jevkedro.nodes.report import summary_line
from jevkedro.registry import VIEWS
from jevkedro.sample import SAMPLE_NOTE, SAMPLE_TAG, is_sample
from support import project_conf

ROOT = Path(__file__).resolve().parents[1]


def rep(model: str, view: str, accuracy: float | None, data: str = "official", **extra) -> dict:
    return {"model": model, "view": view, "data": data,
            "metrics": {"overall": {"accuracy": accuracy, "accuracy_n": 4, "nll": 0.7, "ece": 0.1}},
            "coverage": {"by_status": {"ok": 4}, "questions": 4}, "latency": {"p50": None}, "official": None, **extra}


def write(root: Path, *reports: dict) -> Path:
    reporting = root / "data" / "08_reporting"
    for r in reports:
        path = reporting / r["model"] / r["view"] / "report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r))
    return reporting


@pytest.fixture
def root(tmp_path):
    project_conf(tmp_path)
    return tmp_path


def run(root: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = summary.main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_is_sample_is_true_unless_the_report_says_official():
    assert [is_sample({"data": d}) for d in ("official", "sample", "synthetic")] == [False, True, True]
    assert is_sample({}) and is_sample({"data": None})  # a report that does not say is never a benchmark's


def test_headers_break_only_between_words_and_every_line_fits(root, capsys):
    reports = [rep(m, v, 0.5 + i / 100, data="sample" if i % 2 else "official")
               for i, v in enumerate(VIEWS) for m in ("model-one", "model-two")]
    write(root, *reports)
    code, out, _ = run(root, "--no-lines", capsys=capsys)
    assert code == 0 and all(len(line) <= 100 for line in out.splitlines() if str(root) not in line)
    lines = summary.format_blocks(summary.leaderboard(reports))
    assert "\n".join(lines) in out
    heads, block = [], []
    for line in lines:  # a block: its header lines, a rule of dashes, its rows, an empty line
        if line.startswith("---"):
            heads += block
        block = [] if not line or line.startswith("---") else [*block, line]
    tokens = [t for line in heads for t in line.split() if t not in ("model", SAMPLE_TAG)]
    for t in tokens:  # each piece is whole words of a view's name: from a word's start to after "_" or the end
        assert any(re.search(rf"(^|_){re.escape(t)}{'' if t.endswith('_') else '$'}", v) for v in VIEWS), t
    assert tokens and "visual_decision_be" not in out


def test_rows_are_best_first_in_the_console_csv_and_markdown(root, capsys):
    reporting = write(root, rep("alpha", "zh_decision_bench", 0.2), rep("beta", "zh_decision_bench", 0.9),
                      rep("gamma", "zh_decision_bench", 0.5))
    code, out, _ = run(root, "--no-lines", capsys=capsys)
    rows = [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0] in ("alpha", "beta", "gamma")]
    assert code == 0 and rows == ["beta", "gamma", "alpha"]
    assert [r["model"] for r in csv.DictReader(io.StringIO((reporting / "leaderboard.csv").read_text()))] == rows
    md = [line.split("|")[1].strip() for line in (reporting / "leaderboard.md").read_text().splitlines()[3:6]]
    assert md == rows


def test_rows_over_several_views_follow_the_mean_rank(root, capsys):
    reporting = write(root, rep("a", "jevbench", 0.9), rep("a", "decisionbench", 0.1), rep("a", "jevalt_bench", 0.1),
                      rep("b", "jevbench", 0.5), rep("b", "decisionbench", 0.5), rep("b", "jevalt_bench", 0.5))
    assert run(root, capsys=capsys)[0] == 0
    table = list(csv.DictReader(io.StringIO((reporting / "leaderboard.csv").read_text())))
    assert [(r["model"], r["mean_rank"]) for r in table] == [("b", "1.33"), ("a", "1.67")]


def test_a_view_not_run_says_so_and_the_csv_keeps_numbers_alone(root, capsys):
    unsupported = rep("u", "jevbench", 0.0, coverage={"by_status": {"unsupported": 4, "ok": 0}, "questions": 4})
    part = rep("p", "jevbench", 0.625, coverage={"by_status": {"unsupported": 1, "ok": 3}, "questions": 4})
    unclean = rep("p", "decisionbench", 0.5, run={"complete": False, "unattempted_requests": 2})
    reporting = write(root, unsupported, part, unclean, rep("u", "decisionbench", 0.25))
    code, out, _ = run(root, "--no-lines", capsys=capsys)
    assert code == 0
    row_u = next(line for line in out.splitlines() if line.startswith("u "))
    assert "n/a (unsupported)" in row_u and "0.250" in row_u
    row_p = next(line for line in out.splitlines() if line.startswith("p "))
    assert "0.625*" in row_p and "0.500!" in row_p
    write(root, rep("late", "jevbench", 0.1))
    code, out, _ = run(root, "--no-lines", capsys=capsys)
    assert "not run" in next(line for line in out.splitlines() if line.startswith("late "))
    table = list(csv.DictReader(io.StringIO((reporting / "leaderboard.csv").read_text())))
    for row in table:
        for column, value in row.items():
            if column in ("model",) or column.endswith((".flags", ".data")):
                continue
            assert value == "" or float(value) == float(value), (column, value)  # a number or nothing
    by_model = {r["model"]: r for r in table}
    assert (by_model["p"]["jevbench"], by_model["p"]["jevbench.flags"]) == ("0.625", "*")
    assert (by_model["p"]["decisionbench"], by_model["p"]["decisionbench.flags"]) == ("0.5", "!")
    assert (by_model["u"]["jevbench"], by_model["u"]["jevbench.flags"]) == ("", "unsupported")
    assert (by_model["late"]["decisionbench"], by_model["late"]["decisionbench.flags"]) == ("", "not run")


def test_sample_results_are_marked_everywhere_and_explained_once(root, capsys):
    reporting = write(root, rep("m", "zh_decision_bench", 0.5), rep("m", "decision_index", 0.4, data="sample"),
                      rep("m", "jevbench", 0.3, data="synthetic"))
    code, out, _ = run(root, capsys=capsys)
    assert code == 0 and out.count(SAMPLE_NOTE.split(":")[0] + ":") == 1
    assert "[sample]: data jevkedro ships or generates" in out and "not the benchmark's release" in out
    header = out.splitlines()[1:4]
    assert sum(line.count(SAMPLE_TAG) for line in header) == 2  # decision_index and jevbench, not zh_decision_bench
    table = list(csv.DictReader(io.StringIO((reporting / "leaderboard.csv").read_text())))
    assert [table[0][f"{v}.data"] for v in ("decision_index", "jevbench", "zh_decision_bench")] == ["sample", "synthetic", "official"]
    md = (reporting / "leaderboard.md").read_text()
    assert md.splitlines()[0] == "| model | decision_index [sample] | jevbench [sample] | zh_decision_bench |"
    assert md.count("data jevkedro ships or generates") == 1


def test_a_view_with_both_kinds_marks_its_sample_cells(root, capsys):
    write(root, rep("off", "jevbench", 0.5), rep("own", "jevbench", 0.4, data="sample"))
    code, out, _ = run(root, "--no-lines", capsys=capsys)
    assert code == 0 and "0.400s" in out and "0.500s" not in out and " s on data" in out


def test_a_filtered_table_is_printed_and_the_files_keep_the_whole_leaderboard(root, capsys):
    reporting = write(root, rep("a", "jevbench", 0.9), rep("b", "decisionbench", 0.5))
    assert run(root, capsys=capsys)[0] == 0
    files = {p: p.read_bytes() for p in (reporting / "leaderboard.csv", reporting / "leaderboard.md")}
    for args in (["--view", "jevbench"], ["--model", "b"], ["--view", "decisionbench", "--model", "b"]):
        code, out, _ = run(root, *args, capsys=capsys)
        assert code == 0 and "printed only" in out
        assert {p: p.read_bytes() for p in files} == files


@pytest.mark.parametrize("args, message", [
    (["--view", "jevbnch"], "--view jevbnch: no such view; did you mean jevbench?"),
    (["--view", "zh_decision"], "--view zh_decision: no such view; did you mean zh_decision_bench?"),
    (["--model", "gpt-4o-mni"], "--model gpt-4o-mni: no readable report of that model; did you mean gpt-4o-mini?"),
    (["--model", "zzz"], "--model zzz: no readable report of that model (models with reports: gpt-4o-mini, other)"),
])
def test_a_misspelt_filter_names_the_closest_value(root, args, message, capsys):
    write(root, rep("gpt-4o-mini", "jevbench", 0.5), rep("other", "jevbench", 0.4))
    code, _, err = run(root, *args, capsys=capsys)
    assert code == 2 and message in err, err


def test_make_run_prints_each_per_view_line_once(root):
    """``kedro run`` prints a line per view (its hook, ``summary_line``) and the sample note; the
    Makefile's summary after it prints the table, not those lines or the note again."""
    reports = [rep("m", "zh_decision_bench", 0.5), rep("m", "jevbench", 0.25, data="sample")]
    write(root, *reports)
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe
    commands = [shlex.split(line.strip()) for line in recipe.group(1).splitlines() if "jevkedro.summary" in line]
    assert len(commands) == 1
    argv = [sys.executable, *commands[0][commands[0].index("-m"):], "--root", str(root)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    hook_lines = [summary_line(r, model_width=1, view_width=len("zh_decision_bench")) for r in reports]
    assert all("acc " in line for line in hook_lines)
    assert not [line for line in out.splitlines() if "acc " in line], out  # no per-view line a second time
    assert "0.500" in out and SAMPLE_TAG in out and SAMPLE_NOTE.split(":")[0] + ":" not in out  # kedro run said it, once
