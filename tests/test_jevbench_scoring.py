"""JevBench official scorer: every rule with hand-computed values (the family README)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jevkedro.family import family_manifest
from jevkedro.nodes import metrics as M
from jevkedro.nodes.validate import answer_probabilities, build_question_table
from jevkedro.pipelines.jevbench import official
from jevkedro.pipelines.jevbench import scoring as S
from support import choice, noul, record, task
from support import jevbench_snapshot_of as snapshot_of

AB = ["a", "b"]


# ------------------------------------------------------------------ per-item rules


def test_exact_label_set_missing_or_extra_is_invalid_and_wrong():
    for probs in ({"a": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.0}, {"a": 0.5, "B": 0.5}):
        item = S.score_item(probs, AB, "choice", "a")
        assert item["valid"] is False and item["correct"] is False and item["probs"] is None
        assert "label set differs" in item["error"]


@pytest.mark.parametrize("bad", [True, False, math.nan, math.inf, -0.1, 1.1, "0.5", None])
def test_value_checks_reject_bool_nonfinite_out_of_range_and_non_numbers(bad):
    item = S.score_item({"a": bad, "b": 0.5}, AB, "choice", "b")
    assert item["valid"] is False and item["strict_valid"] is False and item["correct"] is False


def test_sum_1_015_is_valid_renormalised_but_not_strictly_valid():
    item = S.score_item({"a": 0.5, "b": 0.515}, AB, "choice", "b")
    assert item["valid"] is True and item["strict_valid"] is False and item["renormalized"] is True
    assert item["probs"]["a"] == pytest.approx(0.5 / 1.015)
    assert item["probs"]["b"] == pytest.approx(0.515 / 1.015)
    assert item["predicted"] == "b" and item["correct"] is True
    # Brier on the renormalised distribution: (0.5/1.015)^2 + (1 - 0.515/1.015)^2 = 2 (0.5/1.015)^2
    assert S.brier_item(item["probs"], AB, "b") == pytest.approx(2 * (0.5 / 1.015) ** 2)


def test_sum_1_03_is_invalid_never_repaired_and_wrong():
    item = S.score_item({"a": 0.5, "b": 0.53}, AB, "choice", "b")
    assert item["valid"] is False and item["renormalized"] is False and item["probs"] is None
    assert item["predicted"] is None and item["correct"] is False
    assert item["sum"] == pytest.approx(1.03)


def test_strict_band_keeps_the_answer_as_returned():
    inside = S.score_item({"a": 0.4, "b": 0.6009}, AB, "choice", "b")  # |sum - 1| = 9e-4 <= 1e-3
    assert inside["strict_valid"] and not inside["renormalized"] and inside["probs"]["b"] == 0.6009
    outside = S.score_item({"a": 0.4, "b": 0.6011}, AB, "choice", "b")  # 1.1e-3 > 1e-3
    assert outside["valid"] and not outside["strict_valid"] and outside["renormalized"]
    low = S.score_item({"a": 0.4, "b": 0.581}, AB, "choice", "b")  # sum 0.981: inside 2e-2
    assert low["valid"] and low["renormalized"]
    assert not S.score_item({"a": 0.4, "b": 0.579}, AB, "choice", "b")["valid"]  # sum 0.979


def test_argmax_ties_go_to_the_lexicographically_smallest_label_whatever_the_label_order():
    assert S.score_item({"b": 0.5, "a": 0.5}, ["b", "a"], "choice", "a")["predicted"] == "a"
    three = {"zeta": 0.4, "alpha": 0.2, "mid": 0.4}
    assert S.score_item(three, ["zeta", "alpha", "mid"], "choice", "zeta")["predicted"] == "mid"
    # string order, not numeric: "10" < "9"
    assert S.argmax_lexicographic({"9": 0.5, "10": 0.5}) == "10"
    # noul: a 0.5 answer predicts "no"
    assert S.score_item({"no": 0.5, "yes": 0.5}, ["no", "yes"], "noul", "no")["predicted"] == "no"


def test_score_is_graded_on_the_argmax_level_with_the_expected_level_recorded():
    item = S.score_item({"0": 0.4, "1": 0.2, "2": 0.4}, ["0", "1", "2"], "score", 0)
    assert item["predicted"] == "0" and item["correct"] is True  # the rounded mean (1) would be wrong
    assert item["ordinal_ev"] == pytest.approx(1.0) and item["expected_level"] == 0
    wrong = S.score_item({"0": 0.1, "1": 0.2, "2": 0.7}, ["0", "1", "2"], "score", 1)
    assert wrong["predicted"] == "2" and wrong["correct"] is False
    assert wrong["ordinal_ev"] == pytest.approx(0.2 + 1.4) and wrong["expected_level"] == 1


def test_expected_null_gives_correct_null_and_failure_is_invalid_and_wrong():
    assert S.score_item({"a": 1.0, "b": 0.0}, AB, "choice", None)["correct"] is None
    failed = S.score_item(None, AB, "choice", "a", error="error: HTTP 500")
    assert failed["valid"] is False and failed["correct"] is False and failed["probs"] is None
    assert failed["error"] == "error: HTTP 500"


def test_noul_wire_mapping_and_answer_checks():
    probs, err = S.map_answer("noul", {"type": "noul", "noul": 0.7})
    assert err is None and probs == {"no": pytest.approx(0.3), "yes": 0.7}
    assert S.map_answer("noul", {"type": "noul", "noul": True})[0] is None  # a bool is not P(yes)
    assert S.map_answer("noul", {"type": "noul", "noul": "0.7"})[0] is None
    assert S.map_answer("choice", {"type": "noul", "noul": 0.5})[1] == "answer type 'noul' for a choice task"
    assert S.map_answer("choice", {"type": "choice", "choice": "a"})[1] == "no probabilities object"
    assert S.map_answer("score", None)[1].startswith("no answer")
    # out of range P(yes) survives the mapping and fails the value check
    assert S.score_item(S.map_answer("noul", {"noul": 1.2})[0], ["no", "yes"], "noul", "yes")["valid"] is False


def test_label_only_answers_abstention_is_invalid_and_wrong():
    assert S.score_label("yes", ["no", "yes"], "yes")["correct"] is True
    wrong = S.score_label("no", ["no", "yes"], "yes")
    assert wrong["valid"] is True and wrong["correct"] is False and wrong["probs"] is None
    abstained = S.score_label(None, ["no", "yes"], "yes")
    assert abstained["valid"] is False and abstained["correct"] is False and abstained["probs"] is None
    assert S.score_label("maybe", ["no", "yes"], "yes")["valid"] is False


# ------------------------------------------------------------------ summary pieces


def test_ece_ten_bins_min_int_conf_times_ten_9():
    conf = np.array([0.05, 0.95, 1.0, 0.55, 0.55])
    hit = np.array([0, 1, 1, 1, 0])
    out = S.ece_top_label(conf, hit)
    assert len(out["bins"]) == 10 and sum(b["n"] for b in out["bins"]) == out["n"] == 5
    assert out["bins"][9]["n"] == 2 and out["bins"][5]["n"] == 2 and out["bins"][0]["n"] == 1
    # bin 0: |0 - 0.05|; bin 5: |0.5 - 0.55|; bin 9: |1 - 0.975|  -> (0.05 + 2*0.05 + 2*0.025) / 5
    assert out["ece"] == pytest.approx((0.05 + 0.1 + 0.05) / 5)
    assert out["bins"][9]["mean_confidence"] == pytest.approx(0.975) and out["bins"][9]["accuracy"] == 1.0
    assert out["bins"][3] == {"lo": 0.3, "hi": 0.4, "n": 0, "mean_confidence": None, "accuracy": None}
    assert S.ece_top_label(np.array([]), np.array([]))["ece"] is None


def test_total_variation_to_gold_probs():
    assert S.total_variation({"approve": 0.6, "deny": 0.4}, {"approve": 0.7, "deny": 0.3},
                             ["approve", "deny"]) == pytest.approx(0.1)
    assert S.total_variation({"x": 1.0, "y": 0.0}, {"y": 1.0}, ["x", "y"]) == pytest.approx(1.0)


def test_uniform_chance_of_the_published_easy_histogram_matches_the_manifest():
    chance = S.uniform_chance([2] * 12 + [4] * 9 + [5] * 27)
    assert chance == pytest.approx((12 / 2 + 9 / 4 + 27 / 5) / 48) == pytest.approx(0.284375)
    assert family_manifest("jevbench")["tiers"]["easy"]["uniform_chance"] == pytest.approx(chance)
    cc = S.chance_corrected(0.5, 0.25)
    assert cc["chance_corrected"] == pytest.approx(1 / 3) and cc["chance_corrected_raw"] == pytest.approx(1 / 3)
    below = S.chance_corrected(0.1, 0.25)
    assert below["chance_corrected"] == 0.0 and below["chance_corrected_raw"] == pytest.approx(-0.2)


def test_release_chance_baselines_from_the_v13_option_count_histograms():
    tiers = family_manifest("jevbench")["tiers"]
    hist = {t: tiers[t]["release_chance"]["option_counts_all_frozen_items"] for t in ("easy", "original", "hard")}
    # easy 18 x 1/2 + 13 x 1/4 + 41 x 1/5 over 72 frozen items (48 public + 24 held out)
    assert S.chance_from_option_counts(hist["easy"]) == pytest.approx((9 + 3.25 + 8.2) / 72)
    # standard ("original"): 32/2 + 40/4 + 12/5 + 12/6 over 96
    assert S.chance_from_option_counts(hist["original"]) == pytest.approx((16 + 10 + 2.4 + 2) / 96)
    # hard: 77/2 + 26/3 + 73/4 + 38/5 + 6/6 over 220
    assert S.chance_from_option_counts(hist["hard"]) == pytest.approx((38.5 + 26 / 3 + 18.25 + 7.6 + 1) / 220)
    assert [tiers[t]["release_chance"]["upstream_tier"] for t in ("easy", "original", "hard")] == [
        "easy", "standard", "hard"]
    assert S.chance_from_option_counts({}) is None


def test_calibration_axis_terms():
    assert S.calibration_axis(0.1, 0.2) == pytest.approx({"ece_term": 80.0, "tvd_term": 80.0, "axis": 80.0})
    assert S.calibration_axis(0.05, None) == {"ece_term": pytest.approx(90.0), "tvd_term": None, "axis": pytest.approx(90.0)}
    assert S.calibration_axis(0.6, 0.0)["ece_term"] == 0.0  # ECE at or past 0.5 scores 0
    assert S.calibration_axis(0.6, 0.0)["axis"] == 50.0
    assert S.calibration_axis(None, 0.1)["axis"] is None  # no distribution, no axis


def test_latency_percentiles_leave_the_first_request_apart():
    out = S.latency([5.0, 1.0, 2.0, 3.0, None], [True, False, False, False, False])
    assert out["first_s"] == 5.0 and out["n"] == 3
    assert out["p50_s"] == pytest.approx(2.0) and out["p95_s"] == pytest.approx(2.9)  # linear: 2 + 0.9 * (3 - 2)
    assert out["first_n"] == 1


def test_official_latency_takes_the_first_request_out_of_the_percentiles(tmp_path):
    tasks = [task(f"easy-intent-0{i}", "choice", AB, "a") for i in range(1, 6)]
    preds = {"easy-intent-01": record(choice(a=1.0, b=0.0), latency=4.0, first=True),
             "easy-intent-02": record(choice(a=1.0, b=0.0), latency=1.0),
             "easy-intent-03": record(None, status="error", latency=None, error="HTTP 503"),
             "easy-intent-04": record(choice(a=1.0, b=0.0), latency=3.0),
             # a second worker's first request (distributed run): also left out
             "easy-intent-05": record(choice(a=1.0, b=0.0), latency=9.0, first=True)}
    lat = official.official_summary(snapshot_of(tmp_path, tasks), preds)["latency"]
    assert (lat["first_s"], lat["first_n"], lat["n"]) == (4.0, 2, 2)
    # percentiles over 1.0 and 3.0: p50 = 2.0, p95 = 1 + 0.95 * 2 = 2.9
    assert lat["p50_s"] == pytest.approx(2.0) and lat["p95_s"] == pytest.approx(2.9)
    assert lat["mean_s"] == pytest.approx(2.0)


# ------------------------------------------------------------------ whole summaries


def easy_tier_with_published_histogram():
    """48 easy tasks: 12 two-option (noul), 9 four-option, 27 five-option; 13 golds on the tie winner."""
    tasks = [task(f"easy-fact-{i:02d}", "noul", ["no", "yes"], "no" if i < 6 else "yes", family="fact")
             for i in range(12)]
    tasks += [task(f"easy-intent-{i:02d}", "choice", ["d", "c", "b", "a"], "a" if i < 3 else "c", family="intent")
              for i in range(9)]
    tasks += [task(f"easy-extraction-{i:02d}", "choice", ["e", "d", "c", "b", "a"], "a" if i < 4 else "e",
                   family="extraction") for i in range(27)]
    return tasks


def uniform_answer(t):
    if t["question"]["type"] == "noul":
        return noul(0.5)
    return choice(**{lab: 1 / len(t["labels"]) for lab in t["labels"]})


def test_uniform_answer_on_the_published_easy_histogram(tmp_path):
    tasks = easy_tier_with_published_histogram()
    snap = snapshot_of(tmp_path, tasks)
    preds = {t["id"]: record(uniform_answer(t)) for t in tasks}
    out = official.official_summary(snap, preds)
    o = out["overall"]
    # Brier: two-option 0.5, four-option 0.75^2 + 3 * 0.25^2 = 0.75, five-option 0.8^2 + 4 * 0.2^2 = 0.8
    assert o["brier_mean"] == pytest.approx((12 * 0.5 + 9 * 0.75 + 27 * 0.8) / 48) == pytest.approx(0.715625)
    # ties go to "no" / "a": 6 + 3 + 4 = 13 correct
    assert o["n_correct"] == 13 and o["accuracy"] == pytest.approx(13 / 48)
    assert o["schema_validity"] == 1.0 and o["schema_validity_strict"] == 1.0
    # ECE: bin 5 holds the 12 nouls (conf 0.5, acc 0.5, gap 0); bin 2 holds 36 choices with mean
    # confidence 7.65/36 and accuracy 7/36 -> (36/48) * (0.65/36) = 0.65/48
    assert o["ece"]["ece"] == pytest.approx(0.65 / 48)
    assert o["ece"]["bins"][2]["n"] == 36 and o["ece"]["bins"][5]["n"] == 12
    cc = out["chance_corrected"]["easy"]
    assert cc["chance"] == pytest.approx(0.284375)
    assert cc["chance_corrected_raw"] == pytest.approx((13 / 48 - 0.284375) / 0.715625)
    assert cc["chance_corrected"] == 0.0
    # the release's own v1.3 easy baseline (72 frozen items) is 20.45 / 72, also above 13/48
    release = cc["release"]
    assert release["upstream_tier"] == "easy" and release["items"] == 72
    assert release["chance"] == pytest.approx(20.45 / 72)
    assert release["chance_corrected_raw"] == pytest.approx((13 / 48 - 20.45 / 72) / (1 - 20.45 / 72))
    assert release["chance_corrected"] == 0.0
    # macro over families: fact 6/12, intent 3/9, extraction 4/27
    assert o["macro_accuracy"] == pytest.approx((6 / 12 + 3 / 9 + 4 / 27) / 3)
    # majority-class baseline: gold "e" on 23 of 48 tasks
    assert o["majority_class"] == "e" and o["majority_class_accuracy"] == pytest.approx(23 / 48)


def test_accuracy_denominator_is_every_scorable_task_and_invalid_has_no_distribution(tmp_path):
    tasks = [task("easy-intent-01", "choice", AB, "b"), task("easy-intent-02", "choice", AB, "b"),
             task("easy-intent-03", "choice", AB, "b"), task("easy-intent-04", "choice", AB, None)]
    snap = snapshot_of(tmp_path, tasks)
    preds = {
        "easy-intent-01": record(choice(a=0.25, b=0.75), latency=1.0),
        "easy-intent-02": record(None, status="error", latency=None, error="HTTP 500"),
        # easy-intent-03: never attempted; easy-intent-04: unscorable (expected null)
        "easy-intent-04": record(choice(a=0.5, b=0.53), latency=3.0),
    }
    o = official.official_summary(snap, preds)["overall"]
    assert (o["n_planned"], o["n_attempted"], o["n_scorable"], o["n_valid"], o["n_correct"]) == (4, 3, 3, 1, 1)
    assert o["accuracy"] == pytest.approx(1 / 3)  # unattempted and failed count wrong
    # over the tasks with a record only (01 right, 02 failed): 1 / 2
    assert o["n_scorable_attempted"] == 2 and o["accuracy_attempted"] == pytest.approx(1 / 2)
    assert o["schema_validity"] == pytest.approx(1 / 3)  # valid / attempted
    assert o["coverage"] == pytest.approx(3 / 4) and o["operational_success"] == pytest.approx(2 / 3)
    assert o["brier_mean"] == pytest.approx(0.125) and o["calibration_n"] == 1  # only the valid item
    assert o["ece"]["ece"] == pytest.approx(0.25)


def test_paraphrase_agreement_is_not_both_correct(tmp_path):
    tasks = [task("original-intent-01-0", "choice", AB, "b", group="original-intent-01"),
             task("original-intent-01-1", "choice", AB, "b", group="original-intent-01"),
             task("original-intent-02-0", "choice", AB, "a", group="original-intent-02"),
             task("original-intent-02-1", "choice", AB, "a", group="original-intent-02"),
             task("original-intent-03-0", "choice", AB, "a", group="original-intent-03"),
             task("original-intent-03-1", "choice", AB, "a", group="original-intent-03"),
             task("hard-opus-a-trap-01", "choice", AB, "a", group="hard-opus-a-trap-01")]
    snap = snapshot_of(tmp_path, tasks)
    preds = {"original-intent-01-0": record(choice(a=0.9, b=0.1)), "original-intent-01-1": record(choice(a=0.8, b=0.2)),
             "original-intent-02-0": record(choice(a=0.9, b=0.1)), "original-intent-02-1": record(choice(a=0.6, b=0.4)),
             "original-intent-03-0": record(choice(a=0.9, b=0.1)), "original-intent-03-1": record(choice(a=0.9, b=0.2)),
             "hard-opus-a-trap-01": record(choice(a=1.0, b=0.0))}
    out = official.official_summary(snap, preds)
    p = out["paraphrase"]
    # pair 1: both valid, same (wrong) answer; pair 2: both valid, same right answer; pair 3: one invalid
    assert (p["pairs"], p["both_valid"], p["agree"], p["both_correct"]) == (3, 2, 2, 1)
    assert p["agreement"] == 1.0 and p["agreement_all_pairs"] == pytest.approx(2 / 3)
    assert p["both_correct_rate_all_pairs"] == pytest.approx(1 / 3)
    table = out["reports"]["paraphrase"]["pairs"]
    assert [r["group"] for r in table] == ["original-intent-01", "original-intent-02", "original-intent-03"]
    variants = out["reports"]["paraphrase"]["variant"]
    assert variants["0"]["accuracy"] == pytest.approx(2 / 3) and variants["1"]["accuracy"] == pytest.approx(1 / 3)
    # original tier: 3 of 6 right; two-option chance 0.5 -> 0; release "standard" baseline 30.4 / 96
    cc = out["chance_corrected"]["original"]
    assert cc["accuracy"] == 0.5 and cc["chance"] == 0.5 and cc["chance_corrected"] == 0.0
    assert cc["release"]["upstream_tier"] == "standard" and cc["release"]["items"] == 96
    assert cc["release"]["chance_corrected"] == pytest.approx((48 - 30.4) / (96 - 30.4))


def test_hard_calibration_axis_uses_gold_probs_and_the_hard_ece(tmp_path):
    tasks = [task("hard-opus-a-probability-01", "choice", ["approve", "deny"], "approve", family="probability",
                  provenance={"gold_probs": {"approve": 0.7, "deny": 0.3}}),
             task("hard-opus-a-probability-02", "choice", ["x", "y", "z"], "z", family="probability",
                  provenance={"gold_probs": {"x": 0.25, "z": 0.75}}),
             task("hard-sol-b-trap-01", "noul", ["no", "yes"], "yes", family="trap"),
             task("easy-fact-01", "noul", ["no", "yes"], "yes", family="fact")]
    snap = snapshot_of(tmp_path, tasks)
    preds = {"hard-opus-a-probability-01": record(choice(approve=0.6, deny=0.4)),
             "hard-opus-a-probability-02": record(choice(x=0.5, y=0.0, z=0.5)),
             "hard-sol-b-trap-01": record(noul(0.9)),
             "easy-fact-01": record(noul(0.1))}
    axis = official.official_summary(snap, preds)["hard_calibration_axis"]
    # TV: 0.1 and 0.5 * (0.25 + 0 + 0.25) = 0.25; tie x/z -> "x" (wrong)
    assert axis["tvd_gold_probs"] == pytest.approx((0.1 + 0.25) / 2) and axis["tvd_n"] == 2
    # hard ECE: (0.6, right) bin 6 gap 0.4; (0.5, wrong) bin 5 gap 0.5; (0.9, right) bin 9 gap 0.1
    assert axis["ece"] == pytest.approx((0.4 + 0.5 + 0.1) / 3) and axis["ece_n"] == 3
    # v1.3 terms: 100 (1 - (1/3) / 0.5) = 100/3 and 100 (1 - 0.175) = 82.5
    assert axis["ece_term"] == pytest.approx(100 / 3) and axis["tvd_term"] == pytest.approx(82.5)
    assert axis["axis"] == pytest.approx((100 / 3 + 82.5) / 2)


def test_noul_candidate_order_puts_both_tie_rules_on_no(tmp_path):
    """Unknown 9: noul candidates follow the source's labels (no, yes) = (false, true)."""
    snap = snapshot_of(tmp_path, [task("easy-fact-01", "noul", ["no", "yes"], "no")])
    assert snap.rows[0].candidates["decision"] == ["false", "true"]
    preds = {"easy-fact-01": record(noul(0.5))}
    table = build_question_table(snap.rows, preds)
    pred_idx, _ = M.top_label(table.P)
    assert snap.rows[0].candidates["decision"][pred_idx[0]] == "false"  # generic: first candidate = no
    assert M.summarize_table(table)["accuracy"] == 1.0
    assert official.official_summary(snap, preds)["items"][0]["predicted"] == "no"


