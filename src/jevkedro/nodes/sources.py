"""Reading upstream release files: strictly, against their pins, faults named by file and line.

Every family reads its release through these: a JSON document or JSON-lines record is read by
the one strict reader (:func:`jevkedro.nodes.jsonparse.parse_json`), which refuses text that is
not JSON or not UTF-8, a key repeated within one object and a number beyond the range of a
double, so a label or a target never changes on the way in; :func:`check_source` hashes a file
and compares it with the family's pin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jevkedro.errors import UserError
from jevkedro.files import check_file
from jevkedro.nodes.jsonparse import JSONTextError, describe_path, parse_json
from jevkedro.nodes.snapshot import SnapshotError, SourceFile, SourceFormatError, sha256_file


class SourceJSONError(UserError, ValueError):
    """Why the JSON text of an upstream source is refused; ``syntax`` when it is not JSON at all."""

    def __init__(self, what: str, syntax: bool) -> None:
        super().__init__(what)
        self.syntax = syntax


def read_source_json(text: str | bytes) -> Any:
    """One JSON document of an upstream source (text, or UTF-8 bytes), read strictly. Beyond text
    that is not JSON, a key repeated within one object (parsers keep one of its values silently:
    which was meant is unknown) and a number beyond the range of a double (it would be read as
    infinity) are refused: a label or a target must never change on the way in. Raises
    :class:`SourceJSONError`."""
    try:
        parsed = parse_json(text)
    except JSONTextError as exc:
        if exc.byte_column and isinstance(text, bytes):
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise SourceJSONError(f"not UTF-8 (byte 0x{text[bad.start]:02x} at byte {bad.start + 1})",
                                      syntax=False) from None
        if exc.line is None:  # nested too deeply: no single place to name
            raise SourceJSONError(f"cannot be read ({exc.msg})", syntax=False) from None
        at = f"column {exc.column}" if exc.line == 1 else f"line {exc.line} column {exc.column}"
        raise SourceJSONError(f"not valid JSON ({exc.msg} at {at})", syntax=True) from None
    if parsed.duplicate_keys:
        keys = ", ".join(describe_path(p) for p in parsed.duplicate_keys[:5])
        raise SourceJSONError(f"key repeated within one object ({keys}): which of its values is meant is unknown",
                              syntax=False)
    if parsed.numbers_out_of_range:
        raise SourceJSONError(f"{parsed.numbers_out_of_range} number(s) beyond the range of a double "
                              "(they would be read as infinity)", syntax=False)
    return parsed.value


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)``; a malformed line raises naming file, line and column
    (bytes that are not UTF-8, repeated keys and numbers a double cannot hold included:
    :func:`read_source_json`)."""
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, read_source_object(f"{path}:{lineno}", raw)


def read_source_document(where: str, raw: bytes) -> Any:
    """One JSON document of an upstream source given as bytes (a line, or a whole file), read by
    :func:`read_source_json`; a fault raises :class:`SourceFormatError` starting with ``where``
    (``<file>`` or ``<file>:<line>``)."""
    try:
        return read_source_json(raw)
    except SourceJSONError as exc:
        raise SourceFormatError(f"{where}: {exc}") from None


def read_source_object(where: str, raw: bytes) -> dict[str, Any]:
    """:func:`read_source_document` that must be a JSON object (one record of a JSON-lines source)."""
    obj = read_source_document(where, raw)
    if not isinstance(obj, dict):
        raise SourceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def json_cell(where: str, column: str, text: Any) -> Any:
    """Decode one JSON-text cell of an upstream row (a Parquet column holding JSON as a string).

    ``where`` names the row (e.g. ``<file>:row <n>``); a cell that is not a string or not valid
    JSON raises :class:`SourceFormatError` naming the row and the column.
    """
    if not isinstance(text, str):
        raise SourceFormatError(f"{where}: column {column} must hold JSON text, got {type(text).__name__}")
    try:
        return read_source_json(text)
    except SourceJSONError as exc:
        raise SourceFormatError(f"{where}: column {column} is {exc}" if exc.syntax else f"{where}: column {column}: {exc}") from None


def check_source(path: str | Path, pin: dict[str, Any] | None) -> SourceFile:
    """Hash an upstream file and compare it with its pin; a mismatch names the file and both values,
    and a path that is no regular file (a folder, a FIFO, ``/dev/zero``) is named for what it is
    (:func:`jevkedro.files.file_problem`)."""
    path = check_file(path, "source file", SnapshotError)
    digest = sha256_file(path)
    size = path.stat().st_size
    info = {k: v for k, v in (pin or {}).items() if k not in {"file", "sha256", "bytes"}}
    if pin:
        if pin.get("sha256") and pin["sha256"] != digest:
            raise SnapshotError(
                f"source {path}: sha256 {digest} does not match the pinned {pin['sha256']}"
            )
        if pin.get("bytes") is not None and pin["bytes"] != size:
            raise SnapshotError(f"source {path}: {size} bytes, pinned {pin['bytes']}")
    return SourceFile(path=path, sha256=digest, bytes=size, info=info)
