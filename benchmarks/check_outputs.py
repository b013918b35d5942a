"""Digests of every output a user keeps, to show a refactoring changed none of them.

For a checkout's code (``--src``, default this one) in a scratch copy of the project: ``kedro run``
of all ten views with the embedded model, then each view again with the replay adapter on the
answers just recorded (``model.name=replayed``). For both models it digests the snapshot TSV and
manifest, ``report.json``, ``official.json`` and ``questions.jsonl`` of every view, leaving out
the fields that record time, host or package versions (``VOLATILE``).

    python benchmarks/check_outputs.py --record benchmarks/outputs_before.json   # before
    python benchmarks/check_outputs.py --check benchmarks/outputs_before.json    # after: exit 1 on a difference

Fields added since the "before" file was recorded are listed by name in ``KNOWN_ADDITIONS``: a
check digests each file both whole and without them, so every field the before file had must be
identical, and it prints which known additions it left out of the comparison (a field added and
not listed there makes the file differ).

Bootstrap intervals and analytic errors go through BLAS products, whose last digit depends on the
OpenBLAS kernel: the before file was recorded under the SkylakeX kernel, so on a CPU where OpenBLAS
picks another one (AMD EPYC: Haswell) run the check with ``OPENBLAS_CORETYPE=SkylakeX``
(docs/benchmarks.md, "The check of outputs and the BLAS kernel").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEWS = ("zh_decision_bench", "jevbench", "decision_index", "typed_decisions", "procedural_typed_decisions",
         "decisionbench", "jevalt_bench", "visual_decision_bench", "visual_decision_bench_image",
         "visual_decision_bench_video")
# fields that say when, where or with which package versions a file was made
VOLATILE = {"created_at", "generated_at", "run_date", "started_at", "finished_at", "versions", "package_versions",
            "jevkedro_version", "python", "platform", "host", "duration_s", "elapsed_s", "wall_s", "command",
            "latency", "latency_s"}  # the embedded model's measured latencies differ from run to run


# file name -> top-level fields added after benchmarks/outputs_before.json was recorded (7ab4636)
KNOWN_ADDITIONS: dict[str, tuple[str, ...]] = {
    "report.json": ("analytic", "calibration"),  # issue 22 #1 and #5: clustered errors, calibration decomposed
}


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _digest_of(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def digest(path: Path, without: tuple[str, ...] = ()) -> str:
    """The file's digest (JSON: volatile fields stripped; ``without``: top-level fields left out)."""
    if not path.exists():
        return "absent"
    if path.suffix == ".json":
        value = _strip(json.loads(path.read_text(encoding="utf-8")))
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in without}
        return _digest_of(value)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def additions_in(path: Path) -> tuple[str, ...]:
    """The known additions ``path`` has (its file name's entry in ``KNOWN_ADDITIONS``)."""
    names = KNOWN_ADDITIONS.get(path.name, ())
    if not names or not path.exists():
        return ()
    value = json.loads(path.read_text(encoding="utf-8"))
    return tuple(n for n in names if isinstance(value, dict) and n in value)


def _copy_project(dest: Path, root: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _kedro(work: Path, src: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(src), "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    kedro = Path(sys.executable).with_name("kedro")
    done = subprocess.run([str(kedro), "run", *args], cwd=work, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 3):  # 3: a gate failed, outputs written
        sys.exit(f"kedro run {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def collect(src: Path, keep: Path | None = None) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[str, ...]]]:
    """``(digests, digests without the known additions, the additions each file had)`` by output."""
    with tempfile.TemporaryDirectory(prefix="jevkedro-outputs-") as tmp:
        work = keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _copy_project(work, src.parent)  # the checkout whose code runs, with its configuration and data
        _kedro(work, src)
        model = next(p.name for p in (work / "data/07_model_output").iterdir() if p.is_dir())
        for view in VIEWS:
            replay = Path(f"replay_{view}.jsonl")  # relative: the report names it, and the folder is a temporary one
            with open(work / f"data/07_model_output/{model}/{view}/predictions.jsonl", encoding="utf-8") as f, \
                    open(work / replay, "w", encoding="utf-8") as out:
                for line in f:
                    if line.strip():
                        record = json.loads(line)
                        if record.get("status") == "ok":
                            out.write(json.dumps({"request_id": record["request_id"], "response": record["response"]}) + "\n")
            _kedro(work, src, f"--pipelines={view}", f"--from-nodes={view}.verify_snapshot",
                   f"--params=model.adapter=replay,model.path={replay},model.name=replayed")
        files: dict[str, Path] = {}
        for view in VIEWS:
            for name in (f"{view}.tsv", f"{view}.manifest.json"):
                files[f"02_snapshots/{name}"] = work / "data/02_snapshots" / name
            for m in (model, "replayed"):
                for name in ("report.json", "official.json"):
                    files[f"08_reporting/{m}/{view}/{name}"] = work / f"data/08_reporting/{m}/{view}/{name}"
                files[f"07_model_output/{m}/{view}/questions.jsonl"] = work / f"data/07_model_output/{m}/{view}/questions.jsonl"
        whole = {key: digest(path) for key, path in files.items()}
        without = {key: digest(path, KNOWN_ADDITIONS.get(path.name, ())) for key, path in files.items()}
        return whole, without, {key: additions_in(path) for key, path in files.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the checkout's src/ whose code runs")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (to look at the outputs)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", type=Path, help="write the digests here")
    group.add_argument("--check", type=Path, help="compare with the digests recorded here")
    args = parser.parse_args()
    found, without, additions = collect(args.src.resolve(), args.keep)
    if args.record:
        args.record.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{len(found)} digests written to {args.record}")
        return
    expected = json.loads(args.check.read_text(encoding="utf-8"))
    # identical whole, or identical in every field the before file had once the listed additions are left out
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) not in (found.get(k), without.get(k)))
    for key in differ:
        print(f"DIFFERS {key}: {expected.get(key, 'absent')[:12]} -> {found.get(key, 'absent')[:12]}")
    added = sorted({name for key, names in additions.items() if key not in differ and expected.get(key) != found.get(key)
                    for name in names})
    if added:
        files = sum(1 for key in additions if key not in differ and expected.get(key) != found.get(key))
        print(f"known additions (not in the before file, left out of the comparison) in {files} files: {', '.join(added)}")
    print(f"{len(expected) - len(differ)} of {len(expected)} outputs identical in every field the before file had")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
