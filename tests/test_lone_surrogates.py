"""A string no UTF-8 can hold (a lone surrogate: a model may send ``"\\ud800"``, which is valid
JSON) reaches every file and store a run writes from a model's reply; each must keep it readable."""

from __future__ import annotations

import json

from jevkedro.datasets import JSONDataset, JSONLinesDataset
from jevkedro.nodes.distributed import read_shard, write_shard
from jevkedro.nodes.jsonparse import dumps_utf8
from jevkedro.nodes.snapshot import atomic_write_json
from jevkedro.nodes.tracking import storable, view_run

LONE = "jev-\ud800 é"


def test_json_documents_and_lines_are_utf8_and_read_back_the_same(tmp_path):
    doc = {"model_id": LONE, "n": 1}
    assert json.loads(dumps_utf8(doc).decode("utf-8")) == doc
    assert json.loads(dumps_utf8({"plain": "é"})) == {"plain": "é"} and "é" in dumps_utf8({"plain": "é"}).decode("utf-8")
    atomic_write_json(tmp_path / "report.json", doc)
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8")) == doc
    JSONDataset(filepath=str(tmp_path / "doc.json")).save(doc)
    assert JSONDataset(filepath=str(tmp_path / "doc.json")).load() == doc
    JSONLinesDataset(filepath=str(tmp_path / "q.jsonl")).save([doc, {"x": 2}])
    assert JSONLinesDataset(filepath=str(tmp_path / "q.jsonl")).load() == [doc, {"x": 2}]
    write_shard(str(tmp_path / "shard.jsonl"), [{"request_id": "r1", "status": "ok", "model": LONE}])
    (tmp_path / "shard.jsonl").read_bytes().decode("utf-8")  # valid UTF-8
    assert read_shard(str(tmp_path / "shard.jsonl")) == [{"request_id": "r1", "status": "ok", "model": LONE}]


def test_tags_and_params_are_stored_as_the_escape():
    assert storable(LONE) == "jev-\\ud800 é" and storable("plain é") == "plain é" and storable(3) == 3
    report = {"model": "m", "model_id": LONE, "view": "zh_decision_bench", "family": "zh_decision_bench", "data": "official",
              "snapshot_sha256": "0" * 64, "metrics": {"overall": {}}, "model_settings": {"name": "m", "model": LONE}}
    run = view_run(report, None, {})
    for value in [*run.tags.values(), *run.params.values()]:
        str(value).encode("utf-8")  # a store's UTF-8 column takes every one
    assert run.tags["model_id"] == "jev-\\ud800 é"
