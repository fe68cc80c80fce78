"""`keys list`, `verify` and the verification job ask the catalog directly (issue 41, item 2):
`--metastore-uri thrift://...` or `--rest-uri http://...`, no Spark and no JVM in the command's
process; and every JVM-free key command, run as the console script with no java on PATH, prints
no Spark or Ivy output (the same lakes as tests/keys/test_where_used_without_jvm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto.catalog.hive import table_parameters
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from tests.keys.tables import VERIFY_JOB, encrypted_lakes, run_cli
from tests.path_without_java import fill_without_java

pytestmark = [pytest.mark.loopback, pytest.mark.slow]

#: What a JVM start or an Ivy resolution prints (spark-submit's --packages, log4j, Spark's banner).
JVM_OUTPUT = (":: resolving", "Ivy", "ivy", "SparkSession", "log4j", "WARN NativeCodeLoader", "py4j")


#: Not test_where_used_without_jvm's key: its where-used lists the whole shared metastore.
KEY = "nj-key"


@pytest.fixture(scope="module")
def lakes(spark, hive_metastore, rest_catalog_server, tmp_path_factory):  # noqa: F811
    """Table orders under KEY in a Hive namespace, events under KEY over REST (two INSERTs each)."""
    with encrypted_lakes(spark, tmp_path_factory.mktemp("without-jvm"), prefix="nj", metastore_uri=hive_metastore.uri,
                         rest_uri=rest_catalog_server.uri, hive_tables=(("orders", KEY),),
                         rest_tables=(("events", KEY),)) as lakes:
        yield lakes


def test_keys_list_by_table_name_over_thrift_and_rest(lakes):
    ns = lakes["ns"]
    done = run_cli("keys", "list", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["metadata_location"] == table_parameters(lakes["metastore"], ns, "orders")["metadata_location"]
    assert doc["master_key_id"] == KEY
    assert doc["keks"] and {k["master_key_version"] for k in doc["keks"]} <= {"1", "2"}
    done = run_cli("keys", "list", f"shop.{ns}.events", "--rest-uri", lakes["rest"])
    assert done.returncode == 0, done.stderr
    assert f"master key   '{KEY}'" in done.stdout and f"/{ns}/events" in done.stdout
    done = run_cli("keys", "list", f"{ns}.orders")  # a table name with nowhere to look it up
    assert done.returncode == 2 and "--metastore-uri thrift://host:port" in done.stderr
    done = run_cli("keys", "list", f"lake.{ns}.gone", "--metastore-uri", lakes["metastore"])
    assert done.returncode == 2 and f"lake.{ns}.gone" in done.stderr and "does not exist" in done.stderr


def test_the_verification_job_asks_the_metastore_directly(lakes, tmp_path):
    ns = lakes["ns"]
    report = tmp_path / "report.json"
    done = run_cli("--table", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--json", "--output", str(report), main=VERIFY_JOB)
    assert done.returncode == 0, done.stderr + done.stdout
    doc = json.loads(report.read_text())
    checks = {c["name"]: c["status"] for c in doc["table"]["checks"]}
    assert checks["metastore"] == "OK" and checks["metadata-hash"] == "OK", checks
    assert doc["files"] and all(f["status"] == "OK" for f in doc["files"])
    done = run_cli("--table", f"shop.{ns}.events", "--rest-uri", lakes["rest"], *lakes["kms"], "--json",
                   main=VERIFY_JOB)
    assert done.returncode == 0, done.stderr + done.stdout
    checks = {c["name"]: c["status"] for c in json.loads(done.stdout)["table"]["checks"]}
    assert checks["catalog"] == "OK" and checks["catalog-metadata"] == "OK", checks
    done = run_cli("--table", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--parallelism", "4", main=VERIFY_JOB)
    assert done.returncode == 2 and "--parallelism" in done.stderr


def test_verify_by_table_name_keeps_one_ledger_with_the_job(lakes, tmp_path):
    ns = lakes["ns"]
    ledger = tmp_path / "orders.ledger.json"
    done = run_cli("verify", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--state", str(ledger))
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(ledger.read_text())["last"]["table_name"] == f"lake.{ns}.orders"  # as verify_table records it
    done = run_cli("--table", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--state", str(ledger), "--json", main=VERIFY_JOB)
    assert done.returncode == 0, done.stderr + done.stdout
    done = run_cli("verify", f"lake.{ns}.orders", "--metastore-uri", lakes["metastore"], *lakes["kms"],
                   "--metadata-hash", "abc")
    assert done.returncode == 2 and "--metadata-hash" in done.stderr


def test_no_key_command_that_needs_no_jvm_starts_one(lakes, tmp_path):
    """The console script, with no java on PATH and no JAVA_HOME: each command works and prints
    nothing of Spark's or Ivy's."""
    ns = lakes["ns"]
    bin_dir = tmp_path / "bin"
    fill_without_java(bin_dir, os.environ.get("PATH", ""))
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir)])
    console_script = str(Path(sys.executable).parent / "pyiceberg-crypto")
    hive, rest = ["--metastore-uri", lakes["metastore"]], ["--rest-uri", lakes["rest"]]
    location = table_parameters(lakes["metastore"], ns, "orders")["metadata_location"]
    commands = [
        ["keys", "list", location, *lakes["kms"]],
        ["keys", "list", f"lake.{ns}.orders", *hive, *lakes["kms"]],
        ["keys", "list", f"shop.{ns}.events", *rest],
        ["keys", "where-used", KEY, *lakes["kms"], *hive, "--table", f"lake.{ns}.orders"],
        ["keys", "where-used", KEY, *lakes["kms"], *rest, "--catalog", "shop"],
        ["keys", "where-used", KEY, *lakes["kms"], "--table", location],
        ["keys", "rewrap", f"lake.{ns}.orders", *lakes["kms"], *hive, "--dry-run"],
        ["keys", "prune", f"shop.{ns}.events", *lakes["kms"], *rest, "--dry-run"],
        ["keystore", "list", str(lakes["keystore"])],
        ["verify", f"lake.{ns}.orders", *hive, *lakes["kms"]],
        ["verify", f"shop.{ns}.events", *rest, *lakes["kms"]],
    ]
    for argv in commands:
        done = subprocess.run([console_script, *argv], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, (argv, done.stderr)
        output = done.stdout + done.stderr
        assert not [marker for marker in JVM_OUTPUT if marker in output], (argv, output)
    # keystore retire's check: refused (the version is the newest, or still needed), still no JVM;
    # and where-used with no catalog name refused, one line, before any catalog is asked
    # (keystore retire's: tests/cli/test_catalog_name_cli.py, tests/keys/test_where_used_without_jvm.py)
    for argv in (["keystore", "retire", str(lakes["keystore"]), KEY, "1", *hive, "--table", f"lake.{ns}.orders"],
                 ["keys", "where-used", KEY, *lakes["kms"], *rest]):
        done = subprocess.run([console_script, *argv], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (argv, done.stderr)
        assert not [marker for marker in JVM_OUTPUT if marker in done.stdout + done.stderr]
    assert "name the catalog with --catalog NAME or give --table as CATALOG.DB.TABLE" in done.stderr


def test_metastore_uri_with_warehouse_never_starts_spark(lakes, tmp_path):
    """issue 49: `--metastore-uri` (or `--rest-uri`) together with `--warehouse` (or
    `--metastore-dir`) takes the key commands' JVM-free path; it took Spark's (26 s and a JVM).
    run_cli fails when the command imported pyspark."""
    ns = lakes["ns"]
    local = ["--warehouse", str(tmp_path / "wh")]
    hive, rest = ["--metastore-uri", lakes["metastore"]], ["--rest-uri", lakes["rest"]]
    commands = [
        ["keys", "rewrap", f"lake.{ns}.orders", *lakes["kms"], *hive, *local, "--dry-run"],
        ["keys", "prune", f"lake.{ns}.orders", *lakes["kms"], *hive, *local, "--dry-run"],
        ["keys", "prune", f"shop.{ns}.events", *lakes["kms"], *rest, *local, "--dry-run"],
        ["keys", "where-used", KEY, *lakes["kms"], *hive, *local, "--table", f"lake.{ns}.orders"],
        ["keys", "where-used", KEY, *lakes["kms"], *hive, "--metastore-dir", str(tmp_path / "ms"),
         "--table", f"lake.{ns}.orders"],
        ["keys", "where-used", KEY, *lakes["kms"], *rest, *local, "--namespace", ns, "--catalog", "shop"],
    ]
    for argv in commands:
        done = run_cli(*argv)
        assert done.returncode == 0 and "pyspark was imported" not in done.stderr, (argv, done.stderr)
    assert f"lake.{ns}.orders: would re-wrap" in run_cli(*commands[0]).stdout
    assert f"lake.{ns}.orders: KEK(s)" in run_cli(*commands[3]).stdout
    # keystore retire's catalog check: refused (the version is needed), still without a JVM
    done = run_cli("keystore", "retire", str(lakes["keystore"]), KEY, "1", *hive, *local, "--table", f"lake.{ns}.orders")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "pyspark was imported" not in done.stderr, \
        done.stderr
    # no catalog name, asking the metastore directly or with --warehouse alone: a usage error before any JVM
    for argv in (["keys", "where-used", KEY, *lakes["kms"], *hive, *local],
                 ["keys", "where-used", KEY, *lakes["kms"], *local, "--table", f"{ns}.orders"]):
        done = run_cli(*argv)
        assert done.returncode == 2 and "name the catalog with --catalog NAME" in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr and "pyspark was imported" not in done.stderr