def test_generic_metrics_use_their_own_band_and_drop_invalid_from_probability_metrics(tmp_path):
    """Unknown 10: 1.015 is official-valid but generic-invalid; it still counts wrong in generic accuracy."""
    tasks = [task("easy-intent-01", "choice", AB, "b"), task("easy-intent-02", "choice", AB, "b")]
    snap = snapshot_of(tmp_path, tasks)
    preds = {"easy-intent-01": record(choice(a=0.5, b=0.515)), "easy-intent-02": record(choice(a=0.1, b=0.9))}
    assert answer_probabilities("choice", AB, {"probabilities": {"a": 0.5, "b": 0.515}})[0] is None
    generic = M.summarize_table(build_question_table(snap.rows, preds))
    assert generic["accuracy"] == 0.5 and generic["accuracy_n"] == 2 and generic["probability_n"] == 1
    assert generic["brier"] == pytest.approx(0.1 ** 2 + 0.1 ** 2)
    o = official.official_summary(snap, preds)["overall"]
    assert o["accuracy"] == 1.0 and o["n_renormalized"] == 1


def test_excluded_items_are_asked_but_not_scored(tmp_path):
    tasks = [task("hard-opus-a-trap-01", "choice", AB, "a", provenance={"exclude_reason": "ambiguous gold"}),
             task("hard-opus-a-trap-02", "choice", AB, "a")]
    snap = snapshot_of(tmp_path, tasks)
    assert snap.rows[0].targets["decision"].unscored is True
    preds = {t["id"]: record(choice(a=0.0, b=1.0)) for t in tasks}
    o = official.official_summary(snap, preds)["overall"]
    assert (o["n_planned"], o["n_scorable"], o["n_valid"], o["accuracy"]) == (2, 1, 2, 0.0)
    assert o["brier_mean"] == pytest.approx(2.0)  # only the scorable one: (0-1)^2 + (1-0)^2


