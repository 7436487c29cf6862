"""Fetch PyIceberg's own test suite (from its sdist on PyPI) into .cache/.

The pinned sdist is downloaded with pip, checked against its SHA-256 and its
``tests/`` folder and ``pyproject.toml`` (which holds the suite's pytest
settings) are extracted to ``.cache/pyiceberg-suite/pyiceberg-<version>/``.
The package source itself is not extracted, so the suite imports the
installed ``pyiceberg``. Running this again does nothing once the suite is
in place. Prints the suite's folder.

Usage: python scripts/fetch_pyiceberg_suite.py
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.12.0"
SHA256 = "19f165d298054f9436108691098b60fa0fa99d0eff5fb884700c43b29334a39d"

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "pyiceberg-suite"
SUITE = CACHE / f"pyiceberg-{VERSION}"
SDIST = CACHE / f"pyiceberg-{VERSION}.tar.gz"
STAMP = SUITE / ".extracted"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download() -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                tmp,
                f"pyiceberg=={VERSION}",
            ],
            check=True,
        )
        got = Path(tmp) / SDIST.name
        if not got.exists():
            sys.exit(f"pip download did not produce {SDIST.name}")
        actual = _sha256(got)
        if actual != SHA256:
            sys.exit(f"{SDIST.name}: sha256 {actual}, expected {SHA256}")
        got.replace(SDIST)


def _extract() -> None:
    prefix = f"pyiceberg-{VERSION}/"
    wanted = (prefix + "tests/", prefix + "pyproject.toml")
    if SUITE.exists():
        shutil.rmtree(SUITE)
    with tarfile.open(SDIST) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        if not members:
            sys.exit(f"{SDIST.name} holds no tests/ folder")
        tar.extractall(CACHE, members=members, filter="data")
    STAMP.write_text(SHA256 + "\n")


def main() -> None:
    if STAMP.exists() and STAMP.read_text().strip() == SHA256:
        print(SUITE)
        return
    if not SDIST.exists() or _sha256(SDIST) != SHA256:
        _download()
    _extract()
    print(SUITE)


if __name__ == "__main__":
    main()
