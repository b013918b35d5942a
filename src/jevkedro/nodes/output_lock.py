"""One output folder, one writer: a lock per (model, view) output folder.

Two runs with the same ``model.name`` on the same view would write one predictions log at once:
each would ask the server everything the other has not finished, both would fail when they
compact the log, and no report would be written. So whatever writes a folder's outputs first
takes the folder's lock, and a second process is refused at once with a message naming the
folder and the process that holds it (pid, host, start time, command).

The lock is ``fcntl.flock`` on the folder itself (the predictions folder,
``data/07_model_output/<model>/<view>``, which stands for the pair's report folder too), so it holds
whatever happens to any file in it: a lock on a file would be lost with the file (removed, a second
run creates and locks a new one). ``<folder>/.jevkedro.lock`` only tells who holds it (pid, host,
start time, command) and is removed when the lock is let go. The kernel releases the lock when the
holding process ends, however it ends (SIGKILL included), so what a dead run leaves behind never
blocks the next one. A folder replaced while it was being locked is locked again at its path.
``flock`` is local to a machine (on NFS it is emulated with POSIX locks, which works with NFSv4);
runs sharing an output folder across machines need a filesystem that honours it.

Within one process the lock is reentrant: the predictions dataset claims it when the log is first
loaded (before inference, also for a score-only run) and :func:`release_claims` (a Kedro hook at
the end of the pipeline) lets it go after every output was written; :func:`holding` wraps a
block (``run_inference`` outside Kedro).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jevkedro.errors import UserError
from jevkedro.redaction import redact_registered

LOCK_FILE = ".jevkedro.lock"
_HOLDER_WAIT_S = 0.5  # a holder writes its details right after locking: wait this long for them


class OutputFolderBusy(UserError, RuntimeError):
    """Another process holds the output folder's lock (the message names the folder and it)."""


class _Held:
    def __init__(self, fd: int) -> None:
        self.fd, self.count, self.claimed = fd, 0, False  # fd: the locked folder


_REGISTRY: dict[Path, _Held] = {}
_GUARD = threading.Lock()


def lock_path(folder: str | Path) -> Path:
    return Path(folder) / LOCK_FILE


def _holder_details() -> dict[str, Any]:
    command = " ".join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv))
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": redact_registered(command[:500])}


def _read_holder(path: Path) -> dict[str, Any] | None:
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            with open(path, "rb") as f:
                holder = json.loads(f.read(4096).decode("utf-8"))
            if isinstance(holder, dict):
                return holder
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def describe_holder(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "a process that has not said who it is yet"
    return (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
            + (f": {holder['command']}" if holder.get("command") else ""))


def _acquire(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    path = lock_path(folder)
    while True:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_holder(path)
            raise OutputFolderBusy(
                f"{folder}: another run is writing this output folder ({describe_holder(holder)}); "
                f"one output folder has one writer: wait for that run to end (or stop it), or give this run its "
                f"own model.name (lock file {path})") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(folder).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the folder was replaced as we locked it: lock the one now at that path
    data = (json.dumps(_holder_details()) + "\n").encode("utf-8")
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return fd


def _take(folder: str | Path) -> _Held:
    key = Path(folder).resolve()
    with _GUARD:
        held = _REGISTRY.get(key)
        if held is None:
            held = _REGISTRY[key] = _Held(_acquire(key))
        held.count += 1
        return held


def _drop(key: Path, held: _Held) -> None:
    """Release ``key`` when nothing in this process needs it any more (caller holds _GUARD)."""
    if held.count <= 0 and not held.claimed:
        del _REGISTRY[key]
        try:
            with suppress(OSError):  # removed while still locked: never names a run that ended
                lock_path(key).unlink(missing_ok=True)
            fcntl.flock(held.fd, fcntl.LOCK_UN)
        finally:
            os.close(held.fd)


@contextmanager
def holding(folder: str | Path) -> Iterator[None]:
    """Hold ``folder``'s lock for the block (reentrant within the process); raises
    :class:`OutputFolderBusy` at once when another process holds it."""
    held = _take(folder)
    key = Path(folder).resolve()
    try:
        yield
    finally:
        with _GUARD:
            held.count -= 1
            _drop(key, held)


def claim(folder: str | Path) -> object:
    """Hold ``folder``'s lock until :func:`release_claims` (or the end of the process). Returns
    the hold: the same object while the lock has been held throughout, a new one once it was let
    go and taken again (when another process may have written the folder)."""
    held = _take(folder)
    with _GUARD:
        held.claimed = True
        held.count -= 1
    return held


def release_claims() -> list[Path]:
    """Let go of every folder :func:`claim` took (the end of a Kedro pipeline, failed or not)."""
    released = []
    with _GUARD:
        for key, held in list(_REGISTRY.items()):
            if held.claimed:
                held.claimed = False
                _drop(key, held)
                released.append(key)
    return released


def held_folders() -> list[Path]:
    with _GUARD:
        return list(_REGISTRY)
