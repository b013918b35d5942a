"""jevkedro.files: the one check every file input goes through (what is at a path, named)."""

from __future__ import annotations

import os

import pytest

from jevkedro.files import check_file, file_problem, present


def test_a_regular_file_passes_and_a_symlink_to_one_too(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "a.jsonl")
    assert file_problem(tmp_path / "a.jsonl", "source file") is None
    assert check_file(tmp_path / "link.jsonl", "source file", ValueError) == tmp_path / "link.jsonl"


def test_each_kind_is_named_with_the_role_the_path_and_the_setting(tmp_path):
    os.mkfifo(tmp_path / "f")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "plain").write_text("")
    assert file_problem(tmp_path / "nothere", "replay file", setting="model.path") == \
        f"replay file not found: {tmp_path / 'nothere'} (model.path)"
    assert file_problem(tmp_path, "source file") == f"source file {tmp_path} is a folder, not a regular file"
    assert file_problem(tmp_path / "f", "source file", expected="a replay file").endswith("is a FIFO, not a replay file")
    assert "cannot be read (Too many levels of symbolic links)" in file_problem(tmp_path / "loop", "source file")
    assert "cannot be read (Not a directory)" in file_problem(tmp_path / "plain" / "x.jsonl", "source file")


def test_present_counts_a_broken_symlink_so_an_optional_file_is_never_taken_for_absent(tmp_path):
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert present(tmp_path / "gone") and not present(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"is a symlink to .*nowhere, which does not exist; fetch it"):
        check_file(tmp_path / "gone", "source file", ValueError, "; fetch it")
