"""Shared HTTP client layer of the remote adapters (System One, OpenAI-compatible): one transport, aiohttp.

Every request goes through aiohttp on the engine's event loop (:meth:`HttpAdapter.answer_async`):
no thread per request in flight, and one deadline can cancel the whole exchange. A subclass writes
only its wire format (:meth:`HttpAdapter.prepare`: the bytes to POST; :meth:`HttpAdapter.finish`:
the result from the reply); the rest lives here and in :mod:`jevkedro.models.connection`:

- **Connections.** One slot per request in flight, each one keep-alive connection lent to one
  request at a time: at most ``model.concurrency`` connections. TLS uses the system's certificate
  authorities (``SSL_CERT_FILE``/``SSL_CERT_DIR`` as OpenSSL reads them); a proxy is the one
  aiohttp's ``trust_env`` finds for the endpoint (``HTTP_PROXY``/``HTTPS_PROXY``, ``NO_PROXY``),
  read once per adapter; no redirects are followed, no cookies kept.
- **A reply belongs to its request.** Bytes that reach a keep-alive connection after its last
  reply was read (a server pushing an unsolicited reply) make it broken: the request is sent again
  once on a fresh connection, before the broken one carried it (a second time is a ``connection``
  error). Bytes past a body's ``Content-Length`` in the same read make the next reply unreadable: a
  ``connection`` error. Never is such a reply the next request's answer. (Bytes a server sends only
  after the next request went out are, by HTTP/1.1, that request's reply: no client can tell them apart.)
- **Per-request deadline.** ``model.timeout_s`` bounds the whole request — connect, send, reply
  head and body — with one timer around the exchange (aiohttp's own timeouts are off); past it the
  request is an ``error`` with failure ``timeout``. A server trickling its reply cannot stretch it.
- **Replies as aiohttp reads them** (its lenient response parser): a bare-LF head, obs-fold
  headers, lines up to 100 KiB and 128 header fields are read; anything longer or more, a reply that
  is not HTTP/1.x or a broken framing is a ``connection`` error naming aiohttp's exception.
- **Key handling.** ``model.api_key_env`` names an environment variable; its value is sent as
  ``Authorization: Bearer <key>``. An empty name (``''``, ``none``, ``-``) sends no
  ``Authorization`` header at all (open endpoints). The key itself is never a setting and never
  part of the adapter's identity. A reply is read exactly as received (validation sees the body the
  server sent); what the adapter *returns* — the parsed body, the raw text, the stored header,
  error texts — is then redacted by structure, in every encoding a server may echo the key in
  (:mod:`jevkedro.redaction`), so it cannot reach predictions, logs or MLflow. The key is also
  registered with the process-wide log filter.
- **Body cap.** ``model.max_response_bytes`` (16 MiB) bounds a reply body: past it (declared by
  ``Content-Length`` or counted while streaming) reading stops and the request is an ``error`` with
  failure ``too_large``, storing only a short excerpt of the body. It counts as an infrastructure
  failure (the server's reply is unusable, like a malformed one: a run of them stops the run) and
  is not retried (the same request would fetch the same body).
- **Status mapping** (docs/protocol.md §2 and the engine's stop rules): 401/403 and 429 raise
  :class:`StopRun` (429 carries ``retry-after`` so a retry policy may wait it out); 413/422 are an
  error for this request only (failure ``request``); any other non-2xx status is failure
  ``server``; a refused, dropped or reset connection, or a reply that is not HTTP/1.x, is
  ``connection``; a 2xx body that is not JSON, or
  whose ``Content-Encoding`` cannot be decoded, is ``malformed`` (its text is kept as returned). A JSON body is read by
  :func:`jevkedro.nodes.jsonparse.parse_json`: a key it repeats is reported
  (:attr:`HttpReply.duplicate_keys`) and a number beyond the double range (a 5,000-digit integer)
  is read as infinity, to be judged invalid at scoring, never a reason to call the body malformed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from annotated_types import Le
from pydantic import Field

from jevkedro.models.base import Adapter, AdapterResult, StopRun
from jevkedro.models.settings import AdapterOptions, PositiveFloat, PositiveInt
from jevkedro.nodes.jsonparse import JSONTextError, parse_json
from jevkedro.protocol import ProtocolError, candidates_for
from jevkedro.redaction import Redactor, header_problem, is_env_name, public_strings, register_secret, settings_holding

if TYPE_CHECKING:  # aiohttp is imported with the first connection, not with the adapters
    from jevkedro.models.connection import Slot

log = logging.getLogger(__name__)

NO_AUTH_NAMES = {"", "none", "null", "-"}
REQUEST_ID_HEADER = "x-typesafe-request-id"
ERROR_EXCERPT_CHARS = 300
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``retry-after`` header (delta-seconds form only; HTTP dates are ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def check_endpoint(endpoint: Any) -> str:
    """A base URL (``https://host/v1``) without credentials or query, with no trailing slash."""
    if not isinstance(endpoint, str) or not endpoint:
        raise ValueError("a remote adapter needs model.endpoint=<base URL up to and including /v1>")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"model.endpoint must be an http(s) URL, got {endpoint!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        # Anything there would be logged as an MLflow param: keys belong in model.api_key_env.
        raise ValueError("model.endpoint must not carry credentials, a query or a fragment; "
                         "name the key's environment variable in model.api_key_env")
    return endpoint.rstrip("/")


@dataclass(frozen=True)
class WireRequest:
    """One POST as it goes on the wire: the path below the endpoint, the encoded body and its type."""

    path: str
    content: bytes
    content_type: str


def json_body(value: Any) -> bytes:
    """A JSON request body: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _form_param(value: str) -> str:
    """A form-data parameter value in quotes, escaped as browsers do (HTML's multipart form encoding)."""
    out = value.replace("\\", "\\\\").replace('"', "%22")
    return "".join(f"%{ord(c):02X}" if ord(c) < 0x20 and c != "\x1b" else c for c in out)


def multipart_body(fields: list[tuple[str, str]], files: list[tuple[str, str, bytes, str]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body and its content type (with the boundary): text ``fields``
    (name, value) and ``files`` (name, file name, bytes, media type), in that order."""
    boundary = os.urandom(16).hex()
    parts: list[bytes] = []
    for name, value in fields:
        parts += [f'--{boundary}\r\nContent-Disposition: form-data; name="{_form_param(name)}"\r\n\r\n'.encode(),
                  value.encode("utf-8"), b"\r\n"]
    for name, filename, data, media_type in files:
        parts += [f'--{boundary}\r\nContent-Disposition: form-data; name="{_form_param(name)}"; '
                  f'filename="{_form_param(filename)}"\r\nContent-Type: {media_type}\r\n\r\n'.encode(), data, b"\r\n"]
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


@dataclass
class HttpReply:
    """A 2xx reply: the parsed JSON body, the body text as received (neither redacted yet: the
    adapter's :meth:`HttpAdapter.answer` redacts what it returns) and the paths of the keys the
    body repeats (see :mod:`jevkedro.nodes.jsonparse`; validation marks what they touch invalid)."""

    status: int
    body: Any
    text: str
    request_id: str | None
    duplicate_keys: list[list[Any]] = field(default_factory=list)


class HttpAdapter(Adapter):
    """Base of the remote adapters: settings, key, client, deadline, body cap, status mapping and
    redaction. Subclasses implement :meth:`ask`; :meth:`answer` redacts what it returns."""

    remote = True
    event_loop = True  # the engine awaits answer_async on its loop
    default_key_env: str | None = None

    class Options(AdapterOptions):
        endpoint: str | None = Field(None, description="base URL up to and including /v1")
        model: str | None = Field(None, description="the server's model id (pin a version, e.g. jev-1.13.0)")
        api_key_env: str | None = Field(None, description="NAME of the environment variable holding the key; none: no auth")
        timeout_s: Annotated[PositiveFloat, Le(3600)] = Field(60.0, description="per-request deadline in seconds")
        max_response_bytes: PositiveInt = Field(MAX_RESPONSE_BYTES, description="largest reply body read; past it "
                                                "the request is an error (failure too_large)")

    def __init__(self, endpoint: str | None = None, model: str | None = None,
                 api_key_env: str | None = None, timeout_s: float = 60.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, **settings: Any) -> None:
        super().__init__(endpoint=endpoint, model=model, api_key_env=api_key_env, timeout_s=timeout_s,
                         **settings)
        self.endpoint = check_endpoint(endpoint)
        self.timeout_s = float(timeout_s)
        self.max_response_bytes = int(max_response_bytes)
        self.key_env = self.key_env_of(api_key_env)
        self.redactor = Redactor(None)
        self._headers: dict[str, str] | None = None  # what every request carries, set by setup()
        self._ssl: Any = None  # one ssl.SSLContext for every slot (made with the first one)
        self._proxy: Any = None  # the environment's proxy for the endpoint (with the first slot)
        self._slots: dict[Any, list[Slot]] = {}  # event loop -> its idle slots (one connection each)
        self._slots_lock = threading.Lock()  # Dask worker threads may each run a loop

    @classmethod
    def key_env_of(cls, api_key_env: str | None) -> str | None:
        """The environment variable that holds the key (None: no auth)."""
        name = cls.default_key_env if api_key_env is None else str(api_key_env)
        return None if name is None or name.strip().lower() in NO_AUTH_NAMES else name.strip()

    @classmethod
    def preflight(cls, options: AdapterOptions, settings: Mapping[str, Any]) -> list[str]:
        """``model.api_key_env`` names a variable (a key's value there is refused, unprinted); the
        key can be sent as a header value; no setting holds the key's value."""
        raw_name = getattr(options, "api_key_env", None)
        name = cls.key_env_of(raw_name)
        if name is None:
            return []
        if not is_env_name(name):
            return ["model.api_key_env: must NAME the environment variable that holds the key (letters, digits "
                    "and _, e.g. TYPESAFE_API_KEY); what was given is not one and is not shown, in case it is the key "
                    "itself: put the key in the environment (or conf/local/credentials.yml) and its name here"]
        key = os.environ.get(name, "")
        if not key:
            return []  # said when the adapter starts, with what to do (an open endpoint may need none)
        problems = []
        problem = header_problem(key)
        if problem:
            problems.append(f"the key in ${name} (model.api_key_env) cannot be sent as an HTTP header value: it holds "
                            f"{problem}; fix the key where it is set (its value is not shown)")
        for setting in settings_holding({k: v for k, v in settings.items() if k != "api_key_env"}, [key]):
            problems.append(f"model.{setting}: holds the value of the API key in ${name}; a key belongs in the "
                            "environment only (the setting would be logged); its value is not shown")
        return problems

    # -- lifecycle -------------------------------------------------------------------------
    def setup(self) -> None:
        headers = {"Accept": "application/json"}
        if self.key_env is not None:
            key = os.environ.get(self.key_env, "")
            if not key:
                raise ValueError(
                    f"model.api_key_env names {self.key_env}, which is not set: export it or put it under "
                    "model_api_keys in conf/local/credentials.yml (or pass model.api_key_env='' for an "
                    "open endpoint)")
            register_secret(key)  # the log filter: no log line of this process carries it
            problem = header_problem(key)
            if problem:  # a line break would inject a header line: refused before any request
                raise ValueError(f"the key in ${self.key_env} (model.api_key_env) cannot be sent as an HTTP header "
                                 f"value: it holds {problem}; fix the key where it is set (its value is not shown)")
            self.redactor = Redactor(key)
            headers["Authorization"] = f"Bearer {key}"
        self._headers = headers

    def _new_slot(self) -> Slot:
        """A slot of one keep-alive connection to the endpoint (see :class:`~jevkedro.models.connection.Slot`)."""
        import ssl

        from jevkedro.models.connection import Slot, env_proxy

        if self._headers is None:
            raise RuntimeError(f"{self.kind}: setup() was not called")
        if self._ssl is None:  # loading the CA store costs CPU: once per adapter, not per slot
            self._ssl = ssl.create_default_context()  # the system's CAs; SSL_CERT_FILE / SSL_CERT_DIR as OpenSSL reads them
            self._proxy = env_proxy(self.endpoint)
        return Slot(self._headers, self._ssl, self._proxy)

    def close(self) -> None:
        # Only loops that ended without aclose() (an interpreter-level interrupt) leave sessions here;
        # their sockets close with them.
        with self._slots_lock:
            for idle in self._slots.values():
                for slot in idle:
                    slot.detach()
            self._slots.clear()

    async def aclose(self) -> None:
        """Close the running loop's sessions (the engine calls this before its loop ends)."""
        with self._slots_lock:
            idle = self._slots.pop(asyncio.get_running_loop(), [])
        for slot in idle:
            await slot.close()

    def identity(self) -> dict[str, Any]:
        return {"adapter": self.kind, "model": self.model_id, "endpoint": self.endpoint}

    # -- answering ---------------------------------------------------------------------------
    def prepare(self, request: dict[str, Any]) -> tuple[WireRequest, Any] | AdapterResult:
        """The subclass's wire format: what to POST and what :meth:`finish` needs to read the reply,
        or the request's result when nothing is to be sent (``unsupported``, a missing image)."""
        raise NotImplementedError

    def finish(self, reply: HttpReply | AdapterResult, context: Any, request: dict[str, Any]) -> AdapterResult:
        """The request's result from the server's reply (or from the transport's error result)."""
        raise NotImplementedError

    async def ask_async(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        """One request: its wire form, the POST and the result; redacted by :meth:`answer_async`."""
        prepared = self.prepare(request)
        if isinstance(prepared, AdapterResult):
            return prepared
        wire, context = prepared
        return self.finish(await self.post_async(wire.path, wire.content, wire.content_type), context, request)

    async def answer_async(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        return self.redacted(await self.ask_async(request_id, request), request)

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        """:meth:`answer_async` on an event loop of its own (for callers outside the engine, which
        awaits :meth:`answer_async` on its loop); not from inside a running loop."""
        async def once() -> AdapterResult:
            try:
                return await self.answer_async(request_id, request)
            finally:
                await self.aclose()

        return asyncio.run(once())

    def redacted(self, result: AdapterResult, request: Mapping[str, Any]) -> AdapterResult:
        """``result`` with the key taken out of everything it stores (see :mod:`jevkedro.redaction`).

        The raw text is searched first: every string of the parsed body is read from it, so a raw
        text without the key (in any encoding) means a body without it and nothing more is walked.
        Strings of the request that was sent, its candidate keys and the reply formats' field names
        are public and kept, so a short key that happens to be such a string never changes a valid
        answer.
        """
        red = self.redactor
        if not red:
            return result
        raw = red.text(result.raw)
        body_may_hold = result.raw is None or raw != result.raw
        result.raw = raw
        result.error = red.text(result.error)
        result.server_request_id = red.text(result.server_request_id)
        result.meta = red.value(result.meta)
        if body_may_hold and (result.response is not None or result.model or result.usage):
            public = public_strings(request, extra=[self.model_id, *_candidate_keys(request)])
            result.response = red.value(result.response, public)
            result.usage = red.value(result.usage, public)
            result.model = red.string(result.model, public) if isinstance(result.model, str) else result.model
        return result

    # -- helpers ---------------------------------------------------------------------------
    def redact(self, text: str | None) -> str | None:
        """Free text (an error, an excerpt) with the key taken out."""
        return self.redactor.text(text)

    def _excerpt(self, text: str) -> str:
        text = " ".join(text.split())
        return (self.redact(text[:ERROR_EXCERPT_CHARS * 2]) or "")[:ERROR_EXCERPT_CHARS] + ("…" if len(text) > ERROR_EXCERPT_CHARS else "")

    async def post_async(self, path: str, content: bytes, content_type: str) -> HttpReply | AdapterResult:
        """POST ``content`` to ``<endpoint><path>`` under the request's deadline: a 2xx reply, or the
        request's error result (or :class:`StopRun`). Bytes that were on the connection before the
        request went out (:class:`UnboundReply`) send the request again once on a fresh connection."""
        import aiohttp

        from jevkedro.models.connection import unbound

        url = self.endpoint + path
        try:
            async with asyncio.timeout(self.timeout_s):
                for attempt in (1, 2):
                    body = CappedBody(self.max_response_bytes)
                    slot = self._take_slot()
                    try:
                        status, headers = await slot.post(url, content, content_type, body)
                    except aiohttp.ClientOSError as exc:
                        self._give_slot(slot)  # aiohttp closed that connection: the slot's next one is fresh
                        if not unbound(exc):
                            raise
                        if attempt == 2:
                            return self.connection_result(exc.__cause__ or exc)
                        log.warning("%s: %s; sending the request again on a fresh connection", url, exc.__cause__)
                        continue
                    except BaseException:
                        self._give_slot(slot)  # aiohttp closed the connection the exchange left unfinished
                        raise
                    self._give_slot(slot)
                    return self.reply_from(url, status, headers, body)
        except TimeoutError as exc:  # the deadline (aiohttp's own timeouts are off)
            return self.timeout_result(exc)
        except aiohttp.ClientPayloadError as exc:
            if isinstance(exc.__cause__, aiohttp.http_exceptions.ContentEncodingError):
                return self.undecodable_result(exc)  # a Content-Encoding (gzip, br, ...) the body does not follow
            return self.connection_result(exc)  # dropped mid-body, a broken chunk
        except aiohttp.ClientError as exc:  # refused, reset, TLS, a proxy that failed, a head that is not HTTP/1.x
            return self.connection_result(exc)
        raise AssertionError("unreachable: the second attempt returns")

    def _take_slot(self) -> Slot:
        """An idle slot of the running loop, or a new one (so one per request in flight)."""
        loop = asyncio.get_running_loop()
        with self._slots_lock:
            idle = self._slots.setdefault(loop, [])
            if idle:
                return idle.pop()
        return self._new_slot()

    def _give_slot(self, slot: Slot) -> None:
        with self._slots_lock:
            self._slots.setdefault(asyncio.get_running_loop(), []).append(slot)

    # -- the rules every transport shares, once the bytes have arrived --------------------------
    def timeout_result(self, exc: BaseException) -> AdapterResult:
        return AdapterResult(status="error", failure="timeout",
                             error=f"timed out after {self.timeout_s:g}s ({type(exc).__name__})")

    def connection_result(self, exc: BaseException, what: str = "connection failed") -> AdapterResult:
        detail = getattr(exc, "message", None) if isinstance(getattr(exc, "message", None), str) else str(exc)
        detail = " ".join(str(detail).split())  # aiohttp's parse errors span lines (an excerpt and a caret)
        if len(detail) > ERROR_EXCERPT_CHARS:
            detail = detail[:ERROR_EXCERPT_CHARS] + "…"
        return AdapterResult(status="error", failure="connection", error=self.redact(f"{what}: {type(exc).__name__}: {detail}"))

    def undecodable_result(self, exc: BaseException) -> AdapterResult:
        return AdapterResult(status="error", failure="malformed",
                             error=self.redact(f"reply body could not be decoded ({type(exc).__name__}: {exc})"))

    def reply_from(self, url: str, status: int, headers: Any, body: CappedBody) -> HttpReply | AdapterResult:
        """The status mapping, the body cap's verdict and the JSON parse of a reply whose body was
        read into ``body``; ``headers`` answers ``get(name)`` and ``getall(name, default)`` (a multidict)."""
        cap = self.max_response_bytes
        text = body.data().decode("utf-8", errors="replace")  # JSON bodies are UTF-8 by definition
        request_id = self.redactor.header(headers.getall(REQUEST_ID_HEADER, []))
        if status in (401, 403):
            raise StopRun(f"HTTP {status} from {url}: {self._excerpt(text)}", http_status=status)
        if status == 429:
            raise StopRun(f"HTTP 429 (rate limited) from {url}: {self._excerpt(text)}", http_status=429,
                          retry_after=parse_retry_after(headers.get("retry-after")))
        if body.too_large:
            return AdapterResult(status="error", failure="too_large", http_status=status, server_request_id=request_id,
                                 raw=self._excerpt(text) if text else None,
                                 error=f"HTTP {status} with a body over model.max_response_bytes={cap} "
                                       f"({'declared' if body.declared else 'read'} {body.size} bytes; stopped reading)")
        if status in (413, 422):
            return AdapterResult(status="error", failure="request", error=f"HTTP {status}: {self._excerpt(text)}",
                                 raw=text, http_status=status, server_request_id=request_id)
        if not 200 <= status < 300:
            return AdapterResult(status="error", failure="server", error=f"HTTP {status}: {self._excerpt(text)}",
                                 raw=text, http_status=status, server_request_id=request_id)
        try:  # the bytes: not UTF-8 is malformed, never U+FFFD (jsonparse's rules: repeats, numbers, BOM)
            parsed = parse_json(body.data())
        except JSONTextError as exc:
            return AdapterResult(status="error", failure="malformed", error=f"HTTP {status} with a body that is not JSON ({exc})",
                                 raw=text, http_status=status, server_request_id=request_id)
        return HttpReply(status, parsed.value, text, request_id, [list(p) for p in parsed.duplicate_keys])


class CappedBody:
    """A reply body read under ``model.max_response_bytes``: a declared ``Content-Length`` over the
    cap is refused unread; otherwise (decoded) chunks are kept until the cap, and reading stops there."""

    __slots__ = ("cap", "chunks", "size", "too_large", "declared")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.declared = False  # True: refused by its Content-Length, nothing read

    def refuse_declared(self, content_length: str | None) -> bool:
        """True (and nothing is to be read) when ``content_length`` declares more than the cap."""
        declared = (content_length or "").strip()
        if declared.isdigit() and int(declared) > self.cap:
            self.size, self.too_large, self.declared = int(declared), True, True
            return True
        return False

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; True when the cap is passed (the part past it is dropped: stop reading)."""
        self.size += len(chunk)
        if self.size > self.cap:
            self.chunks.append(chunk[: max(0, self.cap - (self.size - len(chunk)))])
            self.too_large = True
            return True
        self.chunks.append(chunk)
        return False

    def data(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


def _candidate_keys(request: Mapping[str, Any]) -> list[str]:
    """The candidate keys of a request's questions (score levels are "0".."K-1", which the request
    does not spell out): public text an answer is keyed by."""
    out: list[str] = []
    questions = request.get("questions") if isinstance(request, Mapping) else None
    for q in (questions.values() if isinstance(questions, Mapping) else ()):
        try:
            out += candidates_for(q)
        except (ProtocolError, TypeError, ValueError, KeyError, AttributeError):
            continue
    return out
