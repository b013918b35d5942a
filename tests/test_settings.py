"""Typed settings: unknown keys, wrong types and ranges are refused before anything runs, naming the key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jevkedro.config import PrepareOptions, SettingsError, parse_prepare_options
from jevkedro.models import ADAPTERS, adapter_class, make_adapter
from jevkedro.models.settings import EngineSettings, ModelSettings
from jevkedro.parameters import check_parameters
from jevkedro.registry import VIEWS
from support import ROOT, run_kedro

BASE = {"adapter": "sparrow", "name": "m"}


def problems(raw: dict, **kw) -> list[str]:
    with pytest.raises(SettingsError) as info:
        ModelSettings.parse(raw, **kw)
    return info.value.problems


@pytest.mark.parametrize("key, closest", [
    ("adaptor", "adapter"), ("concurency", "concurrency"), ("shard_sise", "shard_size"), ("fsinc", "fsync"),
])
def test_an_unknown_model_key_is_refused_naming_the_closest_known_key(key, closest):
    (line,) = problems({**BASE, key: 1})
    assert line.startswith(f"model.{key}: unknown setting; did you mean model.{closest}?")


def test_an_adapter_key_is_known_only_to_its_adapter():
    (line,) = problems({"adapter": "systemone", "endpoint": "http://h/v1", "timeout": 1})
    assert line.startswith("model.timeout: unknown setting; did you mean model.timeout_s?")
    # set for an adapter that does not use it: refused (it would be ignored), named with its users
    (line,) = problems({**BASE, "endpoint": "http://h/v1"})
    assert line == "model.endpoint: a setting of the openai_compat, systemone adapter(s), not of model.adapter=sparrow"
    # null is "not set": parameters.yml lists every adapter's keys as null
    assert ModelSettings.parse({**BASE, "endpoint": None, "flavour": None, "device": None}).adapter == "sparrow"


@pytest.mark.parametrize("raw, message", [
    ({"concurrency": "abc"}, "model.concurrency: 'abc' is not allowed; allowed: an integer ≥ 1 and ≤ 1024"),
    ({"concurrency": True}, "model.concurrency: True is not allowed; allowed: an integer"),
    ({"concurrency": 0}, "model.concurrency: 0 is not allowed; allowed: an integer ≥ 1"),
    ({"adapter": "systemone", "endpoint": "http://h/v1", "timeout_s": -1},
     "model.timeout_s: -1 is not allowed; allowed: a number > 0 and ≤ 3600"),
    ({"adapter": "systemone", "endpoint": "http://h/v1", "timeout_s": 0},
     "model.timeout_s: 0 is not allowed; allowed: a number > 0"),
    ({"executor": "spark"}, "model.executor: 'spark' is not allowed; allowed: one of: local, dask"),
    ({"fsync": "sometimes"}, "model.fsync: 'sometimes' is not allowed; allowed: one of: always, interval, never"),
    ({"retry": {"max_attempts": 0}}, "model.retry.max_attempts: 0 is not allowed; allowed: an integer ≥ 1"),
    ({"retry": {"kinds": ["418"]}}, "model.retry.kinds[0]: '418' is not allowed; allowed: a list of values from: 429"),
    ({"retry": {"max_attemps": 2}}, "model.retry.max_attemps: unknown setting; did you mean model.retry.max_attempts?"),
    ({"price_input_per_1m": -0.1}, "model.price_input_per_1m: -0.1 is not allowed; allowed: a number ≥ 0"),
    ({"adapter": "sparow"}, "model.adapter: unknown adapter 'sparow'; did you mean 'sparrow'?"),
])
def test_wrong_types_and_ranges_name_the_setting_and_what_is_allowed(raw, message):
    lines = problems({**BASE, **raw})
    assert any(line.startswith(message) for line in lines), lines


def test_every_problem_is_listed_at_once():
    lines = problems({**BASE, "concurency": 8, "timeout": 1, "workers": 0})
    assert [line.split(":")[0] for line in lines] == ["model.concurency", "model.timeout", "model.workers"]


@pytest.mark.parametrize("name", ["../../x", "", "a/b", ".hidden", "x" * 129, "名字", "a b", None])
def test_run_names_that_are_not_a_safe_file_name_are_refused(name):
    (line,) = problems({"adapter": "sparrow", "name": name}, require_name=True)
    assert line.startswith(f"model.name: {name!r} is not allowed; allowed: 1-128 characters")


def test_typed_settings_round_trip_and_build_the_adapter():
    raw = {"adapter": "systemone", "name": "jev-1.13.0", "endpoint": "http://127.0.0.1:9/v1", "model": "jev-1.13.0",
           "api_key_env": "none", "concurrency": 8, "retry": {"max_attempts": 3, "kinds": ["5xx"]}, "timeout_s": 5}
    settings = ModelSettings.parse(raw)
    assert settings.engine.concurrency == 8 and settings.engine.retry.kinds == ("5xx",)
    assert ModelSettings.parse(settings.flat()) == settings
    adapter = make_adapter(settings)
    assert adapter.timeout_s == 5.0 and adapter.endpoint == "http://127.0.0.1:9/v1"
    assert EngineSettings.from_model(raw) == settings.engine


def test_each_adapter_declares_its_options_and_the_engine_keys_are_not_among_them():
    engine = set(EngineSettings.model_fields)
    for kind in ADAPTERS:
        own = set(adapter_class(kind).Options.model_fields)
        assert own and not own & engine and not own & {"adapter", "name"}, kind


def test_prepare_options_are_typed_per_family():
    assert parse_prepare_options("zh_decision_bench", {"source": "x"}) == PrepareOptions(source="x", data="official")
    with pytest.raises(SettingsError, match=r"zh_decision_bench\.prepare\.sourc: unknown setting; did you mean "
                                            r"zh_decision_bench\.prepare\.source\?"):
        parse_prepare_options("zh_decision_bench", {"sourc": "x", "source": "y"})
    with pytest.raises(SettingsError, match=r"jevbench\.prepare\.data: 'oficial' is not allowed; allowed: one of: "
                                            r"official, sample, synthetic"):
        parse_prepare_options("jevbench", {"source": "x", "data": "oficial"})
    with pytest.raises(SettingsError, match=r"visual_decision_bench_image\.prepare\.verify_media: 'some' is not allowed"):
        parse_prepare_options("visual_decision_bench_image", {"source": "x", "verify_media": "some"})


def test_unknown_parameter_groups_and_view_keys_are_refused():
    with pytest.raises(SettingsError) as info:
        check_parameters({"model": BASE, "zh_decison_bench": {"prepare": {"source": "x"}},
                          "jevbench": {"prepare": {"source": "x"}, "prepar": {}}})
    assert info.value.problems[0].startswith("zh_decison_bench: unknown parameter group; did you mean zh_decision_bench?")
    assert info.value.problems[1].startswith("jevbench.prepar: unknown setting; did you mean jevbench.prepare?")


@given(st.dictionaries(st.text(st.characters(codec="ascii", categories=["Ll", "Nd"], include_characters="_"),
                               min_size=1, max_size=20), st.integers(), max_size=4))
def test_any_key_outside_the_lists_is_refused(extra):
    known = {"adapter", "name", *EngineSettings.model_fields,
             *(k for kind in ADAPTERS for k in adapter_class(kind).Options.model_fields)}
    unknown = {k: v for k, v in extra.items() if k not in known}
    if unknown:
        lines = problems({**BASE, **unknown})
        assert {line.split(":")[0] for line in lines} >= {f"model.{k}" for k in unknown}


def test_the_shipped_parameters_are_valid():
    from kedro.config import OmegaConfigLoader

    params = OmegaConfigLoader(str(ROOT / "conf"), base_env="base", default_run_env="local")["parameters"]
    model, prepare = check_parameters(params)
    assert model.name == "sparrow-nano-general-v1.1" and set(prepare) == set(VIEWS)


# -- as users meet it: `kedro run` stops before any node, naming the key --------------------------

TYPOS = [
    ("model.adaptor=replay,model.path=a.jsonl,model.name=mine", "model.adaptor: unknown setting; did you mean model.adapter?"),
    ("model.concurency=8", "model.concurency: unknown setting; did you mean model.concurrency?"),
    ("model.adapter=systemone,model.endpoint=http://127.0.0.1:9/v1,model.timeout=1",
     "model.timeout: unknown setting; did you mean model.timeout_s?"),
    ("zh_decision_bench.prepare.sourc=data/01_raw/zh_decision_bench",
     "zh_decision_bench.prepare.sourc: unknown setting; did you mean zh_decision_bench.prepare.source?"),
    ("model.concurrency=abc", "model.concurrency: 'abc' is not allowed"),
    ("model.adapter=systemone,model.endpoint=http://127.0.0.1:9/v1,model.timeout_s=-1",
     "model.timeout_s: -1 is not allowed; allowed: a number > 0"),
    ("model.adapter=systemone,model.endpoint=http://127.0.0.1:9/v1,model.timeout_s=0",
     "model.timeout_s: 0 is not allowed; allowed: a number > 0"),
    ("model.name=../../x", "model.name: '../../x' is not allowed"),
]


@pytest.mark.e2e
@pytest.mark.parametrize("params, message", TYPOS, ids=[t[1].split(":")[0] for t in TYPOS])
def test_kedro_run_refuses_a_typo_before_any_node(project, params, message):
    from kedro.framework.cli.utils import _split_params

    with pytest.raises(SettingsError, match=message.replace("?", r"\?").replace(".", r"\.")):
        run_kedro(project, "zh_decision_bench", params=_split_params(None, None, params))
    written = [p for sub in ("02_snapshots", "07_model_output", "08_reporting") for p in (project / "data" / sub).rglob("*")]
    assert not written


@pytest.mark.e2e
def test_the_kedro_cli_exits_non_zero_naming_the_key(project):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=zh_decision_bench",
                           "--params=model.adaptor=replay,model.path=a.jsonl,model.name=mine"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "model.adaptor: unknown setting; did you mean model.adapter?" in done.stdout + done.stderr
    assert not (project / "data" / "07_model_output" / "mine").exists()
