"""Write a SYNTHETIC Typed-Decisions release in the upstream Parquet format (not benchmark data).

    python -m jevkedro.pipelines.typed_decisions.synthetic --out DIR            # full scale: 400 cases
    python -m jevkedro.pipelines.typed_decisions.synthetic --out DIR --sample   # the shipped sample

Writes ``DIR/all/test-00000-of-00001.parquet`` with the upstream columns and types (``id``,
``workflow``, ``split``, ``state``, ``questions``, ``gold``, ``factors``, ``label_agreement``:
string; ``n_questions``: int64) and the ``jevkedro_data_kind`` marker in its Parquet metadata, plus
the folder marker ``DIR/JEVKEDRO_DATA_KIND.json``, so it can only be prepared as ``data: synthetic``
(or ``sample``), never as the real release.

Content is invented: states are random workflow records, and the "teacher" distributions are
means of three random distributions rounded to 4 decimals (so sums may miss 1 by a few 1e-4, as
real means can). Some questions get a tied maximum with the label on the second tied key, i.e. a
label/argmax disagreement: a synthetic release (``write_release``) has exactly the published 31 per
2,000 questions (scaled and rounded for smaller releases), spread evenly; the shipped sample keeps
about 1.5% at random, at least one. Only the ``agent_trace_observability``
question ids are the real ones; the other workflows' ids are unknown (README, Unknown 4) and made up.
Deterministic for a given seed (Python's ``random.Random``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from jevkedro.family import family_manifest
from jevkedro.nodes.parquet_source import write_release_parquet

FAMILY = "typed_decisions"
RELEASE_FILE = "all/test-00000-of-00001.parquet"
FULL_CASES_PER_WORKFLOW = 100
SAMPLE_CASES_PER_WORKFLOW = 2
TIE_RATE = 0.015
LEVELS4 = ["none or negligible", "low", "elevated", "high"]
NOUL = {"false": "No.", "true": "Yes."}
NOTE = ("Written by jevkedro in the format of LocalLLaMA/typed-decisions (config all, split test). "
        "Invented cases, NOT benchmark data: never report results on it as Typed-Decisions results.")

# workflow -> [(question id, type, instructions, criteria)], question ids in alphabetical order.
WORKFLOW_QUESTIONS: dict[str, list[tuple[str, str, str, Any]]] = {
    "agent_trace_observability": [  # the ids the card shows for this workflow
        ("action", "choice", "What should the operator do with this agent run now?",
         {"continue": "Let the agent continue.", "human_review": "Route to a human reviewer.",
          "observe": "Keep watching without acting.", "stop": "Stop the run."}),
        ("needs_review", "noul", "This trace requires human review.",
         {"false": "No review needed.", "true": "A human must review it."}),
        ("outcome", "choice", "How did the run end?",
         {"failure": None, "harmful": None, "partial": None, "success": None}),
        ("risk", "score", "How risky is this run?", LEVELS4),
        ("urgency", "score", "How urgent is a response?", LEVELS4),
    ],
    "customer_service": [  # invented ids (the real ones are unknown)
        ("channel", "choice", "Which team should take this ticket?",
         {"billing": None, "technical": None, "returns": None, "account": None}),
        ("escalate", "noul", "This ticket should be escalated to a supervisor.", dict(NOUL)),
        ("priority", "score", "What priority does the ticket have?", LEVELS4),
        ("resolution", "choice", "What resolution fits best?",
         {"refund": "Refund the customer.", "replace": "Send a replacement.",
          "explain": "Explain the policy.", "close": "Close without action."}),
        ("sentiment", "score", "How upset is the customer?", LEVELS4),
    ],
    "invoice_processing": [  # invented ids
        ("discrepancy_severity", "score", "How severe is the mismatch with the purchase order?", LEVELS4),
        ("disposition", "choice", "What should happen to this invoice?",
         {"approve": None, "hold": None, "reject": None, "review": None}),
        ("duplicate", "noul", "This invoice duplicates one already paid.", dict(NOUL)),
        ("exception_type", "choice", "Which exception applies?",
         {"none": None, "price": None, "quantity": None, "vendor": None}),
        ("payment_urgency", "score", "How urgent is payment?", LEVELS4),
    ],
    "security_incidents": [  # invented ids
        ("blast_radius", "score", "How far could the incident spread?", LEVELS4),
        ("category", "choice", "What kind of incident is this?",
         {"phishing": None, "malware": None, "misconfiguration": None, "insider": None}),
        ("confirmed", "noul", "This alert is a real incident.", dict(NOUL)),
        ("response", "choice", "What is the next response step?",
         {"contain": None, "escalate": None, "monitor": None, "dismiss": None}),
        ("severity", "score", "How severe is the incident?", LEVELS4),
    ],
}
WORKFLOWS = tuple(sorted(WORKFLOW_QUESTIONS))  # rows sorted by workflow, agent_trace_observability first


def _state(rng: random.Random, workflow: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random state object for ``workflow`` and the generator factors behind it."""
    if workflow == "agent_trace_observability":
        steps = rng.randint(2, 30)
        factors = {"autonomy": rng.choice(["low", "medium", "high"]), "completion": round(rng.random(), 2),
                   "steps": steps, "tool_errors": rng.randint(0, 5), "violated_constraint": rng.random() < 0.2,
                   "task": rng.choice(["refactor", "triage", "summarise", "deploy"])}
        state = {"agent": {"autonomy": factors["autonomy"], "task": factors["task"]},
                 "trace": [{"step": i, "tool": rng.choice(["search", "shell", "edit", "http"]),
                            "ok": rng.random() > 0.2} for i in range(min(steps, 6))],
                 "summary": {"steps": steps, "tool_errors": factors["tool_errors"],
                             "completion": factors["completion"]}}
    elif workflow == "customer_service":
        factors = {"tier": rng.choice(["free", "pro", "enterprise"]), "wait_days": rng.randint(0, 20)}
        state = {"customer": {"tier": factors["tier"], "tenure_months": rng.randint(1, 90)},
                 "ticket": {"subject": rng.choice(["charged twice", "cannot log in", "item broken"]),
                            "waited_days": factors["wait_days"], "messages": rng.randint(1, 9)}}
    elif workflow == "invoice_processing":
        amount = round(rng.uniform(50, 5000), 2)
        factors = {"po_gap": round(rng.uniform(-0.2, 0.3), 3), "repeat_vendor": rng.random() < 0.5}
        state = {"invoice": {"amount_usd": amount, "vendor": rng.choice(["Blue Pine", "Acme", "Northwind"]),
                             "due_in_days": rng.randint(-5, 45)},
                 "po": {"amount_usd": round(amount / (1 + factors["po_gap"]), 2)},
                 "history": {"similar_paid_last_30d": rng.randint(0, 2)}}
    else:
        factors = {"signal": rng.choice(["edr", "mail_gateway", "siem"]), "hosts": rng.randint(1, 40)}
        state = {"alert": {"source": factors["signal"], "rule": rng.choice(["T1059", "T1566", "T1078"]),
                           "hosts_affected": factors["hosts"]},
                 "context": {"after_hours": rng.random() < 0.3, "privileged_account": rng.random() < 0.2}}
    return state, factors


