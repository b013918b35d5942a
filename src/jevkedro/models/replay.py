"""Replay adapter: scores answers recorded elsewhere.

Reads a JSONL file whose lines are ``{"request_id": ..., "response": <System One body>}``.
Requests with no line are ``unattempted``. A malformed line names file and line. The response is
kept exactly as recorded; validity is judged at scoring time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from jevkedro.config import AdapterOptions
from jevkedro.models.base import Adapter, AdapterResult
from jevkedro.nodes.snapshot import SourceFormatError, read_jsonl, sha256_file


class ReplayAdapter(Adapter):
    kind = "replay"
    resumable = False  # the file is the answer: re-read it on every run
    measures_latency = False  # reading a recorded answer says nothing about the model's speed

    class Options(AdapterOptions):
        path: str | None = Field(None, description='JSONL of {"request_id", "response"} lines')
        model: str | None = Field(None, description="the model id to record (default replay:<file name>)")

    def __init__(self, path: str | None = None, **settings: Any) -> None:
        super().__init__(path=path, **settings)
        if not path:
            raise ValueError("the replay adapter needs model.path=<answers.jsonl>")
        self.path = Path(path)
        self._responses: dict[str, Any] = {}

    @property
    def model_id(self) -> str:
        return str(self.settings.get("model") or f"replay:{self.path.name}")

    def identity(self) -> dict[str, Any]:
        return {"adapter": self.kind, "model": self.model_id, "file_sha256": sha256_file(self.path)}

    def setup(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(f"replay file not found: {self.path}")
        for lineno, obj in read_jsonl(self.path):
            rid = obj.get("request_id")
            if not isinstance(rid, str) or "response" not in obj:
                raise SourceFormatError(f"{self.path}:{lineno}: a replay line needs request_id and response")
            self._responses[rid] = obj["response"]

    def has(self, request_id: str) -> bool:
        return request_id in self._responses

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        if request_id not in self._responses:
            return AdapterResult(status="unattempted")
        body = self._responses[request_id]
        model = body.get("model") if isinstance(body, dict) else None
        usage = body.get("usage") if isinstance(body, dict) else None
        return AdapterResult(status="ok", response=body, model=model or self.model_id, usage=usage)
