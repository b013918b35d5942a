"""Kedro datasets of the views' pipelines (declared as factories in ``conf/base/catalog.yml``), and
the project's catalog as the commands outside ``kedro run`` read it.

``{view}.release`` (raw) -> ``{view}.snapshot`` (primary) -> ``{view}.predictions`` (model output) ->
``{view}.report`` / ``{view}.official`` / ``{view}.plots`` (reporting) -> ``{view}.mlflow_run``
(tracking). Every file written here is written atomically (temp file + rename), so a killed run
never leaves half a file where a good one was; a file that is broken anyway (edited, copied half)
is refused naming it, and :func:`read_reports` names a broken report and goes on with the others.

``python -m jevkedro.compare`` and ``python -m jevkedro.summary`` find every file through
:func:`project_catalog` (the project's ``conf/``, resolved as ``kedro run`` resolves it), so an
output moved in ``conf/`` is followed by them too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.io import AbstractDataset, DataCatalog, DatasetError
from kedro_datasets._typing import JSONPreview, TablePreview

from jevkedro.config import PrepareOptions, check_run_name, parse_prepare_options
from jevkedro.errors import UserError
from jevkedro.family import Release
from jevkedro.nodes import output_lock, tracking
from jevkedro.nodes.plots import figure_png
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.snapshot import (
    PreparedView,
    Snapshot,
    atomic_write_bytes,
    atomic_write_json,
    commit_dataset,
    load_snapshot,
    snapshot_paths,
)
from jevkedro.nodes.validate import question_lines
from jevkedro.registry import VIEWS, family_of
from jevkedro.report_fields import LEADERBOARD_FIELDS, report_problem

# How the project's configuration is read: settings.py hands these to Kedro, and
# :func:`project_catalog` reads the catalog with them, so both resolve every path the same way.
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
}
ANY = "*"  # as the model name (or view): a dataset's path becomes a pattern over every model's (view's) files


# the arguments that locate a dataset's files: Kedro's own (made absolute by its context) and ours
PATH_ARGUMENTS = ("filepath", "path", "filename", "folder", "root")


def project_catalog(project: str | Path, model: str = ANY) -> DataCatalog:
    """The catalog of the project at ``project`` as ``kedro run --params=model.name=<model>``
    resolves it (``conf/base``, then ``conf/local`` or ``KEDRO_ENV``, ``globals``), with relative
    locations taken from the project root, as ``kedro run`` (started there) takes them. ``model`` is
    a ``model.name`` (:func:`jevkedro.config.check_run_name`: never a path) or :data:`ANY`."""
    if model != ANY:
        check_run_name(model, "model")
    conf = Path(project) / "conf"
    if not conf.is_dir():
        raise DatasetError(f"{conf}: no project configuration here (give the project's root folder)")
    loader = OmegaConfigLoader(conf_source=str(conf), env=os.environ.get("KEDRO_ENV") or None,
                               runtime_params={"model": {"name": model}}, **CONFIG_LOADER_ARGS)
    return DataCatalog.from_config({name: _rooted(entry, Path(project)) for name, entry in loader["catalog"].items()})


def _rooted(entry: Any, project: Path) -> Any:
    if not isinstance(entry, dict):
        return entry
    out = {k: _rooted(v, project) for k, v in entry.items()}
    for key in PATH_ARGUMENTS:
        value = out.get(key)
        if isinstance(value, str) and "://" not in value and not Path(value).is_absolute():
            out[key] = str(project / value)
    return out


def catalog_dataset(catalog: DataCatalog, name: str) -> AbstractDataset:
    """The catalog's dataset ``name`` (a factory pattern instantiated), or an error naming it."""
    dataset = catalog.get(name)
    if dataset is None:
        raise DatasetError(f"the project's catalog has no dataset {name} (conf/base/catalog.yml)")
    return dataset


class ReleaseDataset(AbstractDataset[None, Release]):
    """A view's upstream release, read and checked by its family's ``read_release`` (read-only).

    Where the release is and what kind of data it holds come from the typed ``<view>.prepare``
    settings, which :class:`jevkedro.hooks.CheckSettings` checks and binds (:meth:`bind`) when the
    catalog is created; a dataset that was never bound refuses to load rather than guess a folder.
    """

    def __init__(self, view: str, metadata: dict[str, Any] | None = None) -> None:
        family_of(view)  # an unknown view fails here, naming the known ones
        self.view, self.metadata = view, metadata
        self.options: PrepareOptions | None = None

    def bind(self, options: PrepareOptions | dict[str, Any]) -> None:
        self.options = parse_prepare_options(self.view, options)

    def load(self) -> Release:
        if self.options is None:
            raise DatasetError(f"{self.view}.release: no release configured; set {self.view}.prepare.source "
                               f"and {self.view}.prepare.data (parameters_<family>.yml or --params)")
        return family_of(self.view).module().read_release(self.options, self.view)

    def save(self, data: None) -> None:
        raise DatasetError(f"{self.view}.release is read-only: upstream releases are never written by a run")

    def _exists(self) -> bool:
        return self.options is not None and Path(self.options.source).exists()

    def _describe(self) -> dict[str, Any]:
        return {"view": self.view, **(self.options.model_dump() if self.options else {})}


