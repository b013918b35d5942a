"""Family package `visual_decision_bench`: not built yet (issue: VisualDecisionBench views).

Registered so that pipelines and the CLI know the view; preparing it fails with a clear error.
"""

from jevkedro.registry import not_built

FAMILY = "visual_decision_bench"
prepare = not_built(FAMILY, "issue: VisualDecisionBench views")
