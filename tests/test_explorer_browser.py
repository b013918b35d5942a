"""The explorer in a real browser: headless Debian chromium driven by playwright (no browser
download) opens the zh-decision-bench page and a comparison page made from real runs of the
pipeline, applies each filter and a search, follows deep links, expands rows, and checks that
hostile strings stay text and that a page asks the network for nothing."""

from __future__ import annotations

import json
import math
import os
import urllib.parse
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from jevkedro.compare import compare
from jevkedro.datasets import JSONLinesDataset
from jevkedro.explorer import run_page, write_page
from jevkedro.nodes.predictions_log import PredictionLog
from jevkedro.nodes.snapshot import load_snapshot
from jevkedro.testing import flattened_replay
from support import copy_project, run_kedro
from test_explorer import CONTEXT, HOSTILE, make_report, make_rows, make_run

CHROMIUM = os.environ.get("JEVKEDRO_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
VIEW = "zh_decision_bench"
A, B = "sparrow-nano-general-v1.1", "sparrow-flattened"
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")]



def _side(root: Path, model: str) -> tuple[list[dict], dict]:
    questions = JSONLinesDataset(str(root / "data" / "07_model_output" / model / VIEW / "questions.jsonl")).load()
    log = PredictionLog(root / "data" / "07_model_output" / model / VIEW / "predictions.jsonl")
    try:
        return questions, dict(log.records.items())
    finally:
        log.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    """Two real zh-decision-bench runs (the embedded model; its answers flattened, replayed) and
    their paired comparison, with the explorer pages they wrote; and a page of hostile strings."""
    root = copy_project(tmp_path_factory.mktemp("explorer") / "project", [VIEW])
    cwd = os.getcwd()
    os.chdir(root)
    try:
        run_kedro(root, VIEW)
        replay = flattened_replay(root / "data" / "07_model_output" / A / VIEW / "predictions.jsonl", root / "flattened.jsonl")
        run_kedro(root, VIEW, {"model": {"adapter": "replay", "path": str(replay), "name": B}})
    finally:
        os.chdir(cwd)
    [doc] = compare(root, [VIEW], A, B)
    snapshot = load_snapshot(root / "data" / "02_snapshots", VIEW)
    qa, pa = _side(root, A)
    qb, pb = _side(root, B)
    report = json.loads((root / "data" / "08_reporting" / A / VIEW / "report.json").read_text(encoding="utf-8"))
    # the pages the pipeline's explore node and the comparison wrote
    run_html = root / "data" / "08_reporting" / A / VIEW / "report.html"
    compare_html = root / "data" / "08_reporting" / "compare" / f"{A}__vs__{B}" / f"{VIEW}.html"
    assert run_html.is_file() and compare_html.is_file()
    rows = make_rows(30, hostile=True)
    hq, hp = make_run(rows, hostile=True)
    hostile_html = root / "hostile.html"
    write_page(hostile_html, run_page(make_report(model=HOSTILE[1], hostile=True), hq, rows, hp,
                                      context={**CONTEXT, "command": HOSTILE[0]}))
    return {"run": run_html, "compare": compare_html, "hostile": hostile_html, "doc": doc, "report": report,
            "questions": qa, "questions_b": qb, "records_a": pa, "records_b": pb, "snapshot": snapshot, "hostile_rows": rows}


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """A page of the browser with what it logged, and helpers to read the question table."""

    def __init__(self, browser, path: Path, fragment: str = "") -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.requests: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.url = path.as_uri()
        self.goto(fragment)

    def _route(self, route) -> None:
        url = route.request.url
        if not url.startswith(("file://", "data:")):
            self.requests.append(url)
            route.abort()
        else:
            route.continue_()

    def goto(self, fragment: str = "") -> None:
        self.page.goto(self.url + ("#" + fragment if fragment else ""))
        self.page.wait_for_selector("html[data-ready]")

    def rows(self) -> int:
        return int(self.page.get_attribute("#jk-qtable", "data-rows"))

    def select(self, key: str, value: str) -> None:
        self.page.select_option(f'select[data-key="{key}"]', value)

    def search(self, text: str) -> None:
        self.page.fill("#jk-search", text)
        done = "t => t ? location.hash.includes('search=' + encodeURIComponent(t)) : !location.hash.includes('search=')"
        self.page.wait_for_function(done, arg=text)

    def visible_ids(self) -> list[str]:
        return self.page.eval_on_selector_all("#jk-qtable tr.jk-row", "rs => rs.map(r => r.dataset.rid)")

    def hash(self) -> str:
        return self.page.evaluate("location.hash")

    def close(self) -> None:
        assert not self.errors, self.errors
        assert not self.requests, self.requests
        self.context.close()


def _state(row) -> str:
    state = row.request["state"]
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, separators=(",", ":"))


