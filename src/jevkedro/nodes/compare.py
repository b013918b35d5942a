"""Statistics for telling models apart: bootstrap intervals, paired differences, McNemar, BH, AUROC.

Small pure functions over numpy arrays; every formula is stated where it is computed.

**Resampling unit.** Questions of one request share a state, so they are not independent: every
bootstrap here draws whole *units* with replacement — a request by default, or a family's group
(JevBench: the paraphrase pair a task belongs to). A resample is a count vector ``w`` over the
``G`` units (``w_g`` = how often unit ``g`` was drawn, ``sum_g w_g = G``), drawn as ``G`` uniform
integers and counted (the same law as ``multinomial(G, 1/G)``, about 5x faster in numpy).

**Ratio statistics.** Accuracy, NLL, Brier, mean confidence are ratios of sums over questions,
``m = sum_i x_i / sum_i d_i``; with unit totals ``X_g``, ``D_g`` a resample's value is
``(w . X) / (w . D)``, so ``B`` resamples are two matrix products ``W X``, ``W D`` (``W``: B x G),
done in chunks to bound memory. ECE is a sum over bins of such totals:
``ECE = sum_b |H_b - C_b| / N`` with ``H_b``/``C_b`` the hits/confidence sums in bin ``b``.

**Intervals.** Percentile bootstrap: the 2.5th and 97.5th percentiles (numpy's linear
interpolation) of the resampled values; resamples where a denominator is 0 are left out.
A paired difference resamples the *same* units for both models, so the interval of identical
models is exactly [0, 0].
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jevkedro.nodes import metrics as M
from jevkedro.nodes.analytic import paired_analytic, verdict

LEVEL = 0.95
RESAMPLES = 1000
SEED = 0
HEADLINE = ("accuracy", "nll", "brier", "ece")
# resample x unit cells of one chunk of count matrices (64 MB of float64): enough resamples per
# chunk that the unit-total blocks are read a few dozen times in all, not once per resample
_CELLS_PER_CHUNK = 8_000_000
_MAX_RESAMPLES_PER_CHUNK = 64


# -- resampling units and count matrices ------------------------------------------------------------

def unit_codes(keys: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, int]:
    """Codes ``0..G-1`` of each question's resampling unit (its request id or group) and ``G``."""
    values, codes = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    return codes.astype(np.intp), len(values)


