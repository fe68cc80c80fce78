"""Step 5 of a verification: the report as people and programs read it.

    print(format_text(report))                 # the human summary
    write_report(report, sys.stdout, as_json=True)
    error_document("unreadable", "table metadata not found: ...")   # --json when no report exists

Paths, key ids and reasons can come from a hostile table: the text form escapes control
characters and terminal escapes (``\\xNN``); JSON escapes them as JSON does.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from pyiceberg_crypto.safe_text import escape_text
from pyiceberg_crypto.verify.report import KINDS, REPORT_VERSION, STATUSES, TableReport

__all__ = ["error_document", "format_text", "write_report"]


def error_document(kind: str, message: str) -> dict[str, Any]:
    """The ``--json`` document when no report could be made (usage error, unreadable input)."""
    return {"ok": False, "version": REPORT_VERSION, "error": {"type": kind, "message": message},
            "table": None, "summary": None, "files": []}


def write_report(report: TableReport, out: TextIO, *, as_json: bool) -> None:
    if as_json:
        json.dump(report.to_dict(), out, indent=2)
        out.write("\n")
    else:
        out.write(format_text(report))


def format_text(report: TableReport) -> str:
    """The human summary: table, scope, checks, counts by kind and status, which engines read the
    current snapshot, then each file not OK."""
    esc = escape_text
    lines = [f"table     {esc(report.table_location or '?')}",
             f"metadata  {esc(report.metadata_location)}",
             f"key id    {esc(repr(report.key_id))}   format-version {report.format_version}   "
             f"snapshots ({report.mode}) {', '.join(map(str, report.snapshot_ids)) or 'none'}"]
    if report.mode == "since":
        scope = report.scope
        lines.append(f"since     snapshot {scope.get('since_snapshot_id')} (sequence number "
                     f"{scope.get('after_sequence_number')}): {scope.get('manifests_skipped', 0)} manifest(s) and "
                     f"{scope.get('entries_skipped', 0)} entries verified by earlier runs, not read again")
    if report.ledger:
        advanced = "advanced" if report.ledger.get("advanced") else "not advanced"
        lines.append(f"ledger    {esc(report.ledger['path'])} ({advanced})")
    lines += ["", "table checks"]
    lines += [f"  {esc(c.status):<15} {esc(c.name):<20} {esc(c.detail)}" for c in report.checks]
    summary = report.summary()
    statuses = [s for s in STATUSES if s in summary["by_status"]]
    lines += ["", f"files ({summary['files']})"]
    lines.append("  " + f"{'kind':<22}" + "".join(f"{s:>16}" for s in statuses))
    for kind in KINDS:
        counts = summary["by_kind"].get(kind)
        if counts:
            lines.append("  " + f"{kind:<22}" + "".join(f"{counts.get(s, 0) or '':>16}" for s in statuses))
    if report.readable_by is not None:
        lines += ["", "readable by (current snapshot)"]
        for answer in report.readable_by:
            verdict = {True: "yes", False: "no", None: "unknown"}[answer["readable"]]
            how = {True: ": natively", False: ": falls back to Spark's scan", None: ""}[answer["native"]] \
                if "native" in answer and answer["readable"] is not False else ""
            lines.append(f"  {verdict:<8} {esc(answer['title'])} ({esc(answer['engine'])}){how}")
            lines += [f"  {'':<8}   {esc(reason)}" for reason in answer["reasons"]]
    bad = report.not_ok()
    if bad:
        lines += ["", f"not OK ({len(bad)})"]
        for f in bad:
            where = f" [{esc(f.location)}]" if f.location else ""
            lines.append(f"  {esc(f.status):<15} {esc(f.kind):<20} {esc(f.path)}{where}\n  {'':<15} {esc(f.detail)}")
    failed = report.failed_checks()
    if report.ok:
        verdict = ("OK: every file the newer snapshots added is encrypted, authentic and in its place"
                   if report.mode == "since" else "OK: every file is encrypted, authentic and in its place")
    else:
        verdict = f"FAILED: {len(bad)} file(s) and {len(failed)} table check(s) not OK"
    lines += ["", verdict, ""]
    return "\n".join(lines)
