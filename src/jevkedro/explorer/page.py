"""Rendering of the explorer pages: a Jinja2 template (autoescaped) for what is static — header,
headline metrics, coverage, latency, plots, slice tables — and the packaged script and style
inlined, with the page's data as one escaped JSON document the script reads.

The page carries a Content-Security-Policy that allows no network access at all and runs only the
script it was rendered with (by its sha256): even a string that slipped into the markup could
neither run nor fetch anything.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2

from jevkedro.explorer.data import PageData, dumps, script_json
from jevkedro.nodes.analytic import HIGHER_IS_BETTER, verdict

MAX_PAGE_BYTES = 60_000_000
HEADROOM = 2_000_000  # below MAX_PAGE_BYTES: markup, script, style, slice tables
PAGE_SIZES = (50, 100, 200, 500)
HEADLINE = ("accuracy", "nll", "brier", "ece")
EXTRA = ("rps", "ordinal_mae")
RUN_PLOTS = ("reliability.png", "slices.png", "latency.png", "risk_coverage.png")
BANNERS = {
    "sample": "Sample data: small data written by jevkedro to exercise the pipeline, not benchmark data. "
              "Its numbers say nothing about a model.",
    "synthetic": "Synthetic data: invented rows at benchmark scale, not benchmark data. Its numbers say nothing about a model.",
}


def _static(name: str) -> str:
    return resources.files("jevkedro.explorer").joinpath("static", name).read_text(encoding="utf-8")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("jevkedro.explorer", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    env.filters["signed"] = _signed
    return env


def _num(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return "—" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.{digits}f}" if math.isfinite(x) else str(x)


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, int | float) else f"{100 * x:.1f}%"


def _signed(x: Any, digits: int = 3) -> str:
    """A signed number, with more digits where rounding would show a non-zero value as zero."""
    if not isinstance(x, int | float) or not math.isfinite(x):
        return "—"
    d = digits
    while x != 0 and round(x, d) == 0 and d < 12:
        d += 1
    return f"{x:+.{d}f}"


def png_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _plots(plots: Mapping[str, bytes] | None, order: tuple[str, ...]) -> list[dict[str, str]]:
    plots = plots or {}
    names = [n for n in order if n in plots] + sorted(n for n in plots if n not in order)
    return [{"name": n, "uri": png_uri(plots[n])} for n in names if isinstance(plots[n], bytes | bytearray)]


def _headline(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    overall = (report.get("metrics") or {}).get("overall") or {}
    ci = ((report.get("intervals") or {}).get("overall")) or {}
    out = []
    for name in HEADLINE + EXTRA:
        if name not in overall:
            continue
        n_key = {"accuracy": "accuracy_n", "ece": "ece_n", "rps": "ordinal_n", "ordinal_mae": "ordinal_n"}.get(name, "probability_n")
        low, high = (ci.get(name) or [None, None])[:2]
        out.append({"name": name, "value": overall.get(name), "low": low, "high": high, "n": overall.get(n_key)})
    return out


def _slice_tables(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One table per ``metrics.by_<slice>`` (``by_type`` first), with accuracy's interval and the
    mean confidence from ``intervals.by_<slice>`` where the report has them."""
    metrics = report.get("metrics") or {}
    intervals = report.get("intervals") or {}
    names = sorted(k for k in metrics if k.startswith("by_") and isinstance(metrics[k], Mapping))
    names.sort(key=lambda k: k != "by_type")
    tables = []
    for key in names:
        rows = []
        for value, m in metrics[key].items():
            iv = (intervals.get(key) or {}).get(value) or {}
            low, high = (iv.get("accuracy_ci") or [None, None])[:2]
            rows.append({"value": value, "n": m.get("n"), "accuracy": m.get("accuracy"), "low": low, "high": high,
                         "mean_confidence": iv.get("mean_confidence"), "nll": m.get("nll"), "brier": m.get("brier"),
                         "ece": m.get("ece")})
        tables.append({"name": key[3:], "rows": rows})
    return tables


def _coverage(report: Mapping[str, Any]) -> dict[str, Any]:
    cov = report.get("coverage") or {}
    return {"by_status": cov.get("by_status") or {}, "invalid_by_reason": cov.get("invalid_by_reason") or {},
            "requests_by_status": cov.get("requests_by_status") or {}, "questions": cov.get("questions"),
            "requests": cov.get("requests"), "valid_fraction": cov.get("answered_valid_fraction")}


