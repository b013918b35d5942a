"""One writer whatever happens to the lock's file (round 3, class 13): a run that holds an output
folder keeps it when `.jevkedro.lock` is removed or replaced under it; a second process is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jevkedro.nodes import output_lock
from jevkedro.nodes.output_lock import OutputFolderBusy

HOLDER = textwrap.dedent("""
    import sys, time
    from jevkedro.nodes import output_lock
    with output_lock.holding(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.readline()
""")


def _hold(tmp_path: Path, folder: Path) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(folder)], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("tamper", ["removed", "replaced", "replaced_by_a_folder"])
def test_the_lock_holds_when_its_file_is_removed_or_replaced(tmp_path, tamper):
    folder = tmp_path / "out"
    holder = _hold(tmp_path, folder)
    try:
        lock_file = folder / output_lock.LOCK_FILE
        lock_file.unlink()
        if tamper == "replaced":
            lock_file.write_text('{"pid": 1, "host": "elsewhere"}\n')
        elif tamper == "replaced_by_a_folder":
            lock_file.mkdir()
        with pytest.raises(OutputFolderBusy, match="another run is writing this output folder"), output_lock.holding(folder):
            pytest.fail("a second writer got the folder")
        assert output_lock.held_folders() == []
    finally:
        holder.communicate("\n", timeout=30)
    if tamper == "replaced_by_a_folder":
        lock_file.rmdir()
    with output_lock.holding(folder):  # the holder ended: the folder is free again
        assert output_lock.held_folders() == [folder.resolve()]
    assert not (folder / output_lock.LOCK_FILE).exists()


def test_the_holder_is_named_when_it_wrote_its_details(tmp_path):
    folder = tmp_path / "out"
    holder = _hold(tmp_path, folder)
    try:
        with pytest.raises(OutputFolderBusy, match=rf"pid {holder.pid} on "), output_lock.holding(folder):
            pass
    finally:
        holder.communicate("\n", timeout=30)
