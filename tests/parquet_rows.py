"""Hand-written upstream Parquet files for the Parquet families' tests (rows as dicts, types inferred)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jevkedro.nodes.parquet_source import DATA_KIND_KEY


def write_rows(path: Path, rows: list[dict], stamp: str | None = None) -> Path:
    """``rows`` as one Parquet file at ``path``; ``stamp`` puts our in-file data-kind marker in its
    schema metadata (as a file of ours copied out of its marked folder would carry)."""
    table = pa.Table.from_pylist(rows)
    if stamp:
        table = table.replace_schema_metadata({DATA_KIND_KEY: stamp})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
