"""jevkedro (JevalKit): evaluation kit for Jev-class decision models, as a Kedro project."""

__version__ = "0.1.0"
