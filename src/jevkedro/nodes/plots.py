"""Plots of one (model, view) and of a paired comparison: matplotlib figures, saved through the
catalog (``{view}.plots``, PNG files under ``data/08_reporting/<model>/<view>/``) and logged to the
view's MLflow run.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot state, so nothing is
shown and nothing leaks between views; rendering uses the Agg canvas). The numbers come from
``report.json`` and the per-question judgements (``questions.jsonl``); the smooth calibration curve
and its band from :mod:`jevkedro.nodes.compare`.

- ``reliability.png`` — 15 equal-width confidence bins (accuracy per bin at its mean confidence,
  question counts underneath) and the kernel-smoothed calibration curve with a 95% bootstrap band
  (requests resampled whole), against the diagonal;
- ``slices.png`` — accuracy per slice value with its 95% interval beside the mean confidence
  (the gap between them is the calibration error of that slice);
- ``latency.png`` — the request latency histogram with p50/p95/p99 (its bins:
  :func:`latency_histogram`, computed by the report);
- ``risk_coverage.png`` — the error rate when abstaining on the least confident answers.

No plot hides data: legends sit outside the axes (a figure legend under them, placed by
constrained layout), summary figures in the axes' title, never on the points, bars or curves
(tests/test_plots.py checks every figure in display coordinates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jevkedro.nodes import compare as stats
from jevkedro.nodes import metrics as M
from jevkedro.nodes.snapshot import Snapshot, each_row
from jevkedro.nodes.validate import QuestionRecords
from jevkedro.registry import family_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

GRID = np.linspace(0.0, 1.0, 101)
BAND_RESAMPLES = 200
COLORS = ("#1f77b4", "#d62728")
MAX_SLICE_PANELS = 4
MAX_SLICE_VALUES = 12
LATENCY_FLOOR_MS = 0.01  # a log-scale histogram starts at 10 µs at the lowest (a 0 ms timing is clipped to it)
MIN_LATENCY_BINS, MAX_LATENCY_BINS = 10, 60
LOG_SCALE_SPAN = 10.0  # latencies spread over more than a decade (max / min) are binned and drawn on a log scale
EDGE = 0.025  # room beyond [0, 1] so that a marker at confidence or accuracy 0 or 1 is drawn whole


def _new_figure(*args: Any, **kwargs: Any) -> Figure:
    """A matplotlib figure with constrained layout (room is made for legends outside the axes);
    matplotlib is imported here, when a plot is made, not when a pipeline is assembled (it costs
    every `kedro run` about a second otherwise)."""
    from matplotlib.figure import Figure

    return Figure(*args, layout="constrained", **kwargs)


def _legend_below(fig: Figure, ncols: int = 2) -> None:
    """One legend for every labelled artist of the figure, under the axes: never on the data."""
    fig.legend(loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)


def _whole_numbers(ax) -> None:
    """Counts on the y axis: ticks at whole numbers only (7 requests never read as 2.5)."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, steps=[1, 2, 5, 10]))


def _bin_count(x: np.ndarray) -> int:
    """Bins for values ``x`` (already on the histogram's scale): the larger of Sturges' and the
    Freedman–Diaconis counts, kept within [MIN_LATENCY_BINS, MAX_LATENCY_BINS] (computed as a
    number first, so a tiny spread with one far outlier cannot ask for millions of edges)."""
    n = len(x)
    iqr = float(np.subtract(*np.percentile(x, [75, 25])))
    fd = float(np.ptp(x)) / (2 * iqr * n ** (-1 / 3)) if iqr > 0 else 0.0
    return int(np.clip(np.ceil(max(np.log2(n) + 1, fd)), MIN_LATENCY_BINS, MAX_LATENCY_BINS))


