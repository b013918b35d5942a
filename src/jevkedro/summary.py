"""The leaderboard: ``python -m jevkedro.summary [--view VIEW ...] [--model MODEL ...]``.

Reads every model's ``{view}.report`` where the project's catalog puts it
(``data/08_reporting/<model>/<view>/report.json``) and prints a models × views table of each view's
headline — the family's official headline where it names one (Decision Index:
``balanced_skill``), else the generic accuracy — in blocks of view columns that fit 100
characters (a header breaks only between the words of a view's name), then one summary line per
report. Rows are the models, best first: by their mean rank over the views shown (1 = the best
headline of a view; a view without a number ranks last). A cell reads ``not run`` where the model
has no report on the view and ``n/a (unsupported)`` where it could answer none of its questions;
marks after a number: ``*`` part of the questions unsupported, ``!`` the run is not clean
(unattempted requests or request errors). A view run on data jevkedro wrote is headed
``[sample]`` (:func:`jevkedro.sample.is_sample`), and the summary says once what that means.

The whole table is written to the catalog's ``leaderboard_csv`` and ``leaderboard_md``
(``data/08_reporting/leaderboard.{csv,md}``); the CSV has one row per model and, per view, the number
alone (``<view>``), its marks (``<view>.flags``: ``*``, ``!``, ``unsupported``, ``not run``) and its
data kind (``<view>.data``). A table narrowed by ``--view``/``--model`` is printed only: the files
always hold the whole leaderboard.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kedro.io import DatasetError

from jevkedro import console
from jevkedro.config import SettingsError, check_run_name, closest
from jevkedro.datasets import catalog_dataset, project_catalog, read_reports
from jevkedro.errors import UserError
from jevkedro.nodes.report import LINE_WIDTH, main_metric, summary_line, unsupported_view
from jevkedro.registry import VIEWS
from jevkedro.sample import SAMPLE_NOTE, SAMPLE_TAG, is_sample
from jevkedro.sample import note as sample_note  # the note as the console shows it

UNSUPPORTED = "n/a (unsupported)"
NOT_RUN = "not run"
LEGEND = "`*` part of the questions unsupported; `!` not clean (unattempted requests or request errors)."
MIXED = "s"  # the mark of a sample result in a view where other models ran the official data
MIXED_LEGEND = f"`{MIXED}` on data jevkedro wrote, in a view where other models ran the official data."


class SummaryError(UserError):
    """A filter names a view or model that is not there; the message names it and the closest one."""


def headline(report: dict[str, Any]) -> tuple[str, float | None]:
    """``(name, value)`` of a view's headline: the official one where the family names one."""
    main = main_metric(report.get("official"))
    if main is not None:
        return f"official {main['name']}", main["value"]
    return "accuracy", report["metrics"]["overall"].get("accuracy")


@dataclass(frozen=True)
class Cell:
    """One model's headline on one view: the number (None: none to show), its marks and data kind."""

    value: float | None
    text: str  # as printed: the number with its marks, "n/a (unsupported)", "not run" or "—"
    flags: str  # "*", "!", "*!", "unsupported", "not run" or ""
    data: str  # the report's data kind ("" when not run)


def _flags(report: dict[str, Any]) -> str:
    cov = (report.get("coverage") or {}).get("by_status") or {}
    run = report.get("run") or {}
    errors = (report.get("errors") or {}).get("requests") or 0
    return ("*" if cov.get("unsupported") else "") + ("!" if run.get("complete") is False or errors else "")


def cell_of(report: dict[str, Any] | None) -> Cell:
    if report is None:
        return Cell(None, NOT_RUN, NOT_RUN, "")
    data = str(report.get("data") or "")
    if unsupported_view(report):
        return Cell(None, UNSUPPORTED, "unsupported", data)
    name, value = headline(report)
    flags = _flags(report)
    text = "—" if value is None else (f"{value:.3f}" if name == "accuracy" else f"{value:.2f}")
    return Cell(value, text + flags, flags, data)


def cell(report: dict[str, Any] | None) -> str:
    """The printed cell of a report (``not run`` for none)."""
    return cell_of(report).text


@dataclass(frozen=True)
class Leaderboard:
    """Models (best first) × views (sorted) of :class:`Cell`, each view's headline name and data mark."""

    models: list[str]
    views: list[str]
    cells: dict[tuple[str, str], Cell]
    names: dict[str, str]  # view -> its headline's name
    sample: dict[str, bool]  # view -> every report on it is on data jevkedro wrote
    mean_rank: dict[str, float]
    mixed: bool = False  # some view has both sample and official results (its sample cells marked MIXED)

    def cell(self, model: str, view: str) -> Cell:
        return self.cells.get((model, view), cell_of(None))

    def heading(self, view: str) -> str:
        return f"{view} {SAMPLE_TAG}" if self.sample[view] else view


