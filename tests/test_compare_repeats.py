"""``python -m jevkedro.compare`` with repeated sampling (issue 22 item 4): two models, each with its
own ``model.repeats``, are paired on each question's mean over its repeats — checked against a
plain per-question computation (means, the analytic clustered error, the paired unit bootstrap
redrawn by hand, ECE pooled over repeats); McNemar and the flips use attempt 0 and say so; a run
with K=1 ignores attempts in its log and its comparison is what it was."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jevkedro.compare import main
from jevkedro.nodes import metrics as M
from support import jevbench_snapshot_of, project_conf, task

N, GROUP = 30, 3  # 30 JevBench tasks, label "a", in paraphrase groups of 3 (the resampling unit)
RESAMPLES, SEED = 300, 7


def write_model(root, name, p, valid, snapshot, repeats=None):
    """``p[i, k]``: P(a) of question ``i`` in attempt ``k`` (``valid[i, k]`` False: an HTTP error);
    the report records ``model_settings.repeats`` (None: a report of a run asking once)."""
    folder = root / "data" / "07_model_output" / name / "jevbench"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(snapshot.rows):
        for k in range(p.shape[1]):
            ok = bool(valid[i, k])
            rec = {"request_id": row.request_id, "status": "ok" if ok else "error", "model": name,
                   "response": {"answers": {"decision": {"type": "choice", "probabilities": {"a": p[i, k], "b": 1 - p[i, k]}}}}
                   if ok else None, "error": None if ok else "HTTP 500", **({"attempt": k} if k else {})}
            lines.append(json.dumps(rec))
    (folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    rep = root / "data" / "08_reporting" / name / "jevbench"
    rep.mkdir(parents=True, exist_ok=True)
    settings = {"name": name, **({"repeats": repeats} if repeats else {})}
    (rep / "report.json").write_text(json.dumps({"model": name, "view": "jevbench", "snapshot_sha256": snapshot.sha256,
                                                 "probability_source": "native", "model_id": name,
                                                 "model_settings": settings}))


def random_model(rng, K):
    p = rng.choice(np.r_[np.linspace(0.05, 0.45, 9), np.linspace(0.55, 0.95, 9)], size=(N, K))
    valid = rng.random((N, K)) > 0.15
    valid[0] = False  # a question with no valid repeat: in accuracy (not correct), out of NLL/Brier/ECE
    return p, valid


@pytest.fixture
def root(tmp_path):
    project_conf(tmp_path)
    tasks = [task(f"t-{i:02d}", "choice", ["a", "b"], "a", group=f"g{i // GROUP}") for i in range(N)]
    return tmp_path, jevbench_snapshot_of(tmp_path / "data" / "02_snapshots", tasks)


def compare_doc(root, *extra):
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", str(RESAMPLES),
                 "--seed", str(SEED), "--no-plots", *extra]) == 0
    return json.loads((root / "data/08_reporting/compare/model-a__vs__model-b/jevbench.json").read_text())


def per_question(p, valid):
    """Plain per-question values: hit rate over every repeat, NLL/Brier over the valid ones, and
    the ECE gap per bin averaged over the valid repeats."""
    hit = valid & (p > 0.5)
    n_valid = valid.sum(axis=1)
    nll = np.array([np.mean(-np.log(p[i][valid[i]])) if n_valid[i] else np.nan for i in range(N)])
    brier = np.array([np.mean(2 * (1 - p[i][valid[i]]) ** 2) if n_valid[i] else np.nan for i in range(N)])
    conf = np.maximum(p, 1 - p)
    gap = np.zeros((N, M.ECE_BINS))
    for i in range(N):
        for k in np.flatnonzero(valid[i]):
            gap[i, M.bin_index(np.array([conf[i, k]]))[0]] += (p[i, k] > 0.5) - conf[i, k]
        gap[i] /= max(n_valid[i], 1)
    return {"accuracy": hit.mean(axis=1), "nll": nll, "brier": brier, "gap": gap, "any": n_valid > 0}


def clustered_se(d, group):
    G = len(set(group))
    D = np.array([(d[group == g] - d.mean()).sum() for g in sorted(set(group))])
    return math.sqrt(G / (G - 1) * (D ** 2).sum()) / len(d)


def bootstrap_interval(x_a, x_b, group):
    """The paired unit bootstrap redrawn question by question: ``RESAMPLES`` draws of the G units
    from ``default_rng(SEED)``, each a ratio of weighted sums (x: per-question values; None rows out)."""
    units = sorted(set(group))
    G = len(units)
    code = np.array([units.index(g) for g in group])
    rng = np.random.default_rng(SEED)
    diffs = []
    for _ in range(RESAMPLES):
        w = np.bincount(rng.integers(0, G, size=G, dtype=np.int32), minlength=G)[code]
        diffs.append(x_a(w) - x_b(w))
    return np.percentile(diffs, [2.5, 97.5])


@pytest.mark.parametrize("k_a,k_b", [(3, 2), (4, 1)])
def test_repeat_averaged_pairing_against_a_plain_per_question_computation(root, k_a, k_b):
    root, snapshot = root
    rng = np.random.default_rng(k_a * 10 + k_b)
    (pa, va), (pb, vb) = random_model(rng, k_a), random_model(rng, k_b)
    write_model(root, "model-a", pa, va, snapshot, k_a)
    write_model(root, "model-b", pb, vb, snapshot, k_b if k_b > 1 else None)  # K=1: the mean of one
    doc = compare_doc(root)
    qa, qb = per_question(pa, va), per_question(pb, vb)
    group = np.array([f"g{i // GROUP}" for i in range(N)])

    # accuracy: every question (an invalid answer is not correct); NLL/Brier: valid in both
    for name, rows in (("accuracy", np.ones(N, bool)), ("nll", qa["any"] & qb["any"]), ("brier", qa["any"] & qb["any"])):
        m = doc["metrics"][name]
        xa, xb = qa[name][rows], qb[name][rows]
        assert m["n"] == rows.sum()
        assert m["a"] == pytest.approx(xa.mean(), rel=1e-12) and m["b"] == pytest.approx(xb.mean(), rel=1e-12)
        assert m["diff"] == pytest.approx(xa.mean() - xb.mean(), rel=1e-9, abs=1e-12)
        assert m["analytic"]["se"] == pytest.approx(clustered_se(xa - xb, group[rows]), rel=1e-9)
        lo, hi = bootstrap_interval(lambda w, rows=rows, xa=xa: (w[rows] * xa).sum() / w[rows].sum(),
                                    lambda w, rows=rows, xb=xb: (w[rows] * xb).sum() / w[rows].sum(), group)
        assert (m["ci_low"], m["ci_high"]) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))

    # ECE: every valid repeat's answer pooled, each question weighing one, over questions valid in both
    rows = qa["any"] & qb["any"]
    ece = doc["metrics"]["ece"]
    ece_a = np.abs(qa["gap"][rows].sum(axis=0)).sum() / rows.sum()
    ece_b = np.abs(qb["gap"][rows].sum(axis=0)).sum() / rows.sum()
    assert ece["a"] == pytest.approx(ece_a, rel=1e-9) and ece["b"] == pytest.approx(ece_b, rel=1e-9)
    lo, hi = bootstrap_interval(lambda w: np.abs((w[rows, None] * qa["gap"][rows]).sum(axis=0)).sum() / w[rows].sum(),
                                lambda w: np.abs((w[rows, None] * qb["gap"][rows]).sum(axis=0)).sum() / w[rows].sum(), group)
    assert (ece["ci_low"], ece["ci_high"]) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))

    # McNemar needs one right/wrong per question: attempt 0's, and the JSON says so
    hit0_a, hit0_b = va[:, 0] & (pa[:, 0] > 0.5), vb[:, 0] & (pb[:, 0] > 0.5)
    mc = doc["mcnemar"]
    assert (mc["a_only"], mc["b_only"]) == (int((hit0_a & ~hit0_b).sum()), int((~hit0_a & hit0_b).sum()))
    assert mc["outcomes"].startswith("attempt 0")
    assert doc["flips"]["a_only"]["count"] == mc["a_only"] and doc["flips"]["b_only"]["count"] == mc["b_only"]
    assert doc["repeats"]["a"] == k_a and doc["repeats"]["b"] == k_b


def test_slice_differences_use_hit_rates(root):
    """The per-slice accuracy differences (``by_<slice>``) are on hit rates too: a slice value
    holding every question (all tasks here share one family) has the headline's values."""
    root, snapshot = root
    rng = np.random.default_rng(11)
    (pa, va), (pb, vb) = random_model(rng, 3), random_model(rng, 2)
    write_model(root, "model-a", pa, va, snapshot, 3)
    write_model(root, "model-b", pb, vb, snapshot, 2)
    doc = compare_doc(root)
    qa, qb = per_question(pa, va), per_question(pb, vb)
    whole = [entry for key in doc if key.startswith("by_") for entry in doc[key].values() if entry["n"] == N]
    assert whole
    for entry in whole:
        assert entry["a"] == pytest.approx(qa["accuracy"].mean()) and entry["b"] == pytest.approx(qb["accuracy"].mean())
        assert entry["ci_low"] <= entry["diff"] <= entry["ci_high"]


