"""The remote adapters' connections to their endpoint, on aiohttp (see :mod:`jevkedro.models.http`).

A :class:`Slot` is one keep-alive connection lent to one request at a time. Its requests and replies
are aiohttp's own; two documented extension points (a session's ``request_class`` and
``response_class``) and asyncio's ``transport.set_protocol`` add the one rule aiohttp lacks: a reply
belongs to its request. aiohttp reads every byte that reaches a pooled connection and queues a whole
reply found there as the answer to that connection's next request; here every connection's bytes
pass a :class:`ReplyGuard`, and a request whose connection received anything since its previous
reply was read to the end raises :class:`UnboundReply` before it is written (aiohttp then closes that
connection).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

MAX_HEAD_LINE = 100 * 1024  # the longest status line or header field read; at most 128 header fields (aiohttp's default)
NO_TIMEOUTS = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


class UnboundReply(ConnectionError):
    """Bytes a keep-alive connection received that no request of ours asked for."""


class ReplyGuard(asyncio.Protocol):
    """One connection's asyncio protocol in front of aiohttp's: it counts the bytes the server sends
    (``received``) and hands everything on unchanged. ``seen`` is the count when the connection's
    last reply had been read to its end."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.received = 0
        self.seen = 0

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardedResponse(aiohttp.ClientResponse):
    """aiohttp's response, knowing its connection's guard (so the reader can mark the reply's end)."""

    guard: ReplyGuard | None = None


class GuardedRequest(aiohttp.ClientRequest):
    """aiohttp's request, refusing a connection that received bytes since its last reply was read."""

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        transport = conn.transport
        guard = transport.get_protocol() if transport is not None else None
        if isinstance(guard, ReplyGuard):
            # bytes after the last reply's end, or a further reply aiohttp queued from its last read
            if guard.received != guard.seen or guard.inner.should_close:
                raise UnboundReply("the server sent bytes on the idle keep-alive connection before this request")
        elif transport is not None:  # a new connection: guarded from its first exchange on
            guard = ReplyGuard(conn.protocol)
            transport.set_protocol(guard)
        resp = await super().send(conn)
        if isinstance(resp, GuardedResponse) and isinstance(guard, ReplyGuard):
            resp.guard = guard
        return resp


def env_proxy(endpoint: str) -> URL | None:
    """The proxy the environment names for ``endpoint`` as aiohttp's ``trust_env`` reads it
    (``HTTP_PROXY``/``HTTPS_PROXY`` by the endpoint's scheme, ``NO_PROXY``, proxy credentials from
    the URL or ``~/.netrc``), or None. Read once per adapter, not per request."""
    try:
        proxy, auth = get_env_proxy_for_url(URL(endpoint))
    except LookupError:
        return None
    return proxy.with_user(auth.login).with_password(auth.password) if auth is not None else proxy


class Slot:
    """One keep-alive connection to the endpoint: an ``aiohttp.ClientSession`` whose connector holds
    one connection. No cookies kept, no redirects followed, no timeouts of its own (the request's
    one deadline is the caller's), heads up to :data:`MAX_HEAD_LINE` per line."""

    __slots__ = ("session", "proxy", "urls")

    def __init__(self, headers: dict[str, str], ssl_context: Any, proxy: URL | None) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1, ssl=ssl_context), headers=headers,
            cookie_jar=aiohttp.DummyCookieJar(), trust_env=False, timeout=NO_TIMEOUTS,
            request_class=GuardedRequest, response_class=GuardedResponse,
            max_line_size=MAX_HEAD_LINE, max_field_size=MAX_HEAD_LINE)
        self.proxy = proxy
        self.urls: dict[str, URL] = {}

    async def post(self, url: str, content: bytes, content_type: str, body: Any) -> tuple[int, Any]:
        """The reply's status and headers (a multidict), its (decoded) body read into ``body`` (a
        :class:`jevkedro.models.http.CappedBody`) up to the cap."""
        target = self.urls.get(url)
        if target is None:
            target = self.urls[url] = URL(url)
        async with self.session.post(target, data=content, headers={"Content-Type": content_type},
                                     proxy=self.proxy, allow_redirects=False) as resp:
            if not body.refuse_declared(resp.headers.get("Content-Length")):
                async for chunk in resp.content.iter_any():
                    if body.add(chunk):
                        break
            if body.too_large:
                resp.close()  # the rest is never read: the connection goes
            elif isinstance(resp, GuardedResponse) and resp.guard is not None:
                # the reply's end: no read of the socket came between it and here, so what the guard
                # counts from now on was sent before the connection's next request
                resp.guard.seen = resp.guard.received
        return resp.status, resp.headers

    async def close(self) -> None:
        await self.session.close()

    def detach(self) -> None:
        """Drop the session without closing it (its loop is gone; the sockets go with the objects)."""
        self.session.detach()


def unbound(exc: BaseException) -> bool:
    """Whether ``exc`` (an aiohttp error) is a connection refused by :class:`GuardedRequest`."""
    return isinstance(exc, UnboundReply) or isinstance(exc.__cause__, UnboundReply)
