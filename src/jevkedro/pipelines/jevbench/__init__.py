"""Family package `jevbench`: not built yet (issue #4).

Registered so that pipelines and the CLI know the view; preparing it fails with a clear error.
"""

from jevkedro.registry import not_built

FAMILY = "jevbench"
prepare = not_built(FAMILY, "issue #4")
