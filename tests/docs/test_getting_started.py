"""docs/getting-started.md has the steps it promises. The page itself runs as written, from the
built wheel in an empty directory, in the docs walk (tests/docs/test_docs_walk.py, chain ``lake``:
its printed lines, every table file encrypted, the keystore 0600)."""

from __future__ import annotations

from tests.docs.blocks import DOCS, blocks_of

PAGE = DOCS / "getting-started.md"


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