def _matching(snapshot, needle: str) -> int:
    """Questions the search finds: in the request id, the state, the question id or its instructions."""
    n, low = 0, needle.lower()
    for r in snapshot.rows:
        hay = (r.request_id + "\n" + _state(r)).lower()
        n += sum(low in hay or low in qid.lower() or low in q.get("instructions", "").lower() for qid, q in r.request["questions"].items())
    return n


def _count(questions, **want) -> int:
    return sum(all(q.get(k) == v for k, v in want.items()) for q in questions)


def test_zh_page_filters_search_sort_and_paging(pages, browser):
    qs, report = pages["questions"], pages["report"]
    p = Page(browser, pages["run"])
    assert p.rows() == len(qs) == 467
    assert p.page.text_content("#jk-pager .jk-count") == "questions 1–50 of 467"
    assert p.page.text_content("#jk-pager .jk-pages") == "of 10"  # 467 rows, 50 a page
    assert p.page.locator("#jk-qtable tr.jk-row").count() == 50
    p.page.click("#jk-pager button:has-text('last »')")
    assert p.page.locator("#jk-qtable tr.jk-row").count() == 17 and "page=10" in p.hash()
    p.select("size", "100")
    assert p.page.locator("#jk-qtable tr.jk-row").count() == 100 and p.page.text_content("#jk-pager .jk-pages") == "of 5"
    p.select("size", "50")
    p.select("correct", "false")
    wrong = _count(qs, correct=False)
    assert p.rows() == wrong and "correct=false" in p.hash()
    p.select("status", "ok")
    assert p.rows() == wrong  # every answer of the embedded model is valid
    p.select("type", "score")
    assert p.rows() == _count(qs, correct=False, type="score") and p.hash() == "#status=ok&correct=false&type=score"
    p.page.click("button.jk-reset")
    assert p.rows() == 467 and p.hash() == ""
    p.select("slice:domain", "ecommerce_cs")
    assert p.rows() == report["metrics"]["by_domain"]["ecommerce_cs"]["n"]
    p.page.click("button.jk-reset")
    p.select("slice:question", "urgency")
    assert p.rows() == report["metrics"]["by_question"]["urgency"]["n"]
    p.page.click("button.jk-reset")
    # search: a request id, words of a state, an instruction (case-insensitive)
    row = pages["snapshot"].rows[100]
    p.search(row.request_id)
    assert set(p.visible_ids()) == {row.request_id} and p.rows() == len(row.request["questions"])
    for needle in (_state(row)[2:6], "功能域", "URGENCY"):
        p.search(needle)
        assert p.rows() == _matching(pages["snapshot"], needle) > 0
    p.search("")
    # sort by loss, highest first: the first row is the largest loss of any question
    p.select("sort", "loss")
    first_loss = float(p.page.text_content("#jk-qtable tr.jk-row td:last-child"))
    top = max(-math.log(max(q["probabilities"][q["label"]], 1e-12)) for q in qs if q["probabilities"])
    assert first_loss == pytest.approx(top, abs=1e-3)
    p.select("sort", "confidence_asc")
    conf = float(p.page.text_content("#jk-qtable tr.jk-row td:nth-last-child(2)"))
    assert conf == pytest.approx(min(max(q["probabilities"]) for q in qs if q["probabilities"]), abs=1e-3)
    # the slice tables sort on a click
    p.page.click("details[data-slice='domain'] th:has-text('accuracy')")
    first = p.page.text_content("details[data-slice='domain'] tbody tr:first-child td:first-child")
    best = max(report["metrics"]["by_domain"].items(), key=lambda kv: kv[1]["accuracy"])[0]
    assert first == best
    assert p.page.is_visible("#jk-banner") is False  # official data: no banner
    p.close()


