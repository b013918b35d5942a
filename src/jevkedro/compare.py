"""Paired comparison of two models on one or more views: ``python -m jevkedro.compare --view VIEW A B``.

Reads what ``kedro run`` wrote for both models (``{view}.predictions``, the view's snapshot, both
``{view}.report``, found where the project's catalog puts them), re-validates every answer with the
project's own rules and compares them question by question on the same snapshot:

- ``metrics.<m>`` for accuracy, NLL, Brier and ECE: ``a``, ``b``, ``diff`` (= A − B), ``ci_low``,
  ``ci_high`` — a 95% paired percentile bootstrap that resamples whole requests (or the family's
  groups, e.g. JevBench paraphrase groups; ``resampling`` records unit, count and seed). Accuracy
  pairs every hard-label question (an answer that is not valid is not correct, as in the report);
  NLL, Brier and ECE pair the questions valid for both;
- ``mcnemar``: ``a_only``/``b_only`` (questions only A / only B got right) and the exact two-sided
  ``p_value``; with several views also ``p_value_bh`` (Benjamini–Hochberg over the views compared);
- ``by_<slice>``: accuracy differences per slice value with paired intervals;
- ``flips``: the questions right for A and wrong for B (``a_only``) and the reverse (``b_only``),
  each with its slices and both answers, so a regression reads item by item;
- ``repeats`` (only when a model was run with ``model.repeats`` > 1, each with its own K): every
  metric, interval and slice difference is then on each question's mean over its repeats
  (:func:`jevkedro.nodes.repeats.averaged_terms`); McNemar and the flips, which need one right/wrong
  answer per question, use attempt 0 (``mcnemar.outcomes`` says so).

Writes ``<A>__vs__<B>/<VIEW>.json`` under the catalog's ``comparisons`` folder
(``data/08_reporting/compare``) with the reliability of both models on one chart
(``<VIEW>.reliability.png``), the per-slice differences (``<VIEW>.slices.png``) and every question
side by side in a browser (``<VIEW>.html``, :mod:`jevkedro.explorer`), and prints a table; with
``--markdown FILE`` also the comparison as a short Markdown summary (a table per view and the verdicts,
at most 60 lines) for a pull-request comment. A and B are model names under the rule of ``model.name``
(never a path). Exit status: 0, or 2 when an input is missing, damaged or the runs are not comparable
(the message names the file and what is wrong).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from kedro.io import DataCatalog, DatasetError

from jevkedro import console
from jevkedro.config import SettingsError, check_run_name
from jevkedro.datasets import catalog_dataset, project_catalog
from jevkedro.errors import UserError
from jevkedro.explorer import comparison_page, write_page
from jevkedro.nodes import compare as stats
from jevkedro.nodes import repeats as R
from jevkedro.nodes.analytic import HIGHER_IS_BETTER, format_interval
from jevkedro.nodes.plots import comparison_reliability_figure, figure_png, slice_differences_figure
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.report import resampling_units
from jevkedro.nodes.snapshot import Snapshot, atomic_write_bytes
from jevkedro.nodes.validate import build_question_table, question_records
from jevkedro.registry import VIEWS, family_of
from jevkedro.report_fields import COMPARE_FIELDS, report_problem

MAX_FLIPS = 500  # per direction, in the JSON (the counts are always complete)
MARKDOWN_LINES = 60  # the most lines of the --markdown summary
REPEATS_NOTE = ("every metric and interval on each question's mean over its model's repeats (accuracy: the hit "
                "rate; NLL, Brier: the mean loss over its valid repeats; ECE: every repeat's answer pooled, each "
                "question weighing one), a unit holding all its questions' repeats; McNemar and flips: attempt 0")
MCNEMAR_REPEATS_NOTE = ("attempt 0 of each model: McNemar needs one right/wrong answer per question; the accuracy "
                        "interval and its analytic p-value use the hit rates over the repeats")


class CompareError(UserError):
    """An input is missing or the two runs cannot be paired; the message says which file and why."""


def model_catalog(root: Path, model: str) -> DataCatalog:
    """The project's catalog for ``model`` (its outputs' places); a name that is not a plain
    ``model.name`` is refused (it would name a path)."""
    try:
        check_run_name(model, "model")
        return project_catalog(root, model)
    except (SettingsError, DatasetError) as exc:
        raise CompareError("; ".join(exc.problems) if isinstance(exc, SettingsError) else str(exc)) from None


def load_output(catalog: DataCatalog, name: str, missing: str) -> Any:
    dataset = catalog_dataset(catalog, name)
    if not dataset.exists():
        raise CompareError(f"{getattr(dataset, 'filepath', name)}: {missing}")
    try:
        return dataset.load()
    except DatasetError as exc:
        raise CompareError(str(exc)) from None


def _report(catalog: DataCatalog, model: str, view: str) -> dict[str, Any]:
    """``model``'s report on ``view``, refused naming the file and the field where a field compare reads
    is missing or wrong, or where it is another model's or view's report (a folder copied by hand)."""
    dataset = catalog_dataset(catalog, f"{view}.report")
    report = load_output(catalog, f"{view}.report", f"no report for model {model!r} on view {view!r}; run "
                                              f"`kedro run --pipelines={view} --params=model.name={model}` first")
    path = getattr(dataset, "filepath", f"{view}.report")
    wrong = report_problem(report, COMPARE_FIELDS)
    if wrong:
        raise CompareError(f"{path}: {wrong}; rerun `kedro run --pipelines={view} --params=model.name={model}`")
    if (report["model"], report["view"]) != (model, view):
        raise CompareError(f"{path}: the report of model {report['model']!r} on view {report['view']!r} is not in its "
                           f"place (that of model {model!r} on view {view!r}): a report folder copied under another name?")
    return report


def model_records(catalog: DataCatalog, model: str, view: str) -> dict[str, Any]:
    path = catalog_dataset(catalog, f"{view}.predictions").filepath
    if not path.is_file():
        raise CompareError(f"{path}: no predictions for model {model!r} on view {view!r}")
    log = PredictionLog(path)  # read as it is: not the dataset's load, which takes the writer's lock
    try:
        return log.records
    finally:
        log.close()


def repeats_of(report: dict[str, Any], path: Any) -> int:
    """How many times each request was asked in the run ``report`` scores (``model_settings.repeats``,
    1 when absent: a report written before repeats); refused naming the file when it is not a whole
    number from 1."""
    k = (report.get("model_settings") or {}).get("repeats", 1)
    if type(k) is not int or k < 1:
        raise CompareError(f"{path}: model_settings.repeats is {k!r}, not a whole number from 1; rerun the view")
    return k


def compare_view(root: Path, view: str, a: str, b: str, resamples: int = stats.RESAMPLES, seed: int = stats.SEED,
                 max_flips: int = MAX_FLIPS) -> tuple[dict[str, Any], dict[str, Any]]:
    """The comparison document of one view and the figures' inputs."""
    family_of(view)  # an unknown view is refused naming the known ones
    catalogs = {a: model_catalog(root, a), b: model_catalog(root, b)}
    reports = {m: _report(cat, m, view) for m, cat in catalogs.items()}
    report_a, report_b = reports[a], reports[b]
    snapshot: Snapshot = load_output(catalogs[a], f"{view}.snapshot", f"no snapshot of {view}; run `kedro run --pipelines={view}`")
    for name, rep in ((a, report_a), (b, report_b)):
        if rep["snapshot_sha256"] != snapshot.sha256:
            where = catalog_dataset(catalogs[name], f"{view}.report").filepath
            raise CompareError(f"{where} was scored on snapshot {rep['snapshot_sha256'][:16]}…, "
                               f"but {snapshot.path} is {snapshot.sha256[:16]}…: rerun both models on one snapshot")
    records_a, records_b = model_records(catalogs[a], a, view), model_records(catalogs[b], b, view)
    table_a = build_question_table(snapshot.rows, records_a)
    table_b = build_question_table(snapshot.rows, records_b)
    units_all, unit_name = resampling_units(snapshot, table_a)
    keep = ~np.asarray(table_a.unscored, dtype=bool)
    units = np.asarray(units_all, dtype=object)[keep]
    k_a, k_b = (repeats_of(rep, catalog_dataset(catalogs[m], f"{view}.report").filepath)
                for m, rep in ((a, report_a), (b, report_b)))
    tables_a = R.attempt_tables(snapshot.rows, table_a, records_a, k_a)
    tables_b = R.attempt_tables(snapshot.rows, table_b, records_b, k_b)
    ta0, tb0 = stats.terms_of(table_a), stats.terms_of(table_b)  # attempt 0: McNemar, flips
    ta = ta0 if k_a == 1 else R.averaged_terms(tables_a)  # each question's mean over its repeats
    tb = tb0 if k_b == 1 else R.averaged_terms(tables_b)
    hard = ta.hard
    doc: dict[str, Any] = {
        "view": view, "a": a, "b": b, "snapshot_sha256": snapshot.sha256, "data": snapshot.data,
        "model_id": {"a": report_a.get("model_id"), "b": report_b.get("model_id")},
        "probability_source": {"a": report_a.get("probability_source"), "b": report_b.get("probability_source")},
        "resampling": {"method": "paired percentile bootstrap", "level": stats.LEVEL, "unit": unit_name,
                       "units": int(len(set(units.tolist()))), "resamples": resamples, "seed": seed},
        **({"repeats": {"a": k_a, "b": k_b, "per_question": REPEATS_NOTE}} if max(k_a, k_b) > 1 else {}),
        "metrics": stats.paired_metrics(ta, tb, units, resamples, seed),
        "mcnemar": {**stats.mcnemar(ta0.correct[hard], tb0.correct[hard]),
                    **({"outcomes": MCNEMAR_REPEATS_NOTE} if max(k_a, k_b) > 1 else {})},
    }
    slices = {name: col[keep] for name, col in table_a.slices.items()}
    differences = {}
    for name, column in slices.items():
        if name == "question" and len(set(column.tolist())) > 50:
            continue
        groups = stats.paired_slice_differences(ta, tb, column, units, resamples, seed)
        if groups:
            differences[name] = groups
            doc[f"by_{name}"] = groups
    doc["flips"] = _flips(snapshot, table_a, table_b, keep, ta0, tb0, slices, max_flips)
    if (report_a.get("probability_source") or "native") != (report_b.get("probability_source") or "native"):
        doc["warning"] = "one model's probabilities are verbalized, the other's native: compare accuracy, not calibration"
    figures = {
        "models": [_reliability(a, tables_a, ta0, units), _reliability(b, tables_b, tb0, units)],
        "differences": differences,
        # the explorer page's inputs: every question of both models, and their records
        "page": (snapshot, question_records(table_a), question_records(table_b), records_a, records_b),
    }
    return doc, figures