def leaderboard(reports: list[dict[str, Any]]) -> Leaderboard:
    """The table of ``reports`` (one per model and view: read_reports' places are unique; a second is
    ignored), rows ordered by mean rank over the views, then by name."""
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for r in reports:
        by_key.setdefault((str(r["model"]), str(r["view"])), r)
    models = sorted({m for m, _ in by_key})
    views = sorted({v for _, v in by_key})
    cells = {key: cell_of(r) for key, r in by_key.items()}
    names: dict[str, str] = {}
    for (_, v), r in sorted(by_key.items()):
        if not unsupported_view(r):
            names.setdefault(v, headline(r)[0])
    sample = {v: all(is_sample(r) for (_, view), r in by_key.items() if view == v) for v in views}
    mixed = False
    for key, r in by_key.items():  # a view with both kinds: its sample cells are marked one by one
        if is_sample(r) and not sample[key[1]]:
            cells[key], mixed = replace(cells[key], text=cells[key].text + MIXED), True
    ranks: dict[str, list[int]] = {m: [] for m in models}
    for v in views:
        values = {m: c.value for (m, view), c in cells.items() if view == v and c.value is not None}
        for m in models:
            value = values.get(m)
            ranks[m].append(1 + sum(other > value for other in values.values()) if value is not None else len(values) + 1)
    mean_rank = {m: sum(r) / len(r) for m, r in ranks.items()}
    models.sort(key=lambda m: (mean_rank[m], m))
    return Leaderboard(models, views, cells, {v: names.get(v, "accuracy") for v in views}, sample, mean_rank, mixed)


def legend(board: Leaderboard) -> str:
    """What the marks mean (the mark of a mixed view's sample cells only where there is one)."""
    return LEGEND + (f" {MIXED_LEGEND}" if board.mixed else "")


