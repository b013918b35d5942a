"""Project hooks: settings checked before anything runs, API keys from credentials, what MLflow
tracking needs beyond the ``track`` nodes, one writer per output folder.

:class:`ModelKeysFromCredentials` lets API keys live in ``conf/local/credentials.yml`` (git-ignored)
instead of the shell environment::

    model_api_keys:
      TYPESAFE_API_KEY: <key>

Each entry is exported as an environment variable of that name **unless the environment already
has it** (the environment wins). The remote adapters then read the variable named by
``model.api_key_env``, so only that *name* is ever a parameter (and an MLflow param); Dask
LocalCluster workers inherit the variable. Nothing is logged but the names.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from kedro.config import MissingConfigException
from kedro.framework.hooks import hook_impl
from kedro.io import MemoryDataset

from jevkedro import console, sample
from jevkedro.config import SettingsError
from jevkedro.datasets import PredictionsDataset
from jevkedro.errors import EXIT_PRIORITY, GATE_FAILURE_EXIT, STOPPED_EARLY_EXIT, TRACKING_FAILURE_EXIT, UserError
from jevkedro.files import file_problem
from jevkedro.nodes import output_lock, tracking
from jevkedro.nodes.report import summary_line
from jevkedro.nodes.tracking import fail_stale_runs, jevkedro_experiment_ids, log_failed_view_run
from jevkedro.parameters import check_parameters
from jevkedro.redaction import header_problem, is_env_name, redact_registered, register_secret
from jevkedro.registry import VIEWS

log = logging.getLogger(__name__)
console.filter_library_warnings()
# before any plugin's hook runs: kedro-mlflow creates the tracking store (and MLflow logs that) first
console.route_library_logs()

CREDENTIALS_KEY = "model_api_keys"


class ModelKeysFromCredentials:
    @hook_impl
    def after_context_created(self, context) -> None:
        _refuse_unreadable_credentials(context.config_loader)
        try:
            credentials = context.config_loader["credentials"]
        except (MissingConfigException, KeyError):
            return
        keys = (credentials or {}).get(CREDENTIALS_KEY) or {}
        if not isinstance(keys, dict):
            raise SettingsError([f"credentials.yml: {CREDENTIALS_KEY} must map environment variable names to keys"])
        problems = []
        for value in keys.values():
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                register_secret(str(value))  # kept out of every log line from now on
        for name, value in keys.items():
            where = f"credentials.yml: {CREDENTIALS_KEY}.{name}"
            if not is_env_name(str(name)):
                problems.append(f"credentials.yml: {CREDENTIALS_KEY} has an entry whose name is not an environment "
                                "variable's (letters, digits and _); its value is not shown")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):  # YAML changed it: 0123 -> 83
                problems.append(f"{where}: must be the key itself as a quoted string; YAML read the unquoted value "
                                f"as a number ({type(value).__name__}), which may not be the key as written; "
                                "its value is not shown")
            elif value is not None and not isinstance(value, str):
                problems.append(f"{where}: must be the key itself (a string), not a {type(value).__name__}")
            elif value is not None and header_problem(str(value)):
                problems.append(f"{where}: the key cannot be sent as an HTTP header value: it holds "
                                f"{header_problem(str(value))}; its value is not shown")
        if problems:
            raise SettingsError(problems)
        exported = []
        for name, value in keys.items():
            if value and not os.environ.get(name):
                os.environ[str(name)] = str(value)
                exported.append(str(name))
        if exported:
            log.info("API keys from credentials.yml exported as %s", ", ".join(sorted(exported)))


def _refuse_unreadable_credentials(loader: Any) -> None:
    """Kedro passes over a credentials file that is no regular file (an empty folder, a FIFO, a
    device, a broken symlink) as if there were none; name it (:func:`jevkedro.files.file_problem`)
    rather than let the run say later that the key's variable is unset. A folder holding files is
    kedro's own credentials folder layout, and is read as such."""
    root = Path(getattr(loader, "conf_source", "conf"))
    envs = dict.fromkeys(e for e in (getattr(loader, "base_env", None), getattr(loader, "env", None)
                                     or getattr(loader, "default_run_env", None)) if e)
    problems = [problem for env in envs for path in sorted((root / env).glob("credentials*"))
                if path.suffix in (".yml", ".yaml", ".json") and not (path.is_dir() and any(path.iterdir()))
                and (problem := file_problem(path, "credentials file"))]
    if problems:
        raise SettingsError(problems)


