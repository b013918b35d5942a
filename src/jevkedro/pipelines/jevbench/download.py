"""Download the three JevBench task files at the pinned commit and check their sha256.

Usage::

    python -m jevkedro.pipelines.jevbench.download --dest data/01_raw/jevbench/public
    python -m jevkedro.pipelines.jevbench.download --dest DIR --base-url http://127.0.0.1:8000

Each file is fetched from ``<base-url>/<repo>/<commit>/<path>`` (default base
``https://raw.githubusercontent.com``), held in memory, checked against the pinned sha256 and
size, and only then written atomically as ``<dest>/<tier>.jsonl``. A mismatch writes nothing
and names the URL and both hashes. A file already present with the pinned hash is not fetched
again. Then prepare with ``--params "jevbench.prepare.source=<dest>,jevbench.prepare.data=official"``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jevkedro.errors import UserError
from jevkedro.family import family_manifest
from jevkedro.nodes.snapshot import atomic_write_bytes, sha256_file

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
DEFAULT_DEST = Path("data/01_raw/jevbench/public")
MAX_BYTES = 16 << 20  # the largest pinned file is ~650 kB; refuse anything absurd


class DownloadError(UserError, RuntimeError):
    """A file could not be fetched, or its bytes differ from the pin."""


def official_pins() -> list[dict[str, Any]]:
    return list(family_manifest("jevbench")["sources"]["official"])


def file_url(base_url: str, pin: dict[str, Any]) -> str:
    return f"{base_url.rstrip('/')}/{pin['repo']}/{pin['commit']}/{pin['path']}"


def fetch_bytes(url: str, timeout: float = 60.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http/https only, see below)
            data = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DownloadError(f"{url}: {exc}") from None
    if len(data) > MAX_BYTES:
        raise DownloadError(f"{url}: more than {MAX_BYTES} bytes")
    return data


def download(dest: str | Path = DEFAULT_DEST, base_url: str = DEFAULT_BASE_URL,
             pins: Sequence[dict[str, Any]] | None = None, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Fetch every pinned file into ``dest``; returns one entry per file (path, sha256, fetched)."""
    if not base_url.startswith(("http://", "https://")):
        raise DownloadError(f"base URL must be http(s): {base_url!r}")
    dest = Path(dest)
    out = []
    for pin in pins if pins is not None else official_pins():
        path = dest / pin["file"]
        if path.is_file() and sha256_file(path) == pin["sha256"]:
            out.append({"file": str(path), "sha256": pin["sha256"], "fetched": False})
            continue
        url = file_url(base_url, pin)
        data = fetch_bytes(url, timeout)
        digest = hashlib.sha256(data).hexdigest()
        if digest != pin["sha256"]:
            raise DownloadError(f"{url}: sha256 {digest} does not match the pinned {pin['sha256']}; nothing written")
        if pin.get("bytes") is not None and len(data) != pin["bytes"]:
            raise DownloadError(f"{url}: {len(data)} bytes, pinned {pin['bytes']}; nothing written")
        atomic_write_bytes(path, data)
        out.append({"file": str(path), "sha256": digest, "fetched": True})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jevkedro.pipelines.jevbench.download",
                                     description="Fetch the 231 public JevBench tasks at the pinned commit.")
    parser.add_argument("--dest", default=str(DEFAULT_DEST), help=f"target folder (default {DEFAULT_DEST})")
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL,
                        help=f"raw-file host; files are read from <base>/<repo>/<commit>/<path> (default {DEFAULT_BASE_URL})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    args = parser.parse_args(argv)
    try:
        for entry in download(args.dest, args.base_url, timeout=args.timeout):
            print(f"{'fetched' if entry['fetched'] else 'present'}  {entry['sha256']}  {entry['file']}")
    except DownloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
