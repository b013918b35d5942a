"""Reading upstream releases published as Parquet (Hugging Face ``<config>/<split>-*.parquet``),
and telling our own synthetic stand-ins apart from real releases.

A Parquet row is named ``<file>:row <n>`` (1-based, in file order) in every error, the Parquet
counterpart of ``file:line`` for JSONL sources.

A release folder written by jevkedro is marked like every family's: ``JEVKEDRO_DATA_KIND.json``
(:func:`jevkedro.family.write_data_kind_marker`). Each Parquet file we write also carries the kind
in its schema metadata, ``jevkedro_data_kind`` = ``sample`` | ``synthetic`` (upstream files never
do); preparation passes it to :func:`jevkedro.family.check_data_kind` as a secondary check, so a
file of ours copied out of its folder can still never be prepared as the real release.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jevkedro.family import write_data_kind_marker
from jevkedro.nodes.snapshot import SourceFormatError, atomic_write_bytes
from jevkedro.protocol import OWN_DATA_KINDS

DATA_KIND_KEY = "jevkedro_data_kind"


@dataclass
class ParquetRows:
    """A Parquet file as read: its rows as dicts (file order), column names and schema metadata."""

    path: Path
    rows: list[dict[str, Any]]
    columns: list[str]
    metadata: dict[str, str]

    @property
    def data_kind(self) -> str | None:
        """The data kind jevkedro stamped in the file (None for an upstream file)."""
        return self.metadata.get(DATA_KIND_KEY)

    @property
    def file_marker(self) -> tuple[Path, str | None]:
        """``(path, data_kind)``, the ``file_marker`` of :func:`jevkedro.family.check_data_kind`."""
        return self.path, self.data_kind


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


def write_parquet(path: str | Path, columns: dict[str, list[Any]], schema, data_kind: str,
                  hf_features: dict[str, Any] | None = None) -> Path:
    """Write one synthetic Parquet file with the jevkedro data-kind marker (and, like files the
    Hub's converter writes, a ``huggingface`` features entry)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if data_kind not in OWN_DATA_KINDS:
        raise ValueError(f"jevkedro writes only {OWN_DATA_KINDS} data, not {data_kind!r}")
    meta = {DATA_KIND_KEY: data_kind}
    if hf_features is not None:
        meta["huggingface"] = json.dumps({"info": {"features": hf_features}})
    table = pa.table(columns, schema=schema.with_metadata(meta))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    path = Path(path)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path


def hf_features(schema) -> dict[str, Any]:
    """The ``huggingface`` features entry of a flat schema of scalar columns (``Value`` per column,
    its dtype the Arrow type name, e.g. ``string``, ``int64``), in schema order."""
    return {field.name: {"dtype": str(field.type), "_type": "Value"} for field in schema}


def write_release_parquet(out: str | Path, release_file: str, rows: list[dict[str, Any]], schema,
                          family: str, kind: str, note: str) -> Path:
    """Write a release of ours: ``rows`` as ``<out>/<release_file>`` (columns in ``schema``
    order, stamped with ``kind``) and the folder marker in ``out``; returns the file's path."""
    columns = {c: [r[c] for r in rows] for c in schema.names}
    path = write_parquet(Path(out) / release_file, columns, schema, kind, hf_features(schema))
    write_data_kind_marker(out, family, kind, note)
    return path
