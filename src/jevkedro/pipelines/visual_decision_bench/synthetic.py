"""Synthetic VisualDecisionBench releases written by jevkedro (NOT benchmark data).

The release (``Valen-Team/VisualDecisionBench``) cannot be downloaded here, so we write our own
records in its format: ``eval.jsonl`` (image subset first, then video), the per-subset files
``visualdecisionbench_{image,video}.jsonl``, ``assets/visualdecisionbench_<m>/…`` media,
``assets_manifest.jsonl`` (sorted by path) and ``statistics.json``. Every folder we write holds
``JEVKEDRO_DATA_KIND.json`` and every record's ``meta.source`` is ``jevkedro-synthetic``.

Media are ours and tiny: 1x1 PNG images (stored, uncompressed deflate, so the bytes do not depend
on the zlib version) and 24-byte placeholder "videos" (an MP4 ``ftyp`` box and nothing else: the
file type is right, there are no frames). No Jev-class adapter reads video, so none opens them.

- ``sample``: five hand-written records (3 image, 2 video; 15 questions) covering the mapping
  rules, shipped in ``data/01_raw/visual_decision_bench/sample``;
- ``synthetic``: generated records at the published scale (1,696 records, 9,143 questions).

Usage::

    python -m jevkedro.pipelines.visual_decision_bench.synthetic --sample --out data/01_raw/visual_decision_bench/sample
    python -m jevkedro.pipelines.visual_decision_bench.synthetic --out /tmp/vdb-synthetic
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import struct
import zlib
from pathlib import Path
from typing import Any

from jevkedro.family import write_data_kind_marker

FAMILY = "visual_decision_bench"
SUBSETS = ("visualdecisionbench_image", "visualdecisionbench_video")
SOURCE = "jevkedro-synthetic"
LICENCE = "CC0-1.0 (jevkedro synthetic record)"
NOTE = ("Written by jevkedro in the format of Valen-Team/VisualDecisionBench 1.0 (eval.jsonl, assets, "
        "assets_manifest.jsonl, statistics.json). Invented records and placeholder media, NOT benchmark "
        "data: never report results on it as VisualDecisionBench results.")


# ---------------------------------------------------------------------------------------------
# media


def png_1x1(rgb: tuple[int, int, int]) -> bytes:
    """A valid 1x1 RGB PNG (IHDR, one stored-deflate IDAT, IEND)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    raw = bytes([0, *rgb])  # filter byte 0, one pixel
    # stored deflate block by hand: zlib header, final stored block, adler32
    deflate = b"\x78\x01" + b"\x01" + struct.pack("<HH", len(raw), 0xFFFF ^ len(raw)) + raw + struct.pack(">I", zlib.adler32(raw))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", deflate) + chunk(b"IEND", b""))


def placeholder_video(tag: int) -> bytes:
    """24 bytes: an MP4 ``ftyp`` box (brand ``isom``, minor version ``tag``); no frames."""
    return struct.pack(">I", 24) + b"ftyp" + b"isom" + struct.pack(">I", tag) + b"isomjvkd"


def asset(path: str, data: bytes) -> tuple[dict[str, str], bytes]:
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest()}, data


# ---------------------------------------------------------------------------------------------
# records