def latency_histogram(ms: np.ndarray) -> dict[str, Any]:
    """The latency plot's histogram of ``ms`` (one latency per request, in ms), bins from the
    data's own spread: equal-width bins over [min, max] when it spans at most a decade (``scale``
    ``linear``), log-spaced ones beyond (``log``); :func:`_bin_count` bins either way, so a
    narrow range is never one or two bars. ``{"edges_ms", "counts", "scale"}``."""
    ms = np.asarray(ms, dtype=float)
    lo, hi = float(ms.min()), float(ms.max())
    if hi / max(lo, LATENCY_FLOOR_MS) > LOG_SCALE_SPAN:
        ms = np.maximum(ms, LATENCY_FLOOR_MS)
        lo = max(lo, LATENCY_FLOOR_MS)
        edges = np.geomspace(lo, hi, _bin_count(np.log10(ms)) + 1)
        scale = "log"
    else:
        if hi - lo < 1e-9 * max(abs(hi), 1.0):  # one value: a window around it (not below 0)
            half = max(abs(lo) * 0.05, LATENCY_FLOOR_MS / 2)
            lo, hi = max(lo - half, min(lo, 0.0)), hi + half
        edges = np.linspace(lo, hi, _bin_count(ms) + 1)
        scale = "linear"
    counts, _ = np.histogram(np.clip(ms, edges[0], edges[-1]), bins=edges)
    return {"edges_ms": [float(e) for e in edges], "counts": counts.tolist(), "scale": scale}

def confidence_and_correct(question_scores: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-label confidence (of the probabilities as the records state them, rounded to 6
    decimals), correctness and request id of every valid hard-label answer: read from the score
    node's table, or from rows of ``questions.jsonl`` one by one."""
    if isinstance(question_scores, QuestionRecords):
        t = question_scores.table
        at = np.flatnonzero(np.asarray(t.valid, dtype=bool) & (t.label >= 0) & (t.K > 0) & ~np.asarray(t.unscored, dtype=bool))
        P = t.P[at].round(6)
        top = np.where(np.arange(P.shape[1]) < t.K[at, None], P, -np.inf).max(axis=1, initial=-np.inf)
        return top, np.asarray(M.table_stats(t)["correct"], dtype=bool)[at], np.asarray(t.request_id, dtype=object)[at]
    rows = [q for q in question_scores if q.get("status") == "ok" and q.get("label") is not None
            and q.get("probabilities") and not q.get("unscored")]
    conf = np.array([max(q["probabilities"]) for q in rows], dtype=float)
    correct = np.array([bool(q.get("correct")) for q in rows], dtype=bool)
    rid = np.array([q["request_id"] for q in rows], dtype=object)
    return conf, correct, rid


def units_of(snapshot: Snapshot | None, request_ids: np.ndarray) -> np.ndarray:
    """The bootstrap unit of each question (the family's group where it has one, else its request)."""
    if snapshot is None:
        return request_ids
    try:
        unit_of = getattr(family_of(snapshot.view).module(), "resampling_unit", None)
    except KeyError:  # a view outside the registry: requests
        return request_ids
    if unit_of is None:
        return request_ids
    by_request = {row.request_id: str(unit_of(row)) for row in each_row(snapshot.rows)}
    return np.array([by_request.get(r, r) for r in request_ids], dtype=object)


def _title(fig: Figure, text: str) -> None:
    # no y: constrained layout then makes room for the title above the axes (and their titles)
    fig.suptitle(text, fontsize=11, x=0.02, ha="left")


def _empty(title: str, why: str) -> Figure:
    fig = _new_figure(figsize=(6.4, 2.4), dpi=110)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=11, color="#555555")
    _title(fig, title)
    return fig


def smooth_curve(conf: np.ndarray, correct: np.ndarray, units: np.ndarray, resamples: int = BAND_RESAMPLES) -> dict[str, Any]:
    """The smooth calibration curve on :data:`GRID` with its bootstrap band, where questions are."""
    h = stats.smooth_bandwidth(conf, correct)
    acc, dens = stats.smooth_calibration(conf, correct, GRID, h)
    lo, hi = stats.smooth_calibration_band(conf, correct, units, GRID, h, resamples=resamples)
    # draw only over the confidences the model used (the kernel would extrapolate beyond them)
    seen = (GRID >= conf.min() - 0.01) & (GRID <= conf.max() + 0.01) if len(conf) else np.zeros(len(GRID), dtype=bool)
    return {"bandwidth": h, "acc": np.where(seen, acc, np.nan), "lo": np.where(seen, lo, np.nan), "hi": np.where(seen, hi, np.nan),
            "smooth_ece": stats.smooth_ece(conf, correct, h)}


