"""`keys reencrypt` on a REST catalog (issue 42): a table written by the bridge's
EncryptingRestCatalog (deletes as deletion vectors, a tag), master key version 1 leaks and is
rotated; a version that is not the table's key's is refused with nothing changed, the dry run's
counts are the run's, the branch keeps its rows and the tag is dropped as asked; the CLI re-encrypts
it (its commits go through REST updates), prints and writes the proof,
and the proof holds: no remaining file's key chain leads to version 1, every file that did is gone,
and the leaked keystore alone opens nothing."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.catalog.rest import RestCatalog
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.compromise import compromise_report
from tests.conftest import add_catalog

MASTER = "restreenc"


@pytest.mark.slow
def test_rest_reencrypt_cli_proves_nothing_depends_on_the_leaked_version(spark, rest_catalog_server,  # noqa: F811
                                                                         tmp_path, capsys):
    keystore = tmp_path / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), MASTER]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name, namespace = f"restre_{suffix}", f"restre-{suffix}", f"ns_{suffix}"
    with register_kms(spark, KeystoreKms(keystore), name=kms_name):
        add_catalog(spark, catalog, tmp_path / "wh", catalog_type="rest", uri=rest_catalog_server.uri,
                    kms_name=kms_name)
        spark.sql(f"CREATE NAMESPACE {catalog}.{namespace}")
        table = f"{catalog}.{namespace}.orders"
        spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg "
                  f"{config.tblproperties_sql({**config.table_properties(MASTER), 'write.delete.mode': 'merge-on-read'})}")
        for start in (1, 10):
            spark.sql(f"INSERT INTO {table} SELECT id FROM range({start}, {start + 4})")
        spark.sql(f"DELETE FROM {table} WHERE id IN (2, 11)")
        spark.sql(f"ALTER TABLE {table} CREATE TAG t1")
        spark.sql(f"ALTER TABLE {table} CREATE BRANCH b1")
        spark.sql(f"INSERT INTO {table}.branch_b1 SELECT id FROM range(50, 53)")  # rows only on the branch
        expected = sorted(r[0] for r in spark.table(table).collect())
        on_branch = sorted(r[0] for r in spark.table(f"{table}.branch_b1").collect())
        leaked = tmp_path / "leaked.json"
        shutil.copy(keystore, leaked)
        before = RestCatalog(rest_catalog_server.uri).load_table(namespace, "orders").metadata_location
        material = {"compromised_master_keys": [(MASTER, "1")]}
        assert len(compromise_report(before, KeystoreKms(keystore), **material).dependent) >= 6
        assert main(["keystore", "rotate", str(keystore), MASTER]) == 0
        kms = ["--kms", "keystore", "--kms-property", f"keystore.path={keystore}"]
        assert main(["keys", "reencrypt", table, "--compromised-version", "nosuch:1", *kms]) == 2
        assert "nosuch:1 is not a version of" in capsys.readouterr().err
        assert RestCatalog(rest_catalog_server.uri).load_table(namespace, "orders").metadata_location == before
        assert main(["keys", "reencrypt", table, "--compromised-version", f"{MASTER}:1", *kms, "--tags", "drop",
                     "--dry-run", "--json"]) == 0
        dry = json.loads(capsys.readouterr().out)["reencrypt"]
        assert dry["branches_rewritten"] == ["b1"] and dry["refs_dropped"] == ["tag t1"]
        assert dry["tag_rows_nowhere_else"] == {"t1": 0}
        report = tmp_path / "proof.json"
        code = main(["keys", "reencrypt", table, "--compromised-version", f"{MASTER}:1", *kms, "--tags", "drop",
                     "--report", str(report)])
        captured = capsys.readouterr()
        out = captured.out
        assert code == 0, (out, captured.err)
        assert "compromise check of" in out and ": OK" in out
        document = json.loads(report.read_text())
        proof = document["proof"]
        assert proof["ok"] and proof["dependent"] == [] and proof["still_present"] == [] and proof["storage"]["ok"]
        assert document["reencrypt"]["expired_snapshots"] == dry["expired_snapshots"]  # the dry run's count is the run's
        assert document["reencrypt"]["branches_rewritten"] == ["b1"]
        assert proof["previously_dependent"] == len(document["before"]["dependent"]) >= 6
        assert {s["master_key_version"] for s in proof["snapshots"]} == {"2"}
        assert all(f["chains"] and all(c.startswith(f"{MASTER}@2 -> KEK") for c in f["chains"]) for f in proof["files"])
        after = RestCatalog(rest_catalog_server.uri).load_table(namespace, "orders").metadata_location
        assert after == document["reencrypt"]["metadata_location"] != before
        spark.sql(f"REFRESH TABLE {table}")
        assert sorted(r[0] for r in spark.table(table).collect()) == expected
        assert sorted(r[0] for r in spark.table(f"{table}.branch_b1").collect()) == on_branch
        assert verify_metadata(after, KeystoreKms(keystore), all_snapshots=True).ok
        opened = verify_metadata(after, KeystoreKms(leaked), all_snapshots=True)
        assert not opened.ok and not any(f.ok for f in opened.files)
