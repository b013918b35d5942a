"""The explorer's data and page, without a browser: every question is in the page, the JSON
block cannot end its element, strings from sources and models never become markup, the byte
budget keeps the rows that matter, the dataset writes atomically (browser tests:
test_explorer_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from jevkedro.explorer import HTMLDataset, comparison_page, run_page
from jevkedro.explorer.data import PROB_SCALE, comparison_data, loss_of, run_data, script_json
from jevkedro.explorer.data import Gold as _Gold

HOSTILE = ['<script>window.__pwned = 1</script>', '"><img src=x onerror="window.__pwned=2">',
           "</script><script>window.__pwned=3</script>", "<!--<script>", "'; alert(1); //", "\u2028\u2029", "&lt;b&gt;"]
CONTEXT = {"command": "kedro run --pipelines=v", "run_date": "2026-12-01 00:00:00 UTC", "versions": {"jevkedro": "0"}}


def make_rows(n: int = 120, hostile: bool = False, state_chars: int = 20) -> list[dict]:
    """``n`` requests of two questions (a choice of three, a noul) over two domains."""
    rows = []
    for i in range(n):
        bad = HOSTILE[i % len(HOSTILE)] if hostile else ""
        cands = ["a", "b", f"c{bad}"]
        rows.append({
            "request_id": f"r{i:04d}{bad if hostile and i % 5 == 0 else ''}",
            "request": {"state": f"state {i} {bad} " + "x" * state_chars,
                        "questions": {"pick": {"type": "choice", "instructions": f"pick one {bad}",
                                               "criteria": {c: f"option {c}" for c in cands}},
                                      "yes": {"type": "noul", "instructions": "is it so?", "criteria": {"true": "T", "false": "F"}}}},
            "candidates": {"pick": cands, "yes": ["true", "false"]},
            "targets": {"pick": {"label": i % 3}, "yes": {"label": i % 2}},
            "slices": {"domain": ("travel" if i % 2 else "food") + bad, "questions": {"yes": {"task": "check"}}},
        })
    return rows


def make_run(rows: list[dict], hostile: bool = False, seed: int = 0) -> tuple[list[dict], dict[str, dict]]:
    """Question records and prediction records: every 7th request invalid, the rest answered."""
    questions, predictions = [], {}
    for i, row in enumerate(rows):
        rid = row["request_id"]
        invalid = i % 7 == 3
        answers = {}
        for qid, cands in row["candidates"].items():
            k = len(cands)
            top = (i + seed + (qid == "yes")) % k
            p = [0.6 if j == top else 0.4 / (k - 1) for j in range(k)]
            label = row["targets"][qid]["label"]
            questions.append({"request_id": rid, "question": qid, "type": row["request"]["questions"][qid]["type"],
                              "status": "invalid" if invalid else "ok", "reason": "probabilities sum to 1.8" if invalid else None,
                              "probabilities": None if invalid else p, "label": label, "correct": (not invalid) and top == label})
            answers[qid] = {"type": "choice", "probabilities": {c: (0.9 if invalid else p[j]) for j, c in enumerate(cands)}}
            if hostile:
                answers[qid]["note"] = HOSTILE[i % len(HOSTILE)]
        predictions[rid] = {"request_id": rid, "status": "ok", "response": {"model": "m", "answers": answers},
                            "latency_s": 0.001 * (i + 1), "model": "m", "usage": None, "error": None,
                            "snapshot_sha256": "ab" * 32, "first": i == 0}
    return questions, predictions


def make_report(model: str = "m", data: str = "sample", hostile: bool = False) -> dict:
    dom = {"travel" + (HOSTILE[1] if hostile else ""): {"n": 10, "accuracy": 0.5}, "food": {"n": 10, "accuracy": 0.4}}
    return {"view": "zh_decision_bench", "model": model, "family": "zh_decision_bench", "data": data, "snapshot_sha256": "ab" * 32,
            "metrics": {"overall": {"n": 240, "accuracy": 0.41, "accuracy_n": 240, "nll": 1.2, "probability_n": 200,
                                    "brier": 0.6, "ece": 0.1, "ece_n": 200},
                        "by_type": {"choice": {"n": 120, "accuracy": 0.3}, "noul": {"n": 120, "accuracy": 0.5}}, "by_domain": dom},
            "intervals": {"overall": {"accuracy": [0.35, 0.47]}, "method": "percentile bootstrap", "resamples": 1000,
                          "units": 120, "unit": "request", "seed": 0},
            "coverage": {"questions": 240, "requests": 120, "by_status": {"ok": 206, "invalid": 34},
                         "invalid_by_reason": {"sum": 34}, "requests_by_status": {"ok": 120}, "answered_valid_fraction": 0.86},
            "latency": {"unit": "s", "n": 119, "p50": 0.06, "p95": 0.11}}


class Tags(HTMLParser):
    """Every start tag with its attributes, as an HTML parser reads the page."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, attrs))