def _header_lines(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only after a ``_`` or at a space."""
    words: list[str] = []
    for part in text.split(" "):
        pieces = part.split("_")
        words += [p + "_" for p in pieces[:-1]] + [pieces[-1]]
        words[-1] += " "
    words[-1] = words[-1].rstrip()
    lines = [""]
    for word in words:
        if lines[-1] and len(lines[-1] + word.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += word
    return [line.rstrip() for line in lines]


def _width(heading: str, texts: list[str], most: int = 18) -> int:
    """A column's width: its cells', its name's longest word, and the name itself up to ``most``."""
    words = [w for part in heading.split(" ") for w in part.replace("_", "_ ").split(" ")]
    return max([len(t) for t in texts] + [len(w) for w in words] + [min(len(heading), most)])


def format_blocks(board: Leaderboard, width: int = LINE_WIDTH) -> list[str]:
    """The table in blocks of view columns, each line at most ``width`` characters."""
    models, views = board.models, board.views
    model_w = min(max([len(m) for m in models] + [5]), 32)
    col_w = {v: _width(board.heading(v), [board.cell(m, v).text for m in models]) for v in views}
    blocks: list[list[str]] = []
    current: list[str] = []
    used = model_w
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
        heads = {v: _header_lines(board.heading(v), col_w[v]) for v in block}
        depth = max(len(h) for h in heads.values())
        for k in range(depth):  # the header bottom-aligned, as the numbers are right-aligned
            row = [heads[v][k - depth + len(heads[v])] if k >= depth - len(heads[v]) else "" for v in block]
            lines.append((f"{'model' if k == depth - 1 else '':<{model_w}}"
                          + "".join(f"  {h:>{col_w[v]}}" for h, v in zip(row, block))).rstrip())
        lines.append("-" * (model_w + sum(2 + col_w[v] for v in block)))
        for m in models:
            name = m if len(m) <= model_w else m[: model_w - 1] + "…"
            lines.append(f"{name:<{model_w}}" + "".join(f"  {board.cell(m, v).text:>{col_w[v]}}" for v in block))
        lines.append("")
    return lines


def to_csv(board: Leaderboard) -> str:
    """One row per model (best first): ``model``, ``mean_rank``, then per view its number (empty when
    there is none), ``<view>.flags`` and ``<view>.data``: number columns hold numbers only."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["model", "mean_rank"] + [f"{v}{suffix}" for v in board.views for suffix in ("", ".flags", ".data")])
    for m in board.models:
        row: list[Any] = [m, f"{board.mean_rank[m]:.2f}"]
        for v in board.views:
            c = board.cell(m, v)
            row += ["" if c.value is None else repr(float(c.value)), c.flags, c.data]
        writer.writerow(row)
    return out.getvalue()


def to_markdown(board: Leaderboard) -> str:
    views = board.views
    rows = ["| model | " + " | ".join(board.heading(v) for v in views) + " |", "|---|" + "---:|" * len(views),
            "| *headline* | " + " | ".join(board.names[v] for v in views) + " |"]
    rows += [f"| {m} | " + " | ".join(board.cell(m, v).text for v in views) + " |" for m in board.models]
    notes = [legend(board), "Rows: best first, by mean rank over the views."]
    if any(board.sample.values()):
        notes.append(f"`{SAMPLE_NOTE.split(':', 1)[0]}`:{SAMPLE_NOTE.split(':', 1)[1]}.")
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"


def check_filters(reports: list[dict[str, Any]], views: list[str] | None, models: list[str] | None) -> None:
    """Refuse a ``--view`` that is no view, or a ``--model`` with no readable report, naming the closest."""
    problems = []
    for view in views or []:
        if view not in VIEWS:
            hint = closest(view, VIEWS)
            problems.append(f"--view {view}: no such view" + (f"; did you mean {hint}?" if hint else "")
                            + f" (views: {', '.join(VIEWS)})")
    known = sorted({str(r["model"]) for r in reports})
    for model in models or []:
        if model not in known:
            hint = closest(model, known)
            problems.append(f"--model {model}: no readable report of that model" + (f"; did you mean {hint}?" if hint else "")
                            + (f" (models with reports: {', '.join(known)})" if known else ""))
    if problems:
        raise SummaryError("\n".join(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jevkedro.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="project root (default: the current folder)")
    parser.add_argument("--view", action="append", help="only this view (repeatable; the table is printed only)")
    parser.add_argument("--model", action="append", help="only this model (repeatable; the table is printed only)")
    parser.add_argument("--no-lines", action="store_true", help="the table alone (kedro run printed the lines and the sample note)")
    args = parser.parse_args(argv)
    console.filter_library_warnings()
    root = Path(args.root)
    try:
        for model in args.model or []:
            check_run_name(model, "--model")
        catalog = project_catalog(root)
        check_filters([], args.view, None)  # a view is checked before any path is made of it
        reports, broken = read_reports(root, args.view)
        check_filters(reports, None, args.model)
    except (SettingsError, DatasetError, SummaryError) as exc:
        print(f"summary: {'; '.join(exc.problems) if isinstance(exc, SettingsError) else exc}", file=sys.stderr)
        return 2
    if args.model:
        reports = [r for r in reports if r["model"] in args.model]
    for line in broken:
        print(line, file=sys.stderr)
    if not reports:
        if broken:
            print(f"no readable report in {root}: {len(broken)} skipped (named above)")
        else:
            print(f"no reports in {root}" + (" for that filter" if args.view or args.model else "; run `kedro run` first"))
        return 1
    board = leaderboard(reports)
    print("Headline per view (official headline where the family has one, else accuracy), best first:")
    for line in format_blocks(board):
        print(line)
    if any(c.flags not in ("", NOT_RUN) for c in board.cells.values()) or board.mixed:
        print(textwrap.fill(legend(board).replace("`", ""), LINE_WIDTH, subsequent_indent="  "))
    if not args.no_lines:
        print("Per report (accuracy with 95% interval, ECE, valid answers, p50 latency):")
        model_width = max(len(str(r["model"])) for r in reports)
        view_width = max(len(str(r["view"])) for r in reports)
        for report in sorted(reports, key=lambda r: (board.models.index(r["model"]), r["view"])):
            print(summary_line(report, model_width=model_width, view_width=view_width))
    if any(is_sample(r) for r in reports) and not args.no_lines:  # with --no-lines kedro run has said it
        print(sample_note(LINE_WIDTH))
    if args.view or args.model:
        written = [str(getattr(catalog_dataset(catalog, name), "filepath", name)) for name in ("leaderboard_csv", "leaderboard_md")]
        print(f"\na narrowed table is printed only; {', '.join(written)} keep the whole leaderboard "
              "(run without --view/--model to refresh them)")
    else:
        written = []
        for name, text in (("leaderboard_csv", to_csv(board)), ("leaderboard_md", to_markdown(board))):
            dataset = catalog_dataset(catalog, name)
            dataset.save(text)
            written.append(str(getattr(dataset, "filepath", name)))
        print(f"\nthe table as CSV and Markdown: {', '.join(written)}")
    print("MLflow: `make mlflow-ui` (one experiment per view, one run per model)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
