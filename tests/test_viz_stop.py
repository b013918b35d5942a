"""`make viz` (scripts/viz.py) stopped with SIGTERM leaves nothing serving its port (a bare
`kedro viz run` leaves its server child behind: Kedro-Viz's own behaviour)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from support import ROOT, copy_project

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    """A free port below 49152 (Kedro-Viz refuses the ephemeral range the system would pick)."""
    for port in random.Random().sample(range(20000, 49000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 49152")


def _serving(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_sigterm_to_make_viz_frees_the_port(tmp_path):
    port = _free_port()
    project = copy_project(tmp_path / "project", [])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    log = open(tmp_path / "viz.log", "w+b")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "viz.py"), "--port", str(port), "--no-browser"],
                            cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not _serving(port):
            assert proc.poll() is None, "kedro viz ended before serving:\n" + (tmp_path / "viz.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "kedro viz did not start serving"
            time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 20
        while _serving(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _serving(port), "a process still serves the port after make viz was stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
