"""The fenced code blocks of the documentation (``README.md`` and ``docs/**/*.md``), as data.

A block that cannot be checked says so on the line right before its fence, with a reason::

    <!-- not-checked: needs a Spark distribution's spark-sql; tests/serve runs it -->
    ```sh
    spark-sql <conf> -e "..."
    ```

The docs walk (``tests/docs/test_docs_walk.py``) runs the getting-started and how-to pages' ``sh``
and ``python`` blocks in order; a block it does not run (a checked block, or one opted out above)
says so the same way: ``<!-- not-run: REASON -->``. A page the walk does not run says why in a
page marker anywhere on the page: ``<!-- not-walked: REASON -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OPT_OUT = re.compile(r"^\s*<!--\s*not-checked:(.*?)-->\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(.*?)-->\s*$")
NOT_WALKED = re.compile(r"^\s*<!--\s*not-walked:(.*?)-->\s*$", re.M)
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    file: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    opt_out: str | None  # the reason given, or None when the block is checked
    not_run: str | None = None  # why the docs walk does not run it, or None

    @property
    def runs(self) -> bool:
        """Whether the docs walk runs it: a sh or python block, checked, not marked not-run."""
        return self.language in ("sh", "python") and self.opt_out is None and self.not_run is None

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def documentation_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


GENERATED = re.compile(r"<!-- generated: (\w[\w-]*)[^>]*-->\n.*?<!-- end generated: \1 -->", re.S)


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of ``path``, with its indentation removed (blocks inside list items).
    Sections generated from the code into the file (``<!-- generated: NAME ... -->`` to
    ``<!-- end generated: NAME -->``, the CLI reference) are not documentation blocks: a test
    compares them with what the code generates (tests/docs/test_generated_pages.py)."""
    text = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        marker = OPT_OUT.match(lines[i - 1]) if i > 0 else None
        not_run = NOT_RUN.match(lines[i - 1]) if i > 0 else None
        body = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path}:{i + 1}: a code fence that is never closed")
        out.append(Block(path, i + 1, language.lower(), "\n".join(body) + "\n",
                         marker.group(1).strip() if marker else None,
                         not_run.group(1).strip() if not_run else None))
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [block for path in documentation_files() for block in blocks_of(path)]


def opt_out_markers() -> list[tuple[Path, int, str, bool]]:
    """``(file, line, reason, followed_by_a_fence)`` of every opt-out marker."""
    found = []
    for path in documentation_files():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            marker = OPT_OUT.match(line)
            if marker:
                follows = number + 1 < len(lines) and bool(FENCE.match(lines[number + 1]))
                found.append((path, number + 1, marker.group(1).strip(), follows))
    return found


def python_block_after(path: Path, heading: str) -> str:
    """The first ``python`` block after the Markdown heading ``heading`` (any level) in ``path``."""
    text = path.read_text()
    match = re.search(rf"^#+ {re.escape(heading)}\s*$.*?^```python\n(.*?)^```", text, re.S | re.M)
    if match is None:
        raise AssertionError(f"no python block after the heading {heading!r} in {path}")
    return match.group(1)


def not_walked(path: Path) -> str | None:
    """The reason a page gives for the docs walk not running it, or None."""
    match = NOT_WALKED.search(path.read_text())
    return match.group(1).strip() if match else None
