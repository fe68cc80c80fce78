"""The keystore KMS with Spark: a master key rotated between two tables (with the CLI), both tables
readable afterwards by a fresh KMS (as after a restart), and both verified by the JVM-free verifier."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import KeystoreKms
from tests.conftest import add_catalog
from tests.testkit import metadata_location


def test_rotation_between_tables_then_restart_and_verify(spark, tmp_path, capsys):
    keystore = tmp_path / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), "lake"]) == 0
    warehouse = tmp_path / "wh"
    suffix = uuid.uuid4().hex[:6]
    props = config.tblproperties_sql(config.table_properties("lake"))
    before, after = f"ks_{suffix}.db.before_rotation_{suffix}", f"ks_{suffix}.db.after_rotation_{suffix}"

    with register_kms(spark, KeystoreKms(keystore), name=f"keystore-{suffix}") as registration:
        add_catalog(spark, f"ks_{suffix}", warehouse=warehouse, kms_name=f"keystore-{suffix}")
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS ks_{suffix}.db")
        spark.sql(f"CREATE TABLE {before} (id bigint) USING iceberg {props}")
        spark.sql(f"INSERT INTO {before} VALUES (1), (2)")
        assert main(["keystore", "rotate", str(keystore), "lake"]) == 0  # from "another process"
        spark.sql(f"CREATE TABLE {after} (id bigint) USING iceberg {props}")
        spark.sql(f"INSERT INTO {after} VALUES (3)")
        spark.sql(f"INSERT INTO {before} VALUES (4)")
        assert registration.stats.wrap >= 2 and registration.stats.errors == 0
        metadata = {t: metadata_location(spark, t) for t in (before, after)}

    # The wrapped KEKs in the metadata record version 1 (before) and version 2 (after the rotation).
    for table, version in ((before, 1), (after, 2)):
        document = json.loads(Path(metadata[table].removeprefix("file:")).read_text())
        wrapped = [base64.b64decode(k["encrypted-key-metadata"])
                   for k in document["encryption-keys"] if k.get("encrypted-by-id") == "lake"]
        assert wrapped and all(w[:4] == b"PKW1" and int.from_bytes(w[4:8], "big") == version for w in wrapped)

    # A fresh KMS and a fresh catalog (nothing cached): both tables read.
    with register_kms(spark, KeystoreKms(keystore), name=f"keystore2-{suffix}"):
        add_catalog(spark, f"ks2_{suffix}", warehouse=warehouse, kms_name=f"keystore2-{suffix}")
        assert sorted(r[0] for r in spark.table(before.replace("ks_", "ks2_")).collect()) == [1, 2, 4]
        assert sorted(r[0] for r in spark.table(after.replace("ks_", "ks2_")).collect()) == [3]

    capsys.readouterr()
    for table in (before, after):
        code = main(["verify", metadata[table], "--kms", "keystore", "--kms-property", f"keystore.path={keystore}",
                     "--json"])
        assert code == 0, capsys.readouterr()

    # Deleting the old version (a mistake) makes the older table unreadable, with a message that says so.
    document = json.loads(keystore.read_text())
    document["keys"]["lake"] = [v for v in document["keys"]["lake"] if v["version"] != 1]
    keystore.write_text(json.dumps(document))
    with register_kms(spark, KeystoreKms(keystore), name=f"keystore3-{suffix}"):
        add_catalog(spark, f"ks3_{suffix}", warehouse=warehouse, kms_name=f"keystore3-{suffix}")
        with pytest.raises(Exception) as excinfo:
            spark.table(before.replace("ks_", "ks3_")).collect()
        assert "key id 'lake' has no version 1" in str(excinfo.value)
        assert "(versions: [2])" in str(excinfo.value)
        assert sorted(r[0] for r in spark.table(after.replace("ks_", "ks3_")).collect()) == [3]
