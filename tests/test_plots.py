"""No plot hides data (issue 20 item 7): for every figure the project draws, measured in display
coordinates on the Agg renderer, no legend or text box lies on a data artist (a line, a marker, a
bar, a band), no two of them overlap, no marker is cut by its axes' edge, and a latency histogram
has a sensible number of bins. Checked on figures built to tempt each old fault (a badly calibrated
slice in the legend's corner, bins under the legend, latency labels over tall bars, a narrow latency
range) and on every plot of every view of a real run (embedded model, and a second model replayed
for the comparison plots)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.path import Path as MplPath
from matplotlib.transforms import Bbox

from jevkedro.nodes import plots
from jevkedro.nodes.report import latency_summary

NO_LINE = {"None", "none", "", " "}


# -- geometry in display coordinates -----------------------------------------------------------

def _dense(polyline: np.ndarray) -> np.ndarray:
    """Points along a polyline at most a pixel apart (segments with a non-finite end skipped)."""
    out = [polyline[np.isfinite(polyline).all(axis=1)]]
    for a, b in zip(polyline[:-1], polyline[1:]):
        if np.isfinite(a).all() and np.isfinite(b).all():
            k = int(min(np.hypot(*(b - a)), 20000)) + 2
            out.append(a + np.linspace(0, 1, k)[:, None] * (b - a))
    return np.concatenate(out) if out else np.empty((0, 2))


def _boxes(centres: np.ndarray, half: np.ndarray) -> list[np.ndarray]:
    """A square polygon of half-side ``half`` pixels around each finite centre."""
    half = np.broadcast_to(half, len(centres))
    return [np.array([[x - h, y - h], [x + h, y - h], [x + h, y + h], [x - h, y + h], [x - h, y - h]])
            for (x, y), h in zip(centres, half) if np.isfinite([x, y]).all()]


def _polygons(trans, paths) -> list[np.ndarray]:
    polys = []
    for path in paths:
        for poly in trans.transform_path(path).to_polygons(closed_only=False):
            poly = poly[np.isfinite(poly).all(axis=1)]
            w, h = np.ptp(poly, axis=0) if len(poly) else (0, 0)
            if w > 0.5 and h > 0.5:  # an empty bin's bar has no height: nothing drawn
                polys.append(poly)
    return polys


def data_shapes(artist, dpi: float) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """``(polylines, filled polygons, marker boxes)`` of a data artist, in pixels."""
    lines: list[np.ndarray] = []
    fills: list[np.ndarray] = []
    markers: list[np.ndarray] = []
    if isinstance(artist, Line2D):
        xy = artist.get_transform().transform(np.asarray(artist.get_xydata(), dtype=float))
        if artist.get_linestyle() not in NO_LINE:
            lines.append(xy)
        if artist.get_marker() not in (None, *NO_LINE):
            markers += _boxes(xy, artist.get_markersize() * dpi / 72 / 2)
    elif isinstance(artist, LineCollection):
        lines += [artist.get_transform().transform(p.vertices) for p in artist.get_paths()]
    elif isinstance(artist, PathCollection):  # scatter: one marker per offset, sizes in pt²
        centres = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), dtype=float))
        markers += _boxes(centres, np.sqrt(artist.get_sizes()) * dpi / 72 / 2)
    elif isinstance(artist, PolyCollection):  # fill_between bands
        fills += _polygons(artist.get_transform(), artist.get_paths())
    elif isinstance(artist, Patch):  # bars, histogram stairs
        fills += _polygons(artist.get_transform(), [artist.get_path()])
    return lines, fills, markers


def _shrunk(box: Bbox, px: float = 0.5) -> Bbox:
    return Bbox.from_extents(box.x0 + px, box.y0 + px, box.x1 - px, box.y1 - px)


def _inside(points: np.ndarray, box: Bbox) -> bool:
    return bool(len(points)) and bool(((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                                       & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)).any())


def _meets(box: Bbox, lines, fills, markers) -> bool:
    """Whether any of the shapes has a part strictly inside ``box``."""
    if box.width <= 0 or box.height <= 0:
        return False
    if any(_inside(_dense(line), box) for line in lines):
        return True
    corners = np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1],
                        [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]])
    for poly in (*fills, *markers):
        if _inside(_dense(poly), box) or MplPath(poly).contains_points(corners).any():
            return True
    return False


def covers(fig, renderer) -> list[tuple[str, Bbox]]:
    """Every legend and piece of text laid over the figure (titles included), with its box."""
    found = [(f"legend {[t.get_text() for t in leg.get_texts()]}", leg.get_window_extent(renderer)) for leg in fig.legends]
    texts = list(fig.texts)  # the suptitle among them
    for ax in fig.axes:
        if ax.get_legend() is not None:
            leg = ax.get_legend()
            found.append((f"legend {[t.get_text() for t in leg.get_texts()]}", leg.get_window_extent(renderer)))
        texts += [*ax.texts, ax.title, ax._left_title, ax._right_title]
    for text in dict.fromkeys(texts):
        if text.get_visible() and text.get_text().strip():
            box = text.get_window_extent(renderer)
            if text.get_bbox_patch() is not None:
                box = Bbox.union([box, text.get_bbox_patch().get_window_extent(renderer)])
            found.append((f"text {text.get_text()[:40]!r}", box))
    return found


def hidden(fig) -> list[str]:
    """What hides data in ``fig`` as drawn: each legend or text over a data artist (the part of it
    inside its axes: the rest is clipped away), each pair of overlapping legends or texts, each
    marker cut by its axes' edge. Empty when nothing is hidden."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = covers(fig, renderer)
    problems = []
    for i, (a, box_a) in enumerate(found):
        for b, box_b in found[i + 1:]:
            if _shrunk(box_a).overlaps(_shrunk(box_b)):
                problems.append(f"{a} overlaps {b}")
    for ax in fig.axes:
        frame = ax.get_window_extent(renderer)
        for artist in (*ax.lines, *ax.collections, *ax.patches):
            if not artist.get_visible():
                continue
            lines, fills, markers = data_shapes(artist, fig.dpi)
            for name, box in found:
                clip = Bbox.intersection(_shrunk(box), frame) if artist.get_clip_on() else _shrunk(box)
                if clip is not None and _meets(clip, lines, fills, markers):
                    problems.append(f"{name} lies on {type(artist).__name__} {artist.get_label()!r}")
            for m in markers:
                if not (frame.x0 - 0.5 <= m[:, 0].min() and m[:, 0].max() <= frame.x1 + 0.5
                        and frame.y0 - 0.5 <= m[:, 1].min() and m[:, 1].max() <= frame.y1 + 0.5):
                    problems.append(f"a marker of {type(artist).__name__} {artist.get_label()!r} at "
                                    f"{m.mean(axis=0).round(1).tolist()} is cut by the axes' edge {frame.extents.round(1).tolist()}")
    return problems


