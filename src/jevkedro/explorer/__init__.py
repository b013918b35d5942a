"""The explorer: one self-contained HTML page per (model, view) and per comparison, to look at
every answer — filters, search, paging, the whole request and the raw response of any row, deep
links in the URL fragment (``#q=<request_id>``, ``#status=invalid&domain=travel``, ``#flip=a_only``).

Jinja2 (autoescaping) renders the static part and plain JavaScript of ours, inlined, the table: a
page of 50–500 rows drawn through DOM calls over compact columns needs no framework, and a vendored
one would add a licence and more bytes than the code it saves. No network, no fonts, no CDN: the
page opens from ``file://``, inside MLflow's artifact viewer and (its static part) in kedro viz.

- :func:`run_page` / :func:`explorer_node`: ``report.html`` beside ``report.json``;
- :func:`comparison_page`: ``compare/<A>__vs__<B>/<view>.html`` beside the comparison JSON;
- :class:`HTMLDataset` / :func:`write_page`: written atomically.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jevkedro.explorer.data import comparison_data, run_data
from jevkedro.explorer.dataset import HTMLDataset, write_page
from jevkedro.explorer.page import MAX_PAGE_BYTES, detail_budget, render_comparison, render_run
from jevkedro.nodes.plots import figure_png
from jevkedro.nodes.tracking import package_versions

__all__ = ["HTMLDataset", "comparison_page", "default_context", "explorer_node", "run_page", "write_page", "MAX_PAGE_BYTES"]


def _records(predictions: Any) -> Mapping[str, Any]:
    """Request id -> prediction record, from a mapping or a predictions log (its ``records``: the
    records decoded when the log was opened)."""
    return predictions.records if hasattr(predictions, "records") else predictions


def _pngs(plots: Mapping[str, Any] | None) -> dict[str, bytes]:
    return {name: p if isinstance(p, bytes | bytearray) else figure_png(p) for name, p in (plots or {}).items()}


def default_context() -> dict[str, Any]:
    """What made a page, when the caller does not say: the command line, now (UTC), and the
    versions of the packages that shape results (as MLflow records them)."""
    argv = list(sys.argv) or [""]
    script, package = Path(argv[0]).resolve(), Path(__file__).resolve().parents[1]
    if argv[0].endswith("kedro") or (script.name == "__main__.py" and script.parent.name == "kedro"):  # also "python -m kedro"
        argv[0] = "kedro"
    elif script.suffix == ".py" and package in script.parents:  # python -m jevkedro.<module>
        argv[:1] = ["python", "-m", ".".join(("jevkedro", *script.relative_to(package).with_suffix("").parts))]
    return {"command": shlex.join(argv), "run_date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "versions": package_versions()}


def run_page(report: Mapping[str, Any], questions: Iterable[Mapping[str, Any]], snapshot: Any, predictions: Any,
             context: Mapping[str, Any] | None = None, plots: Mapping[str, Any] | None = None,
             max_bytes: int = MAX_PAGE_BYTES) -> str:
    """The explorer page of one (model, view).

    ``report``: report.json; ``questions``: the rows of questions.jsonl (or the score node's
    records); ``snapshot``: the view's snapshot (or its rows); ``predictions``: request id ->
    record of predictions.jsonl (or the predictions log); ``context``: ``command``, ``run_date``,
    ``versions`` (:func:`default_context` when None); ``plots``: file name -> PNG bytes (or
    figures), embedded. Requests' full text is left out, most important kept, beyond ``max_bytes``.
    """
    pngs = _pngs(plots)
    data = run_data(questions, snapshot, _records(predictions), detail_budget(pngs, max_bytes))
    return render_run(report, data, pngs, default_context() if context is None else context)


def comparison_page(comparison: Mapping[str, Any], questions_a: Iterable[Mapping[str, Any]],
                    questions_b: Iterable[Mapping[str, Any]], snapshot: Any, predictions_a: Any, predictions_b: Any,
                    context: Mapping[str, Any] | None = None, plots: Mapping[str, Any] | None = None,
                    max_bytes: int = MAX_PAGE_BYTES) -> str:
    """The page of a paired comparison: ``comparison`` is the document ``python -m jevkedro.compare``
    writes (metrics, McNemar, by_<slice>); the questions and predictions of A and B as for
    :func:`run_page`; ``plots``: ``<view>.reliability.png``, ``<view>.slices.png`` as PNG bytes."""
    pngs = _pngs(plots)
    data = comparison_data(questions_a, questions_b, snapshot, _records(predictions_a), _records(predictions_b),
                           detail_budget(pngs, max_bytes))
    return render_comparison(comparison, data, pngs, default_context() if context is None else context)


def explorer_node(snapshot: Any, report: dict[str, Any], question_scores: Iterable[Mapping[str, Any]], predictions: Any,
                  plots: Mapping[str, Any] | None = None) -> str:
    """The pipeline's ``explore`` node: ``<view>.report_html`` from the view's snapshot, report,
    question scores, predictions log and plots."""
    return run_page(report, question_scores, snapshot, predictions, plots=plots)
