"""Round 3, class 19 (gate and range settings) — a setting that is not what it says is refused with
its rule, naming it: a yes/no word for a boolean gate, a threshold no comparison can fail (NaN) or
pass (an infinity), a minimum above its maximum, a baseline margin with nothing to compare with.
Checked where every parameter group is checked (:func:`jevkedro.parameters.check_parameters`)."""

from __future__ import annotations

import math

import pytest

from jevkedro.config import SettingsError
from jevkedro.parameters import check_parameters

MODEL = {"adapter": "sparrow", "name": "m1"}


def problems(gates=None, model=None) -> list[str]:
    with pytest.raises(SettingsError) as exc:
        check_parameters({"model": {**MODEL, **(model or {})}, **({"gates": gates} if gates is not None else {})})
    return exc.value.problems


@pytest.mark.parametrize("word", ["yes", "no", "on", "1", 1, 0, "true"])
def test_require_complete_takes_true_or_false_only(word):
    (line,) = problems({"jevbench": {"require_complete": word}})
    assert line.startswith("gates.jevbench.require_complete:") and "true or false" in line


@pytest.mark.parametrize("gate", ["min_official", "min_accuracy", "max_nll", "max_latency_p95_ms", "max_rise_nll"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_threshold_no_comparison_can_decide_is_refused(gate, value):
    extra = {"baseline": "m0"} if gate.startswith("max_rise") else {}
    found = problems({"all": {gate: value, **extra}})
    assert any(line.startswith(f"gates.all.{gate}:") and "finite" in line for line in found), found


def test_a_minimum_above_its_maximum_is_refused_naming_both():
    found = problems(model={"adapter": "systemone", "endpoint": "http://127.0.0.1:9/v1",
                            "min_choice_options": 300, "max_choice_options": 299})
    assert any("model.min_choice_options (300) is above model.max_choice_options (299)" in line for line in found), found


def test_a_minimum_above_the_default_maximum_is_refused():
    found = problems(model={"adapter": "systemone", "endpoint": "http://127.0.0.1:9/v1", "min_choice_options": 256})
    assert any("model.min_choice_options (256) is above model.max_choice_options (255)" in line for line in found), found


@pytest.mark.parametrize("gates, needle", [
    ({"jevbench": {"max_drop_accuracy": 0.01}}, "gates.jevbench.max_drop_accuracy: compares with a baseline"),
    ({"all": {"max_rise_ece": 0.01}}, "gates.all.max_rise_ece: compares with a baseline"),
    ({"jevbench": {"baseline": "m0"}}, "gates.jevbench.baseline: set, but no margin"),
    ({"jevbench": {"baseline": "../m0", "max_rise_nll": 0.1}}, "gates.jevbench.baseline: must be a model.name"),
    ({"jevbench": {"baseline": "m1", "max_rise_nll": 0.1}}, "gates.jevbench.baseline: 'm1' is this run's own model.name"),
    ({"jevbench": {"baseline": "m0", "max_drop_accuracy": 1.5}}, "gates.jevbench.max_drop_accuracy: 1.5 is not allowed"),
    ({"jevbench": {"baseline": "m0", "max_rise_brier": "0.1"}}, "gates.jevbench.max_rise_brier: must be a number"),
])
def test_baseline_gates_that_cannot_be_checked_are_refused(gates, needle):
    found = problems(gates)
    assert any(needle in line for line in found), found


def test_good_gate_settings_pass():
    check_parameters({"model": MODEL, "gates": {"all": {"max_drop_accuracy": 0.02, "require_complete": True,
                                                        "min_official": 0.5},
                                                "jevbench": {"baseline": "m0", "max_rise_ece": 0.01}}})