def _reliability_axes(fig: Figure):
    grid = fig.add_gridspec(2, 1, height_ratios=(3.2, 1))
    ax = fig.add_subplot(grid[0])
    counts_ax = fig.add_subplot(grid[1], sharex=ax)
    ax.plot([0, 1], [0, 1], ls="--", color="#888888", lw=1, label="perfect calibration")
    ax.set_xlim(-EDGE, 1 + EDGE)
    ax.set_ylim(-EDGE, 1 + EDGE)
    ax.set_ylabel("accuracy")
    ax.tick_params(labelbottom=False)
    ax.grid(alpha=0.25)
    counts_ax.set_xlabel("confidence (top-label probability)")
    counts_ax.set_ylabel("questions")
    _whole_numbers(counts_ax)
    counts_ax.grid(alpha=0.25)
    return ax, counts_ax


def _draw_model(ax, counts_ax, conf, correct, units, color, label, offset=0.0, width=1 / M.ECE_BINS) -> dict[str, Any]:
    ece, bins = M.ece(conf, correct, return_bins=True)
    filled = [b for b in bins if b["n"]]
    curve = smooth_curve(conf, correct, units)
    ax.fill_between(GRID, curve["lo"], curve["hi"], color=color, alpha=0.18, lw=0)
    ax.plot(GRID, curve["acc"], color=color, lw=2, label=f"{label} (smooth, 95% band)")
    sizes = [12 + 60 * np.sqrt(b["n"] / len(conf)) for b in filled]  # area grows with the bin's share
    ax.scatter([b["confidence"] for b in filled], [b["accuracy"] for b in filled], s=sizes, color=color,
               edgecolor="white", zorder=3, label=f"{label}: 15 bins, ECE {ece:.3f}")
    counts_ax.bar([b["lo"] + offset for b in bins], [b["n"] for b in bins], width=width, align="edge", color=color, alpha=0.6)
    return {"ece": ece, **curve}


def reliability_figure(conf: np.ndarray, correct: np.ndarray, units: np.ndarray, title: str,
                       ece_ci: Sequence[float | None] | None = None) -> Figure:
    """Reliability diagram of one model on one view (see the module docstring)."""
    if not len(conf):
        return _empty(title, "no valid hard-label answer: nothing to calibrate")
    fig = _new_figure(figsize=(6.4, 7.0), dpi=110)
    ax, counts_ax = _reliability_axes(fig)
    drawn = _draw_model(ax, counts_ax, conf, correct, units, COLORS[0], "model")
    ci = f" [{ece_ci[0]:.3f}, {ece_ci[1]:.3f}]" if ece_ci and None not in ece_ci[:2] else ""
    ax.set_title(f"n = {len(conf)}   accuracy {correct.mean():.3f}   mean confidence {conf.mean():.3f}\n"
                 f"ECE {drawn['ece']:.3f}{ci}   smooth ECE {drawn['smooth_ece']:.3f} (bandwidth {drawn['bandwidth']:.3f})",
                 loc="left", fontsize=8.5)
    _legend_below(fig, ncols=3)
    _title(fig, title)
    return fig