class CheckSettings:
    """Check every parameter group before anything runs, and point each view's release dataset at
    the folder its typed ``<view>.prepare`` settings name.

    ``after_context_created`` runs before the catalog is built and before kedro-mlflow logs
    parameters, so a mistyped key (``model.adaptor``), a wrong type (``model.concurrency=abc``) or a
    value out of range (``model.timeout_s=0``) stops ``kedro run`` with every problem listed and
    nothing started. ``--params`` are merged into ``context.config_loader["parameters"]`` already.
    """

    @hook_impl
    def after_context_created(self, context) -> None:
        check_parameters(context.config_loader["parameters"])

    @hook_impl(tryfirst=True)  # before kedro-mlflow starts its run: nothing is started for a run that cannot start
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        """Refuse a run that starts after a node whose output is handed on in memory only
        (``--from-nodes=<view>.score`` needs ``<view>.verified_snapshot``), naming the node to start
        from, instead of Kedro's failure to load it in the middle of the run."""
        from kedro.framework.project import pipelines  # the registered pipelines: who makes each dataset

        missing = sorted(name for name in pipeline.inputs() if not name.startswith("params:") and name != "parameters"
                         and isinstance(catalog.get(name), MemoryDataset) and not catalog.exists(name))
        if missing:
            whole = pipelines.get("__default__")
            makers = [n.name for n in (whole.nodes if whole else ()) if set(n.outputs) & set(missing)]  # in run order
            raise UserError(f"this run needs {' and '.join(missing)}, which an earlier node hands on in memory only: "
                            f"start at {makers[0] if makers else 'the node that makes it'} (--from-nodes="
                            f"{makers[0] if makers else '...'}); answers already in the predictions log are reused, "
                            "not asked again")

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        # ``parameters`` maps catalog names ("parameters", "params:model", ...) to values
        _, prepare = check_parameters(parameters["parameters"])
        for view, options in prepare.items():
            dataset = catalog.get(f"{view}.release")
            if dataset is not None and hasattr(dataset, "bind"):
                dataset.bind(options)


class ReleaseOutputFolders:
    """Let go of each predictions log after the last node that reads it, and of the output
    folders' locks the predictions datasets took (one writer per output folder,
    :mod:`jevkedro.nodes.output_lock`) once the pipeline has ended, well or not, before the other
    ``after_pipeline_run`` hooks (one of which may raise). Kedro releases the datasets nodes make
    after their last reader, but never a pipeline's inputs, which the logs are: a view's decoded
    records would otherwise be held while every later view runs."""

    def __init__(self) -> None:
        self.readers: dict[str, int] = {}  # predictions dataset -> nodes still to read it

    @hook_impl
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        names = {name for name in pipeline.datasets() if isinstance(catalog.get(name), PredictionsDataset)}
        self.readers = {name: sum(name in n.inputs for n in pipeline.nodes) for name in names}

    @hook_impl
    def after_node_run(self, node, catalog, inputs) -> None:
        for name in inputs:
            if name in self.readers:
                self.readers[name] -= 1
                if not self.readers[name]:
                    catalog.release(name)

    @hook_impl(tryfirst=True)  # before TrackViewRuns' (tryfirst too, registered earlier), which may raise
    def after_pipeline_run(self, run_params, pipeline, catalog) -> None:
        output_lock.release_claims()

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        output_lock.release_claims()


class RunEnded(click.ClickException):
    """How a ``kedro run`` whose nodes all ran ends when it is not a success: ``Error: <reasons>``
    (no traceback) and the exit status of the most severe reason (:data:`jevkedro.errors.EXIT_PRIORITY`):
    4 a view stopped early, 3 a view missed a regression gate, 5 the tracking store could not
    be written. Raised after every view was scored, tracked (where the store allowed) and summarised."""

    def __init__(self, reasons: dict[int, list[str]]) -> None:
        self.reasons = reasons
        self.exit_code = next(code for code in EXIT_PRIORITY if reasons.get(code))
        super().__init__("\n".join(line for code in EXIT_PRIORITY for line in reasons.get(code, [])))


def stopped_early(view: str, model: str, inference_run: Mapping[str, Any]) -> str | None:
    """The one line saying that ``view``'s inference stopped before asking everything (a 401/403,
    a 429, the engine giving up after infrastructure failures in a row): why, and how many requests
    have their answer; None when it did not stop."""
    last = (inference_run or {}).get("last_run") or {}
    if not last.get("stopped"):
        return None
    statuses = last.get("statuses") or {}
    answered = sum(n for status, n in statuses.items() if status in ("ok", "unsupported"))
    total = sum(statuses.values())
    return redact_registered(f"{view} ({model}): stopped early, {answered} of {total} requests answered: "
                             f"{str(last['stopped']).splitlines()[0][:300]}")


