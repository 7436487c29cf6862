"""Fetch PyIceberg's own test suite (from its sdist on PyPI) into .cache/.

The pinned sdist is downloaded as a plain file from the package index (the
one pip is configured with, PyPI by default: its JSON "simple" page gives
the file's address), checked against its SHA-256, and its ``tests/`` folder
and ``pyproject.toml`` (which holds the suite's pytest settings) are
extracted to ``.cache/pyiceberg-suite/pyiceberg-<version>/``. Nothing is
built: ``pip download`` of an sdist would build PyIceberg's build
dependencies (Cython among them) only to read its metadata. The package
source itself is not extracted, so the suite imports the installed
``pyiceberg``. Running this again does nothing once the suite is in place.
Prints one line per step on standard error and the suite's folder on
standard output.

Usage: python scripts/fetch_pyiceberg_suite.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

VERSION = "0.12.0"
SHA256 = "19f165d298054f9436108691098b60fa0fa99d0eff5fb884700c43b29334a39d"

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "pyiceberg-suite"
SUITE = CACHE / f"pyiceberg-{VERSION}"
SDIST = CACHE / f"pyiceberg-{VERSION}.tar.gz"
STAMP = SUITE / ".extracted"
DEFAULT_INDEX = "https://pypi.org/simple"


def _say(message: str) -> None:
    print(f"fetch_pyiceberg_suite: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _index_url() -> str:
    """The index pip uses (PIP_INDEX_URL, or pip's configuration), else PyPI."""
    url = os.environ.get("PIP_INDEX_URL", "")
    if not url:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            check=False,
        )
        url = got.stdout.strip() if got.returncode == 0 else ""
    return (url or DEFAULT_INDEX).rstrip("/")


def _open(url: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return bytes(response.read())
        except OSError as exc:
            if attempt == 2:
                sys.exit(f"fetch_pyiceberg_suite: cannot download {url}: {exc}")
            time.sleep(2 * (attempt + 1))
    raise AssertionError("unreachable")


def _sdist_url(index: str) -> str:
    """The address of the sdist, from the index's JSON project page (PEP 691)."""
    page_url = f"{index}/pyiceberg/"
    page = json.loads(_open(page_url, "application/vnd.pypi.simple.v1+json"))
    for entry in page.get("files", []):
        if entry.get("filename") == SDIST.name:
            return urllib.parse.urljoin(page_url, str(entry["url"]))
    sys.exit(f"fetch_pyiceberg_suite: {page_url} lists no {SDIST.name}")


def _download() -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    index = _index_url()
    _say(f"finding {SDIST.name} on {index}")
    url = _sdist_url(index)
    _say(f"downloading {url}")
    data = _open(url)
    actual = hashlib.sha256(data).hexdigest()
    if actual != SHA256:
        sys.exit(f"fetch_pyiceberg_suite: {SDIST.name}: sha256 {actual}, expected {SHA256}")
    with tempfile.NamedTemporaryFile(dir=CACHE, delete=False) as tmp:
        tmp.write(data)
    Path(tmp.name).replace(SDIST)


def _extract() -> None:
    _say(f"extracting tests/ and pyproject.toml to {SUITE}")
    prefix = f"pyiceberg-{VERSION}/"
    wanted = (prefix + "tests/", prefix + "pyproject.toml")
    if SUITE.exists():
        shutil.rmtree(SUITE)
    with tarfile.open(SDIST) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        if not members:
            sys.exit(f"fetch_pyiceberg_suite: {SDIST.name} holds no tests/ folder")
        tar.extractall(CACHE, members=members, filter="data")
    STAMP.write_text(SHA256 + "\n")


def main() -> None:
    if STAMP.exists() and STAMP.read_text().strip() == SHA256:
        _say(f"PyIceberg {VERSION}'s test suite is in place")
        print(SUITE)
        return
    if not SDIST.exists() or _sha256(SDIST) != SHA256:
        _download()
    _extract()
    print(SUITE)


if __name__ == "__main__":
    main()
