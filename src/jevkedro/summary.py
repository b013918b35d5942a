"""The leaderboard: ``python -m jevkedro.summary [--view VIEW ...] [--model MODEL ...]``.

Reads every model's ``{view}.report`` where the project's catalog puts it
(``data/08_reporting/<model>/<view>/report.json``) and prints a models × views table of each view's
headline — the family's official headline where it names one (Decision Index:
``balanced_skill``), else the generic accuracy — in blocks of view columns that fit 100
characters, then one summary line per report. A view a model cannot answer at all reads
``n/a (unsupported)``; marks after a number: ``*`` part of the questions unsupported, ``!`` the
run is not clean (unattempted requests or request errors). The same table is written to the
catalog's ``leaderboard_csv`` and ``leaderboard_md`` (``data/08_reporting/leaderboard.{csv,md}``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import DatasetError

from jevkedro import console
from jevkedro.config import SettingsError, check_run_name
from jevkedro.datasets import catalog_dataset, project_catalog, read_reports
from jevkedro.nodes.report import LINE_WIDTH, main_metric, summary_line, unsupported_view

UNSUPPORTED = "n/a (unsupported)"


def headline(report: dict[str, Any]) -> tuple[str, float | None]:
    """``(name, value)`` of a view's headline: the official one where the family names one."""
    main = main_metric(report.get("official"))
    if main is not None:
        return f"official {main['name']}", main["value"]
    return "accuracy", report["metrics"]["overall"].get("accuracy")


def cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return ""
    if unsupported_view(report):
        return UNSUPPORTED
    name, value = headline(report)
    text = "—" if value is None else (f"{value:.3f}" if name == "accuracy" else f"{value:.2f}")
    cov = (report.get("coverage") or {}).get("by_status") or {}
    run = report.get("run") or {}
    errors = (report.get("errors") or {}).get("requests") or 0
    marks = ("*" if cov.get("unsupported") else "") + ("!" if run.get("complete") is False or errors else "")
    return text + marks


def leaderboard(reports: list[dict[str, Any]]) -> tuple[pd.DataFrame, dict[str, str]]:
    """The models × views table of headline cells (sorted both ways; "" where a model has no report
    for a view) and each view's headline name."""
    long = pd.DataFrame({"model": [r["model"] for r in reports], "view": [r["view"] for r in reports],
                         "cell": [cell(r) for r in reports]})
    table = long.pivot(index="model", columns="view", values="cell").sort_index().sort_index(axis=1).fillna("")
    names = {}
    for r in reports:
        if not unsupported_view(r):
            names.setdefault(r["view"], headline(r)[0])
    return table, {v: names.get(v, "accuracy") for v in table.columns}


def format_blocks(table: pd.DataFrame, width: int = LINE_WIDTH) -> list[str]:
    """The table in blocks of view columns, each line at most ``width`` characters."""
    models, views = list(table.index), list(table.columns)
    cells = {(m, v): table.at[m, v] for m in models for v in views}
    model_w = min(max([len(m) for m in models] + [5]), 32)
    col_w = {v: max(len(v), max((len(cells.get((m, v), "")) for m in models), default=0)) for v in views}
    for v in views:  # a long view name wraps onto two header lines rather than widening its column
        col_w[v] = max(min(col_w[v], 18), max((len(cells.get((m, v), "")) for m in models), default=0))
    blocks, current, used = [], [], model_w
    for v in views:
        if current and used + 2 + col_w[v] > width:
            blocks.append(current)
            current, used = [], model_w
        current.append(v)
        used += 2 + col_w[v]
    if current:
        blocks.append(current)
    lines: list[str] = []
    for block in blocks:
        heads = [(v[: col_w[v]], v[col_w[v]: 2 * col_w[v]]) for v in block]
        lines.append(f"{'model':<{model_w}}" + "".join(f"  {h[0]:>{col_w[v]}}" for h, v in zip(heads, block)))
        if any(h[1] for h in heads):
            lines.append(" " * model_w + "".join(f"  {h[1]:>{col_w[v]}}" for h, v in zip(heads, block)))
        lines.append("-" * (model_w + sum(2 + col_w[v] for v in block)))
        for m in models:
            lines.append(f"{m[:model_w]:<{model_w}}" + "".join(f"  {cells.get((m, v), ''):>{col_w[v]}}" for v in block))
        lines.append("")
    return lines


def to_csv(table: pd.DataFrame) -> str:
    return table.rename_axis(index="model", columns=None).to_csv(lineterminator="\n")


def to_markdown(table: pd.DataFrame, names: dict[str, str]) -> str:
    views = list(table.columns)
    rows = ["| model | " + " | ".join(views) + " |", "|---|" + "---:|" * len(views),
            "| *headline* | " + " | ".join(names[v] for v in views) + " |"]
    rows += [f"| {m} | " + " | ".join(table.loc[m]) + " |" for m in table.index]
    return "\n".join(rows) + "\n\n`*` part of the questions unsupported; `!` not clean (unattempted requests or request errors).\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jevkedro.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="project root (default: the current folder)")
    parser.add_argument("--view", action="append", help="only this view (repeatable)")
    parser.add_argument("--model", action="append", help="only this model (repeatable)")
    parser.add_argument("--no-lines", action="store_true", help="the table only, without one line per report")
    args = parser.parse_args(argv)
    console.filter_library_warnings()
    root = Path(args.root)
    try:
        for model in args.model or []:
            check_run_name(model, "--model")
        reports, broken = read_reports(root, args.view, args.model)
        catalog = project_catalog(root)
    except (SettingsError, DatasetError) as exc:
        print(f"summary: {'; '.join(exc.problems) if isinstance(exc, SettingsError) else exc}", file=sys.stderr)
        return 2
    for line in broken:
        print(line, file=sys.stderr)
    if not reports:
        if broken:
            print(f"no readable report in {root}: {len(broken)} skipped (named above)")
        else:
            print(f"no reports in {root}" + (" for that filter" if args.view or args.model else "; run `kedro run` first"))
        return 1
    table, names = leaderboard(reports)
    print("Headline per view (official headline where the family has one, else accuracy):")
    for line in format_blocks(table):
        print(line)
    if not args.no_lines:
        print("Per report (accuracy with 95% interval, ECE, valid answers, p50 latency):")
        model_width = max(len(str(r["model"])) for r in reports)
        view_width = max(len(str(r["view"])) for r in reports)
        for report in reports:
            print(summary_line(report, model_width=model_width, view_width=view_width))
    written = []
    for name, text in (("leaderboard_csv", to_csv(table)), ("leaderboard_md", to_markdown(table, names))):
        dataset = catalog_dataset(catalog, name)
        dataset.save(text)
        written.append(str(getattr(dataset, "filepath", name)))
    print(f"\nthe table as CSV and Markdown: {', '.join(written)}")
    print("MLflow: `make mlflow-ui` (one experiment per view, one run per model)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
