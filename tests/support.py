"""Test support, in one place: project copies, running Kedro (in-process and the CLI), readers of
what a run wrote, and builders of upstream-format inputs (JevBench tasks, Parquet files).

Fixtures live in ``conftest.py``; everything a test imports by name lives here.
"""

from __future__ import annotations

import base64
import html
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pyarrow as pa
import pyarrow.parquet as pq

from jevkedro.nodes.parquet_source import DATA_KIND_KEY
from jevkedro.nodes.snapshot import PreparedView, commit_dataset, load_snapshot
from jevkedro.pipelines.jevbench import map_row

ROOT = Path(__file__).resolve().parents[1]
ZH_RAW = ROOT / "data" / "01_raw" / "zh_decision_bench"

os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")


# -- project copies and Kedro runs -----------------------------------------------------------------

def copy_project(dest: Path, raw_folders: list[str] | None = None) -> Path:
    """A throw-away copy of the project at ``dest``: pyproject, ``conf/base`` (with an absolute
    sqlite URI, see below), an empty ``conf/local`` and ``src``, the shipped ``data/01_raw`` (all of it,
    or the folders named) and empty output folders. Every output of a run lands in the copy."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(ROOT / "conf" / "base", dest / "conf" / "base")
    (dest / "conf" / "local").mkdir()
    if (ROOT / "conf" / "logging.yml").exists():  # Kedro's INFO log goes to logs/info.log
        shutil.copy(ROOT / "conf" / "logging.yml", dest / "conf" / "logging.yml")
        (dest / "logs").mkdir(exist_ok=True)
    # MLflow caches one database engine per URI string; a relative sqlite URI would make every
    # in-process run write to the first project's store, so each copy gets an absolute one.
    mlflow_yml = dest / "conf" / "base" / "mlflow.yml"
    mlflow_yml.write_text(mlflow_yml.read_text().replace("sqlite:///mlflow.db", f"sqlite:///{dest}/mlflow.db"))
    (dest / "src").mkdir()  # kedro wants its source_dir; the package comes from the venv / PYTHONPATH
    raw = ROOT / "data" / "01_raw"
    for folder in (raw_folders if raw_folders is not None else [p.name for p in raw.iterdir() if p.is_dir()]):
        shutil.copytree(raw / folder, dest / "data" / "01_raw" / folder)
    for sub in ("02_snapshots", "07_model_output", "08_reporting"):
        (dest / "data" / sub).mkdir(parents=True, exist_ok=True)
    return dest


def project_conf(dest: Path) -> Path:
    """``conf/base`` and an empty ``conf/local`` at ``dest``: what compare and summary read to find
    a project's outputs (its catalog)."""
    shutil.copytree(ROOT / "conf" / "base", dest / "conf" / "base")
    (dest / "conf" / "local").mkdir(exist_ok=True)
    return dest


def make_project(tmp: Path, raw_folders: list[str]) -> Path:
    """A project copy under ``tmp/project`` with only the given ``data/01_raw`` folders."""
    return copy_project(tmp / "project", raw_folders)


def run_kedro(project: Path, pipeline: str, params: dict[str, Any] | None = None, **run_args: Any) -> dict:
    """Run one registered pipeline of the project copy in-process, as `kedro run` would."""
    import mlflow
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(project)
    try:
        with KedroSession.create(project_path=project, runtime_params=params or {}) as session:
            return session.run(pipeline_names=[pipeline], **run_args)
    finally:
        # kedro-mlflow closes its run in the store but can leave it on this process's run stack;
        # a second in-process session would then log into it. The CLI runs one session per process.
        while mlflow.active_run():
            mlflow.end_run()