def resample_counts(n_units: int, resamples: int, seed: int, chunk_cells: int = _CELLS_PER_CHUNK) -> Iterator[np.ndarray]:
    """Count matrices ``W`` (``b x G``, float), chunk by chunk, of ``resamples`` bootstrap draws
    of ``G`` units with replacement from ``numpy.random.default_rng(seed)``.

    Each chunk is a view of **one buffer, refilled for the next chunk**: use (or copy) it before
    asking for the next. The buffer is filled a resample at a time (the generator's stream is the
    same as drawing the whole chunk at once), so every temporary is one row: a fresh array of
    the chunk's size would be mapped and page-faulted in again on every chunk (5x slower here).
    The draws are cast into one reused ``intp`` row: ``bincount`` casts an ``int32`` input itself
    into a fresh array per resample, which is page-faulted in again each time (2x slower)."""
    rng = np.random.default_rng(seed)
    per_chunk = int(np.clip(chunk_cells // max(n_units, 1), 1, _MAX_RESAMPLES_PER_CHUNK))
    buf = np.empty((min(per_chunk, resamples), n_units))
    draws = np.empty(n_units, dtype=np.intp)  # each resample's draws, as bincount counts them fastest
    done = 0
    while done < resamples:
        b = min(per_chunk, resamples - done)
        for r in range(b):
            np.copyto(draws, rng.integers(0, n_units, size=n_units, dtype=np.int32))
            buf[r] = np.bincount(draws, minlength=n_units)
        yield buf[:b]
        done += b


def unit_totals(codes: np.ndarray, n_units: int, columns: np.ndarray) -> np.ndarray:
    """``(G, m)`` sums of the ``(N, m)`` per-question ``columns`` over each unit."""
    columns = np.asarray(columns, dtype=float)
    if columns.ndim == 1:
        columns = columns[:, None]
    out = np.zeros((n_units, columns.shape[1]))
    if not len(codes):
        return out
    order = np.argsort(codes, kind="stable")  # contiguous runs per unit, then one reduceat (np.add.at is ~10x slower)
    ordered = codes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out[ordered[starts]] = np.add.reduceat(columns[order], starts, axis=0)
    return out


def one_blas_thread() -> Any:
    """A context in which BLAS runs one thread. The resampling products are skinny (a few dozen
    columns times a chunk of count matrices) and bound by reading the counts: extra BLAS threads
    add nothing, and where the cores are busy they spin waiting for each other (measured 10x slower
    on the shared 2-core machine at load 5: 107 ms against 10 ms per product)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def bootstrap_totals(blocks: Sequence[Any], resamples: int, seed: int) -> list[np.ndarray]:
    """Resampled totals ``W @ block`` (``B x m``) of each ``(G, m)`` unit-total block, all with the
    same resamples (a :class:`SliceTotals` gives its own ``(B, 2k)``). Each block gets its own
    product, so equal blocks give bit-identical totals."""
    n_units = blocks[0].shape[0]
    out: list[list[np.ndarray]] = [[] for _ in blocks]
    products = [_resampled_by(block) for block in blocks]
    with one_blas_thread():
        for W in resample_counts(n_units, resamples, seed):
            for k, product in enumerate(products):
                out[k].append(product(W))
    return [np.vstack(parts) if parts else np.zeros((0, b.shape[1])) for parts, b in zip(out, blocks)]


def _resampled_by(block: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``W -> W @ block`` for one chunk of count matrices. A dense block is multiplied as
    ``(block^T W^T)^T``: both operands as BLAS reads them without a copy (``W @ block``, a long
    inner dimension and few resamples, is many times slower in OpenBLAS)."""
    if isinstance(block, SliceTotals):
        return block.resampled
    columns = np.ascontiguousarray(np.asarray(block, dtype=float).T)
    return lambda W: (columns @ W.T).T


def question_bootstrap(conf: np.ndarray, correct: np.ndarray, bins: np.ndarray, n_bins: int, resamples: int, seed: int,
                       chunk_cells: int = 1_000_000) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy and binned ECE of ``resamples`` question-level bootstrap draws, each draw
    ``integers(0, N, N)`` from one ``default_rng(seed)`` (the stream of a per-draw loop).

    ``acc_r = mean_j correct[i_rj]``; ``ECE_r = sum_b |H_rb - C_rb| / N`` with ``H_rb``/``C_rb``
    the hits/confidence summed over the draw's questions in bin ``b`` (``bins == -1``: in no bin).
    Draws are made ``chunk_cells // N`` at a time (1M cells: 8 MB temporaries, reused by the
    allocator instead of page-faulted afresh per chunk), so memory is bounded whatever ``N``; within a
    cell the sums are taken in draw order, so the values are those of the one-shot version bit for bit."""
    n = len(conf)
    rng = np.random.default_rng(seed)
    conf = np.asarray(conf, dtype=float)
    # one code per question: (bin, hit) cell, bin n_bins a sink for questions in no bin; hits are
    # then counts (integers, exact), so only the confidence needs a weighted sum
    width = 2 * (n_bins + 1)
    cell_of = (2 * np.where(bins >= 0, bins, n_bins) + np.asarray(correct, dtype=bool)).astype(np.intp)
    per_chunk = max(1, chunk_cells // max(n, 1))
    acc, ece = np.empty(resamples), np.empty(resamples)
    for done in range(0, resamples, per_chunk):
        b = min(per_chunk, resamples - done)
        idx = rng.integers(0, n, (b, n))
        cell = cell_of[idx]
        cell += (np.arange(b, dtype=np.intp) * width)[:, None]
        flat = cell.ravel()
        counts = np.bincount(flat, minlength=b * width).reshape(b, n_bins + 1, 2)
        # confidence summed per (draw, bin) in draw order, as one bincount over (draw, bin) cells would
        confs = np.bincount(flat >> 1, weights=conf[idx].ravel(), minlength=b * (n_bins + 1)).reshape(b, n_bins + 1)
        hits = counts[:, :, 1].astype(float)
        acc[done: done + b] = hits.sum(axis=1) / n
        ece[done: done + b] = np.abs(hits - confs)[:, :n_bins].sum(axis=1) / n
    return acc, ece


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """``(lo, hi)``: the ``(1-level)/2`` and ``(1+level)/2`` percentiles of the finite values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return None, None
    lo, hi = np.percentile(v, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


# -- per-question terms of the headline metrics -----------------------------------------------------

@dataclass(frozen=True)
class Terms:
    """Per-question terms of the headline metrics of one model on one view (unscored questions
    dropped), in the view's question order; built by :func:`terms_of` from ``metrics.row_stats``."""

    request_id: np.ndarray
    question_id: np.ndarray
    hard: np.ndarray  # has a hard label (accuracy's denominator)
    correct: np.ndarray  # valid, hard and argmax == label (not-correct policy)
    prob: np.ndarray  # valid with a target (NLL/Brier)
    nll: np.ndarray
    brier: np.ndarray
    ece_rows: np.ndarray  # valid and hard (ECE, reliability)
    conf: np.ndarray  # top-label confidence (0 where not an ECE row)
    bin: np.ndarray  # equal-width ECE bin of conf
    valid: np.ndarray
    pred: np.ndarray  # argmax index (meaningless where not valid)
    # repeats (nodes/repeats.py averaged_terms): ``correct`` is the hit rate, ``nll``/``brier`` the mean
    # loss over valid repeats and ``gap`` (N x bins) the mean of ``hit - conf`` in each answer's bin
    gap: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.request_id)


def terms_of(table) -> Terms:
    """:class:`Terms` of a :class:`~jevkedro.nodes.validate.QuestionTable` (public metric functions only)."""
    stats = M.table_stats(table)  # the terms the generic metrics computed (computed once per table)
    keep = ~np.asarray(table.unscored, dtype=bool)
    pred, _ = M.top_label(table.P)
    return Terms(
        request_id=np.asarray(table.request_id, dtype=object)[keep],
        question_id=np.asarray(table.question_id, dtype=object)[keep],
        hard=stats["hard"][keep], correct=stats["correct"][keep], prob=stats["prob"][keep],
        nll=stats["nll"][keep], brier=stats["brier"][keep], ece_rows=stats["ece_rows"][keep],
        conf=stats["conf"][keep], bin=stats["bin"][keep], valid=np.asarray(table.valid)[keep], pred=pred[keep],
    )


def _headline_block(t: Terms, acc_rows: np.ndarray, prob_rows: np.ndarray, ece_rows: np.ndarray,
                    bins: int = M.ECE_BINS) -> np.ndarray:
    """Per-question columns whose unit totals give every headline metric (see :func:`_headline_of`):
    ``[hits, hard, nll, brier, prob, D_1..D_bins, ece_n]`` with ``D_b = sum over bin b of
    (hit - confidence)`` (ECE needs only ``|H_b - C_b|``, so one column per bin)."""
    n = len(t)
    if t.gap is None:
        gap = np.zeros((n, bins))
        gap[np.arange(n), t.bin] = np.where(ece_rows, t.correct.astype(float) - t.conf, 0.0)
    else:
        gap = np.where(np.asarray(ece_rows, dtype=bool)[:, None], t.gap, 0.0)
    return np.column_stack([
        np.where(acc_rows, t.correct, 0), acc_rows, np.where(prob_rows, t.nll, 0.0), np.where(prob_rows, t.brier, 0.0), prob_rows,
        gap, ece_rows,
    ]).astype(float)


def _headline_unit_totals(t: Terms, codes: np.ndarray, G: int, bins: int = M.ECE_BINS) -> np.ndarray:
    """``unit_totals(codes, G, _headline_block(t, t.hard, t.prob, t.ece_rows))`` without the
    ``(N, 6 + bins)`` per-question block and its sorted copy (about 0.3 GB at 460,000 questions):
    one ``bincount`` per column, the bins' columns as one over (unit, bin) cells; equal to the
    block's segment sums up to rounding (summation order)."""
    out = np.zeros((G, 6 + bins))
    if not len(codes):
        return out
    for j, col in enumerate(((t.correct & t.hard), t.hard, np.where(t.prob, t.nll, 0.0), np.where(t.prob, t.brier, 0.0), t.prob)):
        out[:, j] = np.bincount(codes, weights=np.asarray(col, dtype=float), minlength=G)
    gap = np.where(t.ece_rows, t.correct.astype(float) - t.conf, 0.0)
    out[:, 5:5 + bins] = np.bincount(codes * bins + t.bin, weights=gap, minlength=G * bins).reshape(G, bins)
    out[:, 5 + bins] = np.bincount(codes, weights=t.ece_rows.astype(float), minlength=G)
    return out


def _headline_of(tot: np.ndarray, bins: int = M.ECE_BINS) -> dict[str, np.ndarray]:
    """Headline metrics from totals of :func:`_headline_block` columns (rows: resamples)."""
    tot = np.atleast_2d(tot)
    return {
        "accuracy": _ratio(tot[:, 0], tot[:, 1]),
        "nll": _ratio(tot[:, 2], tot[:, 4]),
        "brier": _ratio(tot[:, 3], tot[:, 4]),
        "ece": _ratio(np.abs(tot[:, 5:5 + bins]).sum(axis=1), tot[:, 5 + bins]),
    }


def headline_intervals(t: Terms, units: np.ndarray | None = None, resamples: int = RESAMPLES, seed: int = SEED,
                       level: float = LEVEL) -> dict[str, Any]:
    """Percentile-bootstrap intervals of accuracy, NLL, Brier and ECE over the whole view,
    resampling whole units (``units``: one key per question; default its request id)."""
    codes, G = unit_codes(t.request_id if units is None else units)
    block = _headline_unit_totals(t, codes, G)
    (boot,) = bootstrap_totals([block], resamples, seed) if G else [np.zeros((0, block.shape[1]))]
    values = _headline_of(boot)
    return {name: list(percentile_interval(values[name], level)) for name in HEADLINE}


# A slice column: each question's value, or already coded as ``(sorted distinct values, each
# question's index into them)`` (:func:`jevkedro.nodes.metrics.slice_codes`, no strings sorted).
SliceData = np.ndarray | tuple[Sequence[str], np.ndarray]


def _slice_members(t: Terms, slices: Mapping[str, SliceData], max_values: int) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """``(N, s)`` column of each question's value in each slice of at most ``max_values`` values,
    as an index into ``keys`` (the ``(slice, value)`` pairs, in slice order then sorted values)."""
    columns: list[np.ndarray] = []
    keys: list[tuple[str, str]] = []
    for name, column in slices.items():
        values, vcodes = column if isinstance(column, tuple) else \
            np.unique(np.asarray(column, dtype=object).astype(str), return_inverse=True)
        if len(values) > max_values:
            continue
        columns.append(vcodes.astype(np.intp) + len(keys))
        keys += [(name, str(v)) for v in values]
    return (np.column_stack(columns) if columns else np.zeros((len(t), 0), dtype=np.intp)), keys


@dataclass(frozen=True)
class SliceTotals:
    """Hits and hard-label questions per slice value, resampled through *signatures*.

    A signature is one combination of slice values (one value per slice: a row of ``member``);
    slice values have few combinations (43 domains x 3 difficulties x 2 languages: 258), far fewer
    than units. ``by_signature`` is a sparse ``(2S, G)`` matrix: row ``s`` holds each unit's hits
    among its hard-label questions of signature ``s``, row ``S + s`` their count. A resample's
    totals per signature are ``by_signature @ w``; per slice value, the sum over the signatures
    taking that value (``to_keys``, a small ``S x k`` 0/1 matrix). The product costs one entry per
    (unit, signature) pair and resample (about one per unit), instead of one per question and
    slice for a units x values block. Every operand is an integer count, so the totals are exact
    whatever the order of summation."""

    by_signature: Any  # scipy.sparse CSC (2S, G): times the C-ordered counts' transpose, 2-3x faster than CSR
    to_keys: np.ndarray  # (S, k) 0/1: signature s takes slice value j

    @classmethod
    def of(cls, t: Terms, member: np.ndarray, n_keys: int, codes: np.ndarray, G: int) -> SliceTotals:
        from scipy import sparse

        hard = np.flatnonzero(t.hard)
        if not len(hard) or not member.shape[1]:
            return cls(sparse.csc_matrix((0, G)), np.zeros((0, n_keys)))
        rows = member[hard].astype(np.int64)
        # one integer per row (mixed radix over the slices' value indices), then unique: np.unique
        # over rows (axis=0) sorts them as opaque records, about 10x slower
        code = np.zeros(len(hard), dtype=np.int64)
        for j in range(rows.shape[1]):
            code = code * n_keys + rows[:, j]
        first_of, sig = np.unique(code, return_index=True, return_inverse=True)[1:]
        signatures = rows[first_of]
        S = len(signatures)
        unit = codes[hard]
        hits = sparse.csc_matrix((t.correct[hard].astype(float), (sig, unit)), shape=(S, G))  # duplicates summed
        count = sparse.csc_matrix((np.ones(len(hard)), (sig, unit)), shape=(S, G))
        to_keys = np.zeros((S, n_keys))
        to_keys[np.repeat(np.arange(S), signatures.shape[1]), signatures.ravel()] = 1.0
        return cls(sparse.vstack([hits, count]).tocsc(), to_keys)

    @property
    def shape(self) -> tuple[int, int]:
        """``(G, 2k)``, as the dense block it stands for."""
        return self.by_signature.shape[1], 2 * self.to_keys.shape[1]

    def resampled(self, W: np.ndarray) -> np.ndarray:
        """``(b, 2k)`` totals: hits per slice value, then hard-label questions, of each row of ``W``."""
        S = self.to_keys.shape[0]
        per_sig = np.asarray(self.by_signature @ W.T)  # (2S, b)
        return np.hstack([per_sig[:S].T @ self.to_keys, per_sig[S:].T @ self.to_keys])


def _slice_results(t: Terms, member: np.ndarray, keys: list[tuple[str, str]], boot: np.ndarray,
                   level: float) -> dict[str, dict[str, Any]]:
    k = len(keys)
    acc_boot = _ratio(boot[:, :k], boot[:, k:])
    out: dict[str, dict[str, Any]] = {}
    column = {name: c for c, name in enumerate(dict.fromkeys(name for name, _ in keys))}
    for j, (name, value) in enumerate(keys):
        if value == "":
            continue
        is_value = member[:, column[name]] == j
        hard = is_value & t.hard
        n_hard = int(hard.sum())
        rows = is_value & t.ece_rows
        out.setdefault(name, {})[value] = {
            "n": n_hard,
            "accuracy": float((hard & t.correct).sum() / n_hard) if n_hard else None,
            "accuracy_ci": list(percentile_interval(acc_boot[:, j], level)),
            "mean_confidence": float(t.conf[rows].mean()) if rows.any() else None,
            "ece": M.ece(t.conf[rows], t.correct[rows]) if rows.any() else None,
        }
    return out


def slice_intervals(t: Terms, slices: Mapping[str, SliceData], units: np.ndarray | None = None,
                    resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                    max_values: int = 50) -> dict[str, dict[str, Any]]:
    """Per slice value: accuracy with a unit-bootstrap interval, mean confidence and ECE
    (``{slice: {value: {"n", "accuracy", "accuracy_ci", "mean_confidence", "ece"}}}``), every
    slice in one pass over the same resamples; a slice with more than ``max_values`` values is
    left out (its table is in the report without intervals)."""
    return report_intervals(t, slices, units, resamples, seed, level, max_values)[1]


def report_intervals(t: Terms, slices: Mapping[str, SliceData], units: np.ndarray | None = None,
                     resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                     max_values: int = 50) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """:func:`headline_intervals` and :func:`slice_intervals` from one set of resamples (the
    count matrices are drawn once; each is multiplied by both blocks of unit totals)."""
    if not len(t):
        return {name: [None, None] for name in HEADLINE}, {}
    codes, G = unit_codes(t.request_id if units is None else units)
    member, keys = _slice_members(t, slices, max_values)
    boot_head, boot_slices = bootstrap_totals(
        [_headline_unit_totals(t, codes, G), SliceTotals.of(t, member, len(keys), codes, G)], resamples, seed)
    values = _headline_of(boot_head)
    intervals = {name: list(percentile_interval(values[name], level)) for name in HEADLINE}
    return intervals, (_slice_results(t, member, keys, boot_slices, level) if keys else {})


# -- paired comparison of two models ----------------------------------------------------------------

def aligned(a: Terms, b: Terms) -> None:
    """Refuse two term sets that are not the same questions in the same order."""
    if len(a) != len(b) or not (np.array_equal(a.request_id, b.request_id) and np.array_equal(a.question_id, b.question_id)):
        raise ValueError("the two models' questions differ: compare runs on the same snapshot only")


def paired_resamples(a: Terms, b: Terms, units: np.ndarray | None = None, resamples: int = RESAMPLES,
                     seed: int = SEED) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray],
                                                dict[str, np.ndarray], dict[str, int]]:
    """``(point_a, point_b, resampled_a, resampled_b, counts)``: each headline metric of both models
    on the paired questions (see :func:`paired_metrics`), and its value in each paired resample
    (both models on the same resampled units); ``counts``: the paired questions per metric."""
    aligned(a, b)
    codes, G = unit_codes(a.request_id if units is None else units)
    hard = a.hard  # the targets are the snapshot's: equal for both
    prob = a.prob & b.prob
    ece_rows = a.ece_rows & b.ece_rows
    block_a = unit_totals(codes, G, _headline_block(a, hard, prob, ece_rows))
    block_b = unit_totals(codes, G, _headline_block(b, hard, prob, ece_rows))
    point_a, point_b = _headline_of(block_a.sum(axis=0)), _headline_of(block_b.sum(axis=0))
    boot_a, boot_b = bootstrap_totals([block_a, block_b], resamples, seed) if G else (block_a[:0], block_b[:0])
    counts = {"accuracy": int(hard.sum()), "nll": int(prob.sum()), "brier": int(prob.sum()), "ece": int(ece_rows.sum())}
    return point_a, point_b, _headline_of(boot_a), _headline_of(boot_b), counts