def test_k1_ignores_further_attempts_in_the_log_and_prints_no_repeats(root, capsys):
    """A report of a run asking once (no ``repeats`` in its settings, or 1) is compared on attempt
    0 alone, byte for byte as from a log without the other attempts; nothing about repeats is added."""
    root, snapshot = root
    rng = np.random.default_rng(3)
    (pa, va), (pb, vb) = random_model(rng, 3), random_model(rng, 1)
    write_model(root, "model-a", pa[:, :1], va[:, :1], snapshot, None)
    write_model(root, "model-b", pb, vb, snapshot, None)
    md = root / "one.md"
    plain = compare_doc(root, "--markdown", str(md))
    out_plain, md_plain = capsys.readouterr().out, md.read_text()
    write_model(root, "model-a", pa, va, snapshot, 1)  # the same attempt 0, two further attempts, K=1
    again = compare_doc(root, "--markdown", str(md))
    assert again == plain and capsys.readouterr().out == out_plain and md.read_text() == md_plain
    assert "repeats" not in plain and "outcomes" not in plain["mcnemar"] and "repeats" not in out_plain


def test_repeats_are_named_on_the_console_and_in_the_markdown_with_the_plots(root, capsys):
    root, snapshot = root
    rng = np.random.default_rng(5)
    (pa, va), (pb, vb) = random_model(rng, 2), random_model(rng, 1)
    write_model(root, "model-a", pa, va, snapshot, 2)
    write_model(root, "model-b", pb, vb, snapshot, None)
    md = root / "s.md"
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--resamples", "50", "--markdown", str(md)]) == 0
    assert "repeats: A 2, B 1" in capsys.readouterr().out
    assert "repeats A 2, B 1" in md.read_text()
    out = root / "data/08_reporting/compare/model-a__vs__model-b"
    for name in ("jevbench.reliability.png", "jevbench.slices.png", "jevbench.html"):
        assert (out / name).stat().st_size > 0
    from jevkedro.compare import compare_view

    (name_a, conf_a, hit_a, _), (_, conf_b, _, _) = compare_view(root, "jevbench", "model-a", "model-b", resamples=20)[1]["models"]
    assert name_a == "model-a" and len(conf_a) == va.sum() and len(conf_b) == vb.sum()  # A's curve pools both repeats
    assert sorted(conf_a) == pytest.approx(sorted(np.maximum(pa, 1 - pa)[va])) and hit_a.sum() == (va & (pa > 0.5)).sum()


@pytest.mark.parametrize("bad", ["3", 0, 1.5, True])
def test_a_report_whose_repeats_is_not_a_whole_number_is_refused_naming_the_file(root, capsys, bad):
    root, snapshot = root
    rng = np.random.default_rng(1)
    (pa, va), (pb, vb) = random_model(rng, 1), random_model(rng, 1)
    write_model(root, "model-a", pa, va, snapshot, None)
    write_model(root, "model-b", pb, vb, snapshot, None)
    path = root / "data/08_reporting/model-b/jevbench/report.json"
    rep = json.loads(path.read_text())
    path.write_text(json.dumps({**rep, "model_settings": {"repeats": bad}}))
    assert main(["--root", str(root), "--view", "jevbench", "model-a", "model-b", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "report.json: model_settings.repeats is" in err and "Traceback" not in err
