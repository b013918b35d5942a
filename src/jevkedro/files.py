"""What is at a path the project is told to read: one rule for every file input.

A release file a family prepares from, a replay file (``model.path``), a snapshot's TSV and
manifest, a data-kind marker, an image a request sends: each must be a regular file this process
can read. Anything else is named for what it is, with the path (and the setting that named it),
never reported as "not found" or left to a reader that would block on a FIFO or read
``/dev/zero`` without end:

- nothing there: ``<role> not found: <path>``;
- a folder, a FIFO, a character or block device, a socket: ``<role> <path> is a FIFO, not a
  regular file``; a symlink is followed and named (``<path>, a symlink to /dev/zero, is a
  character device``), a broken one says where it points;
- unreadable (permissions, a symlink loop): ``<role> <path> cannot be read (<reason>)``.

An optional file (read when the release has it) is absent only when nothing at all is at its path
(:func:`present`): a folder or a broken symlink in its place is refused, never taken for "absent".
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def present(path: str | Path) -> bool:
    """Whether anything is at ``path`` (a broken symlink included): an optional file that is
    present must pass :func:`file_problem`."""
    return os.path.lexists(path)


def file_problem(path: str | Path, role: str, *, expected: str = "a regular file", setting: str | None = None) -> str | None:
    """None when ``path`` is a regular file this process can read; else the sentence refusing it,
    naming ``role`` (``source file``), the path, the ``setting`` that named it (``model.path``)
    when given, and what is there instead of ``expected``."""
    path = Path(path)
    named = f" ({setting})" if setting else ""
    try:
        mode = path.stat().st_mode  # follows a symlink: what would be read
    except FileNotFoundError:
        if path.is_symlink():
            return f"{role} {path}{named} is a symlink to {os.readlink(path)}, which does not exist"
        return f"{role} not found: {path}{named}"
    except OSError as exc:  # ELOOP, EACCES on a folder above, ENAMETOOLONG, ...
        return f"{role} {path}{named} cannot be read ({exc.strerror or exc})"
    link = f", a symlink to {os.readlink(path)}," if path.is_symlink() else ""
    if not stat.S_ISREG(mode):
        what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        return f"{role} {path}{named}{link} is {what}, not {expected}"
    if not os.access(path, os.R_OK):
        return f"{role} {path}{named} cannot be read (permission denied)"
    return None


def check_file(path: str | Path, role: str, error: type[Exception], hint: str = "", **options: str) -> Path:
    """``path`` when :func:`file_problem` finds nothing wrong; else raises ``error`` with its
    sentence (and ``hint``: ``; download the release as README.md says``)."""
    problem = file_problem(path, role, **options)
    if problem is not None:
        raise error(problem + hint)
    return Path(path)
