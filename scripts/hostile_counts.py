"""Count the cases of the bad-input and fault corpus (``tests/hostile``) by the class they test.

``python scripts/hostile_counts.py`` collects the corpus with pytest (``--collect-only``: nothing
runs), gives each collected case (each parametrised case counts on its own) the class of the first
rule below that matches its node id, and prints a Markdown table (the one in docs/reliability.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CLASSES = {
    "1": "1 secrets never on disk",
    "2": "2 numbers no double holds",
    "3": "3 snapshot kind pinned by the settings",
    "4": "4 one writer per output folder",
    "5": "5 answers carry their identity",
    "6": "6 model.name is a name, not a path",
    "7": "7 outputs written whole, broken ones named",
    "8": "8 surprises in replay files",
    "9": "9 errors name the file, line or setting",
    "10": "10 body cap, interleaved errors, records without status",
    "sources": "sources (upstream releases)",
    "snapshots": "snapshots (tampered, damaged)",
    "http": "HTTP faults",
    "kill": "kill points (SIGKILL, torn lines)",
    "lines": "JSONL lines end only at \\n (round 3, class 4)",
    "lock": "the lock holds whatever happens to its file (round 3, class 13)",
    "spellings": "a key re-spelt (round 3, class 9)",
    "keys": "a key is a header value, only in the environment (round 3, classes 7-8)",
    "bodies": "the answer scored is the body received (round 3, class 2)",
    "bounded": "replies bounded, logs of any size (round 3, class 15)",
    "gate settings": "gate and range settings say what they mean (round 3, class 19)",
    "names": "names, never paths; output names never collide (round 3, classes 10-11)",
    "readers": "hand-edited reports, damaged logs: named, never written (round 3, classes 12, 19)",
    "numbers": "no invented numbers: counts, prices, chat content (round 3, class 6)",
    "unclear": "files named for what they are, one BOM and UTF-8 rule (round 3, class 19)",
    "exits": "exit codes, a store that is down, current tags (round 3, classes 5, 17-18)",
}

# (pattern searched in the node id, class): the first that matches wins
RULES: list[tuple[str, str]] = [
    (r"test_hostile_secrets\.py", "1"),
    (r"test_hostile_spellings\.py", "spellings"),
    (r"test_hostile_keys\.py", "keys"),
    (r"test_hostile_lock\.py", "lock"),
    (r"test_hostile_bodies\.py::.*(megabytes|any_size)", "bounded"),
    (r"test_hostile_bodies\.py", "bodies"),
    (r"test_hostile_gate_settings\.py", "gate settings"),
    (r"test_hostile_names\.py::.*(never_paths|never_a_path|only_for_a_model_name|join_alike|one_per_pair|own_outputs"
     r"|beside_the_model_folders)", "names"),
    (r"test_hostile_names\.py", "readers"),
    (r"test_hostile_numbers\.py", "numbers"),
    (r"test_hostile_unclear\.py", "unclear"),
    (r"test_hostile_exits\.py", "exits"),
    (r"number_no_double_holds|one_bad_number_or_repeated_key|\[(5000-digit-number|1e400)\]|beyond the range", "2"),
    (r"test_hostile_snapshots\.py::.*(kind|forged|manifest|another_view|relabelled)", "3"),
    (r"test_hostile_snapshots\.py", "snapshots"),
    (r"test_hostile_writers\.py::.*(second_process|holder_killed|lock_is_reentrant|two_kedro_runs|lock_file|overwritten"
     r"|score_only|another_view)", "4"),
    (r"test_hostile_writers\.py", "5"),
    (r"model_name_that_is_not|plain_names_are_kept", "6"),
    (r"test_hostile_outputs\.py::.*(write|kill_in_the_middle|broken_report|summary_command|damaged_json|compare|serialised)", "7"),
    (r"test_hostile_files\.py::.*(replay_file|choice_probabilities|ids_the_snapshot_lacks)", "8"),
    (r"over-cap|gzip-bomb|over_the_cap|cap_is_a_typed|interleaved_5xx|without_a_status", "10"),
    (r"test_hostile_outputs\.py|damaged_run_json|log_line_that_is_not_a_record", "9"),
    (r"test_hostile_sources\.py", "sources"),
    (r"test_hostile_http\.py", "http"),
    (r"kill_at_each_write|torn_last_line", "kill"),
    (r"unicode_line_breaks", "lines"),
]


def collect() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/hostile"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def classify(node_id: str) -> str:
    for pattern, cls in RULES:
        if re.search(pattern, node_id):
            return cls
    raise SystemExit(f"no class for {node_id}: add a rule to scripts/hostile_counts.py")


def main() -> None:
    ids = collect()
    counts = Counter(classify(i) for i in ids)
    print("| class | cases |\n|---|---:|")
    for cls, name in CLASSES.items():
        print(f"| {name} | {counts.get(cls, 0)} |")
    print(f"| **all** | **{len(ids)}** |")


if __name__ == "__main__":
    main()