def histogram_bins(fig) -> list[int]:
    """The number of bins of each histogram (stairs) drawn in ``fig``."""
    from matplotlib.patches import StepPatch

    return [len(p.get_data().values) for ax in fig.axes for p in ax.patches if isinstance(p, StepPatch)]


def assert_nothing_hidden(figures: dict[str, object]) -> None:
    problems = {name: hidden(fig) for name, fig in figures.items()}
    assert not any(problems.values()), json.dumps({k: v for k, v in problems.items() if v}, indent=1)


# -- the checker finds what it claims to -------------------------------------------------------

def test_the_checker_sees_a_legend_on_a_marker_and_a_marker_cut_by_the_edge():
    fig = plots._new_figure(figsize=(4, 3), dpi=100)
    ax = fig.add_subplot()
    ax.scatter([0.5, 0.95], [0.5, 0.05], s=40, label="points")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    assert any("lies on PathCollection 'points'" in p for p in hidden(fig))
    fig = plots._new_figure(figsize=(4, 3), dpi=100)
    ax = fig.add_subplot()
    ax.scatter([0.5, 1.0], [0.5, 0.5], s=40)
    ax.set_xlim(0, 1)
    assert any("cut by the axes' edge" in p for p in hidden(fig))
    fig = plots._new_figure(figsize=(4, 3), dpi=100)
    ax = fig.add_subplot()
    ax.bar([0, 1, 2], [1, 5, 1])
    ax.text(1, 4, "on the bar")
    assert any("'on the bar' lies on Rectangle" in p for p in hidden(fig))


# -- figures that tempted each old fault -------------------------------------------------------