def _teacher_distribution(rng: random.Random, k: int) -> list[float]:
    """Mean of three random distributions over ``k`` candidates, rounded to 4 decimals."""
    mean = [0.0] * k
    for _ in range(3):
        draw = [rng.gammavariate(0.6, 1.0) + 1e-9 for _ in range(k)]
        total = sum(draw)
        mean = [m + d / total / 3 for m, d in zip(mean, draw)]
    return [round(m, 4) for m in mean]


def _gold(rng: random.Random, qtype: str, keys: list[str], force_tie: bool) -> tuple[dict[str, Any], bool]:
    probs = _teacher_distribution(rng, len(keys))
    if force_tie:  # two tied maxima; the label takes the later one (label != first-key argmax)
        order = sorted(range(len(keys)), key=lambda i: -probs[i])
        a, b = sorted(order[:2])
        probs[a] = probs[b] = round((probs[a] + probs[b]) / 2, 4)
        label_i = b
    else:
        label_i = max(range(len(keys)), key=lambda i: probs[i])
    entry: dict[str, Any] = {"type": qtype, "label": keys[label_i], "confidence": probs[label_i],
                             "probabilities": dict(zip(keys, probs))}
    if qtype == "score":
        entry["score"] = round(sum(i * p for i, p in enumerate(probs)), 4)
    if qtype == "noul":
        entry["noul"] = probs[keys.index("true")]
    first_key = max(range(len(keys)), key=lambda i: (probs[i], -i))
    return entry, first_key == label_i


