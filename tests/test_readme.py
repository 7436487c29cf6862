"""The README's examples run as written, in the order shown (issue 22).

Every fenced block of README.md is either run or, for the few that cannot
run inside a test, checked:

* ``python`` blocks are executed in one Python process, in order, sharing
  their names as a reader typing them into one session would;
* ``bash`` blocks are run with ``bash -eu`` in the same folder; a command
  ending in ``&`` starts a server in the background, and the next block
  waits until the port it named answers;
* ``sql`` blocks are run statement by statement through the ``spark``
  session an earlier block made (they say "from any engine"; Spark is the
  engine at hand);
* lines that would install software or run this suite itself
  (``pip install ...``, ``bash scripts/...``) and the Spark settings block
  for one's own cluster are checked instead: the scripts and extras exist,
  the settings are the ones ``olympia.spark`` itself uses.

Everything runs in a new temporary folder (the README's paths are relative
to where one runs it); S3 variants in the README are comments.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import olympia
import olympia.spark

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FENCE = re.compile(r"^```([A-Za-z]*)\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def _is_checked_only(line: str) -> bool:
    """Commands that install software or run this test suite: checked, not run."""
    line = line.strip()
    return line.startswith(("pip install", "bash scripts/"))


def _commands(code: str) -> list[str]:
    return [line for line in code.splitlines() if line.strip() and not line.startswith("#")]


def _runnable(block: Block) -> bool:
    if block.lang in ("python", "sql"):
        return True
    if block.lang == "bash":
        return not all(_is_checked_only(line) for line in _commands(block.code))
    return False


def test_every_block_is_run_or_checked() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 8
    langs = {b.lang for b in blocks}
    assert langs <= {"python", "bash", "sql", ""}, langs
    # the blocks that only get checked, named, so that a new block is never
    # skipped silently: the set-up commands and the Spark settings
    checked = [b for b in blocks if not _runnable(b)]
    assert [b.lang for b in checked] == ["bash", ""], [(b.lang, b.line) for b in checked]


def test_checked_commands_exist() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    seen = 0
    for block in readme_blocks():
        if block.lang != "bash":
            continue
        for line in _commands(block.code):
            line = line.split("#", 1)[0].strip()
            if line.startswith("bash scripts/"):
                assert (ROOT / line.split()[1]).is_file(), line
                seen += 1
            elif line.startswith("pip install"):
                for extra in re.findall(r"olympia\[([a-z,]+)\]", line):
                    for name in extra.split(","):
                        assert name in extras, (line, sorted(extras))
                seen += 1
    assert seen >= 3
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci  # what CI proves is the README's test command


def test_spark_settings_block_is_what_olympia_spark_uses() -> None:
    (block,) = [b for b in readme_blocks() if b.lang == ""]
    settings = dict(line.split("=", 1) for line in _commands(block.code))
    conf = olympia.spark.session_conf("http://127.0.0.1:8181")
    for key, value in settings.items():
        if key == "spark.jars":
            assert olympia.spark.RUNTIME_JAR in value
            continue
        assert conf.get(key) == value, (key, value, conf.get(key))


DRIVER = r"""
import re, subprocess, sys, tempfile, time, urllib.request

def _wait_for(port):
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/config", timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing answered on port {port}")
            time.sleep(0.3)

def _bash(code, line):
    lines = [l for l in code.splitlines()
             if not l.strip().startswith(("pip install", "bash scripts/"))]
    # Output to a file, not a pipe: a server started with `&` keeps what it
    # inherited open, and a pipe would never reach its end.
    with tempfile.TemporaryFile("w+") as log:
        res = subprocess.run(["bash", "-eu", "-c", "\n".join(lines)], stdout=log, stderr=log)
        log.seek(0)
        text = log.read()
    sys.stdout.write(text)
    if res.returncode != 0:
        raise RuntimeError(f"README.md:{line}: bash exited {res.returncode}: {text}")
    for port in re.findall(r"--port (\d+)[^\n]*&", code):
        _wait_for(int(port))

def _sql(code, line):
    text = "\n".join(l.split("--", 1)[0] for l in code.splitlines())
    for statement in [s.strip() for s in text.split(";") if s.strip()]:
        spark.sql(statement).collect()

"""


def _driver(blocks: list[Block]) -> str:
    parts = [DRIVER]
    for b in blocks:
        if b.lang == "python":
            parts.append(f"exec(compile({b.code!r}, 'README.md:{b.line}', 'exec'))")
        elif b.lang == "bash":
            parts.append(f"_bash({b.code!r}, {b.line})")
        else:
            parts.append(f"_sql({b.code!r}, {b.line})")
        parts.append(f"print('--- README block at line {b.line} ran', flush=True)")
    return "\n".join(parts)


@pytest.mark.timeout(900)
def test_readme_examples_run_in_order(tmp_path: Path) -> None:
    blocks = [b for b in readme_blocks() if _runnable(b)]
    script = tmp_path / "readme_driver.py"
    script.write_text(_driver(blocks))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLYMPIA_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # servers started in the background go with it
    )
    try:
        output, _ = proc.communicate(timeout=840)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, output[-6000:]
    for b in blocks:
        assert f"--- README block at line {b.line} ran" in output, (b.line, output[-3000:])
    # what the examples say happened did happen
    assert "[{'id': 2, 'item': 'jam'}]" in output  # the PyIceberg block's print
    assert "sales.eu.orders created" in output  # `olympia log`, by name
    lake = olympia.load_catalog(str(work / "lake"))
    messages = {t.message for info in lake.history() for t in info.transactions}
    assert {"move 30 to the ledger", "nightly load"} <= messages
    assert any(info.rollback_to == 3 for info in lake.history())
    latest = lake.latest()
    assert latest.list_tables("bank") == ["accounts", "ledger"]
    assert latest.list_tables("sales") == ["orders", "updates"]
    assert (work / "lake.svg").read_text().startswith("<svg")
    assert olympia.load_catalog(str(work / "catalog")).history()[-1].rollback_to is None
