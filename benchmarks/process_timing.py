"""Timing one command in its own process tree, for the benchmarks that measure what a user runs.

Imported by the benchmark scripts beside it (``python benchmarks/<script>.py`` puts this folder on
the import path).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Runs the command given as arguments; prints wall seconds, CPU seconds (user + system) and the
# peak RSS in bytes of its largest process (getrusage of the children of this wrapper only).
WRAPPER = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t0
if done.returncode:
    sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
    raise SystemExit(done.returncode)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024)
"""


def time_command(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """``(wall s, CPU s, peak RSS bytes)`` of ``cmd`` run in a fresh wrapper process."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    wall, cpu, rss = done.stdout.split()
    return float(wall), float(cpu), int(rss)
