"""What a ``kedro run`` shows on the terminal: summary lines, progress, warnings that matter.

Kedro's INFO log goes to ``logs/info.log`` (``conf/logging.yml``); the console handler shows
WARNING and above, except Python warnings (the ``py.warnings`` logger), which go to the file only.
The per-view summary lines are printed here (stdout), so they appear whatever the logging
configuration. Deprecation and future warnings raised inside libraries (MLflow, pydantic, Kedro's
own plugins) are filtered: users cannot act on them.
"""

from __future__ import annotations

import logging
import sys
import warnings

LIBRARY_MODULES = r"(mlflow|kedro|kedro_mlflow|kedro_viz|kedro_datasets|pydantic|alembic|sqlalchemy|pkg_resources|google|"\
                  r"opentelemetry|matplotlib|pandas|fsspec|dask|distributed|torch|transformers|starlette|fastapi)(\..*)?"


def filter_library_warnings() -> None:
    """Ignore deprecation-type warnings whose origin is a library module (not jevkedro)."""
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
    # notices addressed to library authors, raised at import or configuration time
    warnings.filterwarnings("ignore", category=UserWarning, message=r"(?s).*(deprecated|Add type hints).*", module=LIBRARY_MODULES)
    # pydantic warns from its own frames about fields named like BaseModel attributes in MLflow's models
    warnings.filterwarnings("ignore", message=r".*Field name .* shadows an attribute in parent.*")
    warnings.filterwarnings("ignore", message=r".*Support for class-based `config` is deprecated.*")


def route_library_logs() -> None:
    """MLflow gives its loggers their own stderr handler (INFO, not propagated), so its notices
    ("Creating initial MLflow database tables...") would bypass ``conf/logging.yml``; hand them to
    the project's handlers instead (INFO to the log file, warnings to the console)."""
    import mlflow  # noqa: F401  (importing it configures its loggers; undo that after)
    import mlflow.store.db.utils  # noqa: F401  (the SQL store's module configures alembic's logger on import)

    for name in ("mlflow", "alembic", "huey"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
    store = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _StoreErrorToLogFile) for f in store.filters):
        store.addFilter(_StoreErrorToLogFile())


class _StoreErrorToLogFile(logging.Filter):
    """MLflow logs a store's database error with its traceback before raising it again; the run
    says once which store failed and what it costs (``hooks.TrackViewRuns``), so the traceback
    goes to the log file only (INFO), not on the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith("SQLAlchemy database error"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def echo(line: str) -> None:
    """A line for the person at the terminal (summary lines), on stdout, flushed."""
    print(line, file=sys.stdout, flush=True)


def resumed(view: str, total: int, done: int, todo: int, where: str = "") -> None:
    """The one line a resumed run shows when it starts asking (a fresh run says nothing): how many
    requests already have their final answer and how many are asked now; the log has it too."""
    line = f"{view}: resumed: {done} already answered, {todo} to ask (of {total} requests)"
    logging.getLogger("jevkedro.nodes.infer").info("%s%s", line, f" [{where.strip(', ')}]" if where else "")
    if done:
        echo(line)