def slices_figure(report: Mapping[str, Any], title: str) -> Figure:
    """Accuracy (95% interval) and mean confidence per slice value, one panel per slice."""
    intervals = report.get("intervals") or {}
    panels = [(k.removeprefix("by_"), v) for k, v in intervals.items()
              if k.startswith("by_") and isinstance(v, Mapping) and 1 < len(v) <= MAX_SLICE_VALUES]
    panels.sort(key=lambda p: (p[0] != "type", p[0]))
    panels = panels[:MAX_SLICE_PANELS]
    if not panels:
        return _empty(title, "no slice with 2 to 12 values")
    heights = [max(1.0, 0.32 * len(v) + 0.6) for _, v in panels]
    fig = _new_figure(figsize=(7.2, sum(heights) + 1.1), dpi=110)
    grid = fig.add_gridspec(len(panels), 1, height_ratios=heights)
    for i, (name, groups) in enumerate(panels):
        ax = fig.add_subplot(grid[i])
        labels = list(groups)
        y = np.arange(len(labels))
        acc = np.array([groups[v]["accuracy"] if groups[v]["accuracy"] is not None else np.nan for v in labels], dtype=float)
        lo = np.array([groups[v]["accuracy_ci"][0] if groups[v]["accuracy_ci"][0] is not None else np.nan for v in labels], dtype=float)
        hi = np.array([groups[v]["accuracy_ci"][1] if groups[v]["accuracy_ci"][1] is not None else np.nan for v in labels], dtype=float)
        conf = np.array([groups[v]["mean_confidence"] if groups[v].get("mean_confidence") is not None else np.nan for v in labels],
                        dtype=float)
        named = i == 0  # one legend entry per kind, not per panel
        ax.barh(y, acc, color=COLORS[0], alpha=0.75, height=0.6, label="accuracy (95% interval)" if named else "_nolegend_")
        ax.errorbar(acc, y, xerr=[np.nan_to_num(acc - lo), np.nan_to_num(hi - acc)], fmt="none", ecolor="black", capsize=3, lw=1)
        ax.scatter(conf, y, marker="D", color="#ff7f0e", zorder=3, s=22, label="mean confidence" if named else "_nolegend_")
        ax.set_yticks(y, [f"{v}  (n={groups[v]['n']})" for v in labels], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(-EDGE, 1 + EDGE)
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.25)
    _legend_below(fig)
    _title(fig, title)
    return fig


def latency_figure(latency: Mapping[str, Any], title: str) -> Figure:
    """Request latency histogram (the report's bins, :func:`latency_histogram`) with p50/p95/p99,
    named in the legend under the axes (labels on the chart would sit on the bars)."""
    hist = latency.get("histogram")
    if not hist or not sum(hist["counts"]):
        return _empty(title, "no timed request (replayed answers and unsupported requests are not timed)")
    fig = _new_figure(figsize=(6.4, 3.4), dpi=110)
    ax = fig.add_subplot()
    edges = np.array(hist["edges_ms"])
    log_scale = hist.get("scale", "log") == "log"  # reports written before `scale` have log-spaced bins
    ax.stairs(hist["counts"], edges, fill=True, color=COLORS[0], alpha=0.6, label=f"{sum(hist['counts'])} requests")
    if log_scale:
        ax.set_xscale("log")
    for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
        if latency.get(p) is not None:
            ms = latency[p] * 1000
            ax.axvline(ms, color="black", ls=style, lw=1, label=f"{p} {ms:.3g} ms")
    _legend_below(fig, ncols=4)
    ax.set_xlabel("latency per request (ms, log scale)" if log_scale else "latency per request (ms)")
    ax.set_ylabel("requests")
    _whole_numbers(ax)
    ax.grid(alpha=0.25)
    first = latency.get("first")
    _title(fig, title + (f"   (first request {first * 1000:.3g} ms, not counted)" if first is not None else ""))
    return fig


def risk_coverage_figure(curves: Sequence[tuple[str, np.ndarray, np.ndarray]], title: str) -> Figure:
    """Risk (error rate among answered) against coverage, abstaining on the least confident first."""
    fig = _new_figure(figsize=(6.4, 3.8), dpi=110)
    ax = fig.add_subplot()
    for (label, conf, correct), color in zip(curves, COLORS):
        rc = stats.risk_coverage(conf, correct)
        if not len(rc["risk"]):
            continue
        ax.plot(rc["coverage"], rc["risk"], color=color, lw=2, label=f"{label} (AURC {rc['aurc']:.3f})")
        ax.axhline(1 - correct.mean(), color=color, lw=0.8, ls=":", label=f"{label}: error rate keeping all")
    ax.set_xlim(0, 1)
    top = ax.get_ylim()[1]
    ax.set_ylim(-EDGE * top, top)  # a stretch at risk 0 is drawn above the axis line, not on it
    ax.set_xlabel("coverage (share of answers kept, most confident first)")
    ax.set_ylabel("risk (error rate of kept answers)")
    ax.grid(alpha=0.25)
    _legend_below(fig)
    _title(fig, title)
    return fig


