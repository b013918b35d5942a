"""Synthetic DecisionBench releases written by jevkedro (NOT benchmark data).

The real release (``Hanno-Labs/decision-bench``) cannot be downloaded here, so we write our own
rows in its exact format (one Parquet file ``data/eval-00000-of-00001.parquet`` with the 15
standard columns). Every file we write is marked three ways: the folder holds
``JEVKEDRO_DATA_KIND.json``, the Parquet schema metadata carries ``jevkedro_data_kind`` (the
shared in-file stamp, checked at preparation), and
every ``row_id`` starts with ``synthetic-`` and every ``source_json`` says ``jevkedro-synthetic``.

- ``sample``: a few hand-written rows covering every mapping rule (shipped in
  ``data/01_raw/decisionbench/sample``);
- ``synthetic``: a generated release at the full published scale (23,900 rows, 43 tasks over
  three primitives, 27 families, 28 domains, 2-255 candidates) for the count checks and benchmarks.

Usage::

    python -m jevkedro.pipelines.decisionbench.synthetic --out /tmp/decisionbench-synthetic
    python -m jevkedro.pipelines.decisionbench.synthetic --sample --out data/01_raw/decisionbench/sample
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from jevkedro.family import write_data_kind_marker
from jevkedro.nodes.parquet_source import DATA_KIND_KEY

FAMILY = "decisionbench"
DATA_FILE = "data/eval-00000-of-00001.parquet"
FULL_ROWS = 23_900
KIND_SHARES = (("canonical", 20_000), ("task_expansion", 2_700), ("reasoning", 1_200))
NOTE = ("Written by jevkedro in the format of Hanno-Labs/decision-bench (standard eval view). "
        "Invented rows, NOT benchmark data: never report results on it as DecisionBench results.")

BINARY, CHOICE, ORDINAL = "binary_classification", "candidate_selection", "ordinal_scoring"

# 43 tasks as (stored task name, primitive). Binary and ordinal names follow the runtime's task
# list; the candidate-selection names besides relevance_score/route/workflow_decision are invented.
_TASK_NAMES = (
    [(n, BINARY) for n in ("agent_call_retention", "agent_result_retention", "contains_threat", "dom_ad_detection",
                           "musique_evidence_sufficiency", "relevance", "semantic_line_match", "tool-safety-gate",
                           "workflow_decision")]
    + [(n, ORDINAL) for n in ("code_change_risk", "finqa_numerical_reasoning", "tool_action_impact", "toxicity_severity")]
    + [(n, CHOICE) for n in ("relevance_score", "route", "route", "workflow_decision", "ticket_queue", "tool_selection",
                             "language_id", "sentiment_polarity", "email_triage", "form_field_type", "api_endpoint",
                             "doc_category", "priority_bucket", "claim_type", "product_category", "incident_owner",
                             "meeting_action", "code_review_verdict", "log_severity_class", "query_intent",
                             "shipping_method", "refund_reason", "contract_clause", "medication_route",
                             "retrieval_source", "chart_type", "calendar_slot", "escalation_team",
                             "payment_issue", "schema_field_match")]
)
DOMAINS = tuple(f"synthetic_domain_{i:02d}" for i in range(28))
FAMILIES = tuple(f"synthetic_family_{i:02d}" for i in range(27))


def task_table() -> list[tuple[str, str, str, str]]:
    """The 43 synthetic tasks as (domain, family, primitive, task_name).

    Domains and families are assigned round-robin, so all 28 domains and 27 families occur; the
    two ``route`` tasks differ by domain and the two ``workflow_decision`` tasks by primitive,
    as in the real release.
    """
    out = []
    for i, (name, primitive) in enumerate(_TASK_NAMES):
        out.append((DOMAINS[i % len(DOMAINS)], FAMILIES[i % len(FAMILIES)], primitive, name))
    assert len(out) == 43 and len({t for t in out}) == 43
    return out


def _row(row_id: str, domain: str, family: str, primitive: str, task_name: str, instruction: str,
         state: Any, candidates: list[dict[str, Any]], gold: list[float], *, kind: str = "canonical",
         reasoning_type: str | None = None) -> dict[str, Any]:
    """One row in the standard columns; the gold id is the first argmax of ``gold``."""
    assert len(gold) == len(candidates) and abs(sum(gold) - 1.0) < 1e-9
    best = max(range(len(gold)), key=lambda k: (gold[k], -k))
    cands = [{"id": c["id"], "label": c["label"], "description": c.get("description"),
              "ordinal_value": c.get("ordinal_value")} for c in candidates]
    return {
        "row_id": row_id,
        "task_id": f"{domain}/{family}/{primitive}/{task_name}",
        "task_name": task_name,
        "family": family,
        "domain": domain,
        "primitive": primitive,
        "instruction": instruction,
        "state_json": json.dumps(state, ensure_ascii=False),
        "candidates_json": json.dumps(cands, ensure_ascii=False),
        "gold_candidate_id": cands[best]["id"],
        "gold_probabilities": [float(g) for g in gold],
        "source_json": json.dumps({"kind": kind, "repo": "jevkedro-synthetic", "revision": None, "split": "eval",
                                   "source_id": row_id, "source": {"dataset": "jevkedro-synthetic"}}),
        "candidate_count": len(cands),
        "reasoning_required": reasoning_type is not None,
        "reasoning_type": reasoning_type,
    }


def _c(cid: str, label: str, description: str | None = None, ordinal_value: float | None = None) -> dict[str, Any]:
    return {"id": cid, "label": label, "description": description, "ordinal_value": ordinal_value}


def sample_rows() -> list[dict[str, Any]]:
    """The shipped sample: 16 hand-written rows, each exercising a mapping rule."""
    sd = "sample_safety"
    return [
        _row("synthetic-s01", sd, "guardrails", BINARY, "contains_threat", "Does the message contain a threat?",
             {"message": "If the parcel is late again I will cancel my subscription."},
             [_c("threat", "Threat", "explicit or implied harm"), _c("no_threat", "No threat")], [0.0, 1.0]),
        # a binary pair that is not yes/no: the first candidate ("keep") is noul true
        _row("synthetic-s02", "sample_agents", "memory", BINARY, "agent_result_retention",
             "Should the agent keep this tool result in memory?",
             {"tool": "weather", "result": "Rain expected after 4 pm in Lyon."},
             [_c("keep", "Keep", "useful later in the task"), _c("drop", "Drop", None)], [0.3, 0.7]),
        _row("synthetic-s03", sd, "guardrails", BINARY, "tool-safety-gate", "May the agent run this shell command?",
             {"command": "rm -rf /tmp/build-cache", "cwd": "/home/ci"},
             [_c("allow", "Allow"), _c("block", "Block", "destructive or out of scope")], [0.8, 0.2]),
        _row("synthetic-s04", "sample_finance", "routing", CHOICE, "route", "Which desk should handle the request?",
             {"request": "Please move 2,000 EUR from savings to my current account."},
             [_c("payments", "Payments"), _c("cards", "Cards"), _c("savings", "Savings"), _c("other", "Other")],
             [0.1, 0.0, 0.9, 0.0]),
        _row("synthetic-s05", "sample_assistant", "routing", CHOICE, "route", "Which tool should answer?",
             {"request": "What time is it in Osaka?"},
             [_c("clock", "Clock", "time zones"), _c("search", "Web search"), _c("none", "No tool")], [1.0, 0.0, 0.0]),
        _row("synthetic-s06", "sample_search", "ranking", CHOICE, "relevance_score",
             "How relevant is the passage to the query?",
             {"query": "boiling point of water at altitude", "passage": "Water boils at a lower temperature on mountains."},
             [_c("r0", "Irrelevant"), _c("r1", "Somewhat"), _c("r2", "Relevant"), _c("r3", "Answers it")],
             [0.0, 0.1, 0.3, 0.6]),
        _row("synthetic-s07", "sample_ops", "workflow", CHOICE, "workflow_decision", "What is the next workflow step?",
             {"ticket": "Customer sent the missing invoice.", "status": "waiting_on_customer"},
             [_c("resume", "Resume", "continue processing"), _c("close", "Close"), _c("escalate", "Escalate")],
             [0.5, 0.5, 0.0]),
        _row("synthetic-s08", "sample_ops", "workflow", BINARY, "workflow_decision", "Is the workflow complete?",
             {"steps_done": ["intake", "review"], "steps_left": ["approve"]},
             [_c("complete", "Complete"), _c("incomplete", "Incomplete")], [0.0, 1.0]),
        # ordinal, candidates not sorted by value (high, none, mild)
        _row("synthetic-s09", sd, "moderation", ORDINAL, "toxicity_severity", "How severe is the toxicity in this post?",
             {"post": "This update is garbage and so are the people who made it."},
             [_c("high", "High", None, 2), _c("none", "None", "No toxicity", 0), _c("mild", "Mild", None, 1)],
             [0.3, 0.1, 0.6]),
        # ordinal with non-contiguous values
        _row("synthetic-s10", "sample_code", "review", ORDINAL, "code_change_risk", "How risky is this change?",
             {"diff": "-timeout = 30\n+timeout = 3", "files": ["net/client.py"]},
             [_c("medium", "Medium", None, 5), _c("low", "Low", None, 0), _c("critical", "Critical", None, 10)],
             [1.0, 0.0, 0.0]),
        # ordinal with a null value (sorted as 0.0)
        _row("synthetic-s11", "sample_agents", "impact", ORDINAL, "tool_action_impact", "What impact does the action have?",
             {"action": "send_email", "recipients": 1},
             [_c("none", "None", "read only", None), _c("some", "Some", None, 1), _c("large", "Large", None, 2)],
             [0.2, 0.7, 0.1]),
        # ordinal with 11 levels (beyond a 10-level model: unsupported, still counted)
        _row("synthetic-s12", "sample_finance", "numeracy", ORDINAL, "finqa_numerical_reasoning",
             "Roughly how many percent did revenue grow?",
             {"table": [["year", "revenue"], [2022, 100], [2023, 107]]},
             [_c(f"p{v}", f"{v}%", None, v) for v in (10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)],
             [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        _row("synthetic-s13", "sample_support", "triage", CHOICE, "ticket_queue", "Which queue gets the ticket?",
             {"ticket": "The app crashes when I upload a photo larger than 20 MB."},
             [_c(f"q{i:02d}", name) for i, name in enumerate(
                 ("billing", "login", "upload", "crash", "feature", "privacy", "abuse", "sales", "press",
                  "legal", "hardware", "other"))],
             [0.0, 0.0, 0.4, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        _row("synthetic-s14", "sample_finance", "numeracy", CHOICE, "claim_type", "What does the claim amount to in total?",
             {"items": [{"desc": "train", "eur": 42}, {"desc": "hotel", "eur": 180}]},
             [_c("a", "222 EUR"), _c("b", "180 EUR"), _c("c", "42 EUR")], [1.0, 0.0, 0.0],
             kind="reasoning", reasoning_type="arithmetic"),
        # a state that is a JSON string, not an object
        _row("synthetic-s15", "sample_support", "triage", CHOICE, "sentiment_polarity", "What is the sentiment?",
             "Thanks, that fixed it!", [_c("pos", "Positive"), _c("neg", "Negative")], [0.95, 0.05]),
        _row("synthetic-s16", sd, "guardrails", BINARY, "dom_ad_detection", "Is this page element an advertisement?",
             {"html": "<div class=\"promo\">50% off today</div>"},
             [_c("ad", "Advertisement"), _c("content", "Content")], [0.5, 0.5]),
    ]


_WORDS = ("order", "refund", "server", "invoice", "meeting", "shipment", "account", "report", "update", "ticket",
          "policy", "request", "payment", "customer", "schedule", "delay", "error", "summary", "contract", "review")


def _soft(rng: random.Random, k: int) -> list[float]:
    """A soft gold distribution rounded to 3 decimals that sums to exactly 1."""
    raw = [rng.random() ** 3 for _ in range(k)]
    total = sum(raw)
    probs = [round(x / total, 3) for x in raw]
    probs[probs.index(max(probs))] += round(1.0 - sum(probs), 3)
    return [round(p, 3) for p in probs]


def _candidate_count(rng: random.Random, primitive: str, name: str, j: int) -> int:
    if primitive == BINARY:
        return 2
    if primitive == ORDINAL:
        return rng.randint(5, 12) if name == "finqa_numerical_reasoning" else rng.randint(3, 7)
    if name == "tool_selection":  # the widest task: the published maximum of 255 occurs once
        return 255 if j == 0 else rng.randint(20, 120)
    return 2 if j == 0 else rng.randint(2, 12)


def generate_rows(n_rows: int = FULL_ROWS, seed: int = 0) -> list[dict[str, Any]]:
    """A full-scale synthetic release: ``n_rows`` rows over the 43 tasks, deterministic in ``seed``."""
    rng = random.Random(seed)
    tasks = task_table()
    per_task = [n_rows // len(tasks) + (1 if i < n_rows % len(tasks) else 0) for i in range(len(tasks))]
    kinds = [k for k, n in KIND_SHARES for _ in range(n)] if n_rows == FULL_ROWS else ["canonical"] * n_rows
    rng.shuffle(kinds)
    rows = []
    for t, ((domain, family, primitive, name), count) in enumerate(zip(tasks, per_task)):
        for j in range(count):
            kind = kinds[len(rows)]
            k = _candidate_count(rng, primitive, name, j)
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 30)))
            state = {"text": f"{words}.", "item": j, "channel": rng.choice(("email", "chat", "api"))}
            if primitive == ORDINAL:
                values = sorted(rng.sample(range(0, 3 * k), k))
                order = list(range(k))
                rng.shuffle(order)  # candidate order is not value order
                cands = [_c(f"level_{values[o]}", f"Level {values[o]}", None, values[o]) for o in order]
            else:
                cands = [_c(f"opt_{i}", f"Option {i}", rng.choice((None, f"{rng.choice(_WORDS)} case")))
                         for i in range(k)]
            if rng.random() < 0.35:
                gold = _soft(rng, k)
            else:
                gold = [0.0] * k
                gold[rng.randrange(k)] = 1.0
            rows.append(_row(f"synthetic-{t:02d}-{j:05d}", domain, family, primitive, name,
                             f"Decide the {name.replace('_', ' ')} for this {state['channel']} item.", state, cands,
                             gold, kind=kind,
                             reasoning_type=rng.choice(("arithmetic", "multi_hop")) if kind == "reasoning" else None))
    return rows


def write_release(rows: list[dict[str, Any]], out: str | Path, kind: str) -> Path:
    """Write ``rows`` as ``<out>/data/eval-00000-of-00001.parquet`` and mark the folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("row_id", pa.string()), ("task_id", pa.string()), ("task_name", pa.string()), ("family", pa.string()),
        ("domain", pa.string()), ("primitive", pa.string()), ("instruction", pa.string()),
        ("state_json", pa.string()), ("candidates_json", pa.string()), ("gold_candidate_id", pa.string()),
        ("gold_probabilities", pa.list_(pa.float64())), ("source_json", pa.string()),
        ("candidate_count", pa.int64()), ("reasoning_required", pa.bool_()), ("reasoning_type", pa.string()),
    ], metadata={DATA_KIND_KEY: kind, "jevkedro.note": NOTE})
    out = Path(out)
    path = out / DATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, compression="zstd")
    write_data_kind_marker(out, FAMILY, kind, NOTE)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="release folder to write (data/eval-00000-of-00001.parquet)")
    parser.add_argument("--sample", action="store_true", help="write the small hand-written sample instead")
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help="rows of the generated release")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sample:
        path = write_release(sample_rows(), args.out, "sample")
    else:
        path = write_release(generate_rows(args.rows, args.seed), args.out, "synthetic")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
