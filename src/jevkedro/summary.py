"""Print a short summary of the reports on disk: ``python -m jevkedro.summary``."""

from __future__ import annotations

import sys
from pathlib import Path

from jevkedro.nodes.report import summary_lines


def main(root: str = "data/08_reporting") -> int:
    lines = summary_lines(root)
    if not lines:
        print(f"no reports under {root}; run `kedro run` first")
        return 1
    print("\nResults (generic metrics, all questions; see report.json for slices and `official`):")
    for line in lines:
        print("  " + line)
    if Path("mlflow.db").exists():
        print("MLflow runs: sqlite:///mlflow.db  (browse with `make mlflow-ui`; lineage with `make viz`)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
