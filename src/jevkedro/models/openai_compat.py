"""OpenAI-compatible chat-completions adapter (``model.adapter=openai_compat``): verbalized probabilities.

An ordinary instruction model is asked, in one ``POST <model.endpoint>/chat/completions`` per
request, to *write* a probability for every candidate of every question, under a strict JSON
schema (``response_format = {"type": "json_schema", ...}``)::

    {"answers": {"<question id>": {"probabilities": {"<candidate>": <number>, ...}}, ...}}

Candidates are the protocol's keys: ``true``/``false`` for noul, the option ids for choice,
``"0".."K-1"`` for score (the prompt lists what each key means). These numbers are the model's
words, not its likelihoods, so results are marked ``probability_source = "verbalized"`` in every
prediction line, the run meta, the report and the MLflow tags, and must not be pooled with native
System One results.

The written answer is turned into a System One shaped body for scoring (noul as
``probabilities`` over ``true``/``false``, so a pair that does not sum to 1 stays invalid); the
chat-completion body itself is kept in ``raw`` and the conversion (:meth:`read_body`) needs nothing
else, so it is derived again from the stored body when the record is read. A reply whose content is not the
schema's JSON (a refusal, prose, truncation) is the model's answer and scores as invalid; it is
not an infrastructure failure. Images and video are ``unsupported`` (text-only prompts).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from jevkedro.models.base import AdapterResult, BodyFields
from jevkedro.models.http import HttpAdapter, HttpReply, WireRequest, json_body
from jevkedro.models.settings import NonNegativeFloat, PositiveInt
from jevkedro.models.systemone import media_parts
from jevkedro.nodes.jsonparse import parse_json
from jevkedro.protocol import ProtocolError, candidates_for

SYSTEM_PROMPT = (
    "You judge a state against typed questions. For every question, give a probability for "
    "every listed candidate key: numbers between 0 and 1 that sum to 1 for that question. "
    "Answer only with the JSON object the schema describes."
)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def answer_schema(candidates: dict[str, list[str]]) -> dict[str, Any]:
    """The strict JSON schema of the written answer for these questions and candidates."""
    def obj(props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    return obj({"answers": obj({
        qid: obj({"probabilities": obj({c: {"type": "number"} for c in cands})})
        for qid, cands in candidates.items()
    })})


def render_prompt(state: Any, questions: dict[str, dict[str, Any]], candidates: dict[str, list[str]]) -> str:
    """The user message: the state, then each question with the meaning of each candidate key."""
    lines = ["<state>", _text(state), "</state>", ""]
    for qid, q in questions.items():
        qtype, criteria = q["type"], q.get("criteria")
        lines.append(f'<question id="{qid}" type="{qtype}">')
        lines.append(_text(q.get("instructions", "")))
        for key in candidates[qid]:
            if qtype == "noul":
                desc = (criteria or {}).get(key) if isinstance(criteria, dict) else None
                meaning = "yes" if key == "true" else "no"
                lines.append(f"- {key}: {meaning}" + (f" ({_text(desc)})" if desc else ""))
            elif qtype == "choice":
                desc = criteria.get(key) if isinstance(criteria, dict) else None
                lines.append(f"- {key}" + (f": {_text(desc)}" if desc is not None else ""))
            else:  # score: level index, low to high (a score question has its levels)
                assert criteria is not None
                lines.append(f"- {key}: {_text(criteria[int(key)])}")
        lines.append("</question>")
    return "\n".join(lines)


class OpenAICompatAdapter(HttpAdapter):
    kind = "openai_compat"
    probability_source = "verbalized"
    reads_bodies = True
    default_key_env = "OPENAI_API_KEY"

    class Options(HttpAdapter.Options):
        temperature: NonNegativeFloat | None = Field(None, description="sampling temperature (null: the server's default)")
        max_tokens: PositiveInt | None = None

    def __init__(self, temperature: float | None = None, max_tokens: int | None = None, **settings: Any) -> None:
        super().__init__(**settings)
        if not settings.get("model"):
            raise ValueError("the openai_compat adapter needs model.model=<model id>")
        self.temperature = None if temperature is None else float(temperature)
        self.max_tokens = None if max_tokens is None else int(max_tokens)

    def identity(self) -> dict[str, Any]:
        out = {**super().identity(), "temperature": self.temperature}
        if self.max_tokens is not None:  # a token cap can cut an answer short (only when set: older identities stay)
            out["max_tokens"] = self.max_tokens
        return out

    def payload(self, request: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, list[str]], str | None]:
        questions = request.get("questions")
        if not isinstance(questions, dict) or not questions:
            return None, {}, "a request needs at least one question"
        images, videos = media_parts([request.get("state"), request.get("media")])
        if images or videos:
            return None, {}, "image/video input; this adapter sends text only"
        try:
            candidates = {qid: candidates_for(q) for qid, q in questions.items()}
        except ProtocolError as exc:
            return None, {}, str(exc)
        body: dict[str, Any] = {
            "model": self.settings["model"],
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": render_prompt(request["state"], questions, candidates)}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "decision_probabilities", "strict": True, "schema": answer_schema(candidates)}},
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body, candidates, None

    def prepare(self, request: dict[str, Any]) -> tuple[WireRequest, Any] | AdapterResult:
        body, _, why = self.payload(request)
        if body is None:
            return AdapterResult(status="unsupported", error=why)
        return WireRequest("/chat/completions", json_body(body), "application/json"), None

    def finish(self, reply: HttpReply | AdapterResult, context: Any, request: dict[str, Any]) -> AdapterResult:
        if isinstance(reply, AdapterResult):
            return reply
        fields = self.read_body(reply.body, reply.duplicate_keys, str(self.model_id))
        return AdapterResult(status="ok", response=fields.response, raw=reply.text, model=fields.model, usage=fields.usage,
                             http_status=reply.status, server_request_id=reply.request_id, meta=fields.meta)

    @classmethod
    def read_body(cls, value: Any, duplicate_keys: list[list[Any]], model: str | None) -> BodyFields:
        """The written answer of a chat completion as a System One body (:meth:`to_system_one`),
        the reply's model and its token counts."""
        chat = value if isinstance(value, dict) else {}
        named = str(chat["model"]) if isinstance(chat.get("model"), str) else model
        u = chat.get("usage") if isinstance(chat.get("usage"), dict) else {}
        usage = {"input_tokens": u.get("prompt_tokens"), "output_tokens": u.get("completion_tokens")} if u else None
        converted, problem, repeats = cls.to_system_one(chat, named)
        # keys repeated in the chat envelope are ambiguous for every answer ("(reply)" keeps their
        # paths apart from the written answers' own)
        repeats += [["(reply)", *p] for p in duplicate_keys]
        meta: dict[str, Any] = {"verbalized_problem": problem} if problem else {}
        return BodyFields(converted, named, usage, {**meta, "duplicate_keys": repeats} if repeats else meta)

    @classmethod
    def protocol_part(cls, value: Any) -> Any:
        """The model, the token counts and the first choice's message content."""
        if not isinstance(value, dict):
            return value
        out = {k: value[k] for k in ("model",) if k in value}
        usage = value.get("usage")
        if isinstance(usage, dict):
            out["usage"] = {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if k in usage}
        choices = value.get("choices")
        if isinstance(choices, list) and choices:
            first = choices[0]
            message = first.get("message") if isinstance(first, dict) else None
            if isinstance(message, dict) and "content" in message:
                out["choices"] = [{"message": {"content": message["content"]}}]
            else:
                out["choices"] = [{"message": None}]
        return out

    @classmethod
    def body_of(cls, result: AdapterResult) -> tuple[Any, list[list[Any]]]:
        """A chat completion whose content is the written answers as read (their repeats kept)."""
        from jevkedro.nodes.reply_body import dump_with_repeats  # noqa: PLC0415 (nodes import models)

        answers = result.response.get("answers") if isinstance(result.response, dict) else None
        repeats = (result.meta or {}).get("duplicate_keys") or []
        content = dump_with_repeats({"answers": answers or {}}, [p for p in repeats if p[:1] != ["(reply)"]])
        usage = result.usage or {}
        chat = {"model": result.model, "choices": [{"message": {"content": content}}],
                **({"usage": {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}}
                   if result.usage else {})}
        return chat, [p[1:] for p in repeats if p[:1] == ["(reply)"] and len(p) > 1]

    @staticmethod
    def to_system_one(chat: dict[str, Any], model: str | None) -> tuple[dict[str, Any], str | None, list[list[Any]]]:
        """The written answer as a System One body (every written answer with a ``probabilities``
        object; validation reads those of the request's questions), what was wrong with it (None
        if nothing) and the keys the written JSON repeats (paths as in the body: ``answers/<id>/...``)."""
        try:
            content = chat["choices"][0]["message"]["content"]
            if not isinstance(content, str):  # a list of byte values would read as bytes of text
                raise TypeError(f"message.content is a JSON {type(content).__name__}, not text")
            parsed = parse_json(content)  # repeats found; numbers beyond the double range -> inf
            written = parsed.value["answers"]
            if not isinstance(written, dict):
                raise TypeError("answers is not an object")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            return {"model": model, "answers": {}}, f"no schema answer in the reply ({type(exc).__name__}: {exc})", []
        answers = {}
        for qid, item in written.items():
            probs = item.get("probabilities") if isinstance(item, dict) else None
            if isinstance(probs, dict):
                answers[qid] = {"probabilities": probs}
        return {"model": model, "answers": answers}, None, [list(p) for p in parsed.duplicate_keys]
