"""Suite folders written by jevkedro in the exact format of the 0.3 suite files. Invented rows.

The real suite may not be redistributed, so we ship a small ``sample`` (every read-time rule and
every native metric exercised) and can write a full-scale ``synthetic`` suite that reproduces the
edition's counts (124,971 selected rows, 30,419 added, 2,638 GSM8K, 442 exclusions ->
140,178 requests over 43 datasets; also the 140k scale benchmark). Both folders carry the
``JEVKEDRO_DATA_KIND.json`` marker: they can never be prepared as ``official``.

    python -m jevkedro.pipelines.decision_index.synthetic --sample --out data/01_raw/decision_index/sample
    python -m jevkedro.pipelines.decision_index.synthetic --out data/01_raw/decision_index/synthetic
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import Any

from jevkedro.family import write_data_kind_marker
from jevkedro.pipelines.decision_index.edition import hub_manifest

FAMILY = "decision_index"
LETTERS = "ABCDEFGHIJ"
RETRIEVAL = (2, 36)
CASE_EXACT = (1, 33, 9)


def _choice(n: int, text: str = "Which option is the correct answer?") -> dict[str, Any]:
    return {"type": "choice", "instructions": text,
            "criteria": {LETTERS[i]: f"invented option {i + 1}" for i in range(n)}}


def _yes_no(text: str) -> dict[str, Any]:
    return {"type": "choice", "instructions": text, "criteria": {"yes": "It applies.", "no": "It does not apply."}}


def _record(rng: random.Random, cid: int, dataset: str, n: int, run_prefix: str = "", track: str | None = None,
            group: str | None = None) -> dict[str, Any]:
    """One invented record of benchmark ``cid`` (``n``: its serial number)."""
    track = track or dataset
    group = group or f"{dataset}:test:{n}"
    rec: dict[str, Any] = {"id": f"syn-{cid}-{n}", "family": dataset.lower().replace(" ", "_"), "split": "test",
                           "state": f"Invented case {n} of {dataset}; not benchmark text.",
                           "metadata": {}, "provenance": {"synthetic": True}, "scoring": {}}
    qs: dict[str, Any]
    if cid in RETRIEVAL:
        docs = [f"doc-{n}-{j}" for j in range(5)]
        qs = {f"c{j}": _yes_no(f"Is document {j} relevant to the query?") for j in range(5)}
        grades = {docs[j]: rng.choice([0, 1, 2]) for j in range(3)}  # two candidates stay unjudged
        grades[docs[rng.randrange(3)]] = 2  # answerable: at least one relevant judged candidate
        exp = {f"c{j}": ("yes" if grades[docs[j]] > 0 else "no") if j < 3 else None for j in range(5)}
        rec["scoring"] = {"retrieval_ranking": {"qrels": grades, "field_to_document": {f"c{j}": docs[j] for j in range(5)},
                                                "relevant_option": "yes"}}
        rec["metadata"] = {"domain": rng.choice(["alpha", "beta"])}
    elif cid == 38:  # ACOS: one yes/no field per aspect-and-sentiment pair of a review
        qs = {f"pair{j}": _yes_no(f"Does the review express pair {j}?") for j in range(4)}
        exp = {k: rng.choice(["yes", "no"]) for k in qs}
        rec["metadata"] = {"domain": rng.choice(["Laptop-ACOS", "Restaurant-ACOS"])}
    elif cid in CASE_EXACT:
        qs = {f"f{j}": _choice(3, f"Which value does field {j} take?") for j in range(3)}
        exp = {k: rng.choice("ABC") for k in qs}
    elif cid == 56:  # PhishNChips: nine boolean fields, only the verdict is scored
        qs = {"verdict": {"type": "noul", "instructions": "Is this message a phishing attempt?"}}
        qs.update({f"sig_{j}": {"type": "noul", "instructions": f"Does signal {j} appear?"} for j in range(8)})
        exp = {"verdict": rng.random() < 0.5, **{f"sig_{j}": None for j in range(8)}}
        rec["scoring"] = {"calibration_decisions": {"primary_field": "verdict", "unscored_fields": [f"sig_{j}" for j in range(8)]}}
    elif cid == 59:  # RAGTruth: response-level hallucination, boolean
        qs = {"hallucinated": {"type": "noul", "instructions": "Does the response contain a hallucination?"}}
        exp = {"hallucinated": rng.random() < 0.5}
    elif cid == 40:
        qs = {"q1": {"type": "choice", "instructions": "Is the text sarcastic?",
                     "criteria": {"sarcastic": "It is sarcastic.", "not_sarcastic": "It is not."}}}
        exp = {"q1": rng.choice(["sarcastic", "not_sarcastic"])}
    elif cid == 30:
        k = 10 if track.endswith("10") else 4
        qs = {"q1": _choice(k, "Which number answers the problem?")}
        exp = {"q1": rng.choice(LETTERS[:k])}
    elif cid == 62:  # When2Call: structured state and object instructions, kept untouched
        rec["state"] = {"tools": [{"name": "lookup", "parameters": {"q": "string"}}], "question": f"Invented question {n}"}
        qs = {"q1": {"type": "choice", "instructions": {"task": "Which response should the assistant give?", "format": "letter"},
                     "criteria": {LETTERS[i]: f"invented response {i + 1}" for i in range(4)}}}
        exp = {"q1": rng.choice("ABCD")}
    else:
        k = {28: 2, 44: 2, 21: 2, 23: 2, 20: 2, 61: 2, 42: 2, 12: 3, 11: 3, 41: 3}.get(cid, 4)
        qs = {"q1": _choice(k)}
        exp = {"q1": rng.choice(LETTERS[:k])}
        if cid == 31:
            rec["scoring"] = {"chess_reference_value": {"values": {x: round(rng.random(), 3) for x in LETTERS[:k]},
                                                        "accepted": [exp["q1"], LETTERS[(LETTERS.index(exp["q1"]) + 1) % k]]}}
        if cid == 22:
            rec["metadata"] = {"song_id": f"song-{n % 3}"}
        if cid == 23:
            rec["metadata"] = {"user_id": f"user-{n % 3}"}
    if run_prefix.startswith("candidates"):
        rec["scoring"]["candidate_decisions"] = {"primary_field": next(iter(qs)), "unscored_fields": []}
    rec["questions"] = qs
    rec["expected"] = exp
    rec["_evaluation"] = {"run_id": f"{run_prefix}di-syn:{cid}:{track}:{n}", "catalog_id": cid, "dataset": dataset,
                          "group_id": group, "track": track, "source_path": f"synthetic/{cid}.jsonl",
                          "payload_sha256": "0" * 64, "proxy_tokens": 0, "benchmark_origin": "synthetic"}
    return rec


def suite_plan(full: bool) -> dict[str, Any]:
    """Per benchmark: rows in the selected file and rows kept by its subset; exclusions; added rows."""
    hub = hub_manifest()
    if full:
        selected = {int(b["catalog_id"]): (b["dataset"], int(b["requests"])) for b in hub["benchmarks"]}
        kept = {38: 1565, 2: 1013, 36: 307, 9: 88}
        excluded = {2: 328, 36: 87, 24: 27}
        added = {int(b["catalog_id"]): (b["dataset"], int(b["requests"])) for b in hub["added"]}
    else:
        selected = {int(b["catalog_id"]): (b["dataset"], 2) for b in hub["benchmarks"]}
        selected.update({38: ("ACOS", 4), 2: ("ToolRet", 4), 36: ("BRIGHT", 3), 9: ("Home appliance simulator", 3),
                         22: ("POP909-CL", 4), 23: ("cfcolor", 4), 24: ("MMLU", 3)})
        kept = {38: 2, 2: 3, 36: 2, 9: 2}
        excluded = {2: 1, 24: 1}
        added = {int(b["catalog_id"]): (b["dataset"], 2) for b in hub["added"]}
    return {"selected": selected, "kept": kept, "excluded": excluded, "added": added}


def generate(full: bool = False, seed: int = 20260919) -> dict[str, Any]:
    """The suite files' contents: rows lists and JSON objects, by file name."""
    rng = random.Random(seed)
    plan = suite_plan(full)
    selected, gsm8k, added = [], [], []
    subsets: dict[int, list[str]] = {c: [] for c in plan["kept"]}
    exclusions: dict[str, Any] = {}
    for cid, (dataset, n_rows) in plan["selected"].items():
        for n in range(n_rows):
            track = (f"GSM8K-{'4' if n % 2 == 0 else '10'}") if cid == 30 else None
            group = f"GSM8K:test:{n // 2}" if cid == 30 else None
            rec = _record(rng, cid, dataset, n, track=track, group=group)
            selected.append(rec)
            if cid in subsets and n < plan["kept"][cid]:
                subsets[cid].append(rec["_evaluation"]["run_id"])
            if cid == 30:
                new = _record(rng, cid, dataset, n, run_prefix="v0.3-gsm8k:", track=track, group=group)
                gsm8k.append(new)
            kept = n < plan["kept"].get(cid, n_rows)
            if kept and n < plan["excluded"].get(cid, 0):
                ev = rec["_evaluation"]
                exclusions[f"{cid}:{ev['track']}:{ev['group_id']}"] = {next(iter(rec["questions"])): "duplicate_options"}
    for cid, (dataset, n_rows) in plan["added"].items():
        prefix = "calibration-v1:" if cid == 56 else "candidates-v3:"
        added.extend(_record(rng, cid, dataset, n, run_prefix=prefix) for n in range(n_rows))
    return {
        "selected-rows.jsonl.gz": selected, "gsm8k-rows.jsonl.gz": gsm8k, "added-rows.jsonl.gz": added,
        "excluded-questions.json": [{"id": k, "reasons": v} for k, v in exclusions.items()],
        "acos-subset.json": {"run_ids": subsets[38]}, "toolret-subset.json": {"run_ids": subsets[2]},
        "bright-subset.json": {"run_ids": subsets[36]}, "home-appliances-subset.json": {"run_ids": subsets[9]},
    }


def write_suite(out: str | Path, kind: str, full: bool | None = None, seed: int = 20260919) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = generate(full=(kind == "synthetic") if full is None else full, seed=seed)
    for name, content in files.items():
        if name.endswith(".gz"):
            # mtime 0 and no file name in the header: the same rows give the same bytes
            with open(out / name, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as fh:
                for rec in content:
                    fh.write((json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
        else:
            (out / name).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    write_data_kind_marker(out, FAMILY, kind,
                           "Written by jevkedro in the file format of the Decision Index 0.3 suite. Invented rows, "
                           "NOT benchmark data: never report results on it as Decision Index results.")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sample", action="store_true", help="the small shipped sample instead of the full-scale suite")
    parser.add_argument("--seed", type=int, default=20260919)
    args = parser.parse_args(argv)
    path = write_suite(args.out, "sample" if args.sample else "synthetic", seed=args.seed)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
