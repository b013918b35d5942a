"""`kedro viz run` that stops whole: its server child goes when it is stopped, however it is stopped.

Kedro-Viz serves from a child process; stopping `kedro viz run` with SIGTERM (a process manager,
`kill`, a closed terminal's SIGHUP) ends only the parent and leaves the child serving the port.
This runs it in a process group of its own and hands SIGTERM, SIGINT and SIGHUP to the whole
group, so the port is free once this process has ended (`make viz`). Arguments go to `kedro viz
run` (e.g. `--port 4142 --no-browser`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    kedro = Path(sys.executable).with_name("kedro")
    child = subprocess.Popen([str(kedro), "viz", "run", *argv], start_new_session=True)

    def stop(signum: int, _frame: object) -> None:
        try:
            os.killpg(child.pid, signal.SIGTERM if signum != signal.SIGINT else signal.SIGINT)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    code = child.wait()
    try:  # whatever is left of the group (the server child outlives its parent on SIGTERM)
        os.killpg(child.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
