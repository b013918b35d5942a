"""Family package `decision_index`: not built yet (issue: Decision Index).

Registered so that pipelines and the CLI know the view; preparing it fails with a clear error.
"""

from jevkedro.registry import not_built

FAMILY = "decision_index"
prepare = not_built(FAMILY, "issue: Decision Index")