def slices_report(worst_last: bool = True) -> dict:
    """A view whose worst-calibrated slice value (accuracy 0.10, mean confidence 0.96) is the last
    row of the first panel: the lower right corner, where the old legend sat."""
    groups = {"choice": {"n": 300, "accuracy": 0.4, "accuracy_ci": [0.35, 0.45], "mean_confidence": 0.45},
              "noul": {"n": 70, "accuracy": 0.6, "accuracy_ci": [0.5, 0.7], "mean_confidence": 0.62},
              "score": {"n": 34, "accuracy": 0.10, "accuracy_ci": [0.0, 0.25], "mean_confidence": 0.96}}
    if not worst_last:
        groups = dict(reversed(list(groups.items())))
    return {"model": "m", "view": "v",
            "intervals": {"by_type": groups,
                          "by_level": {"easy": {"n": 200, "accuracy": 1.0, "accuracy_ci": [0.98, 1.0], "mean_confidence": 1.0},
                                       "hard": {"n": 204, "accuracy": 0.0, "accuracy_ci": [0.0, 0.02], "mean_confidence": 0.3}}}}


@pytest.mark.parametrize("worst_last", [True, False])
def test_slices_legend_never_covers_the_worst_calibrated_slice(worst_last):
    assert_nothing_hidden({"slices.png": plots.slices_figure(slices_report(worst_last), "slices")})