class SnapshotDataset(AbstractDataset[PreparedView, Snapshot]):
    """``<root>/<view>.tsv`` + manifest. Saving commits through the one shared writer."""

    def __init__(self, root: str, view: str, metadata: dict[str, Any] | None = None) -> None:
        self.root, self.view, self.metadata = Path(root), view, metadata

    def load(self) -> Snapshot:
        return load_snapshot(self.root, self.view)

    def save(self, data: PreparedView) -> None:
        if data.view != self.view:
            raise ValueError(f"snapshot dataset for {self.view} got a prepared view of {data.view}")
        commit_dataset(data, self.root)

    def _exists(self) -> bool:
        return all(p.is_file() for p in snapshot_paths(self.root, self.view))

    def _describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "view": self.view}


class PredictionsDataset(AbstractDataset[None, PredictionLog]):
    """The append-only predictions log of one (model, view); loads as a :class:`PredictionLog`.

    ``infer`` resumes the log it loads and appends to it as answers arrive (crash safety needs
    that), ``score`` and ``explore`` read what is there; it is never saved whole. Loading first
    takes the output folder's lock (:mod:`jevkedro.nodes.output_lock`) for the rest of the
    pipeline: a second run with the same ``model.name`` on the same view is refused before it asks
    anything. While this process holds that lock nothing else writes the log, so every load
    returns the one log opened first: its records are decoded once for all its readers (again only
    after it was written). The project's hook (:class:`jevkedro.hooks.ReleaseOutputFolders`)
    releases the dataset after the last node that reads it, which lets the log go.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata
        self._opened: tuple[object, PredictionLog] | None = None  # (the lock's hold, the log opened under it)

    def load(self) -> PredictionLog:
        hold = output_lock.claim(self.filepath.parent)
        if self._opened is None or self._opened[0] is not hold:  # the lock was let go since: open afresh
            self._opened = (hold, PredictionLog(self.filepath))
        return self._opened[1]

    def _release(self) -> None:
        self._opened = None

    def save(self, data: None) -> None:
        raise DatasetError(f"{self.filepath}: the predictions log is appended to by inference as answers arrive, "
                           "never saved whole")

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


class BrokenFileError(UserError, DatasetError):
    """A JSON or JSON Lines file the project wrote that cannot be read back (the message names it)."""


def read_json_document(path: str | Path) -> Any:
    """A JSON file; one that is missing, not UTF-8, empty, truncated or otherwise not JSON raises
    :class:`BrokenFileError` naming the file, the place and what to do."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BrokenFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BrokenFileError(f"{path}: not UTF-8 (byte {exc.start + 1}); write it again (rerun the node that writes it)") from None
    except json.JSONDecodeError as exc:
        what = "empty" if not data.strip() else f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        raise BrokenFileError(f"{path}: {what}; write it again (rerun the node that writes it)") from None


def _on_disk(pattern: str | Path) -> list[Path]:
    """The files matching a dataset path resolved with :data:`ANY` (a glob pattern)."""
    path = Path(pattern)
    anchor = Path(path.anchor) if path.is_absolute() else Path()
    return [p for p in anchor.glob(str(path.relative_to(anchor))) if p.is_file()]


