"""`keys where-used` and `keystore retire`'s check ask the catalog directly (issue 41, item 2): a
standalone Hive metastore over Thrift (`--metastore-uri`) or a REST catalog over HTTP
(`--rest-uri`), with no Spark and no JVM in the command's process; tables written by the shared
Spark session through catalogs on those services, each under a keystore master key."""

from __future__ import annotations

import json

import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys import where_used_in_listing
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from tests.keys.tables import encrypted_lakes, run_cli

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

KEY, OTHER = "wu-key", "wu-other"


@pytest.fixture(scope="module")
def lakes(spark, hive_metastore, rest_catalog_server, tmp_path_factory):  # noqa: F811
    """Two tables under KEY and one under OTHER in a Hive namespace; one table under KEY over REST."""
    with encrypted_lakes(spark, tmp_path_factory.mktemp("where-used"), prefix="wu", metastore_uri=hive_metastore.uri,
                         rest_uri=rest_catalog_server.uri,
                         hive_tables=(("orders", KEY), ("returns", KEY), ("audit", OTHER)),
                         rest_tables=(("events", KEY),)) as lakes:
        yield lakes


def test_where_used_over_thrift_names_the_tables_without_a_jvm(lakes):
    ns = lakes["ns"]
    done = run_cli("keys", "where-used", KEY, "1", *lakes["kms"], "--metastore-uri", lakes["metastore"],
                   "--catalog", "lake", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["needed"] is True
    assert sorted(u["table"] for u in doc["uses"]) == [f"lake.{ns}.orders", f"lake.{ns}.returns"]
    # The metastore is the test session's: other tests' tables are listed too (some unreadable on
    # purpose); this lake's tables are all checked.
    assert f"lake.{ns}.audit" in doc["checked"]
    assert not [table for table in doc["unchecked"] if table.startswith(f"lake.{ns}.")], doc["unchecked"]
    assert "Ivy" not in done.stderr and ":: resolving" not in done.stderr


def test_where_used_names_the_tables_in_the_catalog_given_and_never_makes_one_up(lakes):
    """Issue 48 item 5: the metastore's tables are shown in the catalog named (prod here), and
    without a name (no --catalog, no --table CATALOG.DB.TABLE) the command refuses before asking
    the metastore: one line, exit 2, no made-up "lake"."""
    ns = lakes["ns"]
    done = run_cli("keys", "where-used", KEY, "1", *lakes["kms"], "--metastore-uri", lakes["metastore"],
                   "--namespace", ns, "--catalog", "prod")
    assert done.returncode == 0, done.stderr
    assert f"prod.{ns}.orders: KEK(s)" in done.stdout and f"prod.{ns}.returns: KEK(s)" in done.stdout
    assert "lake." not in done.stdout
    done = run_cli("keys", "where-used", KEY, "1", *lakes["kms"], "--metastore-uri", lakes["metastore"],
                   "--table", f"prod.{ns}.orders", "--json")
    assert done.returncode == 0, done.stderr
    assert [u["table"] for u in json.loads(done.stdout)["uses"]] == [f"prod.{ns}.orders"]  # the --table's catalog
    done = run_cli("keys", "where-used", KEY, "1", *lakes["kms"], "--metastore-uri", lakes["metastore"],
                   "--table", f"{ns}.orders")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip().splitlines() == [
        "pyiceberg-crypto keys: name the catalog with --catalog NAME or give --table as CATALOG.DB.TABLE "
        "(tables are shown as CATALOG.DB.TABLE; no catalog name is assumed)"]


def test_where_used_over_rest_and_only_the_tables_asked_for(lakes):
    ns = lakes["ns"]
    done = run_cli("keys", "where-used", KEY, *lakes["kms"], "--rest-uri", lakes["rest"], "--catalog", "shop")
    assert done.returncode == 0, done.stderr
    assert f"shop.{ns}.events: KEK(s)" in done.stdout
    found = where_used_in_listing({"uri": lakes["metastore"]}, OTHER, None, KeystoreKms(lakes["keystore"]),
                                  catalog="prod", tables=[f"prod.{ns}.audit", f"{ns}.orders", f"{ns}.gone"])
    assert [u.table for u in found.uses] == [f"prod.{ns}.audit"]  # named in the catalog given
    assert found.checked == [f"prod.{ns}.audit", f"prod.{ns}.orders"]
    assert found.unchecked == {f"prod.{ns}.gone": "the catalog does not list this table"}  # not provably unused


def test_retire_checks_the_metastore_directly_and_refuses(lakes):
    done = run_cli("keystore", "retire", str(lakes["keystore"]), KEY, "1", "--metastore-uri", lakes["metastore"])
    # version 1 is the newest: refused before any catalog is read; rotate so 1 becomes retirable
    assert done.returncode == 2 and "newest" in done.stderr
    assert main(["keystore", "rotate", str(lakes["keystore"]), KEY]) == 0
    done = run_cli("keystore", "retire", str(lakes["keystore"]), KEY, "1", "--metastore-uri", lakes["metastore"],
                   "--table", f"lake.{lakes['ns']}.orders")
    assert done.returncode == 2 and "still needed" in done.stderr and f"lake.{lakes['ns']}.orders" in done.stderr
    done = run_cli("keystore", "retire", str(lakes["keystore"]), KEY, "1", "--rest-uri", lakes["rest"],
                   "--catalog", "shop")
    assert done.returncode == 2 and f"shop.{lakes['ns']}.events" in done.stderr
    # no catalog name: refused before the catalog is asked, the version kept
    done = run_cli("keystore", "retire", str(lakes["keystore"]), KEY, "1", "--rest-uri", lakes["rest"])
    assert done.returncode == 2 and "name the catalog with --catalog NAME" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    listing = run_cli("keystore", "list", str(lakes["keystore"]), "--json")
    assert listing.returncode == 0, listing.stderr
    assert [v["version"] for v in json.loads(listing.stdout)["keys"][KEY]][:1] == [1]


def test_an_unreachable_metastore_and_mixed_catalog_options_are_one_line(lakes):
    done = run_cli("keys", "where-used", KEY, *lakes["kms"], "--metastore-uri", "thrift://127.0.0.1:1",
                   "--catalog", "lake", "--metastore-timeout", "2")
    assert done.returncode == 2 and "cannot list the tables of catalog 'lake'" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_cli("keys", "where-used", KEY, *lakes["kms"], "--metastore-uri", lakes["metastore"],
                   "--rest-uri", lakes["rest"])
    assert done.returncode == 2 and "not both" in done.stderr
