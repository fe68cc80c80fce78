"""The catalog audit as one self-contained HTML page: what a security officer opens in the morning::

    report.write_html("lake-audit.html")
    page = render_html(report.to_dict())

The page works offline and loads nothing: styles and script are inline, the charts are inline SVG,
and its Content-Security-Policy forbids any other source and any other script: it allows the
page's one inline script by its SHA-256 (:func:`content_security_policy`), never
``'unsafe-inline'``. It holds the verdict and summary counts, a chart of the files by status and
one of the KEK age per table (Iceberg's 730-day rotation marked), then the table of tables: sortable (click a column), filterable (text and state), each
table's findings, failed checks and KEKs in an expandable row. Without JavaScript it is still
the whole report, unsorted. Every name and reason comes from the tables and is escaped.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.safe_text import escape_text
from pyiceberg_crypto.table.statuses import OK, STATUSES

__all__ = [ "render_html"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AuditDocumentError": InvalidArgumentError})

#: Findings shown per table on the page (the JSON document lists more; the counts cover all).
MAX_FINDINGS_SHOWN = 50
#: With at most this many tables the KEK chart has a bar per table, else a histogram of ages.
MAX_TABLE_BARS = 40

STATE_ORDER = ("OK", "FAILED", "UNENCRYPTED", "UNCHECKED", "SKIPPED")
STATE_COLOUR = {"OK": "#1a7f37", "FAILED": "#cf222e", "UNENCRYPTED": "#bc4c00", "UNCHECKED": "#8250df",
                "SKIPPED": "#6e7781"}
GOOD, WARNING, BAD = "#1a7f37", "#bf8700", "#cf222e"

def content_security_policy(script: str) -> str:
    """The page's policy: nothing loaded from anywhere, inline styles (the badges' colours), and the
    one inline ``script`` allowed by its SHA-256, so an injected ``<script>`` or event handler would
    not run even if an escape were missed::

        content_security_policy("1")  # "... script-src 'sha256-a4ay...'; ..."
    """
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:"

STYLE = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
header,main{max-width:1280px;margin:0 auto;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:24px 0 8px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eff1f3;padding:1px 4px;border-radius:4px;word-break:break-all}
.verdict{font-size:16px;font-weight:600;padding:10px 14px;border-radius:6px;color:#fff;display:inline-block}
.verdict.ok{background:#1a7f37}.verdict.bad{background:#cf222e}
.meta{color:#59636e;margin:6px 0}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #d1d9e0;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:22px}.card span{color:#59636e;font-size:12px}
.card.alert b{color:#cf222e}
.charts{display:flex;flex-wrap:wrap;gap:16px}
.chart{background:#fff;border:1px solid #d1d9e0;border-radius:6px;padding:8px 12px;flex:1 1 520px}
.chart h3{font-size:14px;margin:4px 0 8px}
svg text{font:11px system-ui,sans-serif;fill:#1f2328}
.controls{display:flex;gap:10px;align-items:center;margin:8px 0;flex-wrap:wrap}
.controls input{flex:1 1 320px;padding:6px 10px;border:1px solid #d1d9e0;border-radius:6px;font:inherit}
.controls select{padding:6px;border:1px solid #d1d9e0;border-radius:6px;font:inherit}
table.audit{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d1d9e0}
table.audit th{position:sticky;top:0;background:#eff1f3;text-align:left;border-bottom:1px solid #d1d9e0;padding:0}
table.audit th button{all:unset;cursor:pointer;display:block;padding:6px 8px;font-weight:600;width:100%}
table.audit th[aria-sort=ascending] button::after{content:" \\25B2"}
table.audit th[aria-sort=descending] button::after{content:" \\25BC"}
table.audit td{padding:5px 8px;border-top:1px solid #eff1f3;vertical-align:top}
table.audit td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.detail td{border-top:none;padding-top:0}
details summary{cursor:pointer;color:#0969da}
details ul{margin:4px 0 8px;padding-left:20px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600}
.status{font-weight:600}.status.bad{color:#cf222e}.status.warn{color:#9a6700}
.muted{color:#59636e}
code.name{word-break:normal;overflow-wrap:normal;white-space:normal}
[hidden]{display:none!important}
table.keks{border-collapse:collapse;margin:4px 0}table.keks td,table.keks th{padding:2px 8px;border:1px solid #eff1f3;font-size:12px}
footer{color:#59636e;font-size:12px;max-width:1280px;margin:0 auto;padding:16px 24px}
"""

