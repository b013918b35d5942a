"""The static per-question layout of a snapshot, built from its rows.

Everything scoring needs from a snapshot that does not depend on the answers: which questions
exist and in which order (snapshot order, then each request's question order), their type,
candidate keys and count ``K``, score level names, target distributions ``Y`` and labels, the
unscored flags, the slice columns and the level order of score questions whose candidates are not
laid out ``"0".."K-1"``. Each score reuses it instead of walking every row again. It is only ever
built from rows in memory (a loaded snapshot's rows come from its verified TSV), never read from
a file: only the pinned TSV decides labels.

Slice columns are kept as integer codes into their sorted distinct values (:class:`SliceColumn`):
grouping by a slice is then a ``bincount`` over codes, not a sort of a million strings. The
arrays are read-only: every question table of the snapshot shares them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from jevkedro.protocol import QUESTION_TYPES, SnapshotRow, Target, level_names_of

QTYPE_CODES = {t: i for i, t in enumerate(QUESTION_TYPES)}  # noul 0, choice 1, score 2


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class SliceColumn:
    """One slice column: ``values[codes[i]]`` is question ``i``'s value (``""`` where it has none);
    ``values`` are sorted, so code order is the order ``np.unique`` would give."""

    codes: np.ndarray
    values: list[str]

    def objects(self) -> np.ndarray:
        return np.array(self.values, dtype=object)[self.codes]


@dataclass
class QuestionLayout:
    """Per-question arrays of a snapshot (``N`` questions, ``R`` requests, padded width ``kmax``).

    ``q_start[r]:q_start[r+1]`` are request ``r``'s questions (``question_ids`` in that range);
    ``cand_start[i]:cand_start[i+1]`` question ``i``'s candidate keys in ``cand_flat``;
    ``level_names`` the level names of score questions whose levels are all strings (by
    question); ``noul_true_first[i]`` whether a noul question's candidates are ``true, false``.
    """

    request_ids: list[str]
    q_start: np.ndarray
    question_ids: list[str]
    qtypes: list[str]
    K: np.ndarray
    cand_start: np.ndarray
    cand_flat: np.ndarray
    level_names: dict[int, list[str]]
    Y: np.ndarray
    has_target: np.ndarray
    label: np.ndarray
    unscored: np.ndarray
    level_order: np.ndarray | None
    slice_columns: dict[str, SliceColumn] = field(default_factory=dict)
    target_label: np.ndarray | None = None  # the target's label index, unscored ones too (-1: none)
    soft_target: np.ndarray | None = None  # whether the target is a distribution (it is then ``Y``)

    def __post_init__(self) -> None:
        self.position = {rid: r for r, rid in enumerate(self.request_ids)}
        self.q_start_list = self.q_start.tolist()
        self.qids_by_request = [tuple(self.question_ids[a:b]) for a, b in zip(self.q_start_list, self.q_start_list[1:])]
        self.request_index = _frozen(np.repeat(np.arange(len(self.request_ids), dtype=np.int64), np.diff(self.q_start)))
        self.request_id = _frozen(np.array(self.request_ids, dtype=object)[self.request_index])
        self.question_id = _frozen(np.array(self.question_ids, dtype=object))
        self.qtype = _frozen(np.array(self.qtypes, dtype=object))
        self.qtype_code = _frozen(np.array([QTYPE_CODES.get(t, -1) for t in self.qtypes], dtype=np.int8))
        first = self.cand_flat[self.cand_start[:-1][self.K > 0]] if len(self.K) else np.zeros(0, dtype=object)
        true_first = np.zeros(len(self.K), dtype=bool)
        true_first[self.K > 0] = first == "true"
        self.noul_true_first = _frozen(true_first)
        self._slice_objects: dict[str, np.ndarray] | None = None
        if self.target_label is None:
            self.target_label = self.label
        if self.soft_target is None:
            self.soft_target = _frozen(np.zeros(len(self.K), dtype=bool))

    def __len__(self) -> int:
        return len(self.K)

    @property
    def kmax(self) -> int:
        return self.Y.shape[1]

    def candidates_of(self, i: int) -> list[str]:
        return self.cand_flat[self.cand_start[i]: self.cand_start[i + 1]].tolist()

    def candidate_list_codes(self) -> np.ndarray:
        """One integer per question, equal for two questions exactly when their candidate lists
        are equal (same keys, same order): the lists as rows of label codes, ranked by lexsort."""
        import pandas as pd

        n = len(self.K)
        if not n:
            return np.zeros(0, dtype=np.int64)
        labels = pd.factorize(self.cand_flat)[0] + 1  # 0 pads the rows of shorter lists
        rows = np.zeros((n, max(self.kmax, 1)), dtype=np.int64)
        starts = self.cand_start[:-1]
        pos = np.arange(len(labels)) - np.repeat(starts, self.K)
        rows[np.repeat(np.arange(n), self.K), pos] = labels
        order = np.lexsort(rows.T[::-1])
        ranked = rows[order]
        new = np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)]
        codes = np.empty(n, dtype=np.int64)
        codes[order] = np.cumsum(new) - 1
        return codes

    def question_ids_of(self, r: int) -> list[str]:
        return self.question_ids[self.q_start[r]: self.q_start[r + 1]]

    def slices(self) -> dict[str, np.ndarray]:
        """Slice columns as object arrays of strings (the question table's ``slices``)."""
        if self._slice_objects is None:
            self._slice_objects = {k: _frozen(c.objects()) for k, c in self.slice_columns.items()}
        return self._slice_objects


# A row's parts in snapshot column order: request id, request, candidates, targets, slices, source.
RowCells = tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Target], dict[str, Any], dict[str, Any]]