def resolve_tracking_uri(uri: str, project_path: str | Path) -> str:
    """``mlflow.yml``'s tracking URI with a relative sqlite or file path made absolute against the
    project root (MLflow caches one engine per URI string: a relative one would follow the cwd)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(Path(project_path) / uri.removeprefix('sqlite:///')).resolve()}"
    if "://" not in uri and ":" not in uri[:3]:  # a plain folder: a file store
        return (Path(project_path) / uri).resolve().as_uri()
    return uri


def _command(run_params: dict[str, Any]) -> str:
    parts = ["kedro run"]
    names = run_params.get("pipeline_names") or ([run_params["pipeline_name"]] if run_params.get("pipeline_name") else [])
    if names:
        parts.append("--pipelines=" + ",".join(names))
    for key, flag in (("from_nodes", "--from-nodes"), ("to_nodes", "--to-nodes"), ("node_names", "--nodes"), ("tags", "--tags")):
        if run_params.get(key):
            parts.append(f"{flag}=" + ",".join(run_params[key]))
    extra = run_params.get("runtime_params") or run_params.get("extra_params") or {}
    if extra:
        flat: list[str] = []

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            else:
                flat.append(f"{prefix}={value}")

        walk("", extra)
        parts.append("--params=" + ",".join(flat))
    return " ".join(parts)


def _flat_model(model: Any) -> dict[str, Any]:
    """The ``model`` parameters as a flat mapping, whether Kedro hands them over typed or raw."""
    if hasattr(model, "flat"):
        return model.flat()
    if isinstance(model, Mapping):
        return {str(k): v for k, v in model.items()}
    return {}


def _secrets(model: Any) -> list[str]:
    """Values of the key variables a remote adapter may read, to keep them out of failure texts."""
    names = {"TYPESAFE_API_KEY", "OPENAI_API_KEY"}
    if isinstance(model, dict) and isinstance(model.get("api_key_env"), str):
        names.add(model["api_key_env"])
    return [v for v in (os.environ.get(n) for n in names) if v and len(v) >= 6]


def tracking_uri_of(context) -> str:
    """``mlflow.yml``'s ``server.mlflow_tracking_uri`` (default ``sqlite:///mlflow.db``), absolute."""
    try:
        conf = context.config_loader["mlflow"] or {}
    except (MissingConfigException, KeyError):
        conf = {}
    uri = (conf.get("server") or {}).get("mlflow_tracking_uri") or "sqlite:///mlflow.db"
    return resolve_tracking_uri(str(uri), Path(context.project_path))