SCRIPT = """
(function () {
  "use strict";
  var table = document.getElementById("audit-table");
  var filter = document.getElementById("filter");
  var state = document.getElementById("state-filter");
  var shown = document.getElementById("shown");
  function bodies() { return Array.prototype.slice.call(table.tBodies); }
  function apply() {
    var query = filter.value.trim().toLowerCase(), wanted = state.value, count = 0;
    bodies().forEach(function (body) {
      var hit = (!query || body.getAttribute("data-search").indexOf(query) >= 0) &&
                (!wanted || body.getAttribute("data-state") === wanted);
      body.hidden = !hit;
      if (hit) { count += 1; }
    });
    shown.textContent = count + " of " + bodies().length + " tables shown";
  }
  filter.addEventListener("input", apply);
  state.addEventListener("change", apply);
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (head, column) {
    var button = head.querySelector("button");
    if (!button) { return; }
    button.addEventListener("click", function () {
      var ascending = head.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(heads, function (other) { other.removeAttribute("aria-sort"); });
      head.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = head.getAttribute("data-type") === "number";
      var rows = bodies().map(function (body, index) {
        var raw = body.rows[0].cells[column].getAttribute("data-value") || "";
        var value = numeric ? (raw === "" ? -Infinity : parseFloat(raw)) : raw.toLowerCase();
        return {body: body, value: value, index: index};
      });
      rows.sort(function (a, b) {
        var order = a.value < b.value ? -1 : (a.value > b.value ? 1 : 0);
        return (ascending ? order : -order) || a.index - b.index;
      });
      rows.forEach(function (row) { table.appendChild(row.body); });
    });
  });
  document.getElementById("expand-all").addEventListener("click", function () {
    var open = this.getAttribute("aria-pressed") !== "true";
    this.setAttribute("aria-pressed", open ? "true" : "false");
    this.textContent = open ? "Collapse all" : "Expand all";
    Array.prototype.forEach.call(table.querySelectorAll("details"), function (d) { d.open = open; });
  });
  apply();
})();
"""

#: (heading, key into the row's values, numeric)
COLUMNS = (("Table", "table", False), ("State", "state", False), ("Encrypted", "encrypted", False),
           ("Key id", "key_id", False), ("Files", "files", True), ("Not OK", "not_ok", True),
           ("Oldest KEK (days)", "kek_age", True), ("Prunable KEKs", "prunable", True),
           ("Readable by", "readable_by", False), ("Last verified", "last_verified", False), ("Reason", "reason", False))


def _e(value: Any) -> str:
    """Text from the tables (names, reasons, paths) as HTML: unsafe characters (lone surrogates,
    controls, bidi overrides) written as escapes first (:func:`~pyiceberg_crypto.safe_text.escape_text`)."""
    return escape("" if value is None else escape_text(value), quote=True)


#: The top-level fields of an audit report document the page reads.
_REQUIRED_KEYS = ("summary", "ok", "tables")


