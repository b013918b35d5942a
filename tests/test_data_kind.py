"""One way to tell our own data from a benchmark release: the folder marker
``JEVKEDRO_DATA_KIND.json`` (``family.check_data_kind``), checked by every family's ``read_release``."""

from __future__ import annotations

import shutil

import pytest
import yaml

from jevkedro.family import DATA_KIND_MARKER, check_data_kind, prepare_view, write_data_kind_marker
from jevkedro.nodes.snapshot import SnapshotError
from jevkedro.registry import FAMILY_BY_NAME
from support import ROOT, ZH_RAW

# every family that ships a sample (data kind "sample" in its conf/base parameters)
SAMPLE_FAMILIES = ("decision_index", "decisionbench", "jevalt_bench", "jevbench", "procedural_typed_decisions",
                   "typed_decisions", "visual_decision_bench")


def _prepare_options(family: str) -> dict:
    params = yaml.safe_load((ROOT / "conf" / "base" / f"parameters_{family}.yml").read_text(encoding="utf-8"))
    return params[family]["prepare"]


def test_every_family_with_a_shipped_sample_is_listed():
    shipped = {p.stem.removeprefix("parameters_") for p in (ROOT / "conf" / "base").glob("parameters_*.yml")
               if any(v.get("prepare", {}).get("data") == "sample"
                      for v in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}).values() if isinstance(v, dict))}
    assert shipped == set(SAMPLE_FAMILIES)


@pytest.mark.parametrize("family", SAMPLE_FAMILIES)
def test_a_shipped_sample_is_marked_and_refused_as_official(family):
    source = ROOT / _prepare_options(family)["source"]
    assert (source / DATA_KIND_MARKER).is_file()
    view = FAMILY_BY_NAME[family].views[0]
    with pytest.raises(SnapshotError, match=f"{DATA_KIND_MARKER} as a jevkedro 'sample' release.*"
                                            "cannot be prepared as data=official"):
        prepare_view(view, source, data="official")


def test_zh_refuses_a_marked_folder_as_official_and_an_unmarked_one_as_sample(tmp_path):
    folder = tmp_path / "zh"
    shutil.copytree(ZH_RAW, folder)
    assert prepare_view("zh_decision_bench", folder, data="official").rows  # the release as published: unmarked
    with pytest.raises(SnapshotError, match=f"has no {DATA_KIND_MARKER}"):
        prepare_view("zh_decision_bench", folder, data="sample")
    write_data_kind_marker(folder, "zh_decision_bench", "sample", "test copy")
    with pytest.raises(SnapshotError, match="cannot be prepared as data=official"):
        prepare_view("zh_decision_bench", folder, data="official")


def test_a_marker_must_name_the_family_and_the_kind(tmp_path):
    write_data_kind_marker(tmp_path, "decisionbench", "sample", "test")
    assert check_data_kind(tmp_path, "decisionbench", "sample")["data_kind"] == "sample"
    with pytest.raises(SnapshotError, match="marks a 'decisionbench' 'sample' release, not a 'jevbench' 'sample' one"):
        check_data_kind(tmp_path, "jevbench", "sample")
    with pytest.raises(SnapshotError, match="not a 'decisionbench' 'synthetic' one"):
        check_data_kind(tmp_path, "decisionbench", "synthetic")
    with pytest.raises(ValueError, match="only our own releases"):
        write_data_kind_marker(tmp_path, "decisionbench", "official", "test")


def test_a_file_stamp_is_checked_by_the_same_rule(tmp_path):
    """The optional in-file stamp (our Parquet metadata): official files carry none; ours carry
    the kind they are prepared as."""
    file = tmp_path / "rel.parquet"
    assert check_data_kind(tmp_path, "typed_decisions", "official", file_marker=(file, None)) is None
    with pytest.raises(SnapshotError, match="rel.parquet: this file was written by jevkedro as 'sample'"):
        check_data_kind(tmp_path, "typed_decisions", "official", file_marker=(file, "sample"))
    write_data_kind_marker(tmp_path, "typed_decisions", "synthetic", "test")
    check_data_kind(tmp_path, "typed_decisions", "synthetic", file_marker=(file, "synthetic"))
    with pytest.raises(SnapshotError, match="prepared as 'synthetic' data, but the file marked 'sample'"):
        check_data_kind(tmp_path, "typed_decisions", "synthetic", file_marker=(file, "sample"))
    with pytest.raises(SnapshotError, match="carries no jevkedro marker"):
        check_data_kind(tmp_path, "typed_decisions", "synthetic", file_marker=(file, None))
