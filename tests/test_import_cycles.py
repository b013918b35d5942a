"""scripts/import_cycles.py on small packages written here: function-level imports count,
relative imports resolve, a package's own submodules are no cycle, TYPE_CHECKING imports don't count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_cycles.py"


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def _scan(pkg: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(pkg)], capture_output=True, text=True)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import g\n",
        "b.py": "def g():\n    from pkg import a\n    return a\n",
    })
    done = _scan(pkg)
    assert done.returncode == 1
    assert "import cycle: pkg.a <-> pkg.b" in done.stdout


def test_relative_imports_and_packages_resolve(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "sub/__init__.py": "from .x import f\n",
        "sub/x.py": "from ..y import h\ndef f():\n    return h\n",
        "y.py": "def h():\n    from .sub import x\n    return x\n",
    })
    done = _scan(pkg)
    assert done.returncode == 1
    assert "pkg.sub.x" in done.stdout and "pkg.y" in done.stdout


def test_no_cycle_when_imports_go_one_way_or_only_for_type_checking(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "from pkg.a import f\n",
        "a.py": ("from typing import TYPE_CHECKING\nfrom pkg.b import g\n"
                 "if TYPE_CHECKING:\n    from pkg.c import C\ndef f():\n    return g\n"),
        "b.py": "def g():\n    return 1\n",
        "c.py": "from pkg.a import f\nclass C:\n    pass\n",
    })
    done = _scan(pkg)
    assert done.returncode == 0, done.stdout
    assert "0 cycles" in done.stdout