def test_zh_deep_links_and_expanded_row(pages, browser):
    snapshot, qs = pages["snapshot"], pages["questions"]
    row = next(r for r in snapshot.rows if len(r.request["questions"]) > 1)
    p = Page(browser, pages["run"], "q=" + row.request_id)
    assert set(p.visible_ids()) == {row.request_id} and p.rows() == len(row.request["questions"])
    detail = p.page.locator("tr.jk-detail")
    assert detail.count() == 1
    text = detail.inner_text()
    assert f"Request {row.request_id}" in text and "Request as the model saw it" in text and "Raw response as stored" in text
    shown = json.loads(p.page.text_content("tr.jk-detail pre.jk-request"))
    assert shown == json.loads(json.dumps(dict(row.request)))  # the whole request, as the model saw it
    raw = json.loads(p.page.text_content("tr.jk-detail pre.jk-raw"))
    assert raw["response"]["model"] == A and raw["status"] == "ok"
    assert p.page.locator("tr.jk-detail table.jk-subtable tbody tr").count() == len(row.request["questions"])
    # filters combine in the fragment
    p.goto("status=ok&correct=false&domain=ecommerce_cs")
    by_rid = {r.request_id: r.slices.get("domain") for r in snapshot.rows}
    assert p.rows() == sum(1 for q in qs if q["status"] == "ok" and not q["correct"] and by_rid[q["request_id"]] == "ecommerce_cs")
    assert p.page.locator("#jk-chips .jk-chip").count() == 3
    p.goto("type=score")
    assert p.rows() == 34
    p.goto("status=invalid")
    assert p.rows() == 0 and "No question matches" in p.page.text_content("#jk-qtable tbody")
    p.goto("nosuchslice=x")
    assert p.rows() == 0 and "no such filter: nosuchslice = x" in p.page.text_content("#jk-chips")
    # a slice link of the static tables is a deep link too
    p.goto()
    p.page.click("details[data-slice='difficulty'] a:has-text('hard')")
    p.page.wait_for_function("() => location.hash === '#difficulty=hard'")
    assert p.rows() == pages["report"]["metrics"]["by_difficulty"]["hard"]["n"]
    # expand a row by clicking it; the fragment names it; a second click closes it
    p.goto("sort=loss")
    first = p.page.locator("#jk-qtable tr.jk-row").first
    rid = first.get_attribute("data-rid")
    first.click()
    assert p.page.locator("tr.jk-detail").count() == 1 and f"open={rid}" in p.hash()
    p.page.locator("#jk-qtable tr.jk-row").first.click()
    assert p.page.locator("tr.jk-detail").count() == 0 and "open=" not in p.hash()
    p.close()


