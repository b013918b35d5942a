"""Screenshots of the MLflow UI comparing two models on zh-decision-bench, and of the reliability diagram.

    pip install -e ".[screenshots]"           # playwright (the Python package only: no browser download)
    apt-get install -y chromium fonts-noto-cjk  # Debian's chromium, driven headless
    PYTHONPATH=src python scripts/mlflow_screenshots.py --out docs/screenshots

What it does, in a throw-away copy of the project (``--work``, default a temporary folder):

1. ``kedro run --pipelines=zh_decision_bench`` with the embedded model (model A,
   ``sparrow-nano-general-v1.1``), then again with model B: A's recorded answers flattened
   (``p^0.5``, renormalised) and, on every third request, the choice probabilities reversed,
   replayed as ``sparrow-flattened`` — a different, worse model on the same snapshot;
2. ``python -m jevkedro.compare --view zh_decision_bench A B`` (the paired comparison and its plots);
3. ``mlflow ui`` on the copy's ``mlflow.db`` (a free port on 127.0.0.1), and headless chromium
   (``--chromium``, default ``/usr/bin/chromium``; ``--no-sandbox --disable-gpu``) through
   playwright takes:
   ``mlflow_runs_default.png`` (the runs table as it opens: the run names carry the headline),
   ``mlflow_runs.png`` (the view's experiment: one row per model, the headline metrics as columns),
   ``mlflow_compare.png`` (the two runs selected and compared: params, metrics, tags),
   ``mlflow_reliability.png`` (the run's ``plots/reliability.png`` in MLflow's artifact viewer),
   and copies the comparison's ``reliability.png`` (both models on one chart) and ``slices.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from jevkedro.testing import flattened_replay

ROOT = Path(__file__).resolve().parents[1]
VIEW = "zh_decision_bench"
A = "sparrow-nano-general-v1.1"
B = "sparrow-flattened"


def project_copy(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(ROOT / "conf" / "base", dest / "conf" / "base")
    shutil.copy(ROOT / "conf" / "logging.yml", dest / "conf" / "logging.yml")
    (dest / "conf" / "local").mkdir()
    (dest / "src").mkdir()
    (dest / "logs").mkdir()
    shutil.copytree(ROOT / "data" / "01_raw" / VIEW, dest / "data" / "01_raw" / VIEW)
    for sub in ("02_snapshots", "07_model_output", "08_reporting"):
        (dest / "data" / sub).mkdir(parents=True, exist_ok=True)
    return dest


def run(cmd: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    print(done.stdout.strip())
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"mlflow ui did not answer at {url}")


def screenshots(project: Path, out: Path, chromium: str) -> None:
    from mlflow import MlflowClient
    from playwright.sync_api import sync_playwright

    db = project / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name(f"jevkedro/{VIEW}")
    runs = {r.data.tags["model"]: r for r in client.search_runs([exp.experiment_id], filter_string="tags.superseded = 'false'")}
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{db}",
                               "--host", "127.0.0.1", "--port", str(port)], cwd=project,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{base}/health")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            context = browser.new_context(viewport={"width": 2100, "height": 760}, device_scale_factor=1)
            # the assistant side panel would cover a third of every page: start with it closed
            context.add_init_script("localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
                                    "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');")
            page = context.new_page()
            exp_id = exp.experiment_id
            # the runs table as it first opens (no saved view): MLflow 3.17 shows no metric column
            # by default, so the run names carry the headline rounded (tracking.ViewRun.run_name)
            page.goto(f"{base}/#/experiments/{exp_id}/runs")
            page.get_by_text(B).first.wait_for(timeout=120_000)
            page.wait_for_timeout(2500)
            page.screenshot(path=str(out / "mlflow_runs_default.png"))
            # the experiment's saved view "leaderboard" (Views menu), opened by its share key
            page.goto(f"{base}/#/experiments/{exp_id}/runs?viewStateShareKey=jevkedro-leaderboard")
            page.get_by_text(B).first.wait_for(timeout=120_000)
            page.wait_for_timeout(2500)
            page.screenshot(path=str(out / "mlflow_runs.png"))
            ids = json.dumps([runs[A].info.run_id, runs[B].info.run_id])
            page.set_viewport_size({"width": 1500, "height": 2000})
            page.goto(f"{base}/#/compare-runs?runs={ids}&experiments={json.dumps([exp_id])}")
            page.get_by_text("accuracy_ci_low").first.wait_for(timeout=120_000)
            page.get_by_text("Visualizations", exact=True).first.click()  # fold the plots: params and metrics first
            page.wait_for_timeout(2500)
            page.screenshot(path=str(out / "mlflow_compare.png"))
            page.set_viewport_size({"width": 1500, "height": 980})
            page.goto(f"{base}/#/experiments/{exp_id}/runs/{runs[A].info.run_id}/artifacts/plots/reliability.png")
            page.locator("img.rc-image-img").first.wait_for(state="attached", timeout=120_000)
            page.wait_for_timeout(3000)
            page.screenshot(path=str(out / "mlflow_reliability.png"))
            browser.close()
    finally:  # mlflow ui starts uvicorn, a job runner and task consumers: end its whole process group
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    compare_dir = project / "data" / "08_reporting" / "compare" / f"{A}__vs__{B}"
    shutil.copy(compare_dir / f"{VIEW}.reliability.png", out / "compare_reliability.png")
    shutil.copy(compare_dir / f"{VIEW}.slices.png", out / "compare_slices.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/screenshots", help="folder for the PNGs")
    parser.add_argument("--work", default=None, help="project copy to run in (default: a temporary folder)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--reuse", action="store_true", help="--work already holds the two runs: take the screenshots only")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.reuse and args.work and (Path(args.work) / "project" / "mlflow.db").is_file():
            screenshots(Path(args.work) / "project", out, args.chromium)
            print(f"screenshots in {out}")
            return
        project = project_copy(Path(args.work or tmp) / "project")
        kedro = [sys.executable, "-m", "kedro", "run", f"--pipelines={VIEW}"]
        run(kedro, project)
        replay = flattened_replay(project / "data" / "07_model_output" / A / VIEW / "predictions.jsonl", project / "flattened.jsonl")
        run(kedro + [f"--params=model.adapter=replay,model.path={replay},model.name={B}"], project)
        run([sys.executable, "-m", "jevkedro.compare", "--view", VIEW, A, B], project)
        screenshots(project, out, args.chromium)
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main()
