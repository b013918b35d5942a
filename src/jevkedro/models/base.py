"""The adapter interface every model runtime implements.

An adapter turns one request (``{"state", "questions"}``, exactly what the model may see) into a
System One response body. It never sees targets, slices or provenance. The engine
(:mod:`jevkedro.nodes.engine`) times each call and hands each result over as it arrives;
:mod:`jevkedro.nodes.infer` persists it and decides what a rerun has to ask again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jevkedro.errors import UserError
from jevkedro.models.settings import AdapterOptions

# Request-level outcomes written to the predictions log.
STATUSES = ("ok", "unsupported", "error", "unattempted")
# Why a request ended in ``error`` (AdapterResult.failure).
FAILURE_KINDS = ("timeout", "connection", "server", "malformed", "too_large", "request")
INFRASTRUCTURE_FAILURES = frozenset({"timeout", "connection", "server", "malformed", "too_large"})


class RepeatsError(UserError, ValueError):
    """``model.repeats`` asks more of the adapter than it can give (names the setting)."""


@dataclass
class AdapterResult:
    """What one request produced.

    ``status``: ``ok`` (a response came back; its validity is judged at scoring), ``unsupported``
    (the adapter cannot represent the request, nothing was sent), ``error`` (the call failed for
    this request). ``unsupported_questions`` lists questions of an ``ok`` request that the
    adapter could not represent (they were not asked and count as unsupported).

    Remote adapters also fill: ``raw`` (the response body exactly as received, decoded as UTF-8
    text; kept even when it is not JSON, while ``response`` holds the parsed body), ``http_status``,
    ``server_request_id`` (the ``x-typesafe-request-id`` header) and, for errors, ``failure``:
    one of ``FAILURE_KINDS``. ``timeout``, ``connection``, ``server``, ``malformed`` and
    ``too_large`` (a body over ``model.max_response_bytes``) are infrastructure failures (the
    engine stops after a configured number in a row); ``request`` (a 413/422 for this one
    request) is not.
    """

    status: str
    response: Any = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    unsupported_questions: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None
    http_status: int | None = None
    server_request_id: str | None = None
    failure: str | None = None

    @property
    def infrastructure_failure(self) -> bool:
        return self.status == "error" and self.failure in INFRASTRUCTURE_FAILURES


@dataclass
class BodyFields:
    """What a reader derives from one reply body: the parsed answer (``response``), the resolved
    ``model``, the ``usage`` and the notes of ``meta`` the body decides (repeated keys, ...)."""

    response: Any
    model: str | None
    usage: dict[str, Any] | None
    meta: dict[str, Any] = field(default_factory=dict)


class StopRun(RuntimeError):
    """Raised by an adapter when the whole run must stop (e.g. bad credentials, rate limit).

    Requests not yet answered are recorded as ``unattempted``, never as wrong answers.
    ``http_status`` and ``retry_after`` (seconds, from a ``retry-after`` header) let the engine's
    retry policy decide whether a 429 is waited out instead.
    """

    def __init__(self, message: str = "", *, http_status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.retry_after = retry_after


class Adapter(ABC):
    """Base class of model adapters.

    Subclasses set ``kind`` (the adapter name used in ``model.adapter``), ``probability_source``
    (``native`` for System One style runtimes, ``verbalized`` for models that write probabilities)
    ``resumable`` (whether answers from an earlier run may be reused) and ``measures_latency``
    (False where a call does not run the model, e.g. replay). ``remote`` adapters
    (HTTP clients) have up to ``model.concurrency`` requests in flight: on one event loop through
    :meth:`answer_async` when ``event_loop`` is true (set by ``setup``), else from that many
    threads through :meth:`answer`; local ones are called in batches of ``model.batch_size``
    (default ``default_batch_size``) through :meth:`answer_batch`.
    """

    kind: str = "base"
    probability_source: str = "native"
    resumable: bool = True
    measures_latency: bool = True
    remote: bool = False
    event_loop: bool = False  # answer_async may be awaited on the engine's event loop
    default_batch_size: int = 1
    Options: type[AdapterOptions] = AdapterOptions  # this adapter's own ``model.<key>`` settings
    reads_bodies: bool = False  # results carry a body (``raw``) that :meth:`read_body` reads
    deterministic: bool = False  # the same request always gets the same answer: ``model.repeats`` > 1 refused

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    @property
    def model_id(self) -> str:
        """The concrete model this adapter answers with (recorded with every prediction)."""
        return str(self.settings.get("model") or self.kind)

    def identity(self) -> dict[str, Any]:
        """What must match for earlier predictions to be reused (no secrets)."""
        return {"adapter": self.kind, "model": self.model_id}

    @classmethod
    def preflight(cls, options: AdapterOptions, settings: Mapping[str, Any]) -> list[str]:
        """What is wrong with these settings that can be seen before any node runs (a file that
        is not there, a key that cannot be sent); each problem names its setting, never a secret.
        ``settings`` is the flat ``model`` mapping. Called by the settings check."""
        return []

    @classmethod
    def read_body(cls, value: Any, duplicate_keys: list[list[Any]], model: str | None) -> BodyFields:
        """The fields of a result derived from its body (parsed: ``value`` and the paths of its
        repeated keys; ``model``: the model recorded when the body names none). The one reading of
        a body, when it arrives and when its record is read back (:mod:`jevkedro.nodes.reply_body`)."""
        raise NotImplementedError(f"{cls.kind} results carry no body")

    @classmethod
    def protocol_part(cls, value: Any) -> Any:
        """What :meth:`read_body` reads of a body: all that is kept of a body too large to store."""
        return value

    @classmethod
    def body_of(cls, result: AdapterResult) -> tuple[Any, list[list[Any]]]:
        """A body that :meth:`read_body` reads as ``result`` and the paths of its repeated keys (for
        a result whose stored body a redaction changed)."""
        return result.response, list((result.meta or {}).get("duplicate_keys") or [])

    @classmethod
    def repeats_problem(cls, repeats: int) -> str | None:
        """Why this adapter cannot be asked every request ``repeats`` times (``model.repeats``), or None:
        a deterministic model gives K copies of one answer, which measure no sampling variation."""
        if cls.deterministic and repeats > 1:
            return (f"model.repeats={repeats}: the {cls.kind} adapter is deterministic (the same request always "
                    "gets the same answer), so repeated sampling measures nothing; set model.repeats=1")
        return None

    def check_repeats(self, repeats: int) -> None:
        """Refuse (:class:`~jevkedro.errors.UserError`) asking every request ``repeats`` times; called
        before anything is asked (the replay adapter also checks its file's attempts)."""
        problem = self.repeats_problem(repeats)
        if problem:
            raise RepeatsError(problem)

    def setup(self) -> None:
        """Load weights / open connections and warm up. Not counted in latency."""

    def close(self) -> None:
        """Release resources."""

    @abstractmethod
    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        """Answer one request; time spent here is the request's latency."""

    async def answer_async(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        """:meth:`answer` as a coroutine on the engine's event loop (adapters with ``event_loop``)."""
        raise NotImplementedError(f"{self.kind} has no event-loop path")

    async def aclose(self) -> None:
        """Release what the running event loop holds (called before the engine's loop ends)."""

    def run_notes(self, request_ids: Sequence[str]) -> dict[str, Any]:
        """What the adapter has to say about a finished run of the snapshot's ``request_ids``
        (merged into ``run.json``, which the report reads); the replay adapter names the request
        ids of its file that the snapshot does not have."""
        return {}

    def answer_batch(self, items: list[tuple[str, dict[str, Any]]]) -> list[AdapterResult]:
        """Answer several requests in one go (local runtimes override this to batch the forward pass)."""
        return [self.answer(rid, request) for rid, request in items]

    # Repeated sampling (``model.repeats``): the engine asks through these, naming each answer's
    # attempt (0-based). A model that samples afresh on every call is asked the same request again;
    # the replay adapter answers with its file's line for that attempt.

    def answer_attempt(self, request_id: str, request: dict[str, Any], attempt: int) -> AdapterResult:
        """Answer attempt ``attempt`` of one request (default: :meth:`answer`)."""
        return self.answer(request_id, request)

    async def answer_attempt_async(self, request_id: str, request: dict[str, Any], attempt: int) -> AdapterResult:
        """:meth:`answer_attempt` on the engine's event loop (default: :meth:`answer_async`)."""
        return await self.answer_async(request_id, request)

    def answer_batch_attempts(self, items: list[tuple[str, dict[str, Any], int]]) -> list[AdapterResult]:
        """A batch of ``(request id, request, attempt)`` (default: :meth:`answer_batch`)."""
        return self.answer_batch([(rid, request) for rid, request, _ in items])