def render_html(doc: dict[str, Any]) -> str:
    """The page of a :meth:`~pyiceberg_crypto.audit.lake.CatalogReport.to_dict` document;
    :class:`InvalidArgumentError` (a ValueError) for a mapping that is not one."""
    missing = [key for key in _REQUIRED_KEYS if not isinstance(doc, dict) or key not in doc]
    if missing:
        raise InvalidArgumentError(f"not an audit report document (CatalogReport.to_dict()): no {', '.join(missing)}")
    summary = doc["summary"]
    ok = doc["ok"]
    catalog = doc.get("catalog") or "?"
    not_ok = summary["iceberg_tables"] - summary["ok"]
    verdict = ("Every Iceberg table is encrypted and verified" if ok else
               f"No audit could be made: {doc['error']}" if doc.get("error") else
               f"{not_ok} of {summary['iceberg_tables']} Iceberg tables are not encrypted and verified"
               + (f", and {summary['unlisted']} table(s) or namespace(s) could not be listed or loaded"
                  if summary.get("unlisted") else ""))
    scope = ", ".join(doc["namespaces"]) if doc.get("namespaces") else "every namespace"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy(SCRIPT)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>Encryption audit of catalog {_e(catalog)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<header>",
        f"<h1>Encryption audit of catalog <code>{_e(catalog)}</code></h1>",
        f'<p><span class="verdict {"ok" if ok else "bad"}" id="verdict">{_e(verdict)}</span></p>',
        f'<p class="meta">Finished {_e(doc.get("finished_at"))} (started {_e(doc.get("started_at"))}, '
        f'{_e(doc.get("timings", {}).get("total"))} s) &middot; {_e(scope)} &middot; '
        f'{"every snapshot (full)" if doc.get("full") else "incremental from the ledgers" if doc.get("state_dir") else "current snapshots"}'
        + (f' &middot; metastore <code>{_e(doc["metastore"])}</code>' if doc.get("metastore") else "")
        + (f' &middot; warehouse <code>{_e(doc["warehouse"])}</code>' if doc.get("warehouse") else "")
        + "</p>",
        "</header><main>",
        _cards(summary),
        '<h2>Charts</h2><div class="charts">',
        f'<div class="chart"><h3>Files by status</h3>{_files_chart(summary["files_by_status"])}</div>',
        f'<div class="chart"><h3>KEK age per table (oldest KEK; rotation at {doc.get("kek_rotation_days", 730)} days)'
        f'</h3>{_kek_chart(doc["tables"], doc.get("kek_rotation_days", 730))}</div>',
        "</div>",
        '<h2>Tables</h2><div class="controls">',
        '<input id="filter" type="search" placeholder="Filter by table, key id, state or reason" aria-label="Filter tables">',
        '<select id="state-filter" aria-label="State"><option value="">every state</option>'
        + "".join(f'<option value="{s}">{s}</option>' for s in STATE_ORDER if summary["by_state"].get(s))
        + "</select>",
        '<button type="button" id="expand-all" aria-pressed="false">Expand all</button>',
        f'<span id="shown" class="muted">{len(doc["tables"])} tables</span></div>',
        '<table class="audit" id="audit-table"><thead><tr>'
        + "".join(f'<th scope="col" data-key="{key}" data-type="{"number" if numeric else "text"}">'
                  f'<button type="button">{_e(title)}</button></th>' for title, key, numeric in COLUMNS)
        + "</tr></thead>",
    ]
    incremental = bool(doc.get("state_dir")) and not doc.get("full")
    parts += [_table_rows(index, table, incremental) for index, table in enumerate(doc["tables"])]
    parts += ["</table>", "</main>",
              f'<footer>pyiceberg-crypto audit, report version {_e(doc.get("version"))}. The JSON report '
              "(<code>--json</code>) holds the same data; its schema is in the documentation.</footer>",
              f"<script>{SCRIPT}</script></body></html>", ""]
    return "\n".join(parts)