def _messages(text: str, media: list[tuple[str, str]], system: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for kind, url in media:
        content.append({"type": f"{kind}_url", f"{kind}_url": {"url": url}})
    messages = [{"role": "system", "content": system}] if system else []
    return {"messages": messages + [{"role": "user", "content": content}]}


def one_hot(keys: list[str], gold: str) -> dict[str, Any]:
    return {"probabilities": {k: (1 if k == gold else 0) for k in keys}}


def _record(subset: str, index: int, state: Any, questions: dict, targets: dict, assets: list[dict],
            group: str, **meta: Any) -> dict[str, Any]:
    return {"request": {"state": state, "questions": questions}, "targets": targets, "assets": assets,
            "group_id": group,
            "meta": {"source": SOURCE, "license": LICENCE, "benchmark": "VisualDecisionBench",
                     "benchmark_subset": subset, "benchmark_record_id": f"{subset}:{index:06d}", **meta}}


def sample_release() -> tuple[dict[str, list[dict]], dict[str, bytes]]:
    """The shipped sample: (records by subset, media bytes by path). Each record exercises a rule:

    - image 0: choice + noul + a soft 3-level score (the spec's worked shape), domain and language set;
    - image 1: a noul with criteria (dropped from the wire) and a 12-level score (beyond Jev's 10);
      no domain/language in meta (-> ``unknown``);
    - image 2: a system message, two images, a soft 4-level score with ``label_source``/``votes``;
    - video 0/1: video clips, all targets hard (as the release's video subset).
    """
    media: dict[str, bytes] = {}

    def add(path: str, data: bytes) -> dict[str, str]:
        entry, media[path] = asset(path, data)
        return entry

    img, vid = SUBSETS
    a = add("assets/visualdecisionbench_image/syn-0000.png", png_1x1((200, 30, 30)))
    b = add("assets/visualdecisionbench_image/syn-0001.png", png_1x1((30, 200, 30)))
    c = add("assets/visualdecisionbench_image/syn-0002a.png", png_1x1((240, 240, 240)))
    d = add("assets/visualdecisionbench_image/syn-0002b.png", png_1x1((20, 20, 20)))
    v0 = add("assets/visualdecisionbench_video/syn-0000.mp4", placeholder_video(0))
    v1 = add("assets/visualdecisionbench_video/syn-0001.mp4", placeholder_video(1))
    twelve = [f"Level {i} of 11" for i in range(12)]
    image = [
        _record(img, 0, _messages("A photo of a kitchen counter (synthetic).", [("image", a["path"])]),
                {"pick": {"type": "choice", "instructions": "Which object is nearest the edge?",
                          "criteria": {"cup": "The cup", "knife": "The knife", "plate": "The plate"}},
                 "safe": {"type": "noul", "instructions": "The knife is stored safely."},
                 "mess": {"type": "score", "instructions": "How cluttered is the counter?",
                          "criteria": ["Clear", "Some items", "Very cluttered"]}},
                {"pick": one_hot(["cup", "knife", "plate"], "knife"),
                 "safe": one_hot(["true", "false"], "false"),
                 "mess": {"probabilities": {"0": 0.0, "1": 0.25, "2": 0.75}}},
                [a], "syn-g0000", domain="home", language_bucket="en"),
        _record(img, 1, _messages("A street crossing at dusk (synthetic).", [("image", b["path"])]),
                {"light": {"type": "choice", "instructions": "Which signal is lit?",
                           "criteria": {"red": "Red", "green": "Green"}},
                 "go": {"type": "noul", "instructions": "Crossing is allowed now.",
                        "criteria": {"true": "Allowed", "false": "Not allowed"}},
                 "fine": {"type": "score", "instructions": "Rate the visibility on a 12-level scale.",
                          "criteria": twelve}},
                {"light": one_hot(["red", "green"], "green"),
                 "go": one_hot(["true", "false"], "true"),
                 "fine": one_hot([str(i) for i in range(12)], "7")},
                [b], "syn-g0001"),
        _record(img, 2, _messages("Compare the two frames (synthetic).", [("image", c["path"]), ("image", d["path"])],
                                  system="You judge photos."),
                {"brighter": {"type": "choice", "instructions": "Which image is brighter?",
                              "criteria": {"first": "The first image", "second": "The second image"}},
                 "count": {"type": "score", "instructions": "How different are they?",
                           "criteria": ["Same", "Slightly", "Clearly", "Completely"]},
                 "ok": {"type": "noul", "instructions": "Both images are in focus."}},
                {"brighter": one_hot(["first", "second"], "first"),
                 "count": {"probabilities": {"0": 0, "1": 0, "2": 0.5, "3": 0.5},
                           "label_source": "annotator_distribution", "votes": 2},
                 "ok": one_hot(["true", "false"], "true")},
                [c, d], "syn-g0002", domain="photo_quality"),
    ]
    video = [
        _record(vid, 0, _messages("A clip of a kitchen counter (synthetic).", [("video", v0["path"])]),
                {"first": {"type": "choice", "instructions": "Which object is moved first?",
                           "criteria": {"cup": "The cup", "knife": "The knife"}},
                 "safe": {"type": "noul", "instructions": "The person handles the knife safely."},
                 "speed": {"type": "score", "instructions": "How fast is the motion?",
                           "criteria": ["Slow", "Moderate", "Fast"]}},
                {"first": one_hot(["cup", "knife"], "cup"), "safe": one_hot(["true", "false"], "true"),
                 "speed": one_hot(["0", "1", "2"], "1")},
                [v0], "syn-g0100", domain="home", language_bucket="en"),
        _record(vid, 1, _messages("A clip of a parking lot (synthetic).", [("video", v1["path"])]),
                {"stops": {"type": "noul", "instructions": "The car stops before the line."},
                 "lights": {"type": "noul", "instructions": "The headlights are on."},
                 "turn": {"type": "choice", "instructions": "Which way does the car turn?",
                          "criteria": {"left": "Left", "right": "Right", "none": "It does not turn"}}},
                {"stops": one_hot(["true", "false"], "false"), "lights": one_hot(["true", "false"], "true"),
                 "turn": one_hot(["left", "right", "none"], "right")},
                [v1], "syn-g0101", domain="traffic", language_bucket="en"),
    ]
    return {img: image, vid: video}, media


# ---------------------------------------------------------------------------------------------
# full-scale generator


FULL = {  # image per-type totals and soft counts are the spec's (§2); the video type split is ours
    "visualdecisionbench_image": {"states": 1402, "types": {"choice": 1200, "noul": 400, "score": 400}, "soft_score": 300},
    "visualdecisionbench_video": {"states": 294, "types": {"choice": 3143, "noul": 2500, "score": 1500}, "soft_score": 0},
}


def _generated_question(rng: random.Random, qtype: str, soft: bool) -> tuple[dict, dict]:
    if qtype == "choice":
        keys = [f"opt{i}" for i in range(rng.randint(2, 5))]
        return ({"type": "choice", "instructions": "Which option fits the media? (synthetic)",
                 "criteria": {k: f"Option {k}" for k in keys}}, one_hot(keys, rng.choice(keys)))
    if qtype == "noul":
        return ({"type": "noul", "instructions": "The statement holds for the media. (synthetic)"},
                one_hot(["true", "false"], rng.choice(["true", "false"])))
    k = rng.randint(3, 5)
    levels = [str(i) for i in range(k)]
    if soft:
        lo = rng.randrange(k - 1)
        target = {"probabilities": {lv: (0.5 if int(lv) in (lo, lo + 1) else 0) for lv in levels}}
    else:
        target = one_hot(levels, rng.choice(levels))
    return ({"type": "score", "instructions": "Rate the level shown. (synthetic)",
             "criteria": [f"Level {i}" for i in range(k)]}, target)


def generate_release(seed: int = 0, scale: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, list[dict]], dict[str, bytes]]:
    """Records at the published scale (default) and their media; deterministic for ``seed``."""
    rng = random.Random(seed)
    records: dict[str, list[dict]] = {}
    media: dict[str, bytes] = {}
    for subset, spec in (scale or FULL).items():
        modality = subset.rsplit("_", 1)[1]
        kinds = [t for t, n in spec["types"].items() for _ in range(n)]
        rng.shuffle(kinds)
        soft_left = spec["soft_score"]
        n_states = spec["states"]
        # every state gets one question, the rest are spread at random
        sizes = [1] * n_states
        for _ in range(len(kinds) - n_states):
            sizes[rng.randrange(n_states)] += 1
        out, pos = [], 0
        for i, size in enumerate(sizes):
            ext = "png" if modality == "image" else "mp4"
            data = png_1x1((i % 256, (i // 256) % 256, 7)) if modality == "image" else placeholder_video(i)
            entry, media[f"assets/{subset}/gen-{i:06d}.{ext}"] = asset(f"assets/{subset}/gen-{i:06d}.{ext}", data)
            questions, targets = {}, {}
            for j, qtype in enumerate(kinds[pos:pos + size]):
                soft = qtype == "score" and soft_left > 0
                soft_left -= soft
                questions[f"q{j}"], targets[f"q{j}"] = _generated_question(rng, qtype, soft)
            pos += size
            out.append(_record(subset, i, _messages(f"Synthetic {modality} {i}.", [(modality, entry["path"])]),
                               questions, targets, [entry], f"gen-{subset[-5:]}-{i:06d}",
                               domain=rng.choice(["home", "traffic", "sports"])))
        records[subset] = out
    return records, media


# ---------------------------------------------------------------------------------------------
# writing a release


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def statistics(records: dict[str, list[dict]], media: dict[str, bytes]) -> dict[str, Any]:
    """``statistics.json`` in the packager's shape (per subset and ``total``)."""
    out: dict[str, Any] = {}
    for subset, recs in records.items():
        types: dict[str, int] = {}
        hard_types: dict[str, int] = {}
        paths = set()
        for r in recs:
            paths.update(a["path"] for a in r["assets"])
            for qid, q in r["request"]["questions"].items():
                types[q["type"]] = types.get(q["type"], 0) + 1
                probs = list(r["targets"][qid]["probabilities"].values())
                if probs.count(1) == 1 and all(p in (0, 1) for p in probs):
                    hard_types[q["type"]] = hard_types.get(q["type"], 0) + 1
        sizes = [len(r["request"]["questions"]) for r in recs]
        out[subset] = {"states": len(recs), "questions": sum(sizes), "types": dict(sorted(types.items())),
                       "hard_label_questions": sum(hard_types.values()),
                       "hard_label_types": dict(sorted(hard_types.items())), "assets": len(paths),
                       "multi_question_states": sum(s > 1 for s in sizes),
                       "max_questions_per_state": max(sizes, default=0)}
    out["total"] = {"states": sum(v["states"] for v in out.values()),
                    "questions": sum(v["questions"] for v in out.values()),
                    "asset_bytes": sum(len(b) for b in media.values())}
    return out


def write_release(records: dict[str, list[dict]], media: dict[str, bytes], out: str | Path, kind: str) -> Path:
    """Write the release files, the media and the data-kind marker under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.jsonl").write_text("".join(_jsonl(records[s]) for s in SUBSETS if s in records), encoding="utf-8")
    for subset, recs in records.items():
        (out / f"{subset}.jsonl").write_text(_jsonl(recs), encoding="utf-8")
    lines = []
    for path in sorted(media):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(media[path])
        subset = path.split("/")[1]
        lines.append({"path": path, "sha256": hashlib.sha256(media[path]).hexdigest(), "subset": subset,
                      "modality": subset.rsplit("_", 1)[1], "bytes": len(media[path])})
    (out / "assets_manifest.jsonl").write_text(_jsonl(lines), encoding="utf-8")
    (out / "statistics.json").write_text(json.dumps(statistics(records, media), indent=2) + "\n", encoding="utf-8")
    write_data_kind_marker(out, FAMILY, kind, NOTE)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write the release into")
    parser.add_argument("--sample", action="store_true", help="write the small shipped sample instead")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.sample:
        write_release(*sample_release(), args.out, "sample")
    else:
        write_release(*generate_release(args.seed), args.out, "synthetic")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