def _reliability(name: str, tables: list[Any], first: stats.Terms, units: np.ndarray) -> tuple[Any, ...]:
    """A model's curve on the reliability chart: every repeat's answer pooled, as its report's."""
    t = first if len(tables) == 1 else stats.terms_of(R.pooled_table(tables))
    rows, u = t.ece_rows, np.tile(units, len(tables))
    return name, t.conf[rows], t.correct[rows], u[rows]


def _flips(snapshot, table_a, table_b, keep, ta, tb, slices, max_flips: int) -> dict[str, Any]:
    """Questions right for exactly one of the two models, with slices and both answers."""
    candidates = {row.request_id: row.candidates for row in snapshot.rows}
    index = np.flatnonzero(keep)

    def answer(table, t, i, j):
        if not t.valid[i]:
            return {"status": str(table.status[j]), "reason": table.reason[j]}
        cands = candidates[t.request_id[i]][t.question_id[i]]
        p = table.P[j, : len(cands)]
        return {"status": "ok", "choice": cands[int(t.pred[i])], "confidence": round(float(p[t.pred[i]]), 6)}

    out: dict[str, Any] = {}
    for name, mask in (("a_only", ta.correct & ~tb.correct & ta.hard), ("b_only", ~ta.correct & tb.correct & ta.hard)):
        rows = np.flatnonzero(mask)
        items = []
        for i in rows[:max_flips]:
            j = index[i]
            cands = candidates[ta.request_id[i]][ta.question_id[i]]
            items.append({"request_id": ta.request_id[i], "question": ta.question_id[i],
                          "label": cands[int(table_a.label[j])],
                          "slices": {k: str(v[i]) for k, v in slices.items() if str(v[i]) != "" and k != "question"},
                          "a": answer(table_a, ta, i, j), "b": answer(table_b, tb, i, j)})
        out[name] = {"count": int(len(rows)), "items": items, **({"truncated_to": max_flips} if len(rows) > max_flips else {})}
    return out