def _cards(summary: dict[str, Any]) -> str:
    states = summary["by_state"]
    not_ok_files = sum(n for s, n in summary["files_by_status"].items() if s != OK)
    cards = [("Tables", summary["tables"], False), ("Iceberg tables", summary["iceberg_tables"], False),
             ("Encrypted", summary["encrypted"], False), ("OK", states.get("OK", 0), False),
             ("Failed", states.get("FAILED", 0), True), ("Not encrypted", states.get("UNENCRYPTED", 0), True),
             ("Not checked", states.get("UNCHECKED", 0), True), ("Not Iceberg (skipped)", states.get("SKIPPED", 0), False),
             ("Files checked", summary["files"], False), ("Files not OK", not_ok_files, True),
             ("KEKs", summary["keks"], False), ("KEKs due for rotation", summary["keks_rotation_due"], True),
             ("Tables on a compromised key", summary.get("compromised_tables", 0), True),
             ("KEKs prune would remove", summary["prunable_keks"], False),
             ("Plaintext statistics files", summary["plaintext_statistics"], True),
             ("Declared reader cannot read", summary.get("declared_reader_blocked", 0), True)]
    return ('<section class="cards" id="summary">'
            + "".join(f'<div class="card{" alert" if alert and value else ""}"><b>{value}</b><span>{_e(label)}</span></div>'
                      for label, value, alert in cards)
            + "</section>")


def _bar_chart(bars: list[tuple[str, float, str, str]], unit: str, marker: float | None = None,
               marker_label: str = "") -> str:
    """Horizontal bars: (label, value, colour, tooltip); an optional vertical marker at ``marker``."""
    if not bars:
        return '<p class="muted">nothing to show</p>'
    label_width, width, row = 170, 560, 20
    top = max([v for _, v, _, _ in bars] + ([marker * 1.1] if marker else []) + [1])
    plot = width - label_width - 60
    height = row * len(bars) + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
           f'aria-label="{_e(unit)}">']
    for i, (label, value, colour, tip) in enumerate(bars):
        y = 4 + i * row
        w = max(1.0, plot * value / top) if value else 0
        short = label if len(label) <= 26 else label[:25] + "\u2026"
        out.append(f'<g><title>{_e(tip)}</title><text x="{label_width - 6}" y="{y + 13}" text-anchor="end">{_e(short)}</text>'
                   f'<rect x="{label_width}" y="{y + 2}" width="{w:.1f}" height="{row - 6}" fill="{colour}" rx="2"/>'
                   f'<text x="{label_width + w + 4:.1f}" y="{y + 13}">{_e(_fmt(value))}</text></g>')
    if marker:
        x = label_width + plot * marker / top
        out.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 16}" stroke="{BAD}" stroke-dasharray="4 3"/>'
                   f'<text x="{x:.1f}" y="{height - 4}" text-anchor="middle" fill="{BAD}">{_e(marker_label)}</text>')
    out.append(f'<text x="{label_width}" y="{height - 4}" class="muted">{_e(unit)}</text></svg>')
    return "".join(out)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() or value >= 10 else f"{value:.1f}"


def _files_chart(by_status: dict[str, int]) -> str:
    bars = [(status, count, GOOD if status == OK else BAD, f"{count} file(s) {status}")
            for status, count in sorted(by_status.items(), key=lambda kv: STATUSES.index(kv[0])
                                        if kv[0] in STATUSES else len(STATUSES))]
    return _bar_chart(bars, "files")


