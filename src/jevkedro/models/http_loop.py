"""The event-loop HTTP/1.1 transport of the remote adapters: keep-alive connections on asyncio streams.

Why not httpx or aiohttp on the loop: against the loopback server at concurrency 32 (client and
server on their own cores), a bare aiohttp loop cost 0.36 ms of client CPU per request and a bare
asyncio-streams loop 0.11 ms (docs/benchmarks.md, "HTTP client"); the adapters need only one kind
of exchange (a POST with a body in hand, a reply read under a cap), so that is all this module does.

One :class:`ConnectionPool` per endpoint and event loop: idle keep-alive connections are reused
(most recently used first), a connection the server has closed meanwhile is dropped before use, and
one is opened when none is idle (no limit: the engine bounds the requests in flight). A reply is
read by its framing (``Content-Length``, ``Transfer-Encoding: chunked``, or until the server closes),
decoded by its ``Content-Encoding`` with httpx's own decoders (the same rules as the thread path),
and handed chunk by chunk to a :class:`jevkedro.models.http.CappedBody`, which stops the reading at
the cap. A connection goes back to the pool only after a whole reply on a keep-alive exchange;
anything else (a cap, a deadline, a framing error) closes it. Everything after the bytes arrive
(status mapping, parsing, redaction) is :mod:`jevkedro.models.http`'s, shared with httpx.

Failures surface as ``OSError`` (refused, reset), ``EOFError`` (closed early),
:class:`HttpProtocolError` (a reply that is not HTTP/1.x) or ``httpx.DecodingError`` (a body
that does not follow its ``Content-Encoding``, as on the thread path); the caller bounds the whole exchange by its
deadline.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx

from jevkedro.models.http import CappedBody

READ_SIZE = 1 << 16  # bytes asked of the socket at once while reading a body
MAX_HEAD_BYTES = 1 << 16  # a reply's status line and headers (httpx/h11 refuse larger ones too)
NO_BODY_STATUSES = frozenset({204, 304})


class HttpProtocolError(ValueError):
    """A reply that does not follow HTTP/1.1 framing."""


def accept_encoding() -> str:
    """What httpx's client sends: every coding its decoders read (gzip, deflate; br, zstd when installed)."""
    from httpx._decoders import SUPPORTED_DECODERS  # httpx is pinned: the very table its client uses

    return ", ".join(k for k in SUPPORTED_DECODERS if k != "identity")


class ReplyHeaders:
    """A reply's headers with the lookups the reply rules use, as ``httpx.Headers`` answers them:
    names without case, ``get`` joins repeated values with ", ", ``get_list`` keeps them apart.
    (httpx's own class costs about as much CPU per reply as the whole head parse.)"""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs  # (lower-case name, value) in the order received

    def get_list(self, name: str, split_commas: bool = False) -> list[str]:
        name = name.lower()
        values = [v for k, v in self.pairs if k == name]
        return [part.strip() for v in values for part in v.split(",")] if split_commas else values

    def get(self, name: str, default: Any = None) -> Any:
        values = self.get_list(name)
        return ", ".join(values) if values else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(k == name.lower() for k, _ in self.pairs)

    def raw(self) -> list[tuple[str, str]]:
        return list(self.pairs)


class ConnectionPool:
    """Keep-alive connections to one endpoint (``scheme://host:port/base``) on one event loop."""

    def __init__(self, endpoint: str, headers: dict[str, str], user_agent: str | None = None) -> None:
        parts = urlsplit(endpoint)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.base_path = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = httpx.create_ssl_context() if self.tls else None  # certifi, as httpx
        fixed = {"Host": parts.netloc, "Accept-Encoding": accept_encoding(), "Connection": "keep-alive",
                 "User-Agent": user_agent or f"python-httpx/{httpx.__version__}", **headers}
        self._head_fields = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0  # connections opened so far (tests and benchmarks read it)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self.idle:
            reader, writer = self.idle.pop()
            if not (reader.at_eof() or writer.is_closing() or reader._buffer):  # type: ignore[attr-defined]
                return reader, writer
            writer.close()  # closed by the server while idle (or holding bytes no request asked for)
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl, server_hostname=self.host if self.tls else None, limit=MAX_HEAD_BYTES)
        self.opened += 1
        return reader, writer

    def request_head(self, path: str, content_type: str, length: int) -> bytes:
        return (f"POST {self.base_path}{path} HTTP/1.1\r\n".encode("ascii") + self._head_fields
                + f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode("latin-1"))

    async def aclose(self) -> None:
        idle, self.idle = self.idle, []
        for _, writer in idle:
            writer.close()
        for _, writer in idle:
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):  # already reset by the server: nothing left to close
                pass


