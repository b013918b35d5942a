"""Fixtures: throw-away copies of the Kedro project (helpers: ``support.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import copy_project


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project (config and shipped raw data) in ``tmp_path``, made the cwd."""
    copy_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path