def read_reports(project: str | Path, views: list[str] | None = None,
                 models: list[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every report in the project at ``project``, found where its catalog puts ``{view}.report``
    (optionally only these views and models); and one problem line per report that cannot be read
    or is not in the place of the model and view it names (named, then skipped: the others are
    still read)."""
    catalog = project_catalog(project)
    place = {}  # view -> its reports' path, with ANY for the model

    def place_of(view: str) -> str:
        if view not in place:
            place[view] = str(catalog_dataset(catalog, f"{view}.report").filepath)
        return place[view]

    paths = sorted({p for v in dict.fromkeys(views or [*VIEWS, ANY]) for p in _on_disk(place_of(v))})
    found, problems = [], []
    for path in paths:
        try:
            rep = read_json_document(path)
        except BrokenFileError as exc:
            problems.append(f"skipped {exc}")
            continue
        if not isinstance(rep, dict) or not isinstance(rep.get("metrics"), dict) or "view" not in rep or "model" not in rep:
            problems.append(f"skipped {path}: not a report (expected an object with view, model and metrics)")
            continue
        wrong = report_problem(rep, LEADERBOARD_FIELDS)
        if wrong:
            problems.append(f"skipped {path}: {wrong}")
            continue
        view, model = rep["view"], rep["model"]
        if (views and view not in views) or (models and model not in models):
            continue
        misplaced = misplaced_report(rep, path, Path(place_of(view).replace(ANY, model)))
        if misplaced:
            problems.append(f"skipped {misplaced}")
            continue
        found.append(rep)
    found.sort(key=lambda rep: (str(rep["model"]), str(rep["view"])))
    return found, problems


def misplaced_report(report: dict[str, Any], path: Path, place: Path) -> str | None:
    """A report found at ``path`` whose model and view put it at ``place`` (a report folder copied
    under another name), named; None when it is in its place."""
    if Path(place) == Path(path):
        return None
    return (f"{path}: the report of model {report.get('model')!r} on view {report.get('view')!r} is not in its "
            f"place ({place})")


class JSONDataset(AbstractDataset[dict, dict]):
    """A JSON document (UTF-8, non-ASCII kept, indented), written atomically."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> Any:
        return read_json_document(self.filepath)

    def save(self, data: Any) -> None:
        atomic_write_json(self.filepath, data)

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}

    def preview(self) -> JSONPreview:  # kedro-viz: the document itself
        return JSONPreview(self.filepath.read_text(encoding="utf-8") if self.filepath.is_file() else "{}")


class ReportDataset(JSONDataset):
    """``report.json``; kedro-viz previews its headline figures as a table (overall and per type)."""

    HEADLINE = ("n", "accuracy", "accuracy_n", "nll", "brier", "ece", "probability_n")

    def preview(self) -> TablePreview:  # pandas "split" layout
        report = self.load() if self.filepath.is_file() else {}
        metrics = report.get("metrics") or {}
        rows = {"overall": metrics.get("overall") or {}}
        rows.update({f"type={t}": m for t, m in (metrics.get("by_type") or {}).items()})
        return TablePreview({"index": list(rows), "columns": list(self.HEADLINE),
                             "data": [[_rounded(m.get(c)) for c in self.HEADLINE] for m in rows.values()]})


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


class JSONLinesDataset(AbstractDataset[list, list]):
    """A list of JSON objects, one per line, written atomically (UTF-8, non-ASCII kept)."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> list[dict[str, Any]]:
        out = []
        with open(self.filepath, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    out.append(json.loads(raw.decode("utf-8")))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    where = (f"column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                             else f"byte {exc.start + 1}: not UTF-8")
                    raise BrokenFileError(f"{self.filepath}:{lineno}: not a JSON line ({where}); write it again "
                                          "(rerun the node that writes it)") from None
        return out

    def save(self, data: list[dict[str, Any]]) -> None:
        atomic_write_bytes(self.filepath, question_lines(data))

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


class PlotsDataset(AbstractDataset[dict, dict]):
    """A view's plots: ``{file name: matplotlib Figure or PNG bytes}`` saved as PNG files in
    ``folder`` (each written atomically); loads back as ``{file name: PNG bytes}``."""

    def __init__(self, folder: str, metadata: dict[str, Any] | None = None) -> None:
        self.folder, self.metadata = Path(folder), metadata

    def load(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.folder.glob("*.png"))}

    def save(self, data: dict[str, Any]) -> None:
        for name, figure in data.items():
            if not name.endswith(".png") or "/" in name or name.startswith("."):
                raise DatasetError(f"{self.folder}: plot name {name!r} must be a plain file name ending in .png")
            atomic_write_bytes(self.folder / name, figure if isinstance(figure, bytes) else figure_png(figure))

    def _exists(self) -> bool:
        return any(self.folder.glob("*.png"))

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self.folder)}


class TextDataset(AbstractDataset[str, str]):
    """A UTF-8 text file, written atomically (the leaderboard's CSV and Markdown)."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> str:
        return self.filepath.read_text(encoding="utf-8")

    def save(self, data: str) -> None:
        atomic_write_bytes(self.filepath, data.encode("utf-8"))

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}


PAIR_SEPARATOR = "__vs__"


def pair_folder(a: str, b: str) -> str:
    """The folder name of the comparison of ``a`` with ``b``: ``<A>__vs__<B>``, one name per pair.

    Model names (``model.name``) never start with ``_`` and hold no ``%``. Where neither holds ``__``,
    the separator is the only ``__vs__`` in the name, so no two pairs share it; where one does
    (``x__vs__y`` against ``z``, or ``x`` against ``y__vs__z``), each ``_`` of both names is written
    ``%5F``, so that name holds a ``%`` (no plain one does) and no ``_`` but the separator's."""
    if "__" in a or "__" in b:
        a, b = a.replace("_", "%5F"), b.replace("_", "%5F")
    return f"{a}{PAIR_SEPARATOR}{b}"


def pair_of_folder(name: str) -> tuple[str, str]:
    """The models ``(A, B)`` of a :func:`pair_folder` name."""
    a, b = name.split(PAIR_SEPARATOR, 1)
    return a.replace("%5F", "_"), b.replace("%5F", "_")


class ComparisonsDataset(AbstractDataset[dict, dict]):
    """Paired comparisons (``python -m jevkedro.compare``) under ``folder``: for models A and B on a
    view, ``<A>__vs__<B>/<view>.json`` (:func:`pair_folder`) and its plots beside it (``<view>.<plot>.png``).
    Saves ``{(A, B, view): (document, {plot name: Figure or PNG bytes})}``; loads the documents by the same keys."""

    def __init__(self, folder: str, metadata: dict[str, Any] | None = None) -> None:
        self.folder, self.metadata = Path(folder), metadata

    def path(self, a: str, b: str, view: str) -> Path:
        return self.folder / pair_folder(check_run_name(a, "model A"), check_run_name(b, "model B")) / f"{view}.json"

    def load(self) -> dict[tuple[str, str, str], Any]:
        out = {}
        for path in sorted(self.folder.glob("*__vs__*/*.json")):
            a, b = pair_of_folder(path.parent.name)
            out[(a, b, path.stem)] = read_json_document(path)
        return out

    def save(self, data: dict[tuple[str, str, str], tuple[dict, dict[str, Any]]]) -> None:
        for (a, b, view), (document, plots) in data.items():
            path = self.path(a, b, view)
            atomic_write_json(path, document)
            for name, figure in plots.items():
                atomic_write_bytes(path.with_name(f"{view}.{name}"), figure if isinstance(figure, bytes) else figure_png(figure))

    def _exists(self) -> bool:
        return any(self.folder.glob("*__vs__*/*.json"))

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self.folder)}


