"""Encrypted tables on real services: a standalone Hive metastore process and an S3 server, both on
127.0.0.1, used by separate Spark applications (each test's Spark runs in its own process)."""

from __future__ import annotations

import json
import os
import re
import uuid

import pytest

from pyiceberg_crypto.cli.main import main as cli_main
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.table import Limits
from tests.testing import helpers
from tests.testing.helpers import AppOutput, assert_every_file_encrypted, assert_verified, run_app, start_app

pytestmark = [pytest.mark.loopback, pytest.mark.slow, pytest.mark.processes]

CATALOG = "lake"
KEY_ID = "orders-key"


@pytest.fixture(scope="module")
def master_keys():
    return {KEY_ID: os.urandom(16)}


@pytest.fixture(scope="module")
def job(hive_metastore, s3_server, master_keys):
    """What every Spark application of this module is told (keys go over stdin only)."""
    return {
        "catalog": CATALOG,
        "warehouse": s3_server.warehouse("wh"),
        "metastore_uri": hive_metastore.uri,
        "s3_endpoint": s3_server.endpoint,
        "s3_region": s3_server.region,
        "key_id": KEY_ID,
        "master_keys": {key_id: key.hex() for key_id, key in master_keys.items()},
    }


@pytest.fixture(autouse=True)
def _s3_credentials_here(s3_environment):
    """The pure-Python verifier in this process reads S3 with the server's credentials too."""


def _table(name: str) -> str:
    return f"{CATALOG}.db.{name}_{uuid.uuid4().hex[:8]}"


def _location(s3_server, table: str) -> str:
    _, db, name = table.split(".")
    return f"{s3_server.warehouse('wh')}/{db}.db/{name}"


# --- the tests ---------------------------------------------------------------------------------


def test_round_trip_and_key_id_pinning_on_standalone_metastore_and_s3(job, s3_server, hive_metastore, master_keys,
                                                                      capsys):
    table = _table("orders")
    result = run_app("round_trip", dict(job, table=table), s3_server)

    assert [tuple(row) for row in result["rows"]] == [(1, "apple"), (3, "fig"), (4, "kiwi")]
    assert result["demo_ok"], result["demo_problems"]  # the docker client's demo, both verifiers
    assert result["key_id"] == KEY_ID
    pinned = re.compile(r"(?i)cannot (modify|remove|unset|change).*key id|key id.*encrypted table")
    # A refusal is its error text; None (the statement went through) searches "" and fails.
    assert pinned.search(result["refused"]["change"] or ""), result["refused"]
    assert pinned.search(result["refused"]["remove"] or ""), result["refused"]
    assert result["kms_calls"]["wrap"] >= 1 and result["kms_calls"]["unwrap"] >= 1
    # The table lives in the S3 server, the metastore records it there, and nothing is plaintext.
    assert result["metadata_json"].startswith(_location(s3_server, table) + "/metadata/")
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=2)
    assert_verified(result, master_keys, s3_server, min_data_files=2, key_id=KEY_ID)

    # The CLI reaches the same S3 server with the catalog's storage properties.
    helpers.CLI_MASTER_KEYS.clear()
    helpers.CLI_MASTER_KEYS.update(master_keys)
    io_options = [arg for key, value in s3_server.catalog_properties().items()
                  for arg in ("--io-property", f"{key}={value}")]
    capsys.readouterr()
    status = cli_main(["verify", result["metadata_json"], "--kms", "tests.testing.helpers:cli_kms",
                       "--all-snapshots", "--json", *io_options])
    document = json.loads(capsys.readouterr().out)
    assert status == 0 and document["ok"], document

    # The JVM-free reader finds the table through the metastore (metadata_hash checked) and reads S3.
    read = read_table(table.split(".", 1)[1], InMemoryKms(master_keys), catalog=hive_metastore.uri,
                      limits=Limits(properties=s3_server.catalog_properties()))
    assert sorted(tuple(row.values()) for row in read.to_pylist()) == [(1, "apple"), (3, "fig"), (4, "kiwi")]


WRITERS = 2
COMMITS_PER_WRITER = 4


def test_two_applications_append_concurrently_without_losing_a_commit(job, s3_server, master_keys, tmp_path):
    """Two driver JVMs, one table, one metastore: their commits race on the metastore's atomic
    swap of metadata_location; the loser of each race retries on the new base."""
    table = _table("concurrent")
    start_file, read_file = tmp_path / "go", tmp_path / "read"
    apps = [
        AppOutput(start_app("writer", dict(job, table=table, writer=index, commits=COMMITS_PER_WRITER,
                                            create=index == 0, start_file=str(start_file),
                                            read_after=str(read_file) if index == 0 else None), s3_server))
        for index in range(WRITERS)
    ]
    for app in apps:
        app.wait_for("READY")
    start_file.touch()  # both drivers hold the same base metadata now: their commits race
    for app in apps:
        app.wait_for("DONE")
    read_file.touch()
    results = [app.result() for app in apps]

    rows = sorted(tuple(row) for row in results[0]["rows"])
    assert rows == sorted((w, n) for w in range(WRITERS) for n in range(COMMITS_PER_WRITER))
    assert results[0]["snapshots"] == WRITERS * COMMITS_PER_WRITER  # one snapshot per commit, none lost
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=WRITERS * COMMITS_PER_WRITER)
    assert_verified(results[0], master_keys, s3_server, min_data_files=WRITERS * COMMITS_PER_WRITER, key_id=KEY_ID)


def test_metastore_killed_while_a_writer_commits_leaves_a_consistent_table(
    job, s3_server, hive_metastore, master_keys, tmp_path
):
    """SIGKILL the metastore while an application commits in a loop: commits fail while it is down
    (each either fully in the table or not at all), the table keeps a consistent current snapshot,
    and after a restart on the same port the same application commits, reads and verifies again."""
    table = _table("killed")
    stop_file = tmp_path / "stop"
    app = AppOutput(start_app("loop_writer", dict(job, table=table, writer=7, stop_file=str(stop_file)), s3_server))
    try:
        app.wait_for("COMMITTED", times=2)
        hive_metastore.kill()  # mid-loop: lands in some phase of a commit
        app.wait_for("FAILED", times=1)
        hive_metastore.start()
        committed_before_restart = app.count("COMMITTED")
        app.wait_for("COMMITTED", times=committed_before_restart + 2)
    finally:
        if not hive_metastore.running:
            hive_metastore.start()
        stop_file.touch()
    result = app.result()

    committed, failed = set(result["committed"]), set(result["failed"])
    assert failed, "no commit failed while the metastore was down"
    rows = {n for writer, n in result["rows"]}
    # Every acknowledged commit is there; a failed one is there at most once, and only if its
    # metadata swap reached the metastore before the kill (commit state unknown to the writer).
    assert committed <= rows <= committed | failed
    assert len(result["rows"]) == len(rows)
    assert result["snapshots"] == len(rows)
    assert_every_file_encrypted(s3_server, _location(s3_server, table), min_data_files=len(rows))
    assert_verified(result, master_keys, s3_server, min_data_files=len(rows), key_id=KEY_ID)
