"""Code cites measured facts from docs/explanation/facts.md (in the repository), by anchor; never
from a file outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "docs" / "explanation" / "facts.md"
SOURCES = [p for folder in ("pyiceberg_crypto", "jars/src", "tests", "bench")
           for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".java") and p != Path(__file__)]


def test_code_cites_no_file_outside_the_repository():
    citing = [str(p.relative_to(ROOT)) for p in SOURCES if "FINDINGS.md" in p.read_text(errors="replace")]
    assert not citing, f"cite docs/explanation/facts.md instead of FINDINGS.md: {citing}"


def test_every_cited_fact_exists():
    anchors = set(re.findall(r"\{ #([\w-]+) \}", FACTS.read_text()))
    cited = {(str(p.relative_to(ROOT)), anchor) for p in SOURCES
             for anchor in re.findall(r"facts\.md#([\w-]+)", p.read_text(errors="replace"))}
    assert len(cited) >= 2
    missing = sorted((path, anchor) for path, anchor in cited if anchor not in anchors)
    assert not missing, f"citations of facts.md anchors that do not exist: {missing}"