def page_data(html: str) -> dict:
    """The page's embedded data document, parsed as the browser would."""
    found = re.search(r'<script type="application/json" id="jk-data">(.*?)</script>', html, re.S)
    assert found, "no data block"
    return json.loads(found.group(1))


def test_every_question_is_in_the_page_with_its_judgement():
    rows = make_rows(60)
    questions, predictions = make_run(rows)
    html = run_page(make_report(), questions, rows, predictions, context=CONTEXT)
    d = page_data(html)
    assert d["n"] == len(questions) == 120 and d["requests"] == 60 and d["kept"] == d["total"] == 60
    S = d["strings"]
    seen = set()
    for i in range(d["n"]):
        rid, qid = d["request_ids"][d["r"][i]], S["qids"][d["q"][i]]
        rec = next(q for q in questions if q["request_id"] == rid and q["question"] == qid)
        seen.add((rid, qid))
        assert S["statuses"][d["st"][i]] == rec["status"]
        assert d["ok"][i] == int(rec["correct"])
        if rec["probabilities"] is None:
            assert d["p"][i] is None and d["loss"][i] is None
        else:
            assert [x / PROB_SCALE for x in d["p"][i]] == pytest.approx(rec["probabilities"], abs=1e-4)
            assert d["loss"][i] == pytest.approx(-__import__("math").log(rec["probabilities"][rec["label"]]), abs=1e-4)
        assert S["cands"][d["c"][i]] == rows[d["r"][i]]["candidates"][qid]
    assert len(seen) == 120
    # per-question slices override the request's; the question's own slice "task" only on "yes"
    task = d["slices"]["task"]
    assert {S["qids"][d["q"][i]] for i in range(d["n"]) if task["codes"][i] >= 0} == {"yes"}
    # the request as the model saw it comes back whole from its detail and the shared question sets
    det = d["details"][5]
    assert {**det["req"], "questions": d["qsets"][det["req"]["questions"]]} == rows[5]["request"]
    shared = d["records"]["raw"]["shared"]
    whole = {**shared, **det["raw"]}
    assert whole == {k: v for k, v in predictions[rows[5]["request_id"]].items() if k not in ("request_id", "snapshot_sha256")}


def test_a_question_without_a_record_reads_unattempted():
    rows = make_rows(4)
    questions, predictions = make_run(rows)
    data = run_data([q for q in questions if q["request_id"] != "r0002"], rows, {k: v for k, v in predictions.items() if k != "r0002"})
    cols = data.columns
    S = cols["strings"]
    missing = [S["statuses"][cols["st"][i]] for i in range(cols["n"]) if cols["request_ids"][cols["r"][i]] == "r0002"]
    assert missing == ["unattempted", "unattempted"]
    assert S["statuses"][cols["rst"][2]] == "unattempted" and data.details[2] is not None


def test_loss_is_the_label_log_loss_or_the_soft_cross_entropy():
    assert loss_of([0.25, 0.75], _Gold(1, None, False)) == pytest.approx(0.2876820724517809)
    assert loss_of([0.0, 1.0], _Gold(0, None, False)) == pytest.approx(27.631021115928547)  # floor 1e-12
    assert loss_of([0.5, 0.5], _Gold(None, [0.2, 0.8], False)) == pytest.approx(0.6931471805599453)
    assert loss_of(None, _Gold(0, None, False)) is None


def test_script_json_cannot_end_or_bend_its_element():
    value = {"a": HOSTILE, "</script>": "<!--", "lone": "\ud800x"}
    text = script_json(json.dumps(value, ensure_ascii=False))
    assert "<" not in text
    assert json.loads(text) == value
    text.encode("utf-8")  # a lone surrogate is escaped, so the page stays valid UTF-8


def test_hostile_strings_never_become_markup():
    rows = make_rows(40, hostile=True)
    questions, predictions = make_run(rows, hostile=True)
    html = run_page(make_report(model='m"><script>window.__pwned=9</script>', hostile=True), questions, rows, predictions,
                    context={**CONTEXT, "command": "<script>window.__pwned=8</script>"})
    # as a browser parses it: our three script elements, no image (no plots given), no event handler
    tags = Tags()
    tags.feed(html)
    assert [t for t, _ in tags.seen if t in ("script", "img", "iframe", "object", "svg")] == ["script"] * 3
    assert not [(t, a) for t, attrs in tags.seen for a, _ in attrs if a.startswith("on")]
    body = html.split('<script type="application/json" id="jk-meta">')[0]
    assert "&lt;script&gt;window.__pwned=9&lt;/script&gt;" in body  # autoescaped in the header
    d = page_data(html)
    assert any(HOSTILE[0] in s for s in d["strings"]["instr"])  # the data holds the strings as they are
    assert d["details"][0]["raw"]["response"]["answers"]["pick"]["note"] == HOSTILE[0]