def _kek_chart(tables: list[dict[str, Any]], rotation_days: int) -> str:
    aged = [(t["table"], t["oldest_kek_days"]) for t in tables if t.get("oldest_kek_days") is not None]
    if len(aged) <= MAX_TABLE_BARS:
        bars = [(name, age, BAD if age >= rotation_days else WARNING if age >= rotation_days * 0.9 else GOOD,
                 f"{name}: oldest KEK {age:.1f} days") for name, age in sorted(aged, key=lambda a: -a[1])]
        return _bar_chart(bars, "days", rotation_days, f"{rotation_days} d")
    step = rotation_days / 10  # ten buckets up to the rotation age, then one past it
    counts = [0] * 11
    for _, age in aged:
        counts[min(int(age // step), 10)] += 1
    bars = []
    for bucket, count in enumerate(counts):
        label = (f"{rotation_days}+ days" if bucket == 10
                 else f"{bucket * step:.0f}-{(bucket + 1) * step:.0f} days")
        bars.append((label, count, BAD if bucket == 10 else GOOD, f"{count} table(s) whose oldest KEK is {label} old"))
    return _bar_chart(bars, "tables")


def wrap_at_dots(name: str) -> str:
    """A dotted name as HTML that may break after its dots only, never inside a word::

        wrap_at_dots("sales.orders")  # 'sales.<wbr>orders'
    """
    return ".<wbr>".join(_e(part) for part in str(name).split("."))


def files_text(this_run: int, so_far: int | None) -> str:
    """The Files cell of an incremental run: what this run verified and, when the ledger knows it, so far::

        files_text(0, 120)  # '0 this run, 120 so far'
    """
    return f"{this_run} this run" + ("" if so_far is None else f", {so_far} so far")


def readable_by_text(answers: list[dict[str, Any]] | None) -> str:
    """The engines that read the current snapshot, ``spark, jvm-free (not trino)``; empty when unknown.

    >>> readable_by_text([{"engine": "spark", "readable": True}, {"engine": "trino", "readable": False}])
    'spark (not trino)'
    >>> readable_by_text([{"engine": "spark", "readable": True},
    ...                   {"engine": "comet", "readable": True, "native": False}])
    'spark; comet falls back to Spark'

    An accelerator (an answer with ``native``: comet) follows, as natively or falling back.
    """
    if not answers:
        return ""
    engines = [a for a in answers if "native" not in a]
    yes = [a["engine"] for a in engines if a.get("readable") is True]
    no = [a["engine"] for a in engines if a.get("readable") is False]
    unknown = [a["engine"] for a in engines if a.get("readable") is None]
    text = ", ".join(yes) or "none"
    if no:
        text += f" (not {', '.join(no)})"
    if unknown:
        text += f" (unknown: {', '.join(unknown)})"
    for a in answers:
        if "native" in a and a.get("readable") is not False:
            text += f"; {a['engine']} " + {True: "native", False: "falls back to Spark", None: "native unknown"}[a["native"]]
    return text


def _table_rows(index: int, t: dict[str, Any], incremental: bool = False) -> str:
    not_ok = t.get("findings_total", 0)
    verified = t.get("last_verified") or {}
    values = {"table": t["table"], "state": t["state"], "encrypted": "yes" if t["encrypted"] else "no",
              "key_id": t.get("key_id") or "", "files": t["files"], "not_ok": not_ok,
              "kek_age": "" if t.get("oldest_kek_days") is None else t["oldest_kek_days"],
              "prunable": len(t["prunable_keks"]), "last_verified": verified.get("verified_at") or "",
              "readable_by": readable_by_text(t.get("readable_by")), "reason": t.get("reason") or ""}
    search = " ".join(str(v) for v in (t["table"], t["state"], t.get("key_id"), t.get("reason"), t.get("detail")) if v)
    colour = STATE_COLOUR.get(t["state"], "#6e7781")
    cells = []
    for _, key, numeric in COLUMNS:
        value = values[key]
        shown: str
        if key == "state":
            shown = f'<span class="badge" style="background:{colour}">{_e(value)}</span>'
        elif key == "table":
            shown = f'<code class="name">{wrap_at_dots(value)}</code>'
        elif key == "files" and incremental:
            shown = _e(files_text(value, verified.get("files_verified")))
        elif key == "kek_age":
            rotation = " (rotation due)" if t.get("rotation_due") else ""
            shown = _e(f"{value:.1f}{rotation}" if value != "" else "")
        elif key == "readable_by" and t.get("declared_reader_blocked"):
            shown = _e(value) + ' <span class="status warn">declared reader blocked</span>'
        elif key == "last_verified" and verified:
            shown = _e(f"{value} (snapshot {verified.get('snapshot_id')})")
        else:
            shown = _e(value)
        cls = ' class="num"' if numeric else ""
        cells.append(f'<td{cls} data-value="{_e(value)}">{shown}</td>')
    return (f'<tbody data-state="{_e(t["state"])}" data-search="{_e(search.lower())}" id="table-{index}">'
            f'<tr class="main">{"".join(cells)}</tr>'
            f'<tr class="detail"><td colspan="{len(COLUMNS)}">{_details(t)}</td></tr></tbody>')


#: The KEK table's mark for a KEK wrapped by a compromised master key version.
LEAKED = '<span class="status bad">YES</span>'


def _details(t: dict[str, Any]) -> str:
    findings = t.get("findings") or []
    checks = t.get("checks") or []
    count = t.get("findings_total", 0) + sum(1 for c in checks if c["status"] != "WARN")
    out = [f"<details><summary>Details: {count} finding(s), {len(t['keks'])} KEK(s)</summary>"]
    if t.get("detail"):
        out.append(f"<p>{_e(t.get('reason') or '')} {_e(t['detail'])}</p>")
    if t.get("next_step"):
        out.append(f'<p class="next">Next step: <code>{_e(t["next_step"])}</code></p>')
    facts = [("metadata", t.get("metadata_location")), ("location", t.get("table_location")),
             ("format-version", t.get("format_version")), ("mode", t.get("mode")),
             ("snapshots", ", ".join(map(str, t.get("snapshot_ids") or [])) or None)]
    out.append("<p class=\"muted\">" + " &middot; ".join(f"{name} <code>{_e(v)}</code>" for name, v in facts if v is not None)
               + "</p>")
    if checks:
        out.append("<p>Table checks not OK:</p><ul>" + "".join(
            f'<li><span class="status {"warn" if c["status"] == "WARN" else "bad"}">{_e(c["status"])}</span> '
            f"{_e(c['name'])}: {_e(c['detail'])}</li>" for c in checks) + "</ul>")
    if findings:
        shown = findings[:MAX_FINDINGS_SHOWN]
        out.append(f"<p>Files not OK ({t.get('findings_total', len(findings))}):</p><ul>" + "".join(
            f'<li><span class="status bad">{_e(f["status"])}</span> {_e(f["kind"])} <code>{_e(f["path"])}</code>'
            + (f" [{_e(f['location'])}]" if f.get("location") else "") + f"<br>{_e(f['detail'])}</li>" for f in shown)
            + "</ul>")
        hidden = t.get("findings_total", len(findings)) - len(shown)
        if hidden > 0:
            out.append(f'<p class="muted">{hidden} more in the JSON report.</p>')
    unreadable = [a for a in t.get("readable_by") or [] if a.get("readable") is not True]
    if unreadable:
        out.append("<p>Engines that cannot read the current snapshot (or not known):</p><ul>" + "".join(
            f"<li>{_e(a['title'])}: {_e('; '.join(a.get('reasons') or []))}</li>" for a in unreadable) + "</ul>")
    if t.get("plaintext_statistics"):
        out.append("<p>Plaintext statistics files:</p><ul>" + "".join(
            f"<li><code>{_e(p)}</code></li>" for p in t["plaintext_statistics"]) + "</ul>")
    if t["keks"]:
        out.append('<table class="keks"><tr><th>KEK</th><th>master key</th><th>version (current)</th><th>created</th>'
                   "<th>age (days)</th><th>rotation due</th><th>in use</th><th>prune removes</th><th>compromised</th></tr>")
        prunable = set(t.get("prunable_keks") or [])
        for k in t["keks"]:
            version = k.get("master_key_version") or "?"
            current = k.get("current_master_key_version")
            out.append(f"<tr><td><code>{_e(k['key_id'])}</code></td><td>{_e(k.get('master_key_id'))}</td>"
                       f"<td>{_e(version)}{_e(f' ({current})') if current else ''}</td><td>{_e(k.get('created'))}</td>"
                       f"<td>{_e(k.get('age_days'))}</td><td>{'yes' if k.get('rotation_due') else 'no'}</td>"
                       f"<td>{'yes' if k.get('in_use') else 'no'}</td><td>{'yes' if k['key_id'] in prunable else 'no'}</td>"
                       f"<td>{LEAKED if k.get('compromised') else 'no'}</td></tr>")
        out.append("</table>")
    out.append("</details>")
    return "".join(out)
