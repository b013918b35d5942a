"""Corpus, the source checks (already handled) and classes 2, 8 and 9 where they meet sources —
upstream release files a careless user or an attacker hands to ``prepare``.

Each case edits one line of a generated JevAlt-Bench release and re-pins it (``SPLITS.sha256``
recomputed, as a user who "fixed" a file would), so the hash check passes and the line itself must
be refused: the message names the file, the line and what is wrong, and no snapshot is written. A
key repeated within one object and a number no double holds are refused, never read silently.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from jevkedro.family import prepare_view
from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError
from jevkedro.nodes.sources import json_cell
from jevkedro.pipelines.jevalt_bench import synthetic as syn


def _edit(change):
    def edit(line: bytes) -> bytes:
        obj = json.loads(line)
        change(obj)
        return json.dumps(obj).encode()
    return edit


def _first_question(obj):
    return next(iter(obj["questions"]))


LINE_FAULTS = {
    "not-json": (lambda line: b"{oops", r"not valid JSON \(Expecting property name enclosed in double quotes at column 2\)"),
    "not-utf8": (lambda line: line.replace(b'"en"', b'"e\xffn"', 1), r"not UTF-8 \(byte 0xff at byte \d+\)"),
    "a-list": (lambda line: b"[1, 2]", r"expected a JSON object, got list"),
    "5000-digit-number": (lambda line: line.replace(b'"lang"', b'"n": ' + b"9" * 5000 + b', "lang"', 1),
                          r"1 number\(s\) beyond the range of a double"),
    "1e400": (lambda line: line.replace(b'"lang"', b'"n": 1e400, "lang"', 1), r"beyond the range of a double"),
    "nested-too-deep": (lambda line: b"[" * 5000 + b"]" * 5000, r"cannot be read \(nested too deeply to read\)"),
    "repeated-top-key": (lambda line: line.replace(b'"lang": "en"', b'"lang": "tr", "lang": "en"', 1),
                         r"key repeated within one object \(lang\)"),
    "repeated-label": (lambda line: line.replace(b'"label": ', b'"label": "0", "label": ', 1),
                       r"key repeated within one object \(targets/severity/label\)"),
    "duplicate-id": (_edit(lambda o: o.__setitem__("id", "en-syn-g0001-a")), r"id 'en-syn-g0001-a' repeats line 1"),
    "empty-id": (_edit(lambda o: o.__setitem__("id", "")), r"id must be a non-empty string"),
    "tab-in-id": (_edit(lambda o: o.__setitem__("id", "a\tb")), r"id must be a non-empty string without tabs"),
    "wrong-language": (_edit(lambda o: o.__setitem__("lang", "tr")), r"lang 'tr' in the 'en' test file"),
    "missing-state": (_edit(lambda o: o.pop("state")), r"missing field\(s\) \['state'\]"),
    "no-questions": (_edit(lambda o: o.__setitem__("questions", {})), r"questions must be an object of 1-6 questions"),
    "unknown-type": (_edit(lambda o: o["questions"][_first_question(o)].__setitem__("type", "rank")),
                     r"unknown question type 'rank'"),
    "label-not-an-option": (_edit(lambda o: o["targets"][_first_question(o)].__setitem__("label", "nowhere")),
                            r"label 'nowhere' is not an option value"),
    "label-nan": (_edit(lambda o: o["targets"][_first_question(o)].__setitem__("label", float("nan"))),
                  r"label nan is not an option value"),
    "dist-sums-to-0.3": (_edit(lambda o: o["targets"][_first_question(o)].__setitem__(
        "dist", {k: 0.1 for k in o["targets"][_first_question(o)]["dist"]})), r"dist sums to 0.3, not 1"),
    "dist-negative": (_edit(lambda o: o["targets"][_first_question(o)].__setitem__(
        "dist", {k: (-1 if i == 0 else 2) for i, k in enumerate(o["targets"][_first_question(o)]["dist"])})),
        r"dist values must be numbers in \[0, 1\]"),
}


@pytest.fixture(scope="module")
def release_lines(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    syn.write_release(syn.sample_items(), root, "synthetic")
    return root


def _repin(root) -> None:
    splits = root / "SPLITS.sha256"
    splits.write_text("".join(f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}\n"
                              for rel in (line.split()[1] for line in splits.read_text().splitlines())))


@pytest.mark.parametrize("fault", sorted(LINE_FAULTS))
def test_a_faulty_source_line_is_refused_naming_file_and_line(tmp_path, release_lines, fault):
    root = tmp_path / "rel"
    shutil.copytree(release_lines, root)
    path = root / "en" / "test.jsonl"
    lines = path.read_bytes().split(b"\n")
    change, message = LINE_FAULTS[fault]
    lines[1] = change(lines[1])
    path.write_bytes(b"\n".join(lines))
    _repin(root)
    with pytest.raises((SourceFormatError, SnapshotError), match=message) as err:
        prepare_view("jevalt_bench", root, data="synthetic")
    assert f"{path}:2: " in str(err.value)


def test_an_untouched_release_prepares(tmp_path, release_lines):
    prepared = prepare_view("jevalt_bench", release_lines, data="synthetic")
    assert prepared.rows and prepared.data == "synthetic"


def test_an_edited_line_without_repinning_is_refused_by_the_hash(tmp_path, release_lines):
    root = tmp_path / "rel"
    shutil.copytree(release_lines, root)
    with open(root / "en" / "test.jsonl", "ab") as fh:
        fh.write(b"\n")
    with pytest.raises(SnapshotError, match=r"en/test\.jsonl: sha256 \w+ does not match SPLITS\.sha256"):
        prepare_view("jevalt_bench", root, data="synthetic")


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "a": 2}', r"eval\.parquet:row 3: column state_json: key repeated within one object \(a\)"),
    ('{"a": ' + "9" * 400 + "}", r"column state_json: 1 number\(s\) beyond the range of a double"),
    ('{"a": \n 1,}', r"column state_json is not valid JSON \(.* at line 2 column 4\)"),
    (b'{"a": 1}', r"column state_json must hold JSON text, got bytes"),
])
def test_a_json_cell_of_a_parquet_source_is_read_strictly(text, message):
    with pytest.raises(SourceFormatError, match=message):
        json_cell("eval.parquet:row 3", "state_json", text)