def test_the_page_runs_only_its_own_script_and_fetches_nothing():
    rows = make_rows(5)
    questions, predictions = make_run(rows)
    html = run_page(make_report(), questions, rows, predictions, context=CONTEXT, plots={"reliability.png": b"\x89PNG fake"})
    csp = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    script = html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp and "img-src data:" in csp
    assert re.findall(r'<img alt="reliability.png" src="data:image/png;base64,', html)
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_banner_for_sample_and_synthetic_data_only():
    rows = make_rows(3)
    q, p = make_run(rows)
    for kind, banner in (("sample", True), ("synthetic", True), ("official", False)):
        html = run_page(make_report(data=kind), q, rows, p, context=CONTEXT)
        assert ('id="jk-banner"' in html) is banner
        if banner:
            assert f"{kind.upper()} DATA." in html


def test_budget_keeps_the_requests_that_matter_and_names_the_rest():
    rows = make_rows(400, state_chars=2000)
    questions, predictions = make_run(rows)
    full = run_page(make_report(), questions, rows, predictions, context=CONTEXT)
    limit = 2_000_000 + 600_000  # HEADROOM + room for about half the details
    html = run_page(make_report(), questions, rows, predictions, context=CONTEXT, max_bytes=limit)
    assert len(html.encode()) <= limit < len(full.encode()) + 2_000_000
    d = page_data(html)
    kept = [r for r in range(d["requests"]) if d["details"][r] is not None]
    assert 0 < d["kept"] == len(kept) < d["total"] == 400
    assert 'id="jk-budget-note"' in html and f"{d['kept']:,} of 400 requests" in html
    invalid = {d["r"][i] for i in range(d["n"]) if d["strings"]["statuses"][d["st"][i]] == "invalid"}
    wrong = {d["r"][i] for i in range(d["n"]) if d["ok"][i] == 0} - invalid
    assert invalid <= set(kept)  # the invalid ones first, then wrong answers, then the rest
    rest = [r for r in range(400) if r not in invalid and r not in wrong]
    assert not (set(rest) & set(kept)) or wrong <= set(kept)
    for r in range(400):  # a request left out keeps its id and the start of its state for search
        assert (d["details"][r] is None) == (d["excerpts"][r] is not None)
    assert d["n"] == 800  # every question is still there
    assert 'id="jk-budget-note"' not in full


def test_comparison_flips_match_the_paired_counts():
    rows = make_rows(90)
    qa, pa = make_run(rows, seed=0)
    qb, pb = make_run(rows, seed=1)
    data = comparison_data(qa, qb, rows, pa, pb)
    ca = {(q["request_id"], q["question"]): q["correct"] for q in qa}
    cb = {(q["request_id"], q["question"]): q["correct"] for q in qb}
    a_only = sum(ca[k] and not cb[k] for k in ca)
    b_only = sum(cb[k] and not ca[k] for k in ca)
    assert data.columns["flip"].count(1) == a_only and data.columns["flip"].count(2) == b_only
    doc = {"view": "zh_decision_bench", "a": "A<b>", "b": "B", "data": "official", "snapshot_sha256": "ab" * 32,
           "metrics": {"accuracy": {"a": 0.5, "b": 0.4, "diff": 0.1, "ci_low": 0.02, "ci_high": 0.2, "n": 180},
                       "nll": {"a": 1.0, "b": 0.9, "diff": 0.1, "ci_low": 0.01, "ci_high": 0.3, "n": 150},
                       "brier": {"a": 0.5, "b": 0.5, "diff": 0.0, "ci_low": -0.1, "ci_high": 0.1, "n": 150}},
           "mcnemar": {"a_only": a_only, "b_only": b_only, "p_value": 0.01},
           "by_domain": {"food": {"n": 90, "a": 0.5, "b": 0.4, "diff": 0.1, "ci_low": -0.01, "ci_high": 0.2}}}
    html = comparison_page(doc, qa, qb, rows, pa, pb, context=CONTEXT)
    assert "A&lt;b&gt; better" in html and "B better" in html and "no clear difference" in html
    d = page_data(html)
    assert set(d["details"][0]) == {"req", "raw_a", "raw_b"}


def test_html_dataset_writes_atomically_and_previews_the_summary(tmp_path: Path):
    rows = make_rows(3)
    q, p = make_run(rows)
    html = run_page(make_report(), q, rows, p, context=CONTEXT)
    ds = HTMLDataset(filepath=str(tmp_path / "m" / "v" / "report.html"))
    assert not ds.exists()
    ds.save(html)
    assert ds.exists() and ds.load() == html
    assert sorted(x.name for x in (tmp_path / "m" / "v").iterdir()) == ["report.html"]  # no temp file left
    preview = ds.preview()
    assert "Headline" in preview and "<script" not in preview and "open report.html in a browser" in preview
