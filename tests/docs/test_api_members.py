"""The API reference (``docs/reference/api/*.md``) documents exactly the public surface.

A page documents a module with a mkdocstrings block (``::: pyiceberg_crypto.kms``), often with a
hand-written ``members: [...]`` list. For each such list of a module that has ``__all__``:

- every listed name is in ``__all__`` (no stale name of something renamed or gone);
- every name of ``__all__`` is documented: in this list, or by another block of the API pages (the
  same object under another module, e.g. ``verify.Limits`` on the table page, or its own block).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api"
BLOCK = re.compile(r"^::: (\S+)[ \t]*\n((?:[ \t]+\S.*\n)*)", re.M)
MEMBERS = re.compile(r"^\s+members:\s*(\[.*\]|false|true)\s*$", re.M)


def blocks() -> list[tuple[str, str, list[str] | None]]:
    """(page, dotted target, its members list or None) of every block of the API pages."""
    found = []
    for page in sorted(API.glob("*.md")):
        for target, options in BLOCK.findall(page.read_text()):
            match = MEMBERS.search(options)
            members = None
            if match and match.group(1).startswith("["):
                members = [name.strip() for name in match.group(1)[1:-1].split(",") if name.strip()]
            elif match and match.group(1) == "false":
                members = []
            found.append((page.name, target, members))
    return found


def resolve(dotted: str):
    """The module or the attribute of a module a block names."""
    try:
        return importlib.import_module(dotted)
    except ImportError:
        module, _, attribute = dotted.rpartition(".")
        return getattr(importlib.import_module(module), attribute)


def documented_objects() -> set[int]:
    """ids of every object the API pages document."""
    out: set[int] = set()
    for _, target, members in blocks():
        obj = resolve(target)
        out.add(id(obj))
        if members is None and hasattr(obj, "__all__"):  # no list: the module's public names
            out.update(id(getattr(obj, name)) for name in obj.__all__)
        out.update(id(getattr(obj, name)) for name in members or () if hasattr(obj, name))  # stale: see below
    return out


LISTS = [(page, target, members) for page, target, members in blocks() if members]


def test_the_pages_have_members_lists():
    assert len(LISTS) >= 8 and {page for page, _, _ in LISTS} >= {"kms.md", "testing.md", "table.md", "verify.md"}


@pytest.mark.parametrize(("page", "target", "members"), LISTS, ids=[f"{p}:{t}" for p, t, _ in LISTS])
def test_a_members_list_matches_the_modules_all(page, target, members):
    module = resolve(target)
    public = getattr(module, "__all__", None)
    missing_attributes = [name for name in members if not hasattr(module, name)]
    assert not missing_attributes, f"{page} lists names {target} does not have: {missing_attributes}"
    if public is None:
        return
    stale = [name for name in members if name not in public]
    assert not stale, f"{page} lists names that are not in {target}.__all__: {stale}"
    documented = documented_objects()
    undocumented = [name for name in public if id(getattr(module, name)) not in documented]
    assert not undocumented, f"{target}.__all__ names missing from the API pages ({page}): {undocumented}"
