"""The embedded default model: ``sparrow-decider`` (numpy only, text only, bundled weights).

Runs the package's own ``Decider.ask`` (its System One contract, with the author-published
per-type temperatures from the model file). What it cannot represent is ``unsupported``, never
trimmed:

- image/video states or media parts (the nano models read text only) -> the whole request;
- a score question outside 2..10 levels, a choice with fewer than two options -> that question;
- a text longer than the model's window: the static nano/micro models pool at most ``max_len``
  (512) word pieces of the state and of the instructions and drop the rest; the encoder models cut
  the middle of the state to fit. We count tokens first and mark the question unsupported.

The length checks mirror sparrow-decider 0.2.0's tokenisation (the version is pinned).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from jevkedro.models.base import Adapter, AdapterResult
from jevkedro.models.settings import AdapterOptions

DEFAULT_SPARROW_MODEL = "sparrow-nano-general-v1.1"
MEDIA_PART_TYPES = {"image", "image_url", "input_image", "video", "video_url", "input_video"}


def has_media(value: Any) -> bool:
    """True when a state holds image/video content parts (chat messages with media)."""
    if isinstance(value, dict):
        if value.get("type") in MEDIA_PART_TYPES:
            return True
        return any(has_media(v) for v in value.values())
    if isinstance(value, list):
        return any(has_media(v) for v in value)
    return False


class SparrowAdapter(Adapter):
    kind = "sparrow"
    deterministic = True  # model.repeats > 1 refused before any node runs

    class Options(AdapterOptions):
        model: str | None = Field(None, description=f"sparrow-decider model name (default {DEFAULT_SPARROW_MODEL})")

    def __init__(self, model: str | None = None, **settings: Any) -> None:
        super().__init__(model=model or DEFAULT_SPARROW_MODEL, **settings)
        self.decider: Any = None  # a sparrow_decider.Decider, loaded by setup()

    def setup(self) -> None:
        from sparrow_decider import Decider

        self.decider = Decider.load(self.settings["model"])
        self.decider.ask("warm-up", {"w": {"type": "noul", "instructions": "warm-up"}})

    @property
    def model_id(self) -> str:
        if self.decider is not None:
            return str(self.decider.name)
        return str(self.settings["model"])

    def unsupported_reason(self, state: Any, question: dict[str, Any]) -> str | None:
        """Why this question cannot be asked of the model as it is, or None."""
        import sparrow_decider as sd

        qtype = question.get("type")
        criteria = question.get("criteria")
        if qtype == "score" and not (isinstance(criteria, list) and 2 <= len(criteria) <= 10):
            return "score questions need 2-10 levels"
        if qtype == "choice" and not (isinstance(criteria, dict) and len(criteria) >= 2):
            return "choice questions need at least two options"
        if qtype not in ("noul", "choice", "score"):
            return f"unknown question type {qtype!r}"
        d = self.decider
        if d is None:
            return None
        if d.static is not None:  # static (Model2Vec-style) nano/micro: each text pooled over <= max_len tokens
            limit = d.static.max_len
            for label, text in (("state", sd._content(state)), ("instructions", sd._content(question.get("instructions")))):
                if len(d.static.tok.encode(text, limit + 1)) > limit:
                    return f"{label} longer than the model's {limit}-token window"
            return None
        kind, opts = sd._options(question)
        lines = [f"{i + 1}. {name}" + (f" — {' '.join((desc or '').split())}" if desc else "")
                 for i, (name, desc) in enumerate(opts)]
        prompt = (f'<question type="{kind}">\n{sd.HEADERS[kind]}\n{sd._content(question.get("instructions"))}\n'
                  "<options>\n" + "\n".join(lines) + "\n</options>\n</question>\n<answer>")
        q_tokens = len(d.tok.encode(prompt))
        s_tokens = len(d.tok.encode(f"<state>\n{sd._content(state)}\n</state>\n"))
        budget = d.max_len - q_tokens - 2
        if budget < 8 or s_tokens > budget:
            return f"input needs {s_tokens + q_tokens + 2} tokens, context is {d.max_len}"
        return None

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        state = request["state"]
        if request.get("media") or has_media(state):
            return AdapterResult(status="unsupported", error="image/video input; the model reads text only")
        asked, skipped = {}, []
        for qid, question in request["questions"].items():
            if self.unsupported_reason(state, question):
                skipped.append(qid)
            else:
                asked[qid] = question
        if not asked:
            return AdapterResult(status="unsupported", error="no question fits the model's limits",
                                 unsupported_questions=skipped)
        answers = self.decider.ask(state, asked)
        body = {"model": self.model_id, "answers": answers}
        return AdapterResult(status="ok", response=body, model=self.model_id, unsupported_questions=skipped)