def question_layout(rows: Iterable[SnapshotRow]) -> QuestionLayout:
    """Lay every question of ``rows`` out as arrays (see :class:`QuestionLayout`); one pass."""
    return layout_of_cells((r.request_id, r.request, r.candidates, r.targets, r.slices, r.source) for r in rows)


def layout_of_cells(rows: Iterable[RowCells]) -> QuestionLayout:
    """The layout of rows given as their checked parts (:data:`RowCells`; a loaded snapshot's
    lines as its reader decodes them, so no row object is built); one pass.

    A question's slices are ``{"type": <type>, "question": <id>, **request slices, **its own
    question slices}`` (later ones win); request-level slices are gathered once per request.
    """
    request_ids: list[str] = []
    q_counts: list[int] = []
    qids: list[str] = []
    qtypes: list[str] = []
    level_names: dict[int, list[str]] = {}
    cands: list[list[str]] = []
    targets: list[Any] = []
    req_slices: list[dict[str, Any]] = []
    q_overrides: list[tuple[int, dict[str, Any]]] = []  # (question, its own slices)
    for rid, request, candidates, row_targets, slices, _ in rows:  # per-question fields gathered in bulk
        questions = request["questions"]
        ids = tuple(questions)
        request_ids.append(rid)
        q_counts.append(len(ids))
        own = slices.get("questions")
        if own:
            q_overrides.extend((len(qids) + j, own[q]) for j, q in enumerate(ids) if own.get(q))
        qids.extend(ids)
        for q in questions.values():
            if q["type"] == "score" and (names := level_names_of(q)) is not None:
                level_names[len(qtypes)] = names
            qtypes.append(q["type"])
        cands.extend(map(candidates.__getitem__, ids))
        targets.extend(map(row_targets.__getitem__, ids))
        req_slices.append(slices)
    n = len(qids)
    raw_label = [t.label for t in targets]
    unscored = [bool(t.unscored) for t in targets]
    dists = [t.probabilities for t in targets]
    labels = [-1 if lab is None or u else lab for lab, u in zip(raw_label, unscored)]
    has_target = [(d is not None or lab is not None) and not u for d, lab, u in zip(dists, raw_label, unscored)]
    onehot = [-1 if d is not None or lab is None else lab for d, lab in zip(dists, raw_label)]
    K = np.fromiter(map(len, cands), dtype=np.int64, count=n)
    kmax = int(K.max()) if n else 1
    cand_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(K, out=cand_start[1:])
    # Targets: one-hot where there is a label only, the distribution where there is one.
    Y = np.zeros((n, kmax))
    hot = np.array(onehot, dtype=np.int64)
    rows_hot = np.flatnonzero(hot >= 0)
    Y[rows_hot, hot[rows_hot]] = 1.0
    for i, dist in enumerate(dists):
        if dist is not None:
            Y[i, : len(dist)] = dist
    q_start = np.zeros(len(request_ids) + 1, dtype=np.int64)
    np.cumsum(np.array(q_counts, dtype=np.int64), out=q_start[1:])
    request_index = np.repeat(np.arange(len(request_ids), dtype=np.int64), q_counts)
    return QuestionLayout(
        request_ids=request_ids,
        q_start=_frozen(q_start),
        question_ids=qids,
        qtypes=qtypes,
        K=_frozen(K),
        cand_start=_frozen(cand_start),
        cand_flat=_frozen(np.array(list(chain.from_iterable(cands)), dtype=object)),
        level_names=level_names,
        Y=_frozen(Y),
        has_target=_frozen(np.array(has_target, dtype=bool)),
        label=_frozen(np.array(labels, dtype=np.int64)),
        unscored=_frozen(np.array(unscored, dtype=bool)),
        level_order=_level_order(qtypes, cands, n, kmax),
        slice_columns=_slice_columns(req_slices, request_index, q_overrides, {"type": qtypes, "question": qids}),
        target_label=_frozen(np.array([-1 if lab is None else lab for lab in raw_label], dtype=np.int64)),
        soft_target=_frozen(np.array([d is not None for d in dists], dtype=bool)),
    )


