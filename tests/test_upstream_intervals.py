"""zh-decision-bench's and JevAlt-Bench's upstream intervals, reproduced with their own settings:
the vectorised versions against plain loops that follow each upstream's published procedure."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jevkedro.nodes import metrics as M
from jevkedro.nodes.validate import QuestionTable
from jevkedro.pipelines import jevalt_bench, zh_decision_bench


def test_zh_bootstrap_equals_the_per_iteration_loop():
    rng = np.random.default_rng(7)
    conf = rng.uniform(1 / 6, 1.0, 57)
    correct = rng.uniform(size=57) < conf
    ours = zh_decision_bench._upstream_bootstrap(conf, correct)
    # upstream's procedure: a fresh default_rng(42) per metric, 1,000 x integers(0, N, N), np.percentile
    loop = {}
    for name, fn in (("accuracy_ci", lambda c, k: k.mean()), ("ece_ci", lambda c, k: M.ece(c, k, right_closed=True))):
        g = np.random.default_rng(42)
        values = []
        for _ in range(1000):
            idx = g.integers(0, 57, 57)
            values.append(fn(conf[idx], correct[idx].astype(float)))
        loop[name] = np.percentile(values, [2.5, 97.5]).tolist()
    assert ours["accuracy_ci"] == pytest.approx(loop["accuracy_ci"], abs=1e-12)
    assert ours["ece_ci"] == pytest.approx(loop["ece_ci"], abs=1e-12)


def _table(request_ids, P, labels):
    n, k = P.shape
    return QuestionTable(
        request_id=np.array(request_ids, dtype=object), question_id=np.array([f"q{i}" for i in range(n)], dtype=object),
        qtype=np.array(["choice"] * n, dtype=object), K=np.full(n, k), P=P, Y=np.eye(k)[labels], has_target=np.ones(n, dtype=bool),
        label=np.array(labels), unscored=np.zeros(n, dtype=bool), status=np.array(["ok"] * n, dtype=object), reason=[None] * n,
    )


def test_jevalt_intervals_equal_the_item_clustered_python_loop():
    rng = np.random.default_rng(11)
    n_items = 23
    sizes = rng.integers(1, 4, n_items)
    rids = [f"item{i:02d}" for i in range(n_items) for _ in range(sizes[i])]
    n = len(rids)
    P = rng.dirichlet([1, 1, 1], size=n).round(2)  # rounded: ties in confidence, as real answers have
    P = P / P.sum(axis=1, keepdims=True)
    labels = rng.integers(0, 3, n)
    ours = jevalt_bench.upstream_metrics(_table(rids, P, labels))

    # the upstream procedure on plain lists: decisions grouped by item in order of first appearance,
    # random.Random(0).choices over the item keys, each resample's decisions in drawn order
    pred = P.argmax(axis=1)
    conf = P.max(axis=1)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rids):
        groups.setdefault(r, []).append(i)
    keys = list(groups)
    r = random.Random(0)

    def accuracy(ix):
        return sum(pred[i] == labels[i] for i in ix) / len(ix)

    def ece(ix):
        ranked = sorted(ix, key=lambda i: conf[i])
        total = 0.0
        for b in range(15):
            chunk = ranked[b * len(ranked) // 15:(b + 1) * len(ranked) // 15]
            if chunk:
                total += len(chunk) / len(ranked) * abs(np.mean([conf[i] for i in chunk]) - np.mean([pred[i] == labels[i] for i in chunk]))
        return total

    acc_vals, ece_vals = [], []
    for _ in range(1000):
        sample = [i for k in r.choices(keys, k=len(keys)) for i in groups[k]]
        acc_vals.append(accuracy(sample))
        ece_vals.append(ece(sample))
    for name, vals in (("accuracy", acc_vals), ("ece", ece_vals)):
        v = sorted(vals)
        assert ours["intervals"][name] == pytest.approx([v[int(0.025 * len(v))], v[int(0.975 * len(v)) - 1]], abs=1e-12)
    assert ours["accuracy"] == pytest.approx(accuracy(list(range(n))))
    assert ours["items"] == n_items and ours["settings"]["seed"] == 0
