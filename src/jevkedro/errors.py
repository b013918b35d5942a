"""The errors that are the user's: a setting, a file, a source, a snapshot, a replay file, an
unknown pipeline or view. ``kedro run`` (jevkedro's ``cli.py``) prints such an error's message
alone and exits with :data:`USER_ERROR_EXIT`; any other exception is a bug of ours and keeps its
traceback. A class joins by inheriting :class:`UserError` beside its own base."""

from __future__ import annotations

USER_ERROR_EXIT = 2  # 1 stays for a run that failed on our side, 3 for a failed gate


class UserError(Exception):
    """Marks an exception whose message is all the user needs (no traceback)."""


def user_error_in(exc: BaseException | None) -> UserError | None:
    """The first :class:`UserError` in ``exc`` and the exceptions it was raised from (Kedro wraps a
    dataset's error in its own ``DatasetError``), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