def test_comparison_page_flips_and_side_by_side(pages, browser):
    doc, qa, qb = pages["doc"], pages["questions"], pages["questions_b"]
    p = Page(browser, pages["compare"], "flip=a_only")
    assert p.rows() == doc["mcnemar"]["a_only"]
    p.goto("flip=b_only")
    assert p.rows() == doc["mcnemar"]["b_only"]
    ok_b = {(q["request_id"], q["question"]): q["correct"] for q in qb}
    p.select("flip", "both_wrong")
    assert p.rows() == sum(1 for q in qa if not q["correct"] and not ok_b[(q["request_id"], q["question"])])
    assert "flip=both_wrong" in p.hash()
    verdicts = p.page.eval_on_selector_all("#jk-paired tbody tr", "rs => rs.map(r => [r.dataset.metric, r.lastElementChild.textContent])")
    assert dict(verdicts)["accuracy"] == f"{A} better"  # the interval of A − B is above zero
    # largest change in loss first
    p.goto("sort=loss_change")
    cells = p.page.eval_on_selector_all("#jk-qtable tr.jk-row", "rs => rs.map(r => [r.cells[10].textContent, r.cells[11].textContent])")
    changes = [abs(float(a) - float(b)) for a, b in cells if a != "—" and b != "—"]
    assert len(changes) == 50 and all(x >= y - 2e-3 for x, y in zip(changes, changes[1:]))  # shown to 3 decimals
    # a request with both raw responses
    item = doc["flips"]["a_only"]["items"][0]
    p.goto("q=" + item["request_id"])
    raws = p.page.locator("tr.jk-detail pre.jk-raw")
    assert raws.count() == 2
    a, b = (json.loads(raws.nth(k).text_content()) for k in range(2))
    rid = item["request_id"]
    assert a["response"] == pages["records_a"][rid]["response"] and b["response"] == pages["records_b"][rid]["response"]
    assert a["response"] != b["response"]
    p.close()


def test_hostile_strings_render_as_text_and_run_nothing(pages, browser):
    rows = pages["hostile_rows"]
    p = Page(browser, pages["hostile"])
    assert p.page.evaluate("typeof window.__pwned") == "undefined"
    # every question, then every request opened: still nothing ran, and the strings read as written
    p.select("size", "100")
    assert p.rows() == 60
    for rid in [rows[0]["request_id"], rows[1]["request_id"], rows[2]["request_id"], rows[5]["request_id"]]:
        p.goto("q=" + urllib.parse.quote(rid, safe=""))
        assert p.page.locator("tr.jk-detail").count() == 1
        assert p.page.text_content("tr.jk-detail h3") == f"Request {rid}"
    shown = json.loads(p.page.text_content("tr.jk-detail pre.jk-request"))
    assert shown == rows[5]["request"]
    instr = p.page.eval_on_selector_all("td.jk-instr", "cs => cs.map(c => c.textContent)")
    assert any(HOSTILE[0] in t for t in instr) or any(HOSTILE[5 % len(HOSTILE)] in t for t in instr)
    p.goto()
    p.select("size", "100")
    texts = p.page.evaluate("document.body.innerText")
    for s in (HOSTILE[0], HOSTILE[1], HOSTILE[2]):
        assert s in texts
    assert p.page.evaluate("document.querySelectorAll('img').length") == 0
    assert p.page.evaluate("document.scripts.length") == 3
    p.search("<script>")
    assert p.rows() > 0
    p.page.click("#jk-qtable tr.jk-row")
    assert p.page.evaluate("typeof window.__pwned") == "undefined" and not p.dialogs
    assert p.page.text_content("h1").startswith(HOSTILE[1])
    p.close()


def test_pages_ask_the_network_for_nothing(pages, browser):
    for path, frags in ((pages["run"], ["", "q=mass_0030", "status=ok&correct=false&sort=loss"]),
                        (pages["compare"], ["flip=a_only", "sort=loss_change&page=2"])):
        p = Page(browser, path)
        for frag in frags:
            p.goto(frag)
            p.page.locator("#jk-qtable tr.jk-row").first.click()
        assert p.page.evaluate("performance.getEntriesByType('resource').filter(e => !e.name.startsWith('data:')).length") == 0
        p.close()  # asserts no request left the page and nothing was logged (a blocked fetch would be)
