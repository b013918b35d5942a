"""Other members of round 3's class 6 (invented numbers) that already hold, pinned: a price is a
number (a string, a boolean, a list, a negative or NaN price refused, naming the setting); a chat
reply's ``message.content`` that is not a string (a dict, a list of content parts, text or not, a
boolean) or a string that is no schema answer (empty, a byte-order mark first, a JSON list, null) is
no answer, with the reason kept; a chat envelope of the wrong shape likewise."""

from __future__ import annotations

import json

import pytest

from jevkedro.config import SettingsError
from jevkedro.models.openai_compat import OpenAICompatAdapter
from jevkedro.models.settings import ModelSettings


@pytest.mark.parametrize("value", ["0.5", True, -0.5, float("-inf"), "nan", [0.5], {"usd": 0.5}, 10**400])
def test_a_price_that_is_no_number_in_range_is_refused(value):
    with pytest.raises(SettingsError, match="model.price_input_per_1m: .* is not allowed; allowed: a number ≥ 0 and ≤"):
        ModelSettings.parse({"adapter": "sparrow", "price_input_per_1m": value})


@pytest.mark.parametrize("value", [0, 1, 0.042, 1e9])
def test_a_price_in_range_is_taken_as_a_float(value):
    assert ModelSettings.parse({"adapter": "sparrow", "price_input_per_1m": value}).engine.price_input_per_1m == float(value)


TEXT = json.dumps({"answers": {"q": {"probabilities": {"true": 0.5, "false": 0.5}}}})


@pytest.mark.parametrize("content, why", [
    ({"type": "text", "text": TEXT}, "message.content is a JSON dict, not text"),
    ([{"type": "text", "text": TEXT}], "message.content is a JSON list, not text"),
    ([{"type": "image_url", "image_url": {"url": "data:,"}}], "message.content is a JSON list, not text"),
    ([{"type": "refusal", "refusal": "no"}], "message.content is a JSON list, not text"),
    (True, "message.content is a JSON bool, not text"),
    ("", "Expecting value"), ("\ufeff" + TEXT, "byte-order mark"), ("[1]", "TypeError"), ("null", "TypeError"),
    ('{"answers": [1]}', "answers is not an object"),
])
def test_chat_content_that_is_no_schema_answer_is_no_answer(content, why):
    chat = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    body, problem, _ = OpenAICompatAdapter.to_system_one(chat, "m")
    assert body["answers"] == {} and problem is not None and why in problem


@pytest.mark.parametrize("chat", [{"choices": {}}, {"choices": []}, [], {"choices": [{"message": "hi"}]},
                                  {"choices": [{"message": None}]}, "x", None])
def test_a_chat_envelope_of_another_shape_is_no_answer(chat):
    body, problem, _ = OpenAICompatAdapter.to_system_one(chat, "m")
    assert body["answers"] == {} and problem.startswith("no schema answer in the reply")


def test_a_written_answer_is_read():
    chat = {"choices": [{"message": {"role": "assistant", "content": TEXT}}]}
    body, problem, _ = OpenAICompatAdapter.to_system_one(chat, "m")
    assert problem is None and body["answers"] == {"q": {"probabilities": {"true": 0.5, "false": 0.5}}}  # no type copied from the question
