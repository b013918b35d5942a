"""``HTMLDataset``: one explorer page as a Kedro dataset (saved atomically, previewed in kedro viz)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset
from kedro_datasets._typing import HTMLPreview

from jevkedro.nodes.snapshot import atomic_write_bytes

PREVIEW_START, PREVIEW_END = "<!--jk-preview-->", "<!--/jk-preview-->"
_PREVIEW = re.compile(re.escape(PREVIEW_START) + "(.*?)" + re.escape(PREVIEW_END), re.S)


def write_page(path: str | Path, html: str) -> None:
    """Write a page as UTF-8, atomically (temp file + rename, like every other output)."""
    atomic_write_bytes(Path(path), html.encode("utf-8", errors="replace"))


class HTMLDataset(AbstractDataset[str, str]):
    """An HTML page at ``filepath``: ``save(text)`` writes it atomically, ``load()`` reads it back.

    kedro viz previews the page's static part (header, headline, coverage, slice tables, marked
    in the page): its preview pane renders sanitised HTML without scripts, so the question table
    is opened from the file itself.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self.filepath, self.metadata = Path(filepath), metadata

    def load(self) -> str:
        return self.filepath.read_text(encoding="utf-8")

    def save(self, data: str) -> None:
        write_page(self.filepath, data)

    def _exists(self) -> bool:
        return self.filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self.filepath)}

    def preview(self) -> HTMLPreview:
        if not self.filepath.is_file():
            return HTMLPreview("<p>not written yet</p>")
        found = _PREVIEW.search(self.load())
        part = found.group(1) if found else "<p>no summary in this page</p>"
        return HTMLPreview(part + f"<p>Every question, with filters and search: open {self.filepath.name} in a browser.</p>")