def generate_rows(cases_per_workflow: int, seed: int = 0, ties_at_least: int = 0,
                  ties: int | None = None) -> list[dict[str, Any]]:
    """Rows of a synthetic ``all/test`` table, ``cases_per_workflow`` cases per workflow.

    ``ties``: exactly this many label/argmax disagreements, question ``g`` of ``N`` getting one
    when ``floor((g + 1) * ties / N) > floor(g * ties / N)``; None: each question at random
    (``TIE_RATE``), at least ``ties_at_least``.
    """
    rng = random.Random(seed)
    n_questions = cases_per_workflow * sum(len(q) for q in WORKFLOW_QUESTIONS.values())
    rows, forced, g = [], 0, 0
    for workflow in WORKFLOWS:
        for n in range(cases_per_workflow):
            state, factors = _state(rng, workflow)
            questions, gold, agreement = {}, {}, {}
            for qid, qtype, instructions, criteria in WORKFLOW_QUESTIONS[workflow]:
                question: dict[str, Any] = {"type": qtype, "instructions": instructions, "criteria": criteria}
                keys = (["false", "true"] if qtype == "noul" else
                        list(criteria) if qtype == "choice" else [str(i) for i in range(len(criteria))])
                if ties is None:
                    force = forced < ties_at_least or rng.random() < TIE_RATE
                else:
                    force = (g + 1) * ties // n_questions > g * ties // n_questions
                gold[qid], agrees = _gold(rng, qtype, keys, force)
                forced += force
                g += 1
                questions[qid] = question
                agreement[qid] = {"argmax_agree": rng.random() < 0.735}
            rows.append({
                "id": f"{workflow}_{n:06d}", "workflow": workflow, "split": "test",
                "state": json.dumps(state), "questions": json.dumps(questions), "gold": json.dumps(gold),
                "factors": json.dumps(factors), "label_agreement": json.dumps(agreement),
                "n_questions": len(questions),
            })
    return rows


def synthetic_ties(cases_per_workflow: int) -> int:
    """Label/argmax disagreements of a synthetic release: the published count (manifest
    ``release.label_argmax_disagreements``, 31 at 100 cases per workflow) scaled to its size."""
    release = family_manifest(FAMILY)["release"]
    full = sum(release["cases_per_workflow"].values())
    return round(release["label_argmax_disagreements"] * cases_per_workflow * len(WORKFLOWS) / full)


def write_release(out: str | Path, cases_per_workflow: int = FULL_CASES_PER_WORKFLOW, seed: int = 0,
                  kind: str = "synthetic") -> Path:
    """Write ``out/all/test-00000-of-00001.parquet`` and the folder marker; returns the file's path."""
    import pyarrow as pa

    if kind == "sample":
        rows = generate_rows(cases_per_workflow, seed, ties_at_least=1)
    else:
        rows = generate_rows(cases_per_workflow, seed, ties=synthetic_ties(cases_per_workflow))
    string_cols = ("id", "workflow", "split", "state", "questions", "gold", "factors", "label_agreement")
    schema = pa.schema([(c, pa.string()) for c in string_cols] + [("n_questions", pa.int64())])
    return write_release_parquet(out, RELEASE_FILE, rows, schema, FAMILY, kind, NOTE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="release folder to write (all/test-00000-of-00001.parquet)")
    parser.add_argument("--sample", action="store_true", help="write the small shipped sample (data kind 'sample')")
    parser.add_argument("--cases-per-workflow", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    kind = "sample" if args.sample else "synthetic"
    n = args.cases_per_workflow or (SAMPLE_CASES_PER_WORKFLOW if args.sample else FULL_CASES_PER_WORKFLOW)
    path = write_release(args.out, n, args.seed, kind)
    print(f"wrote {path} ({kind}, {n * len(WORKFLOWS)} cases; synthetic, not benchmark data)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
