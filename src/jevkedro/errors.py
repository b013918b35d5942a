"""The errors that are the user's, and the exit statuses of ``kedro run``.

A user error (a setting, a file, a source, a snapshot, a replay file, an unknown pipeline or
view) is printed as its message alone and exits with :data:`USER_ERROR_EXIT`; any other exception
is a bug of ours and keeps its traceback. A class joins by inheriting :class:`UserError` beside its
own base. The statuses (README, "Exit codes") are, most severe first: 1 a failure on our side, 2 a
user error, 4 a run that stopped early (requests left unanswered), 3 a failed regression gate, 5 a
tracking store that could not be written (the reports are written). When several hold, the first
of 4, 3, 5 is the status and every reason is printed.
"""

from __future__ import annotations

USER_ERROR_EXIT = 2  # 1 stays for a run that failed on our side
GATE_FAILURE_EXIT = 3  # every view scored and tracked; one fell short of its regression gates
STOPPED_EARLY_EXIT = 4  # a view's inference stopped (StopRun or the engine gave up): requests left unanswered
TRACKING_FAILURE_EXIT = 5  # results and reports written; the MLflow store could not record them
EXIT_PRIORITY = (STOPPED_EARLY_EXIT, GATE_FAILURE_EXIT, TRACKING_FAILURE_EXIT)


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