def paired_metrics(a: Terms, b: Terms, units: np.ndarray | None = None, resamples: int = RESAMPLES, seed: int = SEED,
                   level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """``{metric: {a, b, diff, ci_low, ci_high, n, verdict, analytic}}`` for accuracy, NLL, Brier, ECE,
    ``diff = a - b``; ``verdict`` names the better model by the bootstrap interval and the metric's
    direction; ``analytic`` (accuracy, NLL, Brier) is :func:`jevkedro.nodes.analytic.paired_analytic`.

    Accuracy pairs every hard-label question (an answer that is not valid is not correct);
    NLL, Brier and ECE pair the questions valid for both models. The interval is the percentile
    bootstrap of the resampled differences, both models on the same resampled units.
    """
    point_a, point_b, res_a, res_b, counts = paired_resamples(a, b, units, resamples, seed)
    analytic = paired_analytic(a, b, units, level)  # per-question metrics only: ECE is bootstrap-only
    out: dict[str, dict[str, Any]] = {}
    for name in HEADLINE:
        va, vb = point_a[name][0], point_b[name][0]
        lo, hi = percentile_interval(res_a[name] - res_b[name], level)
        entry: dict[str, Any] = {"a": _num(va), "b": _num(vb), "diff": _num(va - vb), "ci_low": lo, "ci_high": hi,
                                 "n": counts[name], "verdict": verdict(name, lo, hi)}
        if name in analytic:
            entry["analytic"] = {k: analytic[name][k] for k in ("se", "ci_low", "ci_high", "df", "p_value", "mde_80",
                                                                "clusters", "small_sample")}
        out[name] = entry
    return out


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> dict[str, Any]:
    """Exact McNemar test on paired right/wrong outcomes.

    ``a_only`` = questions only A got right, ``b_only`` = only B; under H0 (equal accuracy) each
    discordant question is A's with probability 1/2, so ``p = binomtest(a_only, a_only + b_only,
    0.5)`` two-sided (1.0 when there is no discordant question)."""
    ca, cb = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    a_only, b_only = int((ca & ~cb).sum()), int((~ca & cb).sum())
    n = a_only + b_only
    from scipy.stats import binomtest

    p = float(binomtest(a_only, n, 0.5, alternative="two-sided").pvalue) if n else 1.0
    return {"a_only": a_only, "b_only": b_only, "discordant": n, "p_value": p}


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values: ``q_(i) = min_{j >= i} min(1, p_(j) m / j)`` over the
    p-values sorted ascending (``m`` tests); returned in the input order."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if not m:
        return []
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def paired_slice_differences(a: Terms, b: Terms, slice_values: np.ndarray, units: np.ndarray | None = None,
                             resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                             max_values: int = 50) -> dict[str, dict[str, Any]]:
    """Accuracy ``a``, ``b`` and ``diff = a - b`` per slice value with a paired unit-bootstrap
    interval (hard-label questions of the value); empty past ``max_values`` values."""
    aligned(a, b)
    values, vcodes = np.unique(np.asarray(slice_values, dtype=object).astype(str), return_inverse=True)
    if len(values) > max_values or not len(a):
        return {}
    codes, G = unit_codes(a.request_id if units is None else units)
    member = np.zeros((len(a), len(values)), dtype=bool)
    member[np.arange(len(a)), vcodes] = True
    hard = member & a.hard[:, None]
    diff_cols = np.where(hard, a.correct[:, None], 0).astype(float) - np.where(hard, b.correct[:, None], 0).astype(float)
    block = unit_totals(codes, G, np.hstack([diff_cols, hard]))
    (boot,) = bootstrap_totals([block], resamples, seed)
    k = len(values)
    diffs = _ratio(boot[:, :k], boot[:, k:])
    out = {}
    for j, value in enumerate(values):
        n = int(hard[:, j].sum())
        if value == "" or not n:
            continue
        acc_a = float(np.where(hard[:, j], a.correct, 0).sum() / n)  # a hit rate under repeats
        acc_b = float(np.where(hard[:, j], b.correct, 0).sum() / n)
        lo, hi = percentile_interval(diffs[:, j], level)
        out[str(value)] = {"n": n, "a": acc_a, "b": acc_b, "diff": acc_a - acc_b, "ci_low": lo, "ci_high": hi}
    return out


# -- ranking and selective prediction ---------------------------------------------------------------

def auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve by the Mann–Whitney statistic with average ranks for ties:
    ``(sum of positives' ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg)``; None with one class."""
    s = np.asarray(scores, dtype=float)
    pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(s)  # average ranks of ties
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def macro_auroc(P: np.ndarray, labels: np.ndarray) -> float | None:
    """AUROC of a group of questions with the same candidates: two candidates — the score of
    column 1 against ``label == 1`` (column 1 is the positive class); more — the mean over
    classes ``k`` of the one-vs-rest AUROC of column ``k``; None when a class never occurs."""
    P = np.asarray(P, dtype=float)
    labels = np.asarray(labels)
    if P.ndim != 2 or P.shape[1] < 2:
        return None
    if P.shape[1] == 2:
        return auroc(P[:, 1], labels == 1)
    per_class = [auroc(P[:, k], labels == k) for k in range(P.shape[1])]
    return None if any(v is None for v in per_class) else float(np.mean([float(v) for v in per_class if v is not None]))


def selective_auroc(conf: np.ndarray, correct: np.ndarray) -> float | None:
    """How well confidence ranks right answers above wrong ones: :func:`auroc` of ``conf`` with
    the correct answers as positives."""
    return auroc(conf, correct)


def confidence_order(conf: np.ndarray) -> np.ndarray:
    """Questions from the most to the least confident, ties in question order (stable)."""
    return np.argsort(-np.asarray(conf, dtype=float), kind="stable")


def risk_coverage(conf: np.ndarray, correct: np.ndarray, order: np.ndarray | None = None) -> dict[str, Any]:
    """Selective prediction: answer only the ``k`` most confident questions (stable order for
    ties), abstain on the rest. ``coverage_k = k / n``, ``risk_k = wrong among the k / k``;
    ``aurc`` = mean risk over ``k = 1..n`` (the area under the risk–coverage curve).
    ``order``: :func:`confidence_order` of ``conf``, when the caller has it."""
    c = np.asarray(conf, dtype=float)
    hit = np.asarray(correct, dtype=bool)
    n = len(c)
    if not n:
        return {"coverage": np.zeros(0), "risk": np.zeros(0), "aurc": None}
    order = confidence_order(c) if order is None else order
    k = np.arange(1, n + 1)
    risk = np.cumsum(~hit[order]) / k
    return {"coverage": k / n, "risk": risk, "aurc": float(risk.mean())}


def selective_accuracy(conf: np.ndarray, correct: np.ndarray, coverage: float, order: np.ndarray | None = None) -> float | None:
    """Accuracy on the ``max(1, round(coverage n))`` most confident questions (stable for ties)."""
    c = np.asarray(conf, dtype=float)
    if not len(c):
        return None
    k = max(1, int(round(coverage * len(c))))
    order = confidence_order(c) if order is None else order
    return float(np.asarray(correct, dtype=float)[order[:k]].mean())


def coverage_at_risk(conf: np.ndarray, correct: np.ndarray, risk: float = 0.05, order: np.ndarray | None = None,
                     rc: dict[str, Any] | None = None) -> float | None:
    """The largest coverage ``k / n`` whose ``k`` most confident answers err at most ``risk``
    (``rc``: :func:`risk_coverage` of the same answers, when the caller has it)."""
    rc = risk_coverage(conf, correct, order) if rc is None else rc
    if not len(rc["risk"]):
        return None
    ok = np.flatnonzero(rc["risk"] <= risk + 1e-12)
    return float(rc["coverage"][ok[-1]]) if len(ok) else 0.0


# -- smooth calibration curve -----------------------------------------------------------------------

FINE_BINS = 1000  # confidences are pooled on this fine grid before smoothing (error < 1/2000)


def _pooled(conf: np.ndarray, y: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mass and ``y``-sum of the questions on a fine grid of ``FINE_BINS`` cells over [0, 1]."""
    c = np.clip(np.asarray(conf, dtype=float), 0.0, 1.0)
    w = np.ones_like(c) if weights is None else np.asarray(weights, dtype=float)
    cell = np.minimum((c * FINE_BINS).astype(np.intp), FINE_BINS - 1)
    centers = (np.arange(FINE_BINS) + 0.5) / FINE_BINS
    mass = np.bincount(cell, weights=w, minlength=FINE_BINS)
    ysum = np.bincount(cell, weights=w * np.asarray(y, dtype=float), minlength=FINE_BINS)
    return centers, mass, ysum


def _kernel(grid: np.ndarray, centers: np.ndarray, bandwidth: float) -> np.ndarray:
    """Gaussian kernel reflected at 0 and 1: ``phi((t-c)/h) + phi((t+c)/h) + phi((t-2+c)/h)``."""
    t = np.asarray(grid, dtype=float)[:, None]
    return sum(np.exp(-0.5 * ((t - m) / bandwidth) ** 2) for m in (centers, -centers, 2.0 - centers))


def smooth_calibration(conf: np.ndarray, correct: np.ndarray, grid: np.ndarray, bandwidth: float,
                       weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Kernel-smoothed accuracy as a function of confidence (Nadaraya–Watson with a Gaussian
    kernel reflected at 0 and 1, so the curve is not biased at the edges):
    ``acc(t) = sum_i k(t, c_i) y_i / sum_i k(t, c_i)`` (questions pooled on a fine grid first).
    Returns ``(acc(t), density(t))``; NaN where there is no mass."""
    centers, mass, ysum = _pooled(conf, correct, weights)
    k = _kernel(grid, centers, bandwidth)
    dens = k @ mass
    acc = _ratio(k @ ysum, dens)
    return acc, dens / max(mass.sum(), 1e-12) / (bandwidth * np.sqrt(2 * np.pi))


def smooth_ece(conf: np.ndarray, correct: np.ndarray, bandwidth: float, points: int = 200) -> float | None:
    """Smooth ECE at one bandwidth: the density-weighted mean over a grid of ``|r(t)|``, the
    kernel-smoothed residual ``y - c``: ``sum_t |r(t)| dens(t) / sum_t dens(t)``."""
    c = np.asarray(conf, dtype=float)
    if not len(c):
        return None
    grid = np.linspace(0, 1, points)
    resid, dens = smooth_calibration(c, np.asarray(correct, dtype=float) - c, grid, bandwidth)
    keep = np.isfinite(resid)
    return float((np.abs(resid[keep]) * dens[keep]).sum() / dens[keep].sum()) if keep.any() else None


def smooth_bandwidth(conf: np.ndarray, correct: np.ndarray, low: float = 1e-3, steps: int = 12) -> float:
    """The bandwidth ``h`` where smooth ECE equals ``h`` (a fixed point found by bisection on
    ``[low, 1]``: wide where the data say little, narrow where they show miscalibration);
    at least 0.02 so that a curve stays readable."""
    lo, hi = low, 1.0
    if (smooth_ece(conf, correct, hi) or 0.0) >= hi:
        return hi
    for _ in range(steps):
        mid = (lo + hi) / 2
        if (smooth_ece(conf, correct, mid) or 0.0) >= mid:
            lo = mid
        else:
            hi = mid
    return max(hi, 0.02)


def smooth_calibration_band(conf: np.ndarray, correct: np.ndarray, units: np.ndarray, grid: np.ndarray, bandwidth: float,
                            resamples: int = 200, seed: int = SEED, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile-bootstrap band of :func:`smooth_calibration`, units resampled whole
    (a resample weighs each question by its unit's count)."""
    codes, G = unit_codes(units)
    k = _kernel(grid, (np.arange(FINE_BINS) + 0.5) / FINE_BINS, bandwidth)
    c = np.clip(np.asarray(conf, dtype=float), 0.0, 1.0)
    cell = np.minimum((c * FINE_BINS).astype(np.intp), FINE_BINS - 1)
    y = np.asarray(correct, dtype=float)
    curves = []
    # per unit, its questions' count and hits in each fine cell (sparse, integer): a resample's
    # mass and hits per cell are then one product with its counts, exact in any summation order
    from scipy import sparse

    # (mass over hits: one product per chunk, which also reads the chunk's counts once)
    of_unit = sparse.vstack([sparse.csr_matrix((np.ones(len(codes)), (cell, codes)), shape=(FINE_BINS, G)),
                             sparse.csr_matrix((y, (cell, codes)), shape=(FINE_BINS, G))]).tocsr()
    for W in resample_counts(G, resamples, seed):
        per_cell = np.asarray(of_unit @ W.T).T
        mass, ysum = per_cell[:, :FINE_BINS], per_cell[:, FINE_BINS:]
        curves.append(_ratio(ysum @ k.T, mass @ k.T))
    arr = np.vstack(curves)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a grid point with no mass in every resample
        lo = np.nanpercentile(arr, 50 * (1 - level), axis=0)
        hi = np.nanpercentile(arr, 50 * (1 + level), axis=0)
    return lo, hi
