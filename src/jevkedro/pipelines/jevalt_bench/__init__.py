"""Family package `jevalt_bench`: not built yet (issue #3).

Registered so that pipelines and the CLI know the view; preparing it fails with a clear error.
"""

from jevkedro.registry import not_built

FAMILY = "jevalt_bench"
prepare = not_built(FAMILY, "issue #3")
