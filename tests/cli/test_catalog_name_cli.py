"""The key commands never make up a catalog name (issue 48, item 5): asking a metastore or a REST
catalog directly, or with ``--warehouse``, ``keys where-used`` and ``keystore retire`` need
``--catalog NAME`` or ``--table CATALOG.DB.TABLE`` (the tables are shown as CATALOG.DB.TABLE), and
a table name given as ``db.table`` to ``keys list|rewrap|prune``, ``verify`` or the verification
job needs its catalog. Each refusal is one line, exit 2, before any catalog is asked (an address
nothing listens on would fail differently) and before any JVM starts (run_cli fails when pyspark
was imported). The names the commands show with ``--catalog prod``: tests/keys/test_where_used_without_jvm.py."""

from __future__ import annotations

import pytest

from pyiceberg_crypto.cli.main import main
from tests.keys.tables import VERIFY_JOB, kms_args, run_cli

NAME_THE_CATALOG = ("name the catalog with --catalog NAME or give --table as CATALOG.DB.TABLE (tables are shown "
                    "as CATALOG.DB.TABLE; no catalog name is assumed)")
HIVE, REST = ["--metastore-uri", "thrift://127.0.0.1:1"], ["--rest-uri", "http://127.0.0.1:1"]


@pytest.fixture
def keystore(tmp_path):
    path = tmp_path / "keys.json"
    assert main(["keystore", "create", str(path)]) == 0
    assert main(["keystore", "add", str(path), "k1"]) == 0
    assert main(["keystore", "rotate", str(path), "k1"]) == 0  # version 1 is retirable (not the newest)
    return path


@pytest.mark.parametrize("where", [
    HIVE, REST, [*HIVE, "--namespace", "db"], [*HIVE, "--table", "db.t"], ["--warehouse", "WAREHOUSE"],
    ["--warehouse", "WAREHOUSE", "--table", "db.t"],
], ids=["metastore", "rest", "namespace", "db-table", "warehouse", "warehouse-db-table"])
def test_where_used_without_a_catalog_name_is_a_usage_error(where, keystore, tmp_path):
    where = [str(tmp_path / "wh") if arg == "WAREHOUSE" else arg for arg in where]
    done = run_cli("keys", "where-used", "k1", "1", *kms_args(keystore), *where)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.splitlines() == [f"pyiceberg-crypto keys: {NAME_THE_CATALOG}"]


def test_retire_without_a_catalog_name_keeps_the_version(keystore):
    before = keystore.read_bytes()
    done = run_cli("keystore", "retire", str(keystore), "k1", "1", *HIVE)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"pyiceberg-crypto keystore: not retiring key id 'k1' version 1: {NAME_THE_CATALOG}"]
    assert keystore.read_bytes() == before and not list(keystore.parent.glob("*.bak*"))


@pytest.mark.parametrize("argv", [
    ["keys", "list", "db.t", *HIVE],
    ["keys", "rewrap", "db.t", "KMS", *REST],
    ["keys", "prune", "db.t", "KMS", *REST],
    ["verify", "db.t", "KMS", *HIVE],
], ids=["keys list", "keys rewrap", "keys prune", "verify"])
def test_a_db_table_name_asked_of_a_catalog_directly_needs_the_catalog(argv, keystore):
    argv = [arg for item in argv for arg in (kms_args(keystore) if item == "KMS" else [item])]
    done = run_cli(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert "name the catalog: CATALOG.DB.TABLE, not 'db.t'" in line and "lake" not in line


def test_the_verification_job_needs_the_catalog_too(keystore):
    done = run_cli("--table", "db.t", *HIVE, *kms_args(keystore), main=VERIFY_JOB)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "pyiceberg-crypto verify job: name the catalog: CATALOG.DB.TABLE, not 'db.t' (db.table names need the "
        "catalog's name)"]


@pytest.mark.parametrize("command", [["keys", "where-used"], ["keystore", "retire"]])
def test_the_catalog_option_says_no_default_name(command, capsys):
    assert main([*command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--catalog NAME the catalog's name: tables are shown as NAME.db.table (default: the catalog of" in text
    assert "otherwise required" in text and "default: lake" not in text


LOCAL_SESSION_REFUSAL = ("with --warehouse, give the table as CATALOG.DB.TABLE (the local session's catalog takes its "
                         "first part's name), not 'db.t'")


@pytest.mark.parametrize("argv", [
    ["keys", "rewrap", "db.t", "KMS", "--warehouse", "WAREHOUSE"],
    ["keys", "prune", "db.t", "KMS", "--warehouse", "WAREHOUSE"],
    ["keys", "reencrypt", "db.t", "KMS", "--warehouse", "WAREHOUSE", "--compromised-version", "k1:1"],
    ["encrypt", "db.t", "--key-id", "k1", "KMS", "--warehouse", "WAREHOUSE"],
], ids=["keys rewrap", "keys prune", "keys reencrypt", "encrypt"])
def test_a_db_table_name_with_a_local_session_is_refused_before_spark_starts(argv, keystore, tmp_path):
    """With ``--warehouse`` the command makes its own session, whose catalog takes the table name's
    first part: ``db.t`` would make a catalog called ``db``. Refused, one line, no JVM, nothing written."""
    argv = [arg for item in argv for arg in
            (kms_args(keystore) if item == "KMS" else [str(tmp_path / "wh")] if item == "WAREHOUSE" else [item])]
    done = run_cli(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert line.endswith(LOCAL_SESSION_REFUSAL), line
    assert not (tmp_path / "wh").exists()


def test_the_verification_job_with_a_local_session_needs_the_catalog_too(keystore, tmp_path):
    done = run_cli("--table", "db.t", "--warehouse", str(tmp_path / "wh"), *kms_args(keystore), main=VERIFY_JOB)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [f"pyiceberg-crypto verify job: {LOCAL_SESSION_REFUSAL}"]
    assert not (tmp_path / "wh").exists()