class TrackViewRuns:
    """What the pipelines' ``track`` nodes cannot do themselves: bind the ``{view}.mlflow_run``
    datasets to the tracking store and the command, mark a view whose node failed (a ``FAILED``
    run) and runs a killed process left open, end a ``kedro run`` stopped by Ctrl-C as ``KILLED``,
    print each view's summary line (a result not on the benchmark's data marked ``[sample]``), and
    end the run with its status (:class:`RunEnded`) when a view stopped early, missed a regression
    gate or could not be tracked — kedro-mlflow's record of the ``kedro run`` then ends ``FAILED``.

    The tracking store is ``mlflow.yml``'s ``server.mlflow_tracking_uri``. kedro-mlflow records the
    ``kedro run`` itself in the experiment ``jevkedro``; the view runs (one per model and view, see
    :mod:`jevkedro.nodes.tracking`) are written by the datasets with their own client, never nested
    under it, and carry the command, the params and the results themselves.
    """

    def __init__(self) -> None:
        self.tracking_uri: str | None = None
        self._project_path: Path | None = None
        self._model: dict[str, Any] = {}
        self._command: str | None = None
        self._reports: dict[str, dict[str, Any]] = {}
        self._stops: dict[str, str] = {}
        self._running = False
        self._exit_hook = False

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = Path(context.project_path)
        self.tracking_uri = tracking_uri_of(context)

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        self._model = _flat_model((parameters.get("parameters") or {}).get("model"))
        self._bind(catalog, VIEWS)

    def _bind(self, catalog, views, command: str | None = None) -> None:
        for view in views:
            dataset = catalog.get(f"{view}.mlflow_run")
            if dataset is not None and hasattr(dataset, "bind") and self.tracking_uri:
                dataset.bind(self.tracking_uri, self._project_path, command)

    @hook_impl
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        self._command = _command(run_params)
        self._bind(catalog, sorted({n.namespace for n in pipeline.nodes if n.namespace in VIEWS}), self._command)
        self._reports.clear()
        self._running = True
        if not self._exit_hook:  # after MLflow's own exit handler was registered: runs before it
            atexit.register(self._end_interrupted_run)
            self._exit_hook = True
        self._stops.clear()
        if tracking.store_down(self.tracking_uri):
            return
        try:  # a run a killed process left RUNNING is marked FAILED before anything new is logged
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=self.tracking_uri)
            fail_stale_runs(client, jevkedro_experiment_ids(client))
        except Exception as exc:  # the store is down: said once, and the run's end says what was not tracked
            if not tracking.is_store_error(exc):
                raise
            tracking.mark_store_down(self.tracking_uri, f"{type(exc).__name__}: {str(exc).strip()[:200]}")

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        view, _, kind = dataset_name.partition(".")
        if kind == "report" and view in VIEWS:  # each view's summary line and gates, at the end
            self._reports[view] = data
        elif kind == "inference_run" and view in VIEWS:  # did the view's inference stop early?
            line = stopped_early(view, str(self._model.get("name") or "unnamed"), data)
            if line:
                self._stops[view] = line
            else:
                self._stops.pop(view, None)

    @hook_impl
    def on_node_error(self, error: Exception, node, inputs) -> None:
        view = node.namespace
        if view not in VIEWS:
            return
        if "params:model" in (inputs or {}):
            self._model = _flat_model(inputs["params:model"]) or self._model
        text = f"{node.name} failed: {type(error).__name__}: {error}"
        for secret in _secrets(self._model):
            register_secret(secret)
        text = redact_registered(text)
        name = str(self._model.get("name") or "unnamed")
        if tracking.store_down(self.tracking_uri):
            log.warning("%s / %s: %s (not recorded in MLflow: the store is down)", name, view, text.splitlines()[0][:300])
            return
        try:
            run_id = log_failed_view_run(name, view, text, self.tracking_uri,
                                         tags={"kedro_command": self._command or "", "failed_node": node.name})
            log.warning("%s / %s: %s (MLflow run %s marked FAILED)", name, view, text.splitlines()[0][:300], run_id)
        except Exception as exc:  # never hide the node's own error behind a tracking error
            log.warning("could not record the failure of %s in MLflow: %s", node.name, exc)

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._running = False

    def _end_interrupted_run(self) -> None:
        """At exit in the middle of a pipeline (Ctrl-C: Kedro calls no hook for it), end kedro-mlflow's
        run of this ``kedro run`` as ``KILLED``; MLflow's own exit handler would mark it FINISHED."""
        if not self._running:
            return
        try:
            import mlflow

            while mlflow.active_run():
                mlflow.end_run("KILLED")
        except Exception as exc:  # the process is ending: say so, never raise
            log.debug("could not end the interrupted MLflow run: %s", exc)

    def _end_kedro_run(self, status: str) -> None:
        """End kedro-mlflow's run of this ``kedro run`` with ``status`` (its own hook, called after
        this one, would end it FINISHED; it is not called once this hook raises)."""
        try:
            import mlflow

            while mlflow.active_run() and not tracking.store_down(self.tracking_uri):
                mlflow.end_run(status)  # kedro-mlflow leaves its run on the stack once per node
        except Exception as exc:  # the reasons are said by the exit; the store's failure too
            log.warning("could not end the MLflow run of this kedro run as %s: %s", status, exc)

    @hook_impl(tryfirst=True)  # before kedro-mlflow's, which would end the kedro run's record FINISHED
    def after_pipeline_run(self, run_params, pipeline, catalog) -> None:
        self._running = False
        done = list(self._reports.values())
        view_width = max((len(sample.view_label(r)) for r in done), default=0)
        for report in done:
            console.echo(summary_line(report, model_width=len(str(report["model"])), view_width=view_width))
        reasons: dict[int, list[str]] = {
            STOPPED_EARLY_EXIT: list(self._stops.values()),
            GATE_FAILURE_EXIT: [f"{report['view']} ({report['model']}): {gate['message']}"
                                for report in done for gate in ((report.get("gates") or {}).get("failed") or [])],
        }
        if reasons[GATE_FAILURE_EXIT]:
            reasons[GATE_FAILURE_EXIT].insert(0, "regression gates failed:")
            reasons[GATE_FAILURE_EXIT][1:] = ["  " + r for r in reasons[GATE_FAILURE_EXIT][1:]]
        down = tracking.store_down(self.tracking_uri)
        if down:
            missed = tracking.untracked()
            reasons[TRACKING_FAILURE_EXIT] = [
                f"MLflow store {tracking.store_name(self.tracking_uri)} could not be written ({down}); "
                + (f"not recorded: {', '.join(missed)}; " if missed else "")
                + "the reports are written, and the next kedro run records them"]
        if done:
            paths = [getattr(catalog.get(f"{view}.report"), "filepath", None) for view in self._reports]
            folders = sorted({os.path.relpath(Path(p).parent, self._project_path or ".") for p in paths if p is not None})
            if folders:
                where = folders[0] if len(folders) == 1 else f"{os.path.commonpath(folders)}/<view>"
                console.echo(f"reports and plots: {where}/")
            console.echo("leaderboard: python -m jevkedro.summary; MLflow: make mlflow-ui (an experiment per view)")
            if sample.any_sample(done):
                console.echo(sample.note())
        if any(reasons.values()):
            self._end_kedro_run("FAILED")
            raise RunEnded(reasons)


