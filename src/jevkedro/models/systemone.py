"""System One HTTP client (``model.adapter=systemone``): TypeSafe's Jev API and compatible servers.

``POST <model.endpoint>/systemone`` (``model.flavour=decide``: ``<endpoint>/decide``, the
list-shaped flavour of docs/protocol.md §2) with the body ``{"model", "state", "questions"}``.
``model.endpoint`` is the base URL up to and including ``/v1`` (``https://api.typesafe.ai/v1``).

Before anything is sent the request is checked against the server's limits (docs/protocol.md §2;
all configurable, defaults are Jev 1.13's): a question that cannot be represented is left out
and listed in ``unsupported_questions``; a request with nothing left, an empty question set or
media the server cannot take is ``unsupported`` and never sent.

- choice: ``min_choice_options``..``max_choice_options`` options (2..255);
- score: 2..``max_score_levels`` levels (10 on Jev; compat servers accept up to 32);
- noul: criteria keys within {``true``, ``false``};
- at most ``max_questions`` questions per request (256), at most ``max_request_bytes`` of JSON
  body when set (self-hosted servers document such caps; unset means no client-side cap).

Images (docs/protocol.md §2): with ``model.images=multipart`` (Imajev-style servers) a state whose
chat messages hold ``image_url`` parts is sent as ``multipart/form-data``: field ``request`` = the
JSON body, plus one ``image`` file part per image in order of appearance (at most
``max_images``, 2), read from ``model.media_root`` joined with the relative URL. The state keeps
its URLs so the server can match parts to messages. With ``model.images=none`` (the default,
TypeSafe Jev is text only) such requests are ``unsupported``; video is always ``unsupported``.

The response is saved as returned (``raw`` text and the parsed body); the resolved ``model``,
``usage`` and the ``x-typesafe-request-id`` header are recorded. Validity is judged at scoring.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge
from pydantic import Field, StrictInt

from jevkedro.files import file_problem
from jevkedro.models.base import AdapterResult, BodyFields
from jevkedro.models.http import HttpAdapter, HttpReply, WireRequest, multipart_body
from jevkedro.models.settings import PositiveInt
from jevkedro.protocol import offers_abstain_option

PROTOCOL_MEMBERS = ("model", "usage", "answers")  # what scoring reads of a reply body
FLAVOUR_PATHS = {"systemone": "/systemone", "decide": "/decide"}
IMAGE_PART_TYPES = {"image_url", "image", "input_image"}
VIDEO_PART_TYPES = {"video_url", "video", "input_video"}


def media_parts(value: Any) -> tuple[list[str], int]:
    """(image URLs in order of appearance, number of video parts) in a state or media list."""
    images: list[str] = []
    videos = 0

    def walk(v: Any) -> None:
        nonlocal videos
        if isinstance(v, dict):
            kind = v.get("type")
            if kind in IMAGE_PART_TYPES:
                url = v.get("image_url", v.get("url"))
                if isinstance(url, dict):
                    url = url.get("url")
                images.append(str(url))
                return
            if kind in VIDEO_PART_TYPES:
                videos += 1
                return
            for child in v.values():
                walk(child)
        elif isinstance(v, list):
            for child in v:
                walk(child)

    walk(value)
    return images, videos


class SystemOneAdapter(HttpAdapter):
    kind = "systemone"
    reads_bodies = True
    default_key_env = "TYPESAFE_API_KEY"

    class Options(HttpAdapter.Options):
        flavour: Literal["systemone", "decide"] = Field("systemone", description="decide: the list-shaped /decide flavour")
        images: Literal["none", "multipart"] = Field("none", description="multipart: send images as file parts")
        media_root: str = Field(".", description="folder that image paths in states are relative to")
        max_images: Annotated[StrictInt, Ge(0)] = 2
        min_choice_options: PositiveInt = 2
        max_choice_options: PositiveInt = 255
        max_score_levels: Annotated[StrictInt, Ge(2)] = 10
        max_questions: PositiveInt = 256
        max_request_bytes: PositiveInt | None = Field(None, description="client-side cap on the JSON body")
        send_abstain: bool = Field(False, description="send abstain=true where a request offers the abstain option")

    def __init__(self, flavour: str = "systemone", images: str = "none", media_root: str = ".",
                 max_images: int = 2, min_choice_options: int = 2, max_choice_options: int = 255,
                 max_score_levels: int = 10, max_questions: int = 256,
                 max_request_bytes: int | None = None, send_abstain: bool = False, **settings: Any) -> None:
        super().__init__(**settings)
        if flavour not in FLAVOUR_PATHS:
            raise ValueError(f"model.flavour must be one of {sorted(FLAVOUR_PATHS)}, got {flavour!r}")
        if images not in ("none", "multipart"):
            raise ValueError(f"model.images must be 'none' or 'multipart', got {images!r}")
        self.flavour, self.images = flavour, images
        self.media_root = Path(media_root)
        self.max_images = int(max_images)
        self.min_choice, self.max_choice = int(min_choice_options), int(max_choice_options)
        self.max_levels, self.max_questions = int(max_score_levels), int(max_questions)
        self.max_request_bytes = int(max_request_bytes) if max_request_bytes else None
        self.send_abstain = bool(send_abstain)

    @property
    def model_id(self) -> str:
        return str(self.settings.get("model") or "systemone")

    def identity(self) -> dict[str, Any]:
        out = {**super().identity(), "flavour": self.flavour, "images": self.images}
        if self.send_abstain:  # recorded per run (only when set, so other identities are unchanged)
            out["send_abstain"] = True
        # The client-side limits decide which questions are sent (the rest are unsupported): answers
        # given under other limits are not this run's. Recorded only when not the default, so the
        # identity of a run on the defaults stays what it always was.
        values = {"min_choice_options": self.min_choice, "max_choice_options": self.max_choice,
                  "max_score_levels": self.max_levels, "max_questions": self.max_questions,
                  "max_request_bytes": self.max_request_bytes, "max_images": self.max_images,
                  "media_root": str(self.media_root)}
        changed = {k: v for k, v in values.items() if v != self.Options.model_fields[k].default}
        if changed:
            out["limits"] = changed
        return out

    # -- validation (docs/protocol.md §2) -----------------------------------------------------
    def question_problem(self, question: Any) -> str | None:
        """Why a question cannot be put on the wire for this server, or None."""
        if not isinstance(question, dict):
            return "a question must be an object"
        qtype, criteria = question.get("type"), question.get("criteria")
        if qtype == "noul":
            if criteria is not None and not (isinstance(criteria, dict) and set(criteria) <= {"true", "false"}):
                return "noul criteria keys must be within {true, false}"
        elif qtype == "choice":
            if not isinstance(criteria, dict) or not self.min_choice <= len(criteria) <= self.max_choice:
                return f"choice questions need {self.min_choice}-{self.max_choice} options"
        elif qtype == "score":
            if not isinstance(criteria, list) or not 2 <= len(criteria) <= self.max_levels:
                return f"score questions need 2-{self.max_levels} levels"
        else:
            return f"unknown question type {qtype!r}"
        return None

    def build(self, request: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str], list[str], str | None]:
        """(wire body or None, image URLs, unsupported question ids, reason the request is unsupported)."""
        questions = request.get("questions")
        if not isinstance(questions, dict) or not questions:
            return None, [], [], "a request needs at least one question"
        images, videos = media_parts([request.get("state"), request.get("media")])
        if videos:
            return None, [], [], "video input: no System One server takes video"
        if images and self.images == "none":
            return None, [], [], "image input on a text-only server (set model.images=multipart for image servers)"
        if len(images) > self.max_images:
            return None, [], [], f"{len(images)} images; the server takes at most {self.max_images}"
        asked, skipped = {}, []
        for qid, q in questions.items():
            if self.question_problem(q):
                skipped.append(qid)
            else:  # criteria omitted when null (docs/protocol.md §2)
                asked[qid] = {k: v for k, v in q.items() if not (k == "criteria" and v is None)}
        if not asked:
            return None, [], skipped, "no question fits the server's limits"
        if len(asked) > self.max_questions:
            return None, [], skipped, f"{len(asked)} questions; the server takes at most {self.max_questions}"
        body: dict[str, Any] = {"state": request.get("state"), "questions": asked}
        if self.settings.get("model"):
            body = {"model": self.settings["model"], **body}
        if self.send_abstain and (request.get("abstain") or offers_abstain_option(request)):
            body["abstain"] = True
        if self.max_request_bytes is not None:
            size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
            if size > self.max_request_bytes:
                return None, [], skipped, f"request body is {size} bytes; the server takes at most {self.max_request_bytes}"
        return body, images, skipped, None

    # -- the call ----------------------------------------------------------------------------
    def _multipart(self, body: dict[str, Any], images: list[str]) -> tuple[bytes, str] | AdapterResult:
        """The multipart/form-data body (field ``request`` + one ``image`` part per image) and its
        content type (with the boundary)."""
        files = []
        for url in images:
            if "://" in url or url.startswith("data:"):
                return AdapterResult(status="unsupported", error=f"image {url[:80]!r} is not a local asset path")
            path = self.media_root / url
            problem = file_problem(path, "image file", setting="model.media_root")
            if problem is not None:
                return AdapterResult(status="error", failure="request", error=problem)
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            files.append(("image", path.name, path.read_bytes(), mime))
        return multipart_body([("request", json.dumps(body, ensure_ascii=False))], files)

    def prepare(self, request: dict[str, Any]) -> tuple[WireRequest, Any] | AdapterResult:
        body, images, skipped, why = self.build(request)
        if body is None:
            return AdapterResult(status="unsupported", error=why, unsupported_questions=skipped)
        if images:
            encoded = self._multipart(body, images)
            if isinstance(encoded, AdapterResult):
                return encoded
            content, content_type = encoded
        else:
            content, content_type = json.dumps(body, ensure_ascii=False).encode("utf-8"), "application/json"
        return WireRequest(FLAVOUR_PATHS[self.flavour], content, content_type), (skipped, bool(body.get("abstain")))

    def finish(self, reply: HttpReply | AdapterResult, context: Any, request: dict[str, Any]) -> AdapterResult:
        skipped, abstain_sent = context
        result = reply if isinstance(reply, AdapterResult) else self.result_from(reply, skipped)
        result.unsupported_questions = skipped
        if abstain_sent:  # recorded per request (JevAlt-Bench's official report reads it)
            result.meta = {**result.meta, "abstain_flag_sent": True}
        return result

    def result_from(self, reply: HttpReply, skipped: list[str]) -> AdapterResult:
        fields = self.read_body(reply.body, reply.duplicate_keys, self.model_id)
        return AdapterResult(status="ok", response=fields.response, raw=reply.text, model=fields.model,
                             usage=fields.usage, http_status=reply.status, server_request_id=reply.request_id,
                             unsupported_questions=skipped, meta=fields.meta)

    @classmethod
    def read_body(cls, value: Any, duplicate_keys: list[list[Any]], model: str | None) -> BodyFields:
        """The body is the answer as it is; its ``model`` (a string) and ``usage`` (an object) are recorded."""
        is_obj = isinstance(value, dict)
        named = value.get("model") if is_obj and isinstance(value.get("model"), str) else None
        usage = value.get("usage") if is_obj and isinstance(value.get("usage"), dict) else None
        return BodyFields(value, named or model, usage, {"duplicate_keys": duplicate_keys} if duplicate_keys else {})

    @classmethod
    def protocol_part(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {k: v for k, v in value.items() if k in PROTOCOL_MEMBERS}
        if isinstance(out.get("usage"), dict):  # the token counts are what is read of it
            out["usage"] = {k: v for k, v in out["usage"].items() if k in ("input_tokens", "output_tokens")}
        return out