def test_summary_refuses_answers_to_unknown_task_ids(tmp_path):
    from jevkedro.nodes.snapshot import SnapshotError

    snap = snapshot_of(tmp_path, [task("easy-intent-01", "choice", AB, "a")])
    with pytest.raises(SnapshotError, match=r"unknown task id\(s\), e.g. \['easy-intent-99'\]"):
        official.official_summary(snap, {"easy-intent-01": record(choice(a=1.0, b=0.0)),
                                         "easy-intent-99": record(choice(a=1.0, b=0.0))})


def _ordinal_tasks_and_answers():
    """Two original score tasks (one renormalised), one invalid hard score task, one easy noul."""
    tasks = [task("original-ordinal-01-0", "score", ["0", "1", "2"], 2, family="ordinal", group="original-ordinal-01"),
             task("original-ordinal-01-1", "score", ["0", "1", "2"], 2, family="ordinal", group="original-ordinal-01"),
             task("hard-sol-a-temporal_numeric-01", "score", ["0", "1", "2", "3"], 1, family="temporal_numeric"),
             task("easy-fact-01", "noul", ["no", "yes"], "yes", family="fact")]
    def score(*p):
        return {"type": "score", "probabilities": {str(k): v for k, v in enumerate(p)}}

    preds = {"original-ordinal-01-0": record(score(0.1, 0.2, 0.7)),  # strict; EV 1.6
             "original-ordinal-01-1": record(score(0.0, 0.5, 0.51)),  # sum 1.01: renormalised
             "hard-sol-a-temporal_numeric-01": record(score(0.0, 0.53, 0.5, 0.0)),  # sum 1.03: invalid
             "easy-fact-01": record(noul(0.8))}
    return tasks, preds