class GuardedMlflowHook:
    """kedro-mlflow's hook (its record of each ``kedro run`` in the experiment ``jevkedro``), such
    that a tracking store that is down never costs a result.

    ``settings.py`` keeps the plugin from registering itself (``DISABLE_HOOKS_FOR_PLUGINS``) and
    registers this wrapper last, so it is called where the plugin was. Before anything else in a
    session the store is probed (:func:`jevkedro.nodes.tracking.probe_store`: a sqlite file locked
    by another process, not a database, a directory); a store that is down, then or later (a store
    error raised by the plugin), is noted once, the plugin is skipped for the rest of the session,
    the views' runs are not attempted, and the run ends with status 5 naming the store once every
    report is written (:class:`TrackViewRuns`). Any other error of the plugin is raised as before."""

    def __init__(self, hook: Any = None) -> None:
        self._hook = hook
        self._uri: str | None = None
        self._off = False

    def _plugin(self) -> Any:
        if self._hook is None:
            from kedro_mlflow.framework.hooks.mlflow_hook import mlflow_hook

            self._hook = mlflow_hook
        return self._hook

    def _call(self, name: str, **kwargs: Any) -> None:
        if self._off or tracking.store_down(self._uri):
            self._off = True
            return
        try:
            getattr(self._plugin(), name)(**kwargs)
        except Exception as exc:
            if not tracking.is_store_error(exc):
                raise
            self._off = True
            tracking.mark_store_down(self._uri, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}")
            try:  # the run kedro-mlflow opened, off this process's run stack
                import mlflow

                while mlflow.active_run():
                    mlflow.end_run("FAILED")
            except Exception as end_exc:
                log.debug("could not end kedro-mlflow's run: %s", end_exc)

    @hook_impl
    def after_context_created(self, context) -> None:
        tracking.forget_store_failures()  # a new session tries the store again
        self._off = False
        self._uri = tracking_uri_of(context)
        why = tracking.probe_store(self._uri)
        if why:
            tracking.mark_store_down(self._uri, why)
            self._off = True
            return
        self._call("after_context_created", context=context)

    @hook_impl
    def after_catalog_created(self, catalog, conf_catalog, conf_creds, parameters, save_version, load_versions) -> None:
        self._call("after_catalog_created", catalog=catalog, conf_catalog=conf_catalog, conf_creds=conf_creds,
                   parameters=parameters, save_version=save_version, load_versions=load_versions)

    @hook_impl
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        self._call("before_pipeline_run", run_params=run_params, pipeline=pipeline, catalog=catalog)

    @hook_impl
    def before_node_run(self, node, catalog, inputs, is_async) -> None:
        self._call("before_node_run", node=node, catalog=catalog, inputs=inputs, is_async=is_async)

    @hook_impl
    def after_pipeline_run(self, run_params, pipeline, catalog) -> None:
        self._call("after_pipeline_run", run_params=run_params, pipeline=pipeline, catalog=catalog)

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._call("on_pipeline_error", error=error, run_params=run_params, pipeline=pipeline, catalog=catalog)