def compare(root: Path, views: list[str], a: str, b: str, resamples: int = stats.RESAMPLES, seed: int = stats.SEED,
            plots: bool = True) -> list[dict[str, Any]]:
    """Compare A and B on each view; write the JSON (and plots) of each; BH-adjust McNemar over the views."""
    if a == b:
        raise CompareError(f"both models are {a!r}: name two different models")
    docs, figs = [], []
    for view in views:
        doc, fig = compare_view(root, view, a, b, resamples, seed)
        docs.append(doc)
        figs.append(fig)
    adjusted = stats.benjamini_hochberg([d["mcnemar"]["p_value"] for d in docs])
    comparisons = catalog_dataset(model_catalog(root, a), "comparisons")
    for doc, fig, q in zip(docs, figs, adjusted):
        doc["mcnemar"]["p_value_bh"] = q
        doc["mcnemar"]["bh_views"] = views
        figures: dict[str, bytes] = {}
        if plots:
            title = f"{a} vs {b} on {doc['view']}"
            figures = {"reliability.png": figure_png(comparison_reliability_figure(fig["models"], f"Reliability — {title}")),
                       "slices.png": figure_png(slice_differences_figure(fig["differences"], a, b, f"Accuracy by slice — {title}"))}
        comparisons.save({(a, b, doc["view"]): (doc, figures)})
        path = comparisons.path(a, b, doc["view"]).resolve()
        snapshot, questions_a, questions_b, records_a, records_b = fig["page"]  # <A>__vs__<B>/<view>.html beside the JSON
        write_page(path.with_name(f"{doc['view']}.html"),
                   comparison_page(doc, questions_a, questions_b, snapshot, records_a, records_b,
                                   plots={f"{doc['view']}.{name}": png for name, png in figures.items()}))
        doc["path"] = str(path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else path)
    return docs