def test_ordinal_mae_uses_valid_score_items_and_strict_validity_is_its_own_rate(tmp_path):
    tasks, preds = _ordinal_tasks_and_answers()
    out = official.official_summary(snapshot_of(tmp_path, tasks), preds)
    o = out["overall"]
    # |EV - expected|: |1.6 - 2| = 0.4 and |(0.5 + 2 * 0.51) / 1.01 - 2| = 0.5 / 1.01; the 1.03 item has no EV
    assert o["ordinal_mae"] == pytest.approx((0.4 + 0.5 / 1.01) / 2) and o["ordinal_n"] == 2
    items = {i["task_id"]: i for i in out["items"]}
    assert items["original-ordinal-01-1"]["ordinal_ev"] == pytest.approx(1.52 / 1.01)
    assert items["hard-sol-a-temporal_numeric-01"]["ordinal_ev"] is None
    assert items["hard-sol-a-temporal_numeric-01"]["expected_level"] == 1
    # 4 attempted, 3 valid (headline), 2 strictly valid
    assert (o["n_valid"], o["n_strict_valid"], o["n_renormalized"]) == (3, 2, 1)
    assert o["schema_validity"] == pytest.approx(3 / 4) and o["schema_validity_strict"] == pytest.approx(2 / 4)


def test_slices_and_reports_hold_the_same_rules_per_group(tmp_path):
    tasks, preds = _ordinal_tasks_and_answers()
    out = official.official_summary(snapshot_of(tmp_path, tasks), preds)
    score, noul_ = out["per_type"]["score"], out["per_type"]["noul"]
    assert (score["n_planned"], score["n_scorable"], score["n_correct"]) == (3, 3, 2)
    # Brier: (0.1^2 + 0.2^2 + 0.3^2) and 2 * (0.5 / 1.01)^2 on the renormalised one
    assert score["brier_mean"] == pytest.approx((0.14 + 2 * (0.5 / 1.01) ** 2) / 2)
    assert noul_["accuracy"] == 1.0 and noul_["brier_mean"] == pytest.approx(0.2 ** 2 + 0.2 ** 2)
    assert noul_["ordinal_mae"] is None
    original = out["per_tier"]["original"]
    assert original["schema_validity"] == 1.0 and original["schema_validity_strict"] == 0.5
    assert out["per_split"]["public"]["n_planned"] == 4
    fam = out["per_family"]
    assert (fam["ordinal"]["accuracy"], fam["temporal_numeric"]["accuracy"], fam["fact"]["accuracy"]) == (1.0, 0.0, 1.0)
    assert out["overall"]["macro_accuracy"] == pytest.approx(2 / 3)
    rows = out["reports"]["task_family"]
    assert [r["family"] for r in rows] == ["fact", "ordinal", "temporal_numeric"]
    assert rows[1]["tier"] == ["original"] and rows[1]["n_scorable"] == 2 and rows[2]["schema_validity"] == 0.0
    cal = out["reports"]["calibration"]
    assert cal["bins"] == 10
    # score: confidences 0.7 (bin 7) and 0.51 / 1.01 (bin 5), both right
    assert cal["per_type"]["score"]["ece"] == pytest.approx((0.3 + 0.5 / 1.01) / 2)
    assert [b["n"] for b in cal["per_type"]["score"]["bins"]] == [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]
    assert cal["per_tier"]["easy"]["ece"] == pytest.approx(0.2) and cal["per_tier"]["hard"]["n"] == 0
    assert cal["overall"] == out["overall"]["ece"]
    # one paraphrase pair: same answer, both right
    assert (out["paraphrase"]["pairs"], out["paraphrase"]["agree"], out["paraphrase"]["both_correct"]) == (1, 1, 1)
