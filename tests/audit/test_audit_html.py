"""The audit's page and textfile on reports of many tables (every state, hostile names): parsed
with ``html.parser``, and loaded in a real headless Chromium (Debian's package, over the DevTools
protocol) where it must raise no console error, sort and filter, and be photographed."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from html.parser import HTMLParser

import pytest

from pyiceberg_crypto.audit.lake import CatalogReport, TableAudit
from pyiceberg_crypto.audit.metrics import render_prometheus
from tests.audit.browser import Chromium, find_chromium, installable_here
from tests.audit.test_audit import PageParser, assert_valid

HOSTILE = '<img src=x onerror="window.__pwned=1">"\'&'


def kek(key_id: str, age: float) -> dict:
    return {"key_id": key_id, "master_key_id": "orders-key", "master_key_version": "1",
            "current_master_key_version": "2", "created": "2024-01-01T00:00:00+00:00", "age_days": age,
            "rotation_due": age >= 730, "outdated": True, "in_use": True, "snapshots": 1, "note": None}


def synthetic_report(tables: int) -> CatalogReport:
    """``tables`` tables cycling through every state, with findings, KEKs of many ages, a hostile name."""
    entries = []
    for i in range(tables):
        kind = i % 6
        name = f"sales.orders_{i:04d}" if i else f"sales.{HOSTILE}"
        entry = TableAudit(name, key_id="orders-key", encrypted=True, format_version=3, mode="current",
                           metadata_location=f"s3://lake/wh/sales/orders_{i}/metadata/00001-x.metadata.json",
                           table_type="ICEBERG", files=10 + i % 7, snapshot_ids=[i + 1])
        entry.keks = [kek(f"kek-{i}", float((i * 37) % 900))]
        if kind in (0, 1, 2):
            entry.state, entry.by_status = "OK", {"OK": entry.files}
        elif kind == 3:
            entry.state, entry.reason, entry.detail = "FAILED", "TAMPERED", f"data file tampered {HOSTILE}"
            entry.by_status = {"OK": entry.files - 2, "TAMPERED": 2}
            entry.findings = [{"path": f"s3://lake/wh/sales/orders_{i}/data/{j}.parquet", "kind": "data",
                               "status": "TAMPERED", "detail": "block 3 does not authenticate", "entries": 1,
                               "snapshot_ids": [i + 1], "location": "block 3"} for j in range(2)]
            entry.prunable_keks = ["old-kek"]
        elif kind == 4:
            entry.state, entry.reason, entry.detail = "UNCHECKED", "KEY_ERROR", "KEK kek: the KMS refused the key"
            entry.by_status = {"KEY_ERROR": 1}
        else:
            entry.state, entry.reason, entry.detail = "UNENCRYPTED", "PLAINTEXT", "no encryption.key-id"
            entry.encrypted, entry.key_id, entry.keks, entry.format_version = False, None, [], 2
            entry.by_status = {"PLAINTEXT": entry.files}
        entries.append(entry)
    entries.append(TableAudit("sales.hive_table", iceberg=False, state="SKIPPED", table_type="EXTERNAL_TABLE",
                              detail="not an Iceberg table: not checked"))
    return CatalogReport("lake", tables=sorted(entries, key=lambda t: t.table), metastore="thrift://hms:9083",
                         warehouse="s3://lake/wh", started_at="2026-11-26T02:00:00+00:00",
                         finished_at="2026-11-26T02:04:10+00:00", run={"where": "local"},
                         timings={"total": 250.0})


def test_the_page_is_self_contained_escaped_and_small(tmp_path):
    assert_valid(synthetic_report(30).to_dict())
    report = synthetic_report(1000)
    path = tmp_path / "audit.html"
    report.write_html(str(path))
    text = path.read_text()
    parsed = PageParser()
    parsed.feed(text)
    assert parsed.external == []  # no script, style, image or link from elsewhere
    assert parsed.rows == 1001
    assert HOSTILE not in text and "&lt;img src=x onerror=" in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert len(text.encode()) < 1_500_000, len(text.encode())  # a few hundred KB for 1,000 tables
    counts = Tags()
    counts.feed(text)
    assert counts.tags["svg"] == 2 and counts.tags["details"] == 1001 and counts.tags["script"] == 1


def _policy(page: str) -> dict[str, str]:
    match = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert match, "no Content-Security-Policy"
    return {d.split()[0]: d.strip() for d in match.group(1).split(";") if d.strip()}


def test_the_csp_allows_the_one_script_by_its_hash_not_unsafe_inline(tmp_path):
    """Issue 39: an escape missed once would have run as script under 'unsafe-inline'."""
    path = tmp_path / "audit.html"
    synthetic_report(12).write_html(str(path))
    page = path.read_text(encoding="utf-8")
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1 and scripts[0].strip()
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
    policy = _policy(page)
    assert policy["script-src"] == f"script-src 'sha256-{digest}'"
    assert policy["default-src"] == "default-src 'none'" and "unsafe" not in policy["script-src"]


def test_the_textfile_has_a_gauge_per_table_and_escapes_labels():
    report = synthetic_report(12)
    text = render_prometheus(report.to_dict())
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    sample = re.compile(r'^pyiceberg_crypto_audit_[a-z_]+\{(?:[a-z_]+="(?:[^"\\]|\\.)*",?)+\} -?[0-9.e+]+$')
    assert all(sample.match(line) for line in lines), [line for line in lines if not sample.match(line)]
    assert len([line for line in lines if line.startswith("pyiceberg_crypto_audit_table_ok{")]) == 12
    assert 'pyiceberg_crypto_audit_table_ok{catalog="lake",table="sales.orders_0003"} 0.0' in text
    assert 'pyiceberg_crypto_audit_table_ok{catalog="lake",table="sales.orders_0001"} 1.0' in text
    assert 'table="sales.<img src=x onerror=\\"window.__pwned=1\\">\\"\'&"' in text
    assert 'pyiceberg_crypto_audit_ok{catalog="lake"} 0.0' in text
    assert 'pyiceberg_crypto_audit_tables{catalog="lake",state="SKIPPED"} 1.0' in text
    assert "# TYPE pyiceberg_crypto_audit_table_kek_oldest_age_days gauge" in text


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1


@pytest.fixture(scope="module")
def chromium():
    executable = find_chromium()
    if executable is None:
        if installable_here():
            pytest.fail("Chromium is missing on a machine that can install it: run `make system-packages` "
                        "(Debian package chromium)")
        pytest.skip("no Chromium (Debian package chromium; `make system-packages` installs it as root)")
    return executable


@pytest.mark.system_packages
def test_the_page_in_headless_chromium(chromium, tmp_path):
    report = synthetic_report(60)
    path = tmp_path / "audit.html"
    report.write_html(str(path))
    with Chromium.start(tmp_path / "profile", chromium) as browser:
        page = browser.open(path.as_uri())
        assert page.evaluate("document.title") == "Encryption audit of catalog lake"
        assert page.evaluate("window.__pwned === undefined")  # the hostile table name stayed text
        name = "getComputedStyle(document.querySelector('#audit-table code.name'))"
        assert page.evaluate(f"[{name}.wordBreak, {name}.overflowWrap]") == ["normal", "normal"]  # at dots only
        rows = "Array.from(document.querySelectorAll('#audit-table > tbody:not([hidden])'))"
        names = f"{rows}.map(b => b.rows[0].cells[0].getAttribute('data-value'))"
        assert page.evaluate(f"{rows}.length") == 61
        assert page.evaluate("document.getElementById('shown').textContent") == "61 of 61 tables shown"

        column = "Array.from(document.querySelectorAll('#audit-table th')).findIndex(h => h.dataset.key === '{}')"
        click = "document.querySelectorAll('#audit-table th button')[{}].click()"
        age = page.evaluate(column.format("kek_age"))
        ages = f"{rows}.map(b => b.rows[0].cells[{age}].getAttribute('data-value'))"
        page.evaluate(click.format(age))
        ascending = [float(v) if v else None for v in page.evaluate(ages)]
        known = [v for v in ascending if v is not None]
        assert known == sorted(known) and ascending[:ascending.count(None)] == [None] * ascending.count(None)
        page.evaluate(click.format(age))
        descending = [float(v) for v in page.evaluate(ages) if v]
        assert descending == sorted(descending, reverse=True) and descending[0] == max(known)
        assert page.evaluate(f"document.querySelectorAll('#audit-table th')[{age}].getAttribute('aria-sort')") == "descending"
        page.evaluate(click.format(page.evaluate(column.format("table"))))
        assert page.evaluate(names) == sorted(t.table for t in report.tables)

        def type_filter(text: str) -> None:
            page.evaluate(f"(() => {{ const f = document.getElementById('filter'); f.value = {text!r}; "
                          "f.dispatchEvent(new Event('input')); })()")

        type_filter("orders_001")
        assert page.evaluate(names) == [f"sales.orders_{i:04d}" for i in range(10, 20)]
        type_filter("key_error")  # the reason column
        assert len(page.evaluate(names)) == sum(1 for t in report.tables if t.reason == "KEY_ERROR") > 0
        type_filter("")
        page.evaluate("(() => { const s = document.getElementById('state-filter'); s.value = 'FAILED'; "
                      "s.dispatchEvent(new Event('change')); })()")
        failed = sorted(t.table for t in report.tables if t.state == "FAILED")
        assert page.evaluate(names) == failed
        assert page.evaluate("document.getElementById('shown').textContent") == f"{len(failed)} of 61 tables shown"

        assert page.evaluate("document.querySelectorAll('details[open]').length") == 0
        page.evaluate("document.getElementById('expand-all').click()")
        assert page.evaluate("document.querySelectorAll('details[open]').length") == 61
        shot = page.screenshot(tmp_path / "audit-page.png")
        assert page.errors == []
        # The CSP is enforced: a script injected into the page does not run, the page's own does.
        injected = tmp_path / "injected.html"
        injected.write_text(path.read_text(encoding="utf-8").replace(
            "</body>", "<script>window.__injected = 1</script></body>"), encoding="utf-8")
        other = browser.open(injected.as_uri())
        assert other.evaluate("window.__injected === undefined")
        other.evaluate("document.getElementById('expand-all').click()")
        assert other.evaluate("document.querySelectorAll('details[open]').length") == 61
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot of the audit page: {shot}")
    assert os.path.getsize(path) > 0


def test_table_names_wrap_at_their_dots_never_inside_a_word():
    """Issue 41: long names broke mid-word (the names' <code> had word-break: break-all)."""
    from pyiceberg_crypto.audit.html import STYLE, render_html

    page = render_html(synthetic_report(3).to_dict())
    assert '<code class="name">sales.<wbr>orders_0001</code>' in page
    assert "code.name{word-break:normal;overflow-wrap:normal" in STYLE.replace(" ", "")
    hostile = render_html(CatalogReport("lake", tables=[TableAudit(f"a.b.{HOSTILE}", state="OK")]).to_dict())
    assert "a.<wbr>b.<wbr>&lt;img src=x onerror=" in hostile and HOSTILE not in hostile  # still escaped


def test_incremental_rows_say_what_this_run_verified_and_what_so_far():
    """Issue 41: an OK table with no new commit showed "Files 0" on an incremental run."""
    from pyiceberg_crypto.audit.html import render_html

    def row(state_dir, full=False, files_verified=120):
        entry = TableAudit("sales.orders", key_id="orders-key", encrypted=True, state="OK", files=0)
        entry.last_verified = {"snapshot_id": 7, "verified_at": "2026-11-26T02:00:00+00:00",
                               "ledger": "/ledgers/sales.orders.ledger.json", "advanced": True,
                               "files_verified": files_verified}
        report = CatalogReport("lake", tables=[entry], state_dir=state_dir, full=full)
        doc = report.to_dict()
        assert_valid(doc)
        cell = re.search(r'<td class="num" data-value="0">([^<]*)</td>', render_html(doc))
        assert cell, "no Files cell"
        return cell.group(1)

    assert row("/ledgers") == "0 this run, 120 so far"
    assert row("/ledgers", files_verified=None) == "0 this run"  # a ledger written before the count was kept
    assert row(None) == "0" and row("/ledgers", full=True) == "0"  # not incremental: the files checked
