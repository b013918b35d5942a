"""jevkedro (JevalKit): evaluation kit for Jev-class decision models, as a Kedro project."""

__version__ = "0.1.0"

# Library deprecation notices users cannot act on stay off the console (see jevkedro.console).
from jevkedro.console import filter_library_warnings as _quiet  # noqa: E402

_quiet()