def model_answers(kind: str, n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Confidences and correctness of a model whose binned points fall where old legends or text sat:
    ``over`` (confident and mostly wrong: lower right), ``under`` (unsure and mostly right: upper
    left), ``edges`` (confidences at 1.0, accuracy 0 and 1)."""
    rng = np.random.default_rng(seed)
    if kind == "over":
        conf = rng.uniform(0.82, 1.0, n)
        correct = rng.uniform(size=n) < 0.08
    elif kind == "under":
        conf = rng.uniform(0.34, 0.5, n)
        correct = rng.uniform(size=n) < 0.97
    else:
        conf = np.where(np.arange(n) % 2 == 0, 1.0, 0.36)
        correct = np.arange(n) % 2 == 1
    return conf, correct, np.array([f"r{i}" for i in range(n)], dtype=object)


@pytest.mark.parametrize("kind", ["over", "under", "edges"])
def test_reliability_legend_and_summary_never_cover_bins_or_curve(kind):
    conf, correct, units = model_answers(kind)
    assert_nothing_hidden({"reliability.png": plots.reliability_figure(conf, correct, units, "reliability", (0.1, 0.2))})


@pytest.mark.parametrize("kinds", [("over", "under"), ("edges", "over")])
def test_comparison_reliability_legend_never_covers_bins(kinds):
    models = [(k, *model_answers(k, seed=i)) for i, k in enumerate(kinds)]
    assert_nothing_hidden({"compare reliability.png": plots.comparison_reliability_figure(models, "both")})


@pytest.mark.parametrize("kind", ["over", "under", "edges"])
def test_risk_coverage_legend_never_covers_the_curve(kind):
    conf, correct, _ = model_answers(kind)
    assert_nothing_hidden({"risk_coverage.png": plots.risk_coverage_figure([("model", conf, correct)], "risk")})


def test_slice_differences_forest_plot_hides_nothing():
    diffs = {"type": {v: {"n": 40, "diff": d, "ci_low": d - 0.1, "ci_high": d + 0.1} for v, d in
                      (("choice", 0.3), ("noul", -0.4), ("score", 0.0))},
             "level": {"easy": {"n": 10, "diff": 1.0, "ci_low": 0.9, "ci_high": 1.0},
                       "hard": {"n": 10, "diff": -1.0, "ci_low": -1.0, "ci_high": None}}}
    assert_nothing_hidden({"compare slices.png": plots.slice_differences_figure(diffs, "A", "B", "slices")})


def timed(ms: np.ndarray) -> dict:
    """Prediction records timed at ``ms`` milliseconds (the first request apart, as in a run)."""
    recs = {"r0": {"request_id": "r0", "status": "ok", "latency_s": 0.05, "first": True}}
    recs.update({f"r{i + 1}": {"request_id": f"r{i + 1}", "status": "ok", "latency_s": float(v) / 1000, "first": False}
                 for i, v in enumerate(ms)})
    return recs


NARROW_MS = np.random.default_rng(1).uniform(1.0, 2.4, 300)  # all in two of the old 5-per-decade bins


def test_a_narrow_latency_range_gets_enough_bins():
    lat = latency_summary(timed(NARROW_MS))
    counts = lat["histogram"]["counts"]
    assert 10 <= len(counts) <= 60 and sum(counts) == len(NARROW_MS)
    assert max(counts) <= 0.3 * len(NARROW_MS)  # the spread is shown, not two blocks
    edges = lat["histogram"]["edges_ms"]
    assert edges[0] <= NARROW_MS.min() and NARROW_MS.max() <= edges[-1]
    assert counts[0] and counts[-1]  # bins span the data, not the old fixed grid
    fig = plots.latency_figure(lat, "latency")
    assert histogram_bins(fig) == [len(counts)]


@pytest.mark.parametrize("ms", [NARROW_MS, np.full(50, 3.0), np.zeros(20),
                                np.concatenate([np.random.default_rng(2).lognormal(0, 0.1, 500), [2000.0]]),
                                np.concatenate([np.full(999, 1.0) + np.arange(999) * 1e-12, [1e6]])],
                         ids=["narrow", "one-value", "zeros", "one-far-outlier", "tiny-spread-huge-outlier"])
def test_latency_labels_off_the_bars_and_sensible_bins(ms):
    lat = latency_summary(timed(ms))
    fig = plots.latency_figure(lat, "latency")
    assert_nothing_hidden({"latency.png": fig})
    (bins,) = histogram_bins(fig)
    assert 10 <= bins <= 60
    assert sum(lat["histogram"]["counts"]) == len(ms)


def test_old_reports_histograms_still_draw():
    """A report.json written before ``scale``: log-spaced bins, drawn on a log axis."""
    lat = {"p50": 0.002, "p95": 0.004, "p99": 0.005, "first": 0.1, "histogram": {"edges_ms": [1.0, 2.0, 4.0], "counts": [5, 7]}}
    fig = plots.latency_figure(lat, "latency")
    assert fig.axes[0].get_xscale() == "log"
    assert_nothing_hidden({"latency.png": fig})


# -- every plot of every view of a real run ------------------------------------------------------

A, B = "sparrow-nano-general-v1.1", "sparrow-flattened"


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Every view scored with the embedded model (A) and with A's answers flattened and replayed (B)."""
    from jevkedro.registry import VIEWS
    from jevkedro.testing import flattened_replay
    from support import copy_project, run_kedro

    project = copy_project(tmp_path_factory.mktemp("views"))
    to_score = [f"{v}.score" for v in VIEWS]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        run_kedro(project, "__default__", to_nodes=to_score)
        lines = []
        for view in VIEWS:
            answered = project / "answered.jsonl"
            log = project / "data" / "07_model_output" / A / view / "predictions.jsonl"
            answered.write_text("".join(line + "\n" for line in log.read_text().splitlines()
                                        if line and json.loads(line)["status"] == "ok"))
            lines += flattened_replay(answered, project / "flat.jsonl").read_text().splitlines()
        replay = project / "replay.jsonl"
        replay.write_text("".join(line + "\n" for line in lines if line))
        run_kedro(project, "__default__", {"model": {"adapter": "replay", "path": str(replay), "name": B}}, to_nodes=to_score)
    return project, VIEWS


def view_inputs(project, model: str, view: str):
    """What the plot node gets for one view: snapshot, report, question scores (from the run's files)."""
    from jevkedro.compare import model_catalog

    catalog = model_catalog(project, model)
    return catalog.load(f"{view}.snapshot"), catalog.load(f"{view}.report"), catalog.load(f"{view}.question_scores")


@pytest.mark.e2e
def test_every_plot_of_every_view_hides_nothing(two_models, tmp_path):
    from jevkedro.compare import compare_view

    project, views = two_models
    drawn = {}
    for view in views:
        snapshot, report, scores = view_inputs(project, A, view)
        figures = plots.view_plots(snapshot, report, scores)
        _, inputs = compare_view(project, view, A, B, resamples=50)
        figures["compare.reliability.png"] = plots.comparison_reliability_figure(inputs["models"], f"{A} vs {B} on {view}")
        figures["compare.slices.png"] = plots.slice_differences_figure(inputs["differences"], A, B, f"{A} vs {B} on {view}")
        assert_nothing_hidden({f"{view}/{name}": fig for name, fig in figures.items()})
        if (report.get("latency") or {}).get("n", 0) >= 10:
            assert 10 <= histogram_bins(figures["latency.png"])[0] <= 60, view
        drawn[view] = sorted(figures)
    assert len(drawn) == len(views) and all(len(names) == 6 for names in drawn.values())
