"""The JevBench download step against a loopback HTTP server started by the test."""

from __future__ import annotations

import hashlib
import http.server
import threading
from functools import partial
from pathlib import Path

import pytest

from jevkedro.pipelines.jevbench import download as D

COMMIT = "bb05a335bc809e61b20c0f745d25499a82b326fc"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server(tmp_path):
    """Serve ``tmp_path/www`` on 127.0.0.1 (a free port) in a thread; yields (root, base_url)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _publish(root: Path, path: str, data: bytes, repo: str = "fstandhartinger/jevbench") -> None:
    target = root / repo / COMMIT / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _pins(contents: dict[str, bytes]) -> list[dict]:
    return [{"tier": name.split(".")[0], "file": name, "path": f"datasets/public/{name}",
             "repo": "fstandhartinger/jevbench", "commit": COMMIT,
             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)} for name, data in contents.items()]


CONTENTS = {"original.jsonl": b'{"id": "original-x-01-0"}\n', "easy.jsonl": b'{"id": "easy-x-01"}\n',
            "hard.jsonl": b'{"id": "hard-opus-a-x-01"}\n'}


def test_url_is_raw_github_at_the_pinned_commit():
    pin = D.official_pins()[1]
    assert D.file_url(D.DEFAULT_BASE_URL, pin) == (
        f"https://raw.githubusercontent.com/fstandhartinger/jevbench/{COMMIT}/datasets/public/easy.jsonl")
    assert [p["file"] for p in D.official_pins()] == ["original.jsonl", "easy.jsonl", "hard.jsonl"]


def test_good_files_are_fetched_checked_and_written(server, tmp_path):
    root, base = server
    for name, data in CONTENTS.items():
        _publish(root, f"datasets/public/{name}", data)
    dest = tmp_path / "dest"
    out = D.download(dest, base, pins=_pins(CONTENTS))
    assert [e["fetched"] for e in out] == [True, True, True]
    for name, data in CONTENTS.items():
        assert (dest / name).read_bytes() == data
    assert [e["fetched"] for e in D.download(dest, base, pins=_pins(CONTENTS))] == [False, False, False]


def test_a_corrupted_file_is_refused_and_nothing_is_written(server, tmp_path):
    root, base = server
    for name, data in CONTENTS.items():
        _publish(root, f"datasets/public/{name}", data)
    _publish(root, "datasets/public/easy.jsonl", CONTENTS["easy.jsonl"].replace(b"easy", b"EASY"))
    dest = tmp_path / "dest"
    with pytest.raises(D.DownloadError) as err:
        D.download(dest, base, pins=_pins(CONTENTS))
    msg = str(err.value)
    assert f"{base}/fstandhartinger/jevbench/{COMMIT}/datasets/public/easy.jsonl" in msg
    assert hashlib.sha256(CONTENTS["easy.jsonl"]).hexdigest() in msg and "nothing written" in msg
    assert (dest / "original.jsonl").is_file() and not (dest / "easy.jsonl").exists()
    assert not list(dest.glob(".easy.jsonl.*"))  # no temp file left behind


def test_a_corrupted_download_never_replaces_a_file_already_there(server, tmp_path):
    root, base = server
    _publish(root, "datasets/public/easy.jsonl", b"tampered\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "easy.jsonl").write_bytes(b"old partial\n")
    with pytest.raises(D.DownloadError, match="does not match the pinned"):
        D.download(dest, base, pins=_pins({"easy.jsonl": CONTENTS["easy.jsonl"]}))
    assert (dest / "easy.jsonl").read_bytes() == b"old partial\n"


def test_missing_file_and_bad_base_url(server, tmp_path):
    _, base = server
    with pytest.raises(D.DownloadError, match="HTTP 404"):
        D.download(tmp_path / "d", base, pins=_pins({"easy.jsonl": b"x"}))
    with pytest.raises(D.DownloadError, match="must be http"):
        D.download(tmp_path / "d", "file:///etc", pins=_pins({"easy.jsonl": b"x"}))


def test_cli_against_the_real_pins_rejects_wrong_bytes(server, tmp_path, capsys):
    root, base = server
    for name in CONTENTS:  # right paths, wrong bytes: the real pins cannot match
        _publish(root, f"datasets/public/{name}", b"not the release\n")
    rc = D.main(["--dest", str(tmp_path / "dest"), "--base-url", base, "--timeout", "5"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "5c2414edb3006b8bfcb70fda433f0f9ca015759433849f8d3104328a1f7c4180" in err  # original.jsonl pin
    assert not (tmp_path / "dest" / "original.jsonl").exists()