class MlflowRunDataset(AbstractDataset[tracking.ViewRun, dict]):
    """The MLflow run of one (model, view) (the layout of :mod:`jevkedro.nodes.tracking`).

    Saving a :class:`~jevkedro.nodes.tracking.ViewRun` (the ``track`` node's output) logs it, or
    keeps the current run when its result is unchanged; loading gives the current run's id, status,
    params, metrics and tags. The tracking store (``mlflow.yml``'s ``server.mlflow_tracking_uri``)
    and the project and command a run's tags name are bound by the ``TrackViewRuns`` hook
    (:meth:`bind`) when the catalog is created and when ``kedro run`` starts.
    """

    def __init__(self, view: str, model: str, metadata: dict[str, Any] | None = None) -> None:
        self.view, self.model, self.metadata = view, model, metadata
        self.tracking_uri: str | None = None
        self.project_path: Path | None = None
        self.command: str | None = None

    def bind(self, tracking_uri: str, project_path: str | Path | None = None, command: str | None = None) -> None:
        self.tracking_uri, self.project_path = tracking_uri, Path(project_path) if project_path else self.project_path
        self.command = command or self.command

    def _store(self) -> str:
        if self.tracking_uri is None:
            raise DatasetError(f"{self.view}.mlflow_run: no tracking store bound (the TrackViewRuns hook binds "
                               "mlflow.yml's server.mlflow_tracking_uri when kedro starts)")
        return self.tracking_uri

    def save(self, data: tracking.ViewRun) -> None:
        if data.tags.get("view") != self.view:
            raise DatasetError(f"{self.view}.mlflow_run: got the run of view {data.tags.get('view')!r}")
        if data.name != self.model:  # the catalog names folders and runs after --params=model.name
            raise DatasetError(f"{self.view}.mlflow_run: the report is of model {data.name!r}, but the catalog's "
                               f"outputs are those of {self.model!r}; give model.name on the command line "
                               "(--params=model.name=...): it names the output folders and the run")
        tracking.record_view_run(data, self._store(), tracking.environment_tags(self.project_path, self.command))

    def load(self) -> dict[str, Any]:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=self._store())
        experiment = client.get_experiment_by_name(tracking.experiment_name(self.view))
        runs = [r for r in (tracking.current_runs(client, experiment.experiment_id, self.model) if experiment else [])
                if r.info.status == "FINISHED"]
        if not runs:
            raise DatasetError(f"{self.tracking_uri}: no current run of model {self.model!r} on {self.view}")
        run = max(runs, key=lambda r: r.info.start_time)
        return {"run_id": run.info.run_id, "status": run.info.status, "params": dict(run.data.params),
                "metrics": dict(run.data.metrics), "tags": dict(run.data.tags)}

    def _exists(self) -> bool:
        return False  # always logged: an unchanged result keeps the current run (no new one)

    def _describe(self) -> dict[str, Any]:
        return {"view": self.view, "model": self.model, "tracking_uri": self.tracking_uri}