def _latency(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    lat = report.get("latency") or {}
    scale = 1000.0 if lat.get("unit", "s") == "s" else 1.0
    out = [("requests timed", _num(lat.get("n")))]
    for key in ("p50", "p95", "p99", "mean", "first"):
        v = lat.get(key)
        if isinstance(v, int | float):
            out.append((key if key != "first" else "first request", f"{v * scale:.2f} ms"))
    return out


def _context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    context = dict(context or {})
    versions = context.pop("versions", None) or {}
    return {"command": context.pop("command", None), "date": context.pop("run_date", None) or context.pop("date", None),
            "versions": sorted((str(k), str(v)) for k, v in versions.items()),
            "other": sorted((str(k), str(v)) for k, v in context.items())}


def _render(template: str, data: PageData, meta: dict[str, Any], **values: Any) -> str:
    script = _static("explorer.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
           "form-action 'none'; base-uri 'none'")
    meta = {**meta, "page_sizes": list(PAGE_SIZES)}
    return _environment().get_template(template).render(
        csp=csp, style=_static("explorer.css"), script=script, data_json=data.json(),
        meta_json=script_json(dumps(meta)), kept=data.kept, snapshot_path=meta["snapshot"],
        predictions_path=meta["predictions"], total=data.total, banners=BANNERS, **values)


def detail_budget(plots: Mapping[str, bytes] | None, max_bytes: int = MAX_PAGE_BYTES, columns_bytes: int = 0) -> int:
    """Bytes left for the requests' details in a page of at most ``max_bytes``: what the plots
    (base64), the columns and :data:`HEADROOM` for the rest do not take."""
    plot_bytes = sum(len(v) * 4 // 3 + 64 for v in (plots or {}).values() if isinstance(v, bytes | bytearray))
    return max(0, max_bytes - HEADROOM - plot_bytes - columns_bytes)


def render_run(report: Mapping[str, Any], data: PageData, plots: Mapping[str, bytes] | None,
               context: Mapping[str, Any] | None) -> str:
    view, model = report.get("view", "?"), report.get("model", "?")
    meta = {"kind": "run", "view": view, "model": model, "snapshot": f"data/02_snapshots/{view}.tsv",
            "predictions": f"data/07_model_output/{model}/{view}/predictions.jsonl"}
    return _render("run.html.j2", data, meta, report=report, headline=_headline(report), coverage=_coverage(report),
                   latency=_latency(report), plots=_plots(plots, RUN_PLOTS), slice_tables=_slice_tables(report),
                   context=_context(context), data_kind=report.get("data", "official"))


def _verdict_text(metric: str, low: Any, high: Any, a: str, b: str) -> str:
    if metric not in HIGHER_IS_BETTER:
        return "—"
    who = verdict(metric, low, high)
    return {"A": f"{a} better", "B": f"{b} better"}.get(who, "no clear difference")


def _paired(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, m in (doc.get("metrics") or {}).items():
        out.append({"name": name, **m, "verdict": _verdict_text(name, m.get("ci_low"), m.get("ci_high"), doc["a"], doc["b"])})
    return out


def _paired_slices(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    names = sorted(k for k in doc if k.startswith("by_") and isinstance(doc[k], Mapping))
    names.sort(key=lambda k: k != "by_type")
    tables = []
    for key in names:
        rows = [{"value": v, **m, "verdict": _verdict_text("accuracy", m.get("ci_low"), m.get("ci_high"), doc["a"], doc["b"])}
                for v, m in doc[key].items()]
        tables.append({"name": key[3:], "rows": rows})
    return tables


def render_comparison(doc: Mapping[str, Any], data: PageData, plots: Mapping[str, bytes] | None,
                      context: Mapping[str, Any] | None) -> str:
    view, a, b = doc.get("view", "?"), doc["a"], doc["b"]
    meta = {"kind": "compare", "view": view, "a": a, "b": b, "snapshot": f"data/02_snapshots/{view}.tsv",
            "predictions": f"data/07_model_output/<model>/{view}/predictions.jsonl",
            "mcnemar": {k: (doc.get("mcnemar") or {}).get(k) for k in ("a_only", "b_only")}}
    order = tuple(f"{view}.{n}" for n in ("reliability.png", "slices.png"))
    return _render("compare.html.j2", data, meta, doc=doc, paired=_paired(doc), slice_tables=_paired_slices(doc),
                   plots=_plots(plots, order), context=_context(context), data_kind=doc.get("data", "official"))
