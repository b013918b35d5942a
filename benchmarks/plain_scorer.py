"""The yardstick for the score step: a plain-Python scorer of a replay file against a snapshot TSV.

Standard-library ``csv`` and ``json`` only, Python floats: for every question with a hard label,
the answer's probability vector over the candidates (a ``noul`` number p is [p, 1 - p] in the
candidates' order), then accuracy (the first highest candidate is the label), NLL (-ln p of the
label, clipped at 1e-15) and Brier (sum of squared differences to the one-hot label). No
validation beyond a missing answer counting as wrong: it is what jevkedro's score step is compared
with, not a scorer to trust.

    python benchmarks/plain_scorer.py SNAPSHOT.tsv ANSWERS.jsonl
"""

from __future__ import annotations

import csv
import json
import math
import sys


def score(tsv: str, answers_path: str) -> dict[str, float]:
    answers = {}
    with open(answers_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            answers[record["request_id"]] = record["response"].get("answers", {})
    csv.field_size_limit(1 << 30)
    hits = n = 0
    nll = brier = 0.0
    with open(tsv, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            candidates = json.loads(row["candidates"])
            given = answers.get(row["request_id"], {})
            for qid, target in json.loads(row["targets"]).items():
                label = target.get("label")
                if not isinstance(label, int):
                    continue
                cands = candidates[qid]
                answer = given.get(qid) or {}
                if "noul" in answer:
                    p = float(answer["noul"])
                    vector = [p, 1.0 - p]
                else:
                    probs = answer.get("probabilities", {})
                    vector = [float(probs.get(c, 0.0)) for c in cands]
                n += 1
                top = max(range(len(vector)), key=vector.__getitem__) if vector else -1
                hits += top == label
                nll -= math.log(max(vector[label], 1e-15)) if label < len(vector) else math.log(1e-15)
                brier += sum((v - (i == label)) ** 2 for i, v in enumerate(vector))
    return {"questions": n, "accuracy": hits / n, "nll": nll / n, "brier": brier / n}


if __name__ == "__main__":
    print(json.dumps(score(sys.argv[1], sys.argv[2])))