async def exchange(pool: ConnectionPool, path: str, content: bytes, content_type: str,
                   body: CappedBody) -> tuple[int, ReplyHeaders]:
    """POST ``content`` to ``path`` (below the endpoint) and read the reply into ``body``.

    Returns the status and headers. The request goes out in one write (head and body together: no
    wait on Nagle/delayed ACK, one read for the server).
    """
    reader, writer = await pool._connect()
    reusable = False
    try:
        writer.write(pool.request_head(path, content_type, len(content)) + content)
        while True:
            status, headers, keep_alive = await _read_head(reader)
            if not 100 <= status < 200:
                break  # 1xx interim replies (100 Continue, 103 Early Hints) precede the real one
        if body.refuse_declared(headers.get("content-length")):
            return status, headers
        complete = await _read_body(reader, status, headers, body)
        reusable = complete and keep_alive and not body.too_large
        return status, headers
    finally:
        if reusable:
            pool.idle.append((reader, writer))
        else:
            writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, ReplyHeaders, bool]:
    """Status, headers and whether the connection may be kept, from the reply's head."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise EOFError("server disconnected without sending a complete reply head"
                       if exc.partial else "server disconnected without sending a reply") from None
    except asyncio.LimitOverrunError:
        raise HttpProtocolError(f"reply head longer than {MAX_HEAD_BYTES} bytes") from None
    lines = head[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit() or rest[3:4] not in (b"", b" "):
        raise HttpProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    pairs = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            raise HttpProtocolError(f"not a header line: {line[:80]!r}")
        pairs.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    headers = ReplyHeaders(pairs)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == b"HTTP/1.1" else "keep-alive" in connection
    return int(code), headers, keep_alive


def _decoder(headers: ReplyHeaders) -> Any:
    """httpx's decoder for the reply's ``Content-Encoding`` (None: identity, nothing to decode)."""
    if "content-encoding" not in headers:
        return None
    return httpx.Response(200, headers=headers.raw())._get_content_decoder()  # the thread path's very choice


async def _read_body(reader: asyncio.StreamReader, status: int, headers: ReplyHeaders, body: CappedBody) -> bool:
    """Read (and decode) the body into ``body`` until its end or the cap; True when it ended."""
    if status in NO_BODY_STATUSES:
        return True
    decoder = _decoder(headers)

    def take(raw: bytes) -> bool:  # True: the cap is passed, stop reading
        return body.add(raw if decoder is None else decoder.decode(raw))  # httpx.DecodingError: not its coding

    coding = headers.get("transfer-encoding", "").lower()
    if coding:
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            raise HttpProtocolError(f"unsupported Transfer-Encoding {coding!r}")
        ended = await _read_chunked(reader, take)
    elif "content-length" in headers:
        values = {v.strip() for v in headers.get_list("content-length", split_commas=True)}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise HttpProtocolError(f"bad Content-Length {headers.get('content-length')!r}")
        left = int(values.pop())
        ended = True
        while left:
            raw = await reader.read(min(left, READ_SIZE))
            if not raw:
                raise EOFError(f"peer closed connection without sending complete message body ({left} bytes short)")
            left -= len(raw)
            if take(raw):
                ended = False
                break
    else:  # neither: the body runs until the server closes the connection
        ended = False
        while raw := await reader.read(READ_SIZE):
            if take(raw):
                return False
    if ended and decoder is not None:
        body.add(decoder.flush())
    return ended


async def _read_chunked(reader: asyncio.StreamReader, take: Any) -> bool:
    """A chunked body; True when the last chunk and the trailers were read, False at the cap."""
    while True:
        line = await _readline(reader)
        if not line.endswith(b"\n"):
            raise EOFError("peer closed connection without sending complete message body: incomplete chunked read")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpProtocolError(f"bad chunk size line {line[:40]!r}") from None
        if size == 0:
            while (trailer := await _readline(reader)) not in (b"\r\n", b"\n"):
                if not trailer:
                    raise EOFError("peer closed connection inside the chunked body's trailers")
            return True
        while size:
            raw = await reader.read(min(size, READ_SIZE))
            if not raw:
                raise EOFError("peer closed connection without sending complete message body: incomplete chunked read")
            size -= len(raw)
            if take(raw):
                return False
        if await reader.readexactly(2) != b"\r\n":
            raise HttpProtocolError("chunk not followed by CRLF")


async def _readline(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError:  # longer than the stream's limit (asyncio turns LimitOverrunError into this)
        raise HttpProtocolError(f"a chunk size or trailer line longer than {MAX_HEAD_BYTES} bytes") from None
