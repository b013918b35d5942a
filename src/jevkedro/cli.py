"""Project commands for the ``kedro`` CLI: ``kedro run`` with user errors as messages,
``kedro compare`` and ``kedro leaderboard``.

Kedro lets a project's ``cli.py`` override its commands. ``run`` is Kedro's own command with one
difference: an error that is the user's (:class:`jevkedro.errors.UserError`: a setting, a file, a
snapshot, a replay file, an unknown pipeline) prints its message alone, without the traceback or
Kedro's "resume with --from-nodes" hint, and exits with status 2; any other error keeps its
traceback. ``kedro compare --view V A B`` is ``python -m jevkedro.compare --view V A B`` and
``kedro leaderboard`` is ``python -m jevkedro.summary``.
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run

from jevkedro.errors import USER_ERROR_EXIT, user_error_in

PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}
# the loggers that report a failed node and suggest resuming it (said once, by us, for a user error)
_KEDRO_FAILURE_LOGGERS = ("kedro.pipeline.node", "kedro.runner.runner", "kedro.runner.sequential_runner",
                          "kedro.runner.thread_runner", "kedro.runner.parallel_runner", "kedro.framework.session.session")


class UserFacingError(click.ClickException):
    """A user error as ``kedro run`` prints it: ``Error: <message>``, exit status 2."""

    exit_code = USER_ERROR_EXIT


class _NotWhileAUserErrorIsRaised(logging.Filter):
    """Drops a record logged while a user error is being handled (Kedro's node-failure line and
    resume hint are logged inside the ``except`` that re-raises it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return user_error_in(sys.exc_info()[1]) is None


@contextmanager
def _quiet_user_error_logs() -> Iterator[None]:
    quiet = _NotWhileAUserErrorIsRaised()
    loggers = [logging.getLogger(name) for name in _KEDRO_FAILURE_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _check_pipelines(names: Any) -> None:
    """Refuse an unknown ``--pipelines`` name before the session starts, naming the closest one."""
    from kedro.framework.project import pipelines

    known = sorted(pipelines)
    for name in names or ():
        if name not in pipelines:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UserFacingError(f"unknown pipeline {name!r}{hint} (known: {', '.join(k for k in known if k != '__default__')})")


class _RunCommand(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        _check_pipelines(ctx.params.get("pipelines") or ([ctx.params["pipeline"]] if ctx.params.get("pipeline") else []))
        with _quiet_user_error_logs():
            try:
                return super().invoke(ctx)
            except click.ClickException:
                raise
            except Exception as exc:
                user = user_error_in(exc)
                if user is None:
                    raise
                raise UserFacingError(str(user)) from None


@click.group(name="jevkedro")
def cli() -> None:
    """jevkedro's project commands."""


cli.add_command(_RunCommand(name="run", params=kedro_run.params, callback=kedro_run.callback, help=kedro_run.help,
                            short_help=kedro_run.short_help, context_settings=kedro_run.context_settings))


@cli.command(context_settings=PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def compare(args: tuple[str, ...]) -> None:
    """Paired comparison of two models: kedro compare --view VIEW A B (--help for all options)."""
    from jevkedro.compare import main

    sys.exit(main(list(args)))


@cli.command(context_settings=PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def leaderboard(args: tuple[str, ...]) -> None:
    """Models x views table of each view's headline: kedro leaderboard [--view V] [--model M]."""
    from jevkedro.summary import main

    sys.exit(main(list(args)))
