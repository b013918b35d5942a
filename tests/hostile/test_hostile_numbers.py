"""Round 3, class 6 — no invented numbers: a cost from token counts that are negative, booleans,
fractions or past 2**53 (a 300-digit integer) is unknown (null), never a number; a price no double
holds finitely, or so large that a cost would overflow to infinity, is refused; a chat reply whose
content is not text (an integer, a list of byte values) is no answer."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jevkedro.config import SettingsError
from jevkedro.models.openai_compat import OpenAICompatAdapter
from jevkedro.models.settings import EngineSettings, ModelSettings
from jevkedro.nodes.engine import Tariff

TARIFF = Tariff(input_per_1m=1.0, output_per_1m=2.0)


@pytest.mark.parametrize("usage", [
    {"input_tokens": -5_000_000, "output_tokens": 0}, {"input_tokens": True}, {"input_tokens": 10, "output_tokens": -1},
    {"input_tokens": 1.5}, {"input_tokens": float("inf")}, {"input_tokens": float("nan")}, {"input_tokens": "10"},
    {"input_tokens": 10, "output_tokens": False}, {"input_tokens": 1, "output_tokens": 1e300},
    {"input_tokens": 10**300}, {"input_tokens": 2**53}, {"input_tokens": 1, "output_tokens": 2**60},
])
def test_token_counts_that_are_no_counts_give_no_cost(usage):
    assert TARIFF.cost(usage) is None


def test_real_counts_are_priced():
    assert TARIFF.cost({"input_tokens": 1_000_000, "output_tokens": 500_000}) == pytest.approx(2.0)
    assert TARIFF.cost({"input_tokens": 10}) == pytest.approx(1e-5)
    assert TARIFF.cost({"input_tokens": 10.0, "output_tokens": 0}) == pytest.approx(1e-5)


@pytest.mark.parametrize("key", ["price_input_per_1m", "price_output_per_1m"])
@pytest.mark.parametrize("value", [float("inf"), 1e400, float("nan"), 1e308, 2e9])
def test_a_price_no_double_holds_finitely_is_refused(key, value):
    # 1e308 is a double, but 1,000 tokens at it cost infinity: a price is at most 1e9 USD per 1M
    with pytest.raises(SettingsError, match=f"model.{key}"):
        ModelSettings.parse({"adapter": "sparrow", key: value})
    with pytest.raises(ValidationError):
        EngineSettings(**{key: value})


@pytest.mark.parametrize("content", [467, [123, 34, 97, 110, 115, 119, 101, 114, 115, 34, 58, 123, 125, 125], None, 0.5,
                                     {"answers": {}}])
def test_chat_content_that_is_not_text_is_no_answer(content):
    chat = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    body, problem, _ = OpenAICompatAdapter.to_system_one(chat, "m")
    assert body["answers"] == {}
    assert problem is not None and "content" in problem