def view_plots(snapshot: Snapshot | None, report: Mapping[str, Any], question_scores: Sequence[Mapping[str, Any]]) -> dict[str, Figure]:
    """The figures of one (model, view), keyed by file name."""
    name = f"{report['model']} on {report['view']}"
    conf, correct, rid = confidence_and_correct(question_scores)
    units = units_of(snapshot, rid)
    ece_ci = ((report.get("intervals") or {}).get("overall") or {}).get("ece")
    return {
        "reliability.png": reliability_figure(conf, correct, units, f"Reliability — {name}", ece_ci),
        "slices.png": slices_figure(report, f"Accuracy and confidence per slice — {name}"),
        "latency.png": latency_figure(report.get("latency") or {}, f"Latency — {name}"),
        "risk_coverage.png": risk_coverage_figure([("model", conf, correct)], f"Risk–coverage — {name}")
        if len(conf) else _empty(f"Risk–coverage — {name}", "no valid hard-label answer"),
    }


def plot_view(snapshot: Snapshot, report: dict, question_scores: list) -> dict[str, Any]:
    """The template pipeline's ``plot`` node: :func:`view_plots` of the scored view (name -> figure).

    Annotated without ``Figure``: Kedro resolves a node's type hints at run time, and matplotlib is
    imported only when the figures are drawn."""
    return view_plots(snapshot, report, question_scores)


# -- comparisons --------------------------------------------------------------------------------------

def comparison_reliability_figure(models: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]], title: str) -> Figure:
    """Both models' reliability (smooth curves with bands, binned points, counts) on one chart."""
    fig = _new_figure(figsize=(6.8, 7.4), dpi=110)
    ax, counts_ax = _reliability_axes(fig)
    width = 1 / M.ECE_BINS / len(models)
    for i, ((label, conf, correct, units), color) in enumerate(zip(models, COLORS)):
        if len(conf):
            _draw_model(ax, counts_ax, conf, correct, units, color, label, offset=i * width, width=width)
    _legend_below(fig)
    _title(fig, title)
    return fig


def slice_differences_figure(differences: Mapping[str, Mapping[str, Mapping[str, Any]]], a: str, b: str, title: str) -> Figure:
    """Per-slice accuracy differences (A − B) with paired 95% intervals (a forest plot)."""
    rows = [(f"{name}: {value}", d) for name, groups in differences.items() if len(groups) <= MAX_SLICE_VALUES
            for value, d in groups.items()]
    if not rows:
        return _empty(title, "no slice with at most 12 values")
    fig = _new_figure(figsize=(7.2, 0.28 * len(rows) + 1.6), dpi=110)
    ax = fig.add_subplot()
    y = np.arange(len(rows))
    diff = np.array([d["diff"] for _, d in rows], dtype=float)
    lo = np.array([d["ci_low"] if d["ci_low"] is not None else np.nan for _, d in rows], dtype=float)
    hi = np.array([d["ci_high"] if d["ci_high"] is not None else np.nan for _, d in rows], dtype=float)
    colors = [COLORS[0] if lo_ > 0 else COLORS[1] if hi_ < 0 else "#555555" for lo_, hi_ in zip(lo, hi)]
    ax.errorbar(diff, y, xerr=[np.nan_to_num(diff - lo), np.nan_to_num(hi - diff)], fmt="none", ecolor="#333333", capsize=3, lw=1)
    ax.scatter(diff, y, c=colors, zorder=3, s=28)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, [f"{label}  (n={d['n']})" for label, d in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel(f"accuracy difference {a} − {b} (paired 95% interval)")
    ax.grid(axis="x", alpha=0.25)
    _title(fig, title)
    return fig


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (Agg canvas), drawn once: its constrained layout already fits every
    artist inside the figure (a tight bounding box would draw it a second time to crop it)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