def kedro_run(project: Path, view: str, params: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """``kedro run --pipelines=<view>`` (the CLI, in a subprocess: no MLflow or Kedro state shared)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    cmd = [sys.executable, "-m", "kedro", "run", f"--pipelines={view}"] + ([f"--params={params}"] if params else [])
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"kedro run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


# -- what a run wrote ------------------------------------------------------------------------------

def report(project: Path, model: str, view: str, name: str = "report") -> dict[str, Any]:
    """``data/08_reporting/<model>/<view>/<name>.json`` of the copy (``report`` or ``official``)."""
    return json.loads((project / "data" / "08_reporting" / model / view / f"{name}.json").read_text(encoding="utf-8"))


def reports(project: Path, model: str, view: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(report.json, official.json)`` of one model x view."""
    return report(project, model, view), report(project, model, view, "official")


def write_replay(project: Path, view: str, answer: Callable[[dict, list[str]], dict], path: Path) -> Path:
    """A replay file answering every question of the prepared snapshot with ``answer(question, candidates)``."""
    snap = load_snapshot(project / "data" / "02_snapshots", view)
    with open(path, "w", encoding="utf-8") as fh:
        for row in snap.rows:
            answers = {q: answer(spec, row.candidates[q]) for q, spec in row.request["questions"].items()}
            fh.write(json.dumps({"request_id": row.request_id, "response": {"answers": answers}}) + "\n")
    return path


def replay_file(project: Path, model: str, view: str, out: Path) -> Path:
    """A replay file of the answers an earlier run recorded (its ``ok`` predictions)."""
    lines = []
    for line in (project / "data" / "07_model_output" / model / view / "predictions.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["status"] == "ok":
            lines.append(json.dumps({"request_id": rec["request_id"], "response": rec["response"]}, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def mlflow_tags(project: Path) -> list[dict[str, str]]:
    """Tags of the per-view child runs recorded in the copy's ``mlflow.db``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    runs = []
    for exp in client.search_experiments():
        runs += client.search_runs([exp.experiment_id])
    return [r.data.tags for r in runs if "view" in r.data.tags]


# -- JevBench tasks in the upstream format ------------------------------------------------------

def task(id: str, qtype: str, labels: list[str], expected: Any, family: str = "fam", group: str | None = None,
         criteria: Any = "auto", state: Any = "some state", provenance: dict | None = None) -> dict[str, Any]:
    if criteria == "auto":
        criteria = {"noul": {"true": "T", "false": "F"}, "choice": {lab: f"desc {lab}" for lab in labels},
                    "score": [f"level {i}" for i in range(len(labels))]}[qtype]
    return {"id": id, "family": family, "state": state,
            "question": {"type": qtype, "instructions": "decide", "criteria": criteria},
            "labels": labels, "expected": expected, "split": "public", "group": group,
            "provenance": provenance if provenance is not None else {"source": "test"}}


def tier_of(task_id: str) -> str:
    return task_id.split("-", 1)[0]


def jevbench_snapshot_of(tmp_path: Path, tasks: list[dict[str, Any]], data: str = "synthetic"):
    """Map ``tasks`` (tier from the id prefix), commit them as a snapshot and load it back."""
    rows = [map_row(Path(f"{tier_of(t['id'])}.jsonl"), i + 1, t, tier_of(t["id"])) for i, t in enumerate(tasks)]
    prepared = PreparedView(view="jevbench", family="jevbench", data=data, rows=rows, sources=[], scoring={})
    commit_dataset(prepared, tmp_path)
    return load_snapshot(tmp_path, "jevbench")


def record(answer: Any, status: str = "ok", latency: float | None = 0.1, first: bool = False, **extra: Any) -> dict:
    return {"status": status, "response": {"model": "m", "answers": {"decision": answer}} if status == "ok" else None,
            "latency_s": latency, "first": first, "model": "m", "error": extra.pop("error", None), **extra}


def choice(**probs: float) -> dict[str, Any]:
    return {"type": "choice", "probabilities": probs}


def noul(p: Any) -> dict[str, Any]:
    return {"type": "noul", "noul": p}


# -- Parquet files in the upstream format ---------------------------------------------------------

def write_rows(path: Path, rows: list[dict], stamp: str | None = None) -> Path:
    """``rows`` as one Parquet file at ``path``; ``stamp`` puts our in-file data-kind marker in its
    schema metadata (as a file of ours copied out of its marked folder would carry)."""
    table = pa.Table.from_pylist(rows)
    if stamp:
        table = table.replace_schema_metadata({DATA_KIND_KEY: stamp})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


# -- secrets: the spellings of a key that files are searched for ------------------------------------

def key_forms(key: str) -> dict[str, bytes]:
    """Every spelling of ``key`` a file could hold it in (what the corpus searches written files for):
    as is, in either case, percent-encoded, hex, JSON-escaped, HTML entities, base64 in both alphabets
    at every alignment (the part that depends on the key alone), and 16-character pieces of it."""
    raw = key.encode("utf-8")
    forms = {
        "as is": raw, "upper": key.upper().encode(), "lower": key.lower().encode(),
        "percent": quote(key, safe="").encode(), "quote_plus": quote_plus(key).encode(),
        "percent every byte": "".join(f"%{b:02X}" for b in raw).encode(),
        "hex": raw.hex().encode(), "HEX": raw.hex().upper().encode(),
        "json \\u": "".join(f"\\u{ord(c):04x}" for c in key).encode(),
        "json \\/": key.replace("/", "\\/").encode(),
        "html entities": "".join(f"&#{ord(c)};" for c in key).encode(),
        "html entities (escaped)": html.escape("".join(f"&#{ord(c)};" for c in key)).encode(),
    }
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        core = encoded[-(-8 * offset // 6): 8 * (offset + len(raw)) // 6]
        forms[f"base64 at {offset}"] = core.encode()
        forms[f"base64url at {offset}"] = core.translate(str.maketrans("+/", "-_")).encode()
    if len(key) > 16:
        for start in (0, len(key) // 2 - 8, len(key) - 16):
            forms[f"piece at {start}"] = key[start: start + 16].encode()
    return forms


def leaks(data: bytes, key: str) -> list[str]:
    """The spellings of ``key`` found in ``data`` (empty: none)."""
    low = data.lower()
    found = []
    for name, form in key_forms(key).items():
        hay, needle = (data, form) if name.startswith("base64") else (low, form.lower())
        if needle in hay:
            found.append(name)
    return found
