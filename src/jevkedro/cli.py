"""Project commands for the ``kedro`` CLI: ``kedro compare`` and ``kedro leaderboard``.

Kedro adds the ``cli`` group of a project's ``cli.py`` to its own commands; each command here
hands its arguments to the module that does the work, so ``kedro compare --view V A B`` is
``python -m jevkedro.compare --view V A B`` and ``kedro leaderboard`` is ``python -m jevkedro.summary``.
"""

from __future__ import annotations

import sys

import click

PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.group(name="jevkedro")
def cli() -> None:
    """jevkedro's project commands."""


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
