"""Synthetic JevAlt-Bench releases written by jevkedro (NOT benchmark data).

The held-out test files of ``mertkayacs/jevalt-bench`` cannot be downloaded here, so we write our
own items in their format: ``<lang>/test.jsonl`` for en, tr, de (one JevOss item per line, sorted
by ``id``, non-ASCII unescaped) and ``SPLITS.sha256``. Every folder we write holds
``JEVKEDRO_DATA_KIND.json``, every item's ``source`` is ``jevkedro-synthetic`` and every id
starts with the language and ``-syn-``.

- ``sample``: a dozen hand-written items covering every mapping rule (shipped in
  ``data/01_raw/jevalt_bench/sample``);
- ``synthetic``: generated items at the full published scale (3,116 inputs, 8,434 questions).

Usage::

    python -m jevkedro.pipelines.jevalt_bench.synthetic --out /tmp/jevalt-synthetic
    python -m jevkedro.pipelines.jevalt_bench.synthetic --sample --out data/01_raw/jevalt_bench/sample
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

from jevkedro.family import write_data_kind_marker

FAMILY = "jevalt_bench"
LANGUAGES = ("en", "tr", "de")
FULL_INPUTS = {"en": 1_100, "tr": 1_008, "de": 1_008}  # our split: the per-language counts are not published
FULL_QUESTIONS = 8_434
SOURCE = "jevkedro-synthetic"
NOTE = ("Written by jevkedro in the format of mertkayacs/jevalt-bench (test files). Invented items, "
        "NOT benchmark data: never report results on it as JevAlt-Bench results.")


def smooth(values: list[str], gold: str, eps: float = 0.02, extra: dict[str, float] | None = None) -> dict[str, float]:
    """A one-hot on ``gold`` smoothed with ``eps`` (public-set style), 4 decimals; ``extra``
    adds mass on other keys (e.g. ``unknown``) taken from the gold value."""
    n = len(values)
    dist = {v: round((1 - eps) * (v == gold) + eps / n, 4) for v in values}
    for key, mass in (extra or {}).items():
        dist[key] = mass
        dist[gold] = round(dist[gold] - mass, 4)
    return dist


def _item(lang: str, rid: str, state: Any, questions: dict, golds: dict, tags: list[str], **extra: Any) -> dict:
    targets = {}
    for qid, gold in golds.items():
        label, dist = gold
        targets[qid] = {"label": label, "dist": dist}
    return {"id": rid, "lang": lang, "state": state, "questions": questions, "targets": targets, "tags": tags,
            "source": SOURCE, **extra}


def sample_items() -> dict[str, list[dict]]:
    """The shipped sample: 12 hand-written items (en 5, tr 4, de 3), each exercising a rule."""
    yes_no = ["no", "yes"]
    en = [
        _item("en", "en-syn-g0001-a", "Order 4411 was delivered to the wrong address on Tuesday.",
              {"queue": {"type": "choice", "instructions": "Which team should take this?",
                         "criteria": {"shipping": "Delivery problems", "billing": "Charges", "other": None}},
               "refund": {"type": "noul", "instructions": "Does the customer ask for money back?",
                          "criteria": {"yes": "asks for a refund", "no": "does not"}}},
              {"queue": ("shipping", smooth(["shipping", "billing", "other"], "shipping")),
               "refund": ("no", smooth(yes_no, "no"))}, ["group:g0001"]),
        # a placeholder train field (ignored); a noul without criteria; a list score
        _item("en", "en-syn-g0002-a", "The login page has been down for two hours for every user.",
              {"severity": {"type": "score", "instructions": "How severe is the outage?",
                            "criteria": ["minor", "major", "critical"]},
               "known": {"type": "noul", "instructions": "Is this a known incident?"}},
              {"severity": ("2", smooth(["0", "1", "2"], "2")), "known": ("yes", {"no": 0.5, "yes": 0.5})},
              ["group:g0002"], train=False),
        # public abstain flag: unknown appended to the choice and the score, not to the noul
        _item("en", "en-syn-g0003-a", "A caller asks whether the package was insured.",
              {"carrier": {"type": "choice", "instructions": "Which carrier shipped the package?",
                           "criteria": {"dhl": "DHL", "ups": "UPS"}},
               "urgency": {"type": "score", "instructions": "How urgent is the call?",
                           "criteria": ["low", "medium", "high"]},
               "insured": {"type": "noul", "instructions": "Does the caller mention insurance?"}},
              {"carrier": ("unknown", {"dhl": 0.05, "ups": 0.05, "unknown": 0.9}),
               "urgency": ("1", smooth(["0", "1", "2"], "1", extra={"unknown": 0.05})),
               "insured": ("yes", smooth(yes_no, "yes"))},
              ["group:g0003", "abstain"], abstain=True),
        # extra question fields and structured instructions
        _item("en", "en-syn-g0004-a", {"ticket": "Cannot export my report to PDF", "plan": "pro"},
              {"topic": {"type": "choice", "instructions": {"task": "Pick the topic of `ticket`"},
                         "criteria": {"export": "Exports", "account": "Account"},
                         "examples": [{"ticket": "CSV download fails", "topic": "export"}], "hint": "plan is irrelevant"}},
              {"topic": ("export", smooth(["export", "account"], "export"))}, ["group:g0004"]),
        # an abstain *tag* but no public flag: no unknown candidate; gold unknown -> unscored,
        # unknown mass on a real label -> dropped and renormalised
        _item("en", "en-syn-g0005-a", "The message only says: call me back.",
              {"reason": {"type": "choice", "instructions": "Why does the customer write?",
                          "criteria": {"refund": "Refund", "delivery": "Delivery"}},
               "channel": {"type": "choice", "instructions": "How should we reply?",
                           "criteria": {"phone": "Phone", "email": "Email"}}},
              {"reason": ("unknown", {"refund": 0.1, "delivery": 0.1, "unknown": 0.8}),
               "channel": ("phone", {"phone": 0.85, "email": 0.05, "unknown": 0.1})},
              ["group:g0005", "abstain"]),
    ]
    tr = [
        _item("tr", "tr-syn-g0042-a", "Misafir 23:30'da gelecek; anahtarı kimin teslim edeceğini soruyor.",
              {"oda": {"type": "choice", "instructions": "Misafir hangi oda tipini ayırttı?",
                       "criteria": {"standart": "Standart oda", "suit": "Süit"}},
               "risk": {"type": "score", "instructions": "Gecikme riski?",
                        "criteria": {"dusuk": "Düşük", "orta": "Orta", "yuksek": "Yüksek"}}},
              {"oda": ("unknown", {"standart": 0.05, "suit": 0.05, "unknown": 0.9}),
               "risk": ("orta", {"dusuk": 0.2, "orta": 0.6, "yuksek": 0.15, "unknown": 0.05})},
              ["group:g0042", "abstain"], abstain=True),
        # dict-form score without abstain (keys in insertion order are the levels, not sorted)
        _item("tr", "tr-syn-g0043-a", "Fatura iki kez kesilmiş, müşteri çok kızgın.",
              {"ofke": {"type": "score", "instructions": "Müşteri ne kadar öfkeli?",
                        "criteria": {"sakin": "Sakin", "rahatsiz": "Rahatsız", "ofkeli": "Öfkeli"}},
               "iade": {"type": "noul", "instructions": "İade gerekiyor mu?", "criteria": {"1": "evet", "0": "hayır"}}},
              {"ofke": ("ofkeli", smooth(["sakin", "rahatsiz", "ofkeli"], "ofkeli")),
               "iade": ("yes", smooth(yes_no, "yes"))}, ["group:g0043"]),
        _item("tr", "tr-syn-g0044-a", {"siparis": 981, "durum": "kargoda", "gecikme_gun": 3},
              {"eylem": {"type": "choice", "instructions": "Sıradaki adım nedir?",
                         "criteria": {"bekle": "Bekle", "ara": "Kargoyu ara", "iade": "İade başlat", "kapat": "Kapat"}}},
              {"eylem": ("ara", smooth(["bekle", "ara", "iade", "kapat"], "ara"))}, ["group:g0044"]),
        _item("tr", "tr-syn-g0045-a", "Kullanıcı şifresini unuttu ve e-posta adresi de değişmiş.",
              {f"s{i}": {"type": "noul", "instructions": f"Soru {i}: hesap kurtarma gerekli mi?"} for i in range(1, 7)},
              {f"s{i}": ("yes" if i % 2 else "no", smooth(yes_no, "yes" if i % 2 else "no")) for i in range(1, 7)},
              ["group:g0045"]),
    ]
    de = [
        _item("de", "de-syn-g0100-a", "Die Heizung im Büro fällt seit Montag jeden Morgen aus.",
              {"gewerk": {"type": "choice", "instructions": "Welches Gewerk ist zuständig?",
                          "criteria": {"heizung": "Heizung und Sanitär", "elektro": "Elektrik"}},
               "dringlichkeit": {"type": "score", "instructions": "Wie dringend ist es?",
                                 "criteria": ["1", "2", "3", "4", "5"]}},
              {"gewerk": ("heizung", smooth(["heizung", "elektro"], "heizung")),
               "dringlichkeit": (3, smooth(["0", "1", "2", "3", "4"], "3"))}, ["group:g0100"]),
        _item("de", "de-syn-g0101-a", "Der Kunde fragt, ob die Lieferung versichert war.",
              {"risiko": {"type": "score", "instructions": "Wie hoch ist das Risiko?",
                          "criteria": {"gering": None, "mittel": "mittleres Risiko", "hoch": None}}},
              {"risiko": ("gering", smooth(["gering", "mittel", "hoch"], "gering", extra={"unknown": 0.1}))},
              ["group:g0101", "abstain"], abstain=True),
        _item("de", "de-syn-g0102-a", [{"role": "user", "content": "Kann ich meinen Termin verschieben?"},
                                       {"role": "assistant", "content": "Ja, bis 24 Stunden vorher."}],
              {"beantwortet": {"type": "noul", "instructions": "Wurde die Frage beantwortet?",
                               "criteria": {"true": "ja", "false": "nein"}}},
              {"beantwortet": ("yes", smooth(yes_no, "yes"))}, ["group:g0102"]),
    ]
    return {"en": en, "tr": tr, "de": de}


_TOPICS = {
    "en": ("order", "invoice", "delivery", "password", "meeting", "refund", "server", "contract"),
    "tr": ("sipariş", "fatura", "teslimat", "şifre", "toplantı", "iade", "sunucu", "sözleşme"),
    "de": ("Bestellung", "Rechnung", "Lieferung", "Passwort", "Termin", "Erstattung", "Server", "Vertrag"),
}


def _question_counts(rng: random.Random, n_inputs: int, total: int) -> list[int]:
    """1-6 questions per input, adjusted to sum to exactly ``total``."""
    counts = [rng.choice((1, 2, 2, 3, 3, 3, 4, 5)) for _ in range(n_inputs)]
    while sum(counts) != total:
        i = rng.randrange(n_inputs)
        if sum(counts) < total and counts[i] < 6:
            counts[i] += 1
        elif sum(counts) > total and counts[i] > 1:
            counts[i] -= 1
    return counts


def _generated_item(rng: random.Random, lang: str, n: int, n_questions: int) -> dict:
    topic = rng.choice(_TOPICS[lang])
    abstain = rng.random() < 0.12
    state: Any = f"{topic} #{n}: " + " ".join(rng.choice(_TOPICS[lang]) for _ in range(rng.randint(6, 24)))
    if rng.random() < 0.2:
        state = {"text": state, "priority": rng.randint(1, 4)}
    questions, golds = {}, {}
    for q in range(n_questions):
        qid = f"q{q}_{rng.choice(('route', 'risk', 'flag', 'kind'))}"
        kind = rng.choices(("choice", "score_list", "score_dict", "noul"), weights=(5, 2, 1, 2))[0]
        if kind == "choice":
            values = [f"opt{i}" for i in range(rng.randint(2, 8))]
            question = {"type": "choice", "instructions": f"Pick the {topic} route.",
                        "criteria": {v: (f"{topic} {v}" if rng.random() < 0.8 else None) for v in values}}
        elif kind == "score_list":
            values = [str(i) for i in range(rng.randint(2, 10))]
            question = {"type": "score", "instructions": f"Rate the {topic} risk.",
                        "criteria": [f"level {v}" for v in values]}
        elif kind == "score_dict":
            values = [f"l{i}" for i in range(rng.randint(2, 5))]
            question = {"type": "score", "instructions": f"Rate the {topic} risk.",
                        "criteria": {v: f"level {v}" for v in values}}
        else:
            values = ["no", "yes"]
            question = {"type": "noul", "instructions": f"Is the {topic} flagged?"}
            if rng.random() < 0.5:
                question["criteria"] = {"yes": "flagged", "no": "not flagged"}
        if rng.random() < 0.05:
            question["hint"] = rng.choice(_TOPICS[lang])  # an extra field, serialised into the instruction
        gold = rng.choice(values)
        if abstain and kind != "noul" and rng.random() < 0.3:
            dist = {v: round(0.1 / len(values), 4) for v in values}
            dist["unknown"] = round(1 - sum(dist.values()), 4)
            golds[qid] = ("unknown", dist)
        else:
            golds[qid] = (gold, smooth(values, gold, extra={"unknown": 0.02} if abstain and kind != "noul" else None))
        questions[qid] = question
    tag_only = not abstain and rng.random() < 0.03  # an abstain tag without the public flag
    if tag_only:
        qid, question = next(iter(questions.items()))
        if question["type"] == "choice":
            values = list(question["criteria"])
            dist = {v: round(0.2 / len(values), 4) for v in values}
            dist["unknown"] = round(1 - sum(dist.values()), 4)
            golds[qid] = ("unknown", dist)
    extra: dict[str, Any] = {"abstain": True} if abstain else {}
    if rng.random() < 0.1:
        extra["train"] = False  # the placeholder field some records carry
    return _item(lang, f"{lang}-syn-g{n:05d}-a", state, questions, golds,
                 [f"group:g{n:05d}"] + (["abstain"] if abstain or tag_only else []), **extra)


def generate_items(inputs: dict[str, int] | None = None, questions: int = FULL_QUESTIONS,
                   seed: int = 0) -> dict[str, list[dict]]:
    """A full-scale synthetic release (deterministic in ``seed``)."""
    rng = random.Random(seed)
    inputs = inputs or FULL_INPUTS
    counts = _question_counts(rng, sum(inputs.values()), questions)
    out, k = {}, 0
    for lang in LANGUAGES:
        items = []
        for n in range(inputs[lang]):
            items.append(_generated_item(rng, lang, n, counts[k]))
            k += 1
        out[lang] = items
    return out


def write_release(items: dict[str, list[dict]], out: str | Path, kind: str) -> Path:
    """Write ``<out>/<lang>/test.jsonl`` (sorted by id), ``SPLITS.sha256`` and the marker."""
    out = Path(out)
    lines = []
    for lang in LANGUAGES:
        path = out / lang / "test.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(item, ensure_ascii=False) + "\n"
                       for item in sorted(items[lang], key=lambda it: it["id"]))
        path.write_bytes(body.encode("utf-8"))
        lines.append(f"{hashlib.sha256(body.encode('utf-8')).hexdigest()}  {lang}/test.jsonl\n")
    (out / "SPLITS.sha256").write_text("".join(lines), encoding="utf-8")
    write_data_kind_marker(out, FAMILY, kind, NOTE)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="release folder to write (<lang>/test.jsonl, SPLITS.sha256)")
    parser.add_argument("--sample", action="store_true", help="write the small hand-written sample instead")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sample:
        out = write_release(sample_items(), args.out, "sample")
    else:
        out = write_release(generate_items(seed=args.seed), args.out, "synthetic")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
