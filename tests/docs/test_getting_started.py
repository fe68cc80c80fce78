"""docs/getting-started.md, run as a reader would: its blocks in order, in an empty directory.

Shell blocks run in bash with this environment's ``pyiceberg-crypto`` first on the PATH;
consecutive python blocks run as one Python process (step 3 writes, step 4 verifies in the same
session). The install block is the one block not run: the test-suite's environment is already
installed from this checkout (test_code_blocks checks the extras it names)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, ROOT, blocks_of
from tests.testkit import SHORT_DRIVER_ENV

PAGE = DOCS / "getting-started.md"
ENCRYPTED_MAGICS = {b"PARE", b"AGS1"}


def steps() -> list[tuple[str, str]]:
    """``(language, code)`` to run, in page order, consecutive python blocks joined."""
    out: list[tuple[str, str]] = []
    for block in blocks_of(PAGE):
        if block.language == "sh" and "pip install" in block.code:
            continue
        if out and block.language == "python" and out[-1][0] == "python":
            out[-1] = ("python", out[-1][1] + "\n" + block.code)
        else:
            out.append((block.language, block.code))
    return out


def test_the_page_has_the_steps_it_promises():
    languages = [language for language, _ in steps()]
    assert languages == ["sh", "python", "sh", "python"], languages
    assert "keystore add" in steps()[0][1] and "verify_table" in steps()[1][1] and "read_table" in steps()[3][1]


@pytest.mark.jvm  # the page's commands start Spark
def test_getting_started_runs_as_written(tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), **SHORT_DRIVER_ENV)
    outputs = []
    for language, code in steps():
        command = ["bash", "-e", "-c", code] if language == "sh" else [sys.executable, "-c", code]
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{language} step failed:\n{code}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        outputs.append(result.stdout)
    _, written, verified, read = outputs
    assert re.search(r"\|\s*1\|\s*apple\|", written) and re.search(r"\|\s*2\|\s*pear\|", written), written[-2000:]
    assert "verified: True {'OK': 4}" in written, written[-2000:]   # what the page says it prints
    assert "OK: every file is encrypted, authentic and in its place" in verified, verified[-2000:]
    assert "{'id': 1, 'item': 'apple'}" in read and "{'id': 2, 'item': 'pear'}" in read, read

    table = tmp_path / "warehouse" / "shop.db" / "orders"
    files = [p for p in table.rglob("*") if p.is_file() and not p.name.endswith(".metadata.json")
             and not p.name.endswith(".crc")]
    assert {p.parent.name for p in files} == {"data", "metadata"}
    assert all(p.read_bytes()[:4] in ENCRYPTED_MAGICS for p in files), [(p.name, p.read_bytes()[:4]) for p in files]
    assert (tmp_path / "keys.json").stat().st_mode & 0o077 == 0