def _slice_columns(req_slices: list[dict[str, Any]], request_index: np.ndarray, q_overrides: list[tuple[int, dict[str, Any]]],
                   base: dict[str, list[str]]) -> dict[str, SliceColumn]:
    """Every slice column: the question's own value, else its request's, else ``base`` (type and
    question id), else none (``""``). Request-level values are coded once per request."""
    in_requests: set[str] = set()
    for sl in req_slices:
        in_requests.update(sl)
    in_requests.discard("questions")
    overridden: set[str] = set()
    for _, own in q_overrides:
        overridden.update(own)
    out = {}
    for name in sorted(in_requests | overridden | set(base)):
        if name not in overridden and name not in base:  # the common case: one value per request
            per_request = _slice_column([sl.get(name) for sl in req_slices])
            out[name] = SliceColumn(_frozen(per_request.codes[request_index]), per_request.values)
            continue
        if name not in in_requests:
            col: list[Any] = list(base[name]) if name in base else [None] * len(request_index)
        else:
            per = [sl.get(name, _MISSING) for sl in req_slices]
            col = [per[r] for r in request_index.tolist()]
            fallback = base.get(name)
            col = [(fallback[i] if fallback is not None else None) if v is _MISSING else v for i, v in enumerate(col)]
        for i, own in q_overrides:
            if name in own:
                col[i] = own[name]
        out[name] = _slice_column(col)
    return out


_MISSING = object()


def _level_order(qtypes: list[str], cands: list[list[str]], n: int, kmax: int) -> np.ndarray | None:
    """``(N, kmax)`` column of level ``k`` per row, for score questions whose keys are a
    permutation of ``"0".."K-1"`` (None when every score question is in level order)."""
    order = None
    natural: dict[int, list[str]] = {}
    for i, qtype in enumerate(qtypes):
        if qtype != "score":
            continue
        keys = cands[i]
        want = natural.setdefault(len(keys), [str(k) for k in range(len(keys))])
        if keys != want and sorted(keys) == sorted(want):
            if order is None:
                order = np.tile(np.arange(kmax, dtype=np.int32), (n, 1))
            order[i, : len(keys)] = np.argsort([int(k) for k in keys])
    return None if order is None else _frozen(order)


def _text(v: Any) -> str:
    return v if v.__class__ is str else ("" if v is None else str(v))


def _slice_column(col: list[Any]) -> SliceColumn:
    """Codes into the sorted distinct values (``None`` -> ``""``, anything else ``str()``, so 1
    and "1" are one value, as they are for ``np.unique`` over ``str``)."""
    try:
        distinct = dict.fromkeys(col)
        plain = all(v is None or v.__class__ is str for v in distinct)
    except TypeError:  # an unhashable value (a list, an object)
        plain = False
    if not plain:  # compare as text (True and 1 are equal keys but different slice values)
        col = [_text(v) for v in col]
        distinct = dict.fromkeys(col)
    text_of = {v: _text(v) for v in distinct}
    values = sorted(set(text_of.values()))
    rank = {t: i for i, t in enumerate(values)}
    code_of = {v: rank[t] for v, t in text_of.items()}
    codes = np.fromiter(map(code_of.__getitem__, col), dtype=np.int32, count=len(col))
    return SliceColumn(_frozen(codes), values)