def _signed(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


def _plain(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def verdict_line(doc: dict[str, Any]) -> str:
    """Which model is better on each metric by its 95% paired interval (↑/↓: the better direction)."""
    parts = []
    for name in stats.HEADLINE:
        who = doc["metrics"][name].get("verdict", "none")
        parts.append(f"{name} {who} better" if who in ("A", "B") else f"{name} no significant difference")
    return "verdict: " + ", ".join(parts)


def format_table(docs: list[dict[str, Any]]) -> list[str]:
    """The printed comparison: one block per view (fits 100 columns), then one line per view."""
    lines: list[str] = []
    for doc in docs:
        r = doc["resampling"]
        unit = r["unit"].split(" (")[0]
        lines.append(f"{doc['view']}: A = {doc['a']}, B = {doc['b']}")
        lines.append(f"  {r['resamples']} paired resamples of {r['units']} units ({unit}), seed {r['seed']}")
        if doc.get("repeats"):
            k = doc["repeats"]
            lines.append(f"  repeats: A {k['a']}, B {k['b']}: each question's mean over its repeats; McNemar and "
                         "flips on attempt 0")
        lines.append(f"  {'metric':<11}{'A':>9}{'B':>9}{'A − B':>9}   {'95% CI':<21}{'n':>7}")
        for name in stats.HEADLINE:
            m = doc["metrics"][name]
            arrow = "↑" if HIGHER_IS_BETTER[name] else "↓"
            ci = format_interval(m["ci_low"], m["ci_high"])
            lines.append(f"  {name + ' ' + arrow:<11}{_plain(m['a']):>9}{_plain(m['b']):>9}{_signed(m['diff']):>9}   {ci:<21}{m['n']:>7}")
        lines += textwrap.wrap(verdict_line(doc), 98, initial_indent="  ", subsequent_indent="    ")
        mc = doc["mcnemar"]
        bh = f" (BH-adjusted over {len(docs)} views: {mc['p_value_bh']:.3g})" if len(docs) > 1 else ""
        lines.append(f"  McNemar: right only for A {mc['a_only']}, only for B {mc['b_only']}, exact p = {mc['p_value']:.3g}{bh}")
        if doc.get("warning"):
            lines.append(f"  note: {doc['warning']}")
        lines.append("  written, with the flips (right for one model only) item by item:")
        lines.append(f"  {doc['path']}")
        lines.append("  every question side by side, in a browser:")
        lines.append(f"  {doc['path'].removesuffix('.json')}.html")
    if len(docs) > 1:
        lines.append("")
        lines.append(f"{'view':<28}{'acc A − B':>10}  {'95% CI':<19}{'p':>8}{'p (BH)':>9}")
        for doc in docs:
            m, mc = doc["metrics"]["accuracy"], doc["mcnemar"]
            ci = f"[{_signed(m['ci_low'])}, {_signed(m['ci_high'])}]"
            lines.append(f"{doc['view'][:27]:<28}{_signed(m['diff']):>10}  {ci:<19}{mc['p_value']:>8.3g}{mc['p_value_bh']:>9.3g}")
    return lines


def _better(doc: dict[str, Any], name: str) -> str:
    who = doc["metrics"][name].get("verdict", "none")
    return {"A": "A", "B": "B"}.get(who, "—")


def _markdown_rows(doc: dict[str, Any], first: list[str] | None = None) -> list[str]:
    """One table row per headline metric of ``doc``; ``first``: leading cells of the first row only."""
    rows = []
    for k, name in enumerate(stats.HEADLINE):
        m = doc["metrics"][name]
        lead = (first if k == 0 else [""] * len(first)) if first is not None else []
        cells = [*lead, f"{name} {'↑' if HIGHER_IS_BETTER[name] else '↓'}", _plain(m["a"]), _plain(m["b"]),
                 _signed(m["diff"]), format_interval(m["ci_low"], m["ci_high"]), _better(doc, name)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def markdown_summary(docs: list[dict[str, Any]], max_lines: int = MARKDOWN_LINES) -> str:
    """The comparison as Markdown for a pull-request comment, at most ``max_lines`` lines: a table per
    view (A, B, A − B, the 95% paired interval and the better model per metric), its verdict and McNemar;
    where that would not fit (many views), one table with four rows per view."""
    a, b = docs[0]["a"], docs[0]["b"]
    head = [f"### Paired comparison: A = `{a}`, B = `{b}`", "",
            "95% paired bootstrap intervals of A − B; ↑/↓: the better direction; *better*: the model the "
            "interval shows better (— none)."]
    bh = len(docs) > 1
    per_view: list[str] = []
    for doc in docs:
        r, mc = doc["resampling"], doc["mcnemar"]
        k = doc.get("repeats")
        reps = f"; repeats A {k['a']}, B {k['b']} (each question's mean; McNemar: attempt 0)" if k else ""
        per_view += ["", f"**{doc['view']}** — {r['units']} {r['unit'].split(' (')[0]}s resampled {r['resamples']} times{reps}", "",
                     "| metric | A | B | A − B | 95% CI | better |", "|---|---:|---:|---:|---|---|", *_markdown_rows(doc), "",
                     verdict_line(doc).replace("verdict:", "*Verdict:*", 1)
                     + f"; McNemar p = {mc['p_value']:.3g}" + (f" (BH {mc['p_value_bh']:.3g})" if bh else "")]
    lines = head + per_view
    if len(lines) > max_lines:
        lines = head + ["", "| view | metric | A | B | A − B | 95% CI | better |", "|---|---|---:|---:|---:|---|---|"]
        for doc in docs:
            lines += _markdown_rows(doc, first=[f"**{doc['view']}**"])
        lines += ["", "McNemar p (BH over the views): " + ", ".join(
            f"{d['view']} {d['mcnemar']['p_value_bh' if bh else 'p_value']:.3g}" for d in docs)]
    return "\n".join(lines[:max_lines]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jevkedro.compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="model A (its model.name)")
    parser.add_argument("b", help="model B")
    parser.add_argument("--view", action="append", required=True, choices=VIEWS, metavar="VIEW",
                        help="a view to compare on (repeat for several; p-values are then BH-adjusted)")
    parser.add_argument("--root", default=".", help="project root (default: the current folder)")
    parser.add_argument("--resamples", type=int, default=stats.RESAMPLES)
    parser.add_argument("--seed", type=int, default=stats.SEED)
    parser.add_argument("--no-plots", action="store_true", help="write the JSON only")
    parser.add_argument("--markdown", metavar="FILE", help="also write the comparison as a short Markdown summary "
                        f"(at most {MARKDOWN_LINES} lines) to FILE, e.g. for a pull-request comment")
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    console.filter_library_warnings()
    try:
        docs = compare(Path(args.root), list(dict.fromkeys(args.view)), args.a, args.b, args.resamples, args.seed,
                       plots=not args.no_plots)
    except UserError as exc:  # a file that is missing or damaged, runs that cannot be paired: the message says which
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    print("\n".join(format_table(docs)))
    if args.markdown:
        try:
            atomic_write_bytes(Path(args.markdown), markdown_summary(docs).encode("utf-8"))
        except OSError as exc:
            print(f"compare: {args.markdown}: cannot be written ({exc.strerror or exc})", file=sys.stderr)
            return 2
        print(f"the comparison as Markdown: {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
