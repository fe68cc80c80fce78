"""``pyiceberg-crypto audit`` always reports (issue 39, item 4): a REST catalog on loopback (a real
HTTP server in a thread, the peer) with a namespace that cannot be listed, a table whose name holds
a lone surrogate and one the catalog cannot load beside tables that can be audited. Each bad one is
an UNCHECKED entry with its reason; JSON, HTML and Prometheus are written; exit 1; exit 2 only when
nothing could be audited; no temporary file is left; the Python API's writers raise the package's
errors."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from pyiceberg_crypto.audit.lake import CatalogReport, TableAudit
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.errors import FileAccessError, PyicebergCryptoError
from tests.rest.test_rest_client_hostile import CONFIG, ok, serving
from tests.table.test_limits import METADATA
from tests.audit.test_audit import PageParser, assert_valid

KMS = "tests.testing.helpers:cli_kms"
SURROGATE = "evil\ud800name"


def hostile_catalog(tmp_path, *, every_namespace_fails: bool = False):
    """A route: namespaces good, bad (listing answers 500), x.y (one level); tables good.t (an
    unencrypted table that can be audited), good.<lone surrogate>, good.broken (loading answers 500)."""
    metadata = tmp_path / "t" / "metadata" / "00000-x.metadata.json"
    metadata.parent.mkdir(parents=True)
    metadata.write_text(json.dumps({**METADATA, "location": f"file:{tmp_path / 't'}"}))
    tables = {"good": ["t", SURROGATE, "broken"], "x.y": ["t"]}

    def route(handler):
        path = urllib.parse.unquote(urllib.parse.urlsplit(handler.path).path)
        if path == "/v1/config":
            return ok(CONFIG)
        if path == "/v1/namespaces":
            parent = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("parent")
            return ok({"namespaces": [] if parent else [["good"], ["bad"], ["x.y"]]})
        parts = path.split("/")  # ["", "v1", "namespaces", ns, "tables", (name)]
        namespace = parts[3]
        if every_namespace_fails or namespace not in tables:
            return 500, {"error": {"message": "listing broke", "type": "ServerError", "code": 500}}, {}
        if len(parts) == 5:  # the JSON escape keeps the lone surrogate: "evil\ud800name"
            body = json.dumps({"identifiers": [{"namespace": [namespace], "name": n} for n in tables[namespace]]})
            return 200, body.encode(), {}
        if parts[5] == "broken":
            return 500, {"error": {"message": "cannot load", "type": "ServerError", "code": 500}}, {}
        return ok({"metadata-location": f"file:{metadata}", "metadata": json.loads(metadata.read_text())})

    return route


def audit(capsys, *argv):
    code = main(["audit", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_hostile_names_and_unlistable_namespaces_are_rows_and_every_report_is_written(tmp_path, capsys):
    page, textfile = tmp_path / "out" / "audit.html", tmp_path / "out" / "audit.prom"
    page.parent.mkdir()
    with serving(hostile_catalog(tmp_path)) as (uri, _):
        code, out, err = audit(capsys, "--rest-uri", uri, "--kms", KMS, "--json", "--html", str(page),
                               "--prometheus", str(textfile))
    assert code == 1, err
    assert "Traceback" not in err
    doc = json.loads(out)
    assert_valid(doc)
    rows = {t["table"]: t for t in doc["tables"]}
    assert set(rows) == {"bad.*", "good.t", f"good.{SURROGATE}", "good.broken", "`x.y`.t"}
    assert (rows["bad.*"]["state"], rows["bad.*"]["reason"]) == ("UNCHECKED", "METASTORE")
    assert "HTTP 500 ServerError: listing broke" in rows["bad.*"]["detail"]
    assert rows[f"good.{SURROGATE}"]["state"] == "UNCHECKED" and "lone surrogate" in rows[f"good.{SURROGATE}"]["detail"]
    assert rows["good.broken"]["state"] == "UNCHECKED" and "cannot load" in rows["good.broken"]["detail"]
    assert rows["good.t"]["state"] == rows["`x.y`.t"]["state"] == "UNENCRYPTED"  # audited as usual
    assert doc["ok"] is False and doc["error"] is None
    html = page.read_text(encoding="utf-8")
    parsed = PageParser()
    parsed.feed(html)
    assert parsed.rows == 5 and "evil\\ud800name" in html
    prom = textfile.read_text(encoding="utf-8")
    # issue 41: the report names the REST catalog by the URI given, not "hive"
    assert 'table="good.evil\\\\ud800name"' in prom and f'pyiceberg_crypto_audit_error{{catalog="{uri}"}} 0.0' in prom
    assert f"<title>Encryption audit of catalog {uri}</title>" in html and doc["catalog"] == uri
    assert sorted(p.name for p in page.parent.iterdir()) == ["audit.html", "audit.prom"]  # no .tmp left


def test_the_catalog_name_given_titles_the_report(tmp_path, capsys):
    page = tmp_path / "audit.html"
    with serving(hostile_catalog(tmp_path)) as (uri, _):
        code, out, err = audit(capsys, "--rest-uri", uri, "--kms", KMS, "--catalog", "lake", "--json",
                               "--html", str(page))
    assert code == 1 and json.loads(out)["catalog"] == "lake", err
    assert "<title>Encryption audit of catalog lake</title>" in page.read_text(encoding="utf-8")


def test_the_human_summary_shows_a_hostile_name_escaped(tmp_path, capsys):
    with serving(hostile_catalog(tmp_path)) as (uri, _):
        code, out, err = audit(capsys, "--rest-uri", uri, "--kms", KMS)
    assert code == 1 and "Traceback" not in err
    assert "good.evil\\ud800name" in out and "\ud800" not in out
    assert "UNCHECKED    bad.*  METASTORE" in out
    assert "FAILED: 4 of 4 Iceberg table(s) not encrypted and OK, 1 table(s) or namespace(s) that could not be " \
           "listed or loaded" in out


def test_nothing_audited_exits_2_and_still_writes_the_page_and_the_textfile(tmp_path, capsys):
    page, textfile = tmp_path / "audit.html", tmp_path / "audit.prom"
    with serving(hostile_catalog(tmp_path, every_namespace_fails=True)) as (uri, _):
        code, out, err = audit(capsys, "--rest-uri", uri, "--kms", KMS, "--json", "--html", str(page),
                               "--prometheus", str(textfile))
    assert code == 2 and "nothing was audited" in err
    doc = json.loads(out)
    assert_valid(doc)
    assert doc["ok"] is False and {t["table"] for t in doc["tables"]} == {"bad.*", "good.*", "`x.y`.*"}
    assert page.exists() and f'pyiceberg_crypto_audit_ok{{catalog="{uri}"}} 0.0' in textfile.read_text()

    # the catalog cannot be listed at all: the error document, and the page and textfile say so
    with serving(lambda h: (500, {"error": {"message": "down", "type": "ServerError", "code": 500}}, {})) as (uri, _):
        code, out, err = audit(capsys, "--rest-uri", uri, "--kms", KMS, "--json", "--html", str(page),
                               "--prometheus", str(textfile))
    assert code == 2
    doc = json.loads(out)
    assert_valid(doc)
    assert doc["error"]["type"] == "metastore" and "HTTP 500" in doc["error"]["message"]
    assert "No audit could be made" in page.read_text()
    prom = textfile.read_text()
    assert f'pyiceberg_crypto_audit_error{{catalog="{uri}"}} 1.0' in prom and f'pyiceberg_crypto_audit_ok{{catalog="{uri}"}} 0.0' in prom
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_the_python_writers_raise_the_package_error_naming_the_path_and_leave_no_temporary_file(tmp_path):
    report = CatalogReport("lake", tables=[TableAudit(f"db.{SURROGATE}", state="OK")])
    missing = tmp_path / "missing" / "audit.html"
    for write in (report.write_html, report.write_prometheus, report.write_json):
        with pytest.raises(FileAccessError, match=f"cannot write {missing}: its directory .* does not exist") as caught:
            write(str(missing))
        assert isinstance(caught.value, PyicebergCryptoError) and isinstance(caught.value, OSError)
    target = tmp_path / "a-directory"
    target.mkdir()
    (target / "inside").write_text("x")  # os.replace over a non-empty directory fails after the temp file is written
    for write in (report.write_html, report.write_prometheus, report.write_json):
        with pytest.raises(FileAccessError, match=f"cannot write {target}"):
            write(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]  # no .tmp left behind
    for write, name in ((report.write_html, "a.html"), (report.write_prometheus, "a.prom"), (report.write_json, "a.json")):
        write(str(tmp_path / name))  # a lone surrogate in a name: written, escaped
        assert "\\ud800" in (tmp_path / name).read_text(encoding="utf-8")
