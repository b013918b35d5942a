"""Reading upstream releases published as Parquet (Hugging Face ``<config>/<split>-*.parquet``),
and telling our own synthetic stand-ins apart from real releases.

A Parquet row is named ``<file>:row <n>`` (1-based, in file order) in every error, the Parquet
counterpart of ``file:line`` for JSONL sources.

Synthetic files written by jevkedro carry a key in the Parquet schema metadata,
``jevkedro_data_kind`` = ``sample`` | ``synthetic``; upstream files never do. Preparation checks
it against the data kind it was asked for, so a synthetic file can never be prepared as the real
release (even where the real release has no pinned hash), nor a real file as a sample.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from jevkedro.nodes.snapshot import SnapshotError, SourceFormatError, atomic_write_bytes

DATA_KIND_KEY = "jevkedro_data_kind"
SYNTHETIC_KINDS = ("sample", "synthetic")


@dataclass
class ParquetRows:
    """A Parquet file as read: its rows as dicts (file order), column names and schema metadata."""

    path: Path
    rows: list[dict[str, Any]]
    columns: list[str]
    metadata: dict[str, str]


def read_parquet_rows(path: str | Path, required: Iterable[str] = ()) -> ParquetRows:
    """Read a whole Parquet file.

    Raises :class:`SourceFormatError` naming the file when it is not Parquet or lacks a
    ``required`` column.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a non-Parquet or torn file
        raise SourceFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise SourceFormatError(f"{path}: missing column(s) {missing}; found {table.column_names}")
    meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in (table.schema.metadata or {}).items()}
    return ParquetRows(path, table.to_pylist(), list(table.column_names), meta)


def where(path: Path, index: int) -> str:
    """How errors name a Parquet row: ``<file>:row <n>``, n 1-based."""
    return f"{path}:row {index + 1}"


def check_data_kind(path: Path, declared: str, metadata: dict[str, str]) -> None:
    """Refuse a file whose jevkedro marker disagrees with the data kind it is prepared as."""
    marker = metadata.get(DATA_KIND_KEY)
    if marker is not None and declared == "official":
        raise SnapshotError(
            f"{path}: this file was written by jevkedro as {marker!r} data ({DATA_KIND_KEY} in its "
            "Parquet metadata); it is not the upstream release and cannot be prepared as 'official'"
        )
    if declared in SYNTHETIC_KINDS and marker != declared:
        found = f"marked {marker!r}" if marker else "carries no jevkedro marker (it may be the real release)"
        raise SnapshotError(f"{path}: prepared as {declared!r} data, but the file {found}")


def write_parquet(path: str | Path, columns: dict[str, list[Any]], schema, data_kind: str,
                  hf_features: dict[str, Any] | None = None) -> Path:
    """Write one synthetic Parquet file with the jevkedro data-kind marker (and, like files the
    Hub's converter writes, a ``huggingface`` features entry)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data_kind not in SYNTHETIC_KINDS:
        raise ValueError(f"jevkedro writes only {SYNTHETIC_KINDS} data, not {data_kind!r}")
    meta = {DATA_KIND_KEY: data_kind}
    if hf_features is not None:
        meta["huggingface"] = json.dumps({"info": {"features": hf_features}})
    table = pa.table(columns, schema=schema.with_metadata(meta))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    path = Path(path)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path
