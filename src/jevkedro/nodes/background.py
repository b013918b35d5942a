"""Byte-level work (decompressing, hashing, writing) in one helper thread, beside the Python work.

zlib's inflate, hashlib's sha256 (on blocks of 2 KiB and more) and file writes release the GIL, so
a helper thread doing them runs on the second core while the main thread decodes, maps or encodes
blocks: preparing a view then costs about the larger of the two instead of their sum. Only one
thread ever touches the helper's side (its file, its hash), and the hand-over is a queue of a few
blocks, so memory stays bounded.

- :func:`read_ahead`: the items of an iterator, produced in the helper thread up to ``depth`` ahead.
- :func:`handed_off`: a ``put(item)`` whose items one function handles, in order, in the helper
  thread; leaving the block waits for the last of them.

Errors are never lost: an error of the helper's side is raised in the calling thread, at the item
where it happened (:func:`read_ahead`), or at the next ``put`` and on leaving the block
(:func:`handed_off`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_POLL_S = 0.05  # how often a helper blocked on a full queue looks whether the caller has gone
_END = object()


def read_ahead(items: Iterable[T], depth: int = 2, name: str = "jevkedro-read-ahead") -> Iterator[T]:
    """Yield the items of ``items`` in order, produced by a helper thread (at most ``depth`` waiting).

    The helper runs ``items`` to its end, to an error (raised here, after the items before it) or
    until this generator is closed (the caller stopped early): then the helper stops at its next
    item and ``items`` is closed in the helper thread, which ran it.
    """
    handover: queue.Queue = queue.Queue(maxsize=depth)
    gone = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not gone.is_set():
            try:
                handover.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        source = iter(items)
        try:
            for item in source:
                if not put((True, item)):
                    return
            put((False, _END))
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller, raised there
            put((False, exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    helper = threading.Thread(target=run, name=name, daemon=True)
    helper.start()
    try:
        while True:
            ok, item = handover.get()
            if ok:
                yield item
            elif item is _END:
                return
            else:
                raise item
    finally:
        gone.set()
        helper.join()


@contextmanager
def handed_off(handle: Callable[[T], None], depth: int = 2, name: str = "jevkedro-hand-off") -> Iterator[Callable[[T], None]]:
    """``put(item)`` for the block; ``handle(item)`` runs for each item, in order, in a helper thread.

    Leaving the block normally waits until every item is handled and raises ``handle``'s error if
    it failed (``put`` raises it too, as soon as it is known, so the caller stops early). Leaving on
    an error drops the items not yet handled and waits for the helper before the error goes on, so
    nothing touches ``handle``'s resources (an open file) afterwards.
    """
    handover: queue.Queue = queue.Queue(maxsize=depth)
    failure: list[BaseException] = []
    dropping = threading.Event()

    def run() -> None:
        while (item := handover.get()) is not _END:
            if failure or dropping.is_set():
                continue  # drained until the end marker, so put never blocks for ever
            try:
                handle(item)
            except BaseException as exc:  # noqa: BLE001 -- raised in the caller's thread
                failure.append(exc)

    def put(item: T) -> None:
        if failure:
            raise failure[0]
        handover.put(item)

    helper = threading.Thread(target=run, name=name, daemon=True)
    helper.start()
    try:
        yield put
    except BaseException:
        dropping.set()
        handover.put(_END)
        helper.join()
        raise
    handover.put(_END)
    helper.join()
    if failure:
        raise failure[0]
