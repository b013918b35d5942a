"""Across-repeat figures (issue 22 item 4): each against a plain per-question loop on random data."""

from __future__ import annotations

import math
import statistics

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jevkedro.nodes.repeats import across_repeats

rows = st.integers(1, 6).flatmap(lambda k: st.lists(
    st.tuples(st.lists(st.sampled_from([0.0, 1.0, math.nan]), min_size=k, max_size=k),
              st.lists(st.sampled_from(["a", "b", None]), min_size=k, max_size=k)), min_size=1, max_size=8))


@settings(max_examples=150, deadline=None)
@given(rows)
def test_across_repeat_figures_match_a_plain_loop(questions):
    k = len(questions[0][0])
    qid, att, hit, top = [], [], [], []
    for i, (hits, tops) in enumerate(questions):
        for a in range(k):
            qid.append(f"q{i}")
            att.append(a + 1)
            hit.append(hits[a])
            top.append(tops[a])
    got = across_repeats(qid, att, top, {"accuracy": np.array(hit)})
    means, variances = [], []
    for hits, _ in questions:
        valid = [h for h in hits if not math.isnan(h)]
        if valid:
            means.append(sum(valid) / len(valid))
            variances.append(statistics.pvariance(valid))
    assert got["repeats"] == k and got["accuracy_n"] == len(means)
    assert (got["accuracy"] is None) if not means else math.isclose(got["accuracy"], sum(means) / len(means))
    assert (got["accuracy_within_question_variance"] is None) if not variances else math.isclose(
        got["accuracy_within_question_variance"], sum(variances) / len(variances), abs_tol=1e-12)
    per_attempt = []
    for a in range(k):
        valid = [hits[a] for hits, _ in questions if not math.isnan(hits[a])]
        if valid:
            per_attempt.append(sum(valid) / len(valid))
    expected_std = statistics.stdev(per_attempt) if len(per_attempt) > 1 else None
    assert (got["accuracy_std_across_repeats"] is None) if expected_std is None else math.isclose(
        got["accuracy_std_across_repeats"], expected_std, abs_tol=1e-12)
    same = sum(len(set(tops)) == 1 and tops[0] is not None for _, tops in questions)
    assert math.isclose(got["same_top_answer_share"], same / len(questions))
