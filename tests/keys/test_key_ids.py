"""One canonical key id (issue 49, item 4): the AWS face accepts ``alias/orders-key`` and the key and
alias ARNs as a table's ``encryption.key-id``, all meaning the keystore's ``orders-key``; every key
command must see those tables as needing ``orders-key``.

The tables are written by the real Iceberg writer (the shared Spark session) through the Py4J bridge
with :class:`FaceBlobKms` over the keystore: the KEKs are the face's own blobs under the table's
alias or ARN key id, as ``kms serve --aws-kms-api`` makes them for Iceberg's
``AwsKeyManagementClient``. The commands then run JVM-free on their metadata.json files.

One keystore and one catalog live through the module; tests run in file order."""

from __future__ import annotations

import json
import uuid

import pytest

from pyiceberg_crypto.errors import ApiError, InvalidArgumentError, KmsError
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.keys import rewrap_keks
from pyiceberg_crypto.keys.inventory import inventory_from_metadata
from pyiceberg_crypto.keys.prune import prune_keys
from pyiceberg_crypto.keys.where_used import where_used_in_metadata
from pyiceberg_crypto.kms import AwsKms, InMemoryKms, KeyManagementClient, KeystoreKms
from pyiceberg_crypto.kms.aws_face_blob import FaceBlobKms
from pyiceberg_crypto.kms.key_ids import aws_key_name, canonical_key_id, kms_key_id
from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.serve.aws.key_ids import python_key_id
from tests.conftest import add_catalog
from tests.keys.tables import kms_args, run_cli
from tests.testkit import metadata_location

KEY = "orders-key"
ALIAS = f"alias/{KEY}"
KEY_ARN = f"arn:aws:kms:eu-west-1:000000000000:key/{KEY}"
ALIAS_ARN = f"arn:aws:kms:eu-west-1:000000000000:alias/{KEY}"


# --- the mapping itself (pure) ------------------------------------------------------------------


def test_every_face_spelling_is_the_keystore_key():
    for key_id in (KEY, ALIAS, KEY_ARN, ALIAS_ARN, f"arn:aws:kms:us-east-1:123456789012:key/{KEY}"):
        assert canonical_key_id(key_id) == KEY, key_id
    assert canonical_key_id("arn:aws:s3:::bucket") == "arn:aws:s3:::bucket"  # no KMS ARN: as written
    assert aws_key_name(KEY_ARN).region == "eu-west-1" and aws_key_name(ALIAS_ARN).kind == "alias-arn"
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        canonical_key_id("")
    with pytest.raises(InvalidArgumentError, match="not a KMS key or alias ARN"):
        aws_key_name("arn:aws:kms:eu-west-1:000000000000:grant/x")


def test_the_face_shares_the_parsing_and_keeps_its_region_and_account_checks():
    assert python_key_id(ALIAS_ARN, "eu-west-1", "000000000000") == KEY
    with pytest.raises(ApiError, match="another region or account"):
        python_key_id(KEY_ARN, "us-east-1", "000000000000")
    with pytest.raises(ApiError, match="alias has no name"):
        python_key_id("alias/", "eu-west-1", "000000000000")


def test_which_kms_maps_and_which_keeps_real_aws_ids(tmp_path):
    keystore = tmp_path / "keys.json"
    Keystore(keystore).create()
    assert KeystoreKms(keystore).canonical_key_id(ALIAS) == KEY
    assert InMemoryKms.with_random_keys(KEY).canonical_key_id(KEY_ARN) == KEY
    assert FaceBlobKms(KeystoreKms(keystore)).canonical_key_id(ALIAS_ARN) == KEY
    # AWS KMS: an alias and a key ARN are different real names (the alias may move): as written
    assert AwsKms.canonical_key_id is KeyManagementClient.canonical_key_id
    assert kms_key_id(None, ALIAS) == KEY  # no KMS: the face's mapping (errs towards "needed")
    with pytest.raises(KmsError, match="alias or ARN form"):
        Keystore(keystore).add_key(ALIAS)  # would be ambiguous with the face's names


# --- tables keyed by the alias and by the key ARN ----------------------------------------------


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("key-ids")
    keystore, stranger = work / "keys.json", work / "other-keys.json"
    for path, key in ((keystore, KEY), (stranger, "other-key")):
        assert main(["keystore", "create", str(path)]) == 0
        assert main(["keystore", "add", str(path), key]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name = f"keyids_{suffix}", f"keyids-{suffix}"
    registration = register_kms(spark, FaceBlobKms(KeystoreKms(keystore)), name=kms_name)
    add_catalog(spark, catalog, warehouse=work / "wh", kms_name=kms_name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    tables = {}
    for name, key_id in (("by_alias", ALIAS), ("by_arn", KEY_ARN)):
        table = f"{catalog}.db.{name}_{suffix}"
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(config.table_properties(key_id))}")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        spark.sql(f"INSERT INTO {table} VALUES (3)")
        tables[name] = table
    assert main(["keystore", "rotate", str(keystore), KEY]) == 0  # version 1 is now retirable
    assert main(["keystore", "rotate", str(stranger), "other-key"]) == 0
    yield {"keystore": keystore, "stranger": stranger, "work": work, **tables,
           "metadata": {name: metadata_location(spark, table) for name, table in tables.items()}}
    registration.close()


def table_args(lake) -> list[str]:
    return [arg for location in lake["metadata"].values() for arg in ("--table", location)]


def test_the_tables_are_keyed_by_the_alias_and_the_arn_with_face_blobs(lake):
    for name, key_id in (("by_alias", ALIAS), ("by_arn", KEY_ARN)):
        inventory = inventory_from_metadata(lake["metadata"][name], KeystoreKms(lake["keystore"]))
        assert inventory.master_key_id == key_id and inventory.kms_key_id == KEY
        assert {(k.master_key_id, k.kms_key_id, k.master_key_known) for k in inventory.keks} == {(key_id, KEY, True)}
        assert {k.current_master_key_version for k in inventory.keks} == {"2"}


@pytest.mark.parametrize("asked", [KEY, ALIAS, KEY_ARN])
def test_where_used_finds_both_tables_under_any_name(lake, asked):
    done = run_cli("keys", "where-used", asked, "1", *kms_args(lake["keystore"]), *table_args(lake), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["needed"] is True and doc["kms_key_id"] == KEY
    assert sorted(u["table"] for u in doc["uses"]) == sorted(lake["metadata"].values())
    assert not doc["unchecked"]


def test_retire_refuses_the_version_the_tables_need(lake):
    for asked in (KEY, ALIAS):
        done = run_cli("keystore", "retire", str(lake["keystore"]), asked, "1", *table_args(lake))
        assert done.returncode == 2 and "still needed" in done.stderr, done.stderr
        assert all(location in done.stderr for location in lake["metadata"].values())
    assert [v.version for v in Keystore(lake["keystore"]).load()[KEY]] == [1, 2]
    assert not list(lake["work"].glob("keys.json.*.bak"))


def test_a_master_key_the_kms_does_not_know_is_unchecked_and_retire_refuses(lake):
    found = where_used_in_metadata(list(lake["metadata"].values()), "other-key", "1", KeystoreKms(lake["stranger"]))
    assert not found.uses and not found.checked
    assert set(found.unchecked) == set(lake["metadata"].values()) and found.needed
    assert all("does not know" in why for why in found.unchecked.values())
    done = run_cli("keystore", "retire", str(lake["stranger"]), "other-key", "1", *table_args(lake))
    assert done.returncode == 2 and "NOT CHECKED" in done.stderr and "does not know" in done.stderr, done.stderr
    assert [v.version for v in Keystore(lake["stranger"]).load()["other-key"]] == [1, 2]


def test_where_used_compromised_exits_1_under_either_name(lake):
    assert main(["keystore", "compromised", str(lake["keystore"]), ALIAS, "1"]) == 0  # the keystore's orders-key
    assert Keystore(lake["keystore"]).load()[KEY][0].compromised
    for asked in (KEY, ALIAS, ALIAS_ARN):
        done = run_cli("keys", "where-used", asked, "--compromised", *kms_args(lake["keystore"]), *table_args(lake),
                       "--json")
        assert done.returncode == 1, (asked, done.stdout, done.stderr)
        assert sorted(json.loads(done.stdout)["compromised_tables"]) == sorted(lake["metadata"].values())


def test_rewrap_and_prune_treat_the_alias_as_the_tables_key(spark, lake):
    kms = FaceBlobKms(KeystoreKms(lake["keystore"]))
    for name in ("by_alias", "by_arn"):
        pruned = prune_keys(spark, lake[name], dry_run=True)
        assert pruned.kept_keks and not pruned.removed_keks  # the table's own KEK is kept
        result = rewrap_keks(spark, lake[name], kms=kms)
        assert result.committed and {(c.old_version, c.new_version) for c in result.changes} == {("1", "2")}
        assert sorted(r[0] for r in spark.table(lake[name]).collect()) == [1, 2, 3]
        keks = inventory_from_metadata(metadata_location(spark, lake[name]), KeystoreKms(lake["keystore"])).keks
        assert {(k.master_key_id, k.master_key_version) for k in keks} == {
            (ALIAS if name == "by_alias" else KEY_ARN, "2")}  # encrypted-by-id kept as the table wrote it
    locations = [metadata_location(spark, lake[name]) for name in ("by_alias", "by_arn")]
    assert not where_used_in_metadata(locations, KEY, "1", KeystoreKms(lake["keystore"])).needed


def test_reencrypt_names_the_alias_keyed_table_s_key_by_its_kms_id(spark, lake):
    """Version 1 is marked compromised (above) under the keystore's name: re-encrypting the alias- and
    ARN-keyed tables takes it as their key's version, and the fresh KEK keeps the table's spelling."""
    from pyiceberg_crypto.keys.reencrypt import OperationError, reencrypt_table
    from pyiceberg_crypto.verify.compromise import compromise_report

    kms = FaceBlobKms(KeystoreKms(lake["keystore"]))
    for name, written in (("by_alias", ALIAS), ("by_arn", KEY_ARN)):
        with pytest.raises(OperationError, match="holds no version '9'"):
            reencrypt_table(spark, lake[name], compromised_master_keys=[(KEY, "9")], kms=kms)
        result = reencrypt_table(spark, lake[name], compromised_master_keys=[(ALIAS_ARN, "1")], kms=kms)
        assert result.compromised_versions == ["1"] and result.fresh_kek_master_version == "2"
        assert sorted(r[0] for r in spark.table(lake[name]).collect()) == [1, 2, 3]
        location = metadata_location(spark, lake[name])
        keks = inventory_from_metadata(location, KeystoreKms(lake["keystore"])).keks
        assert [(k.key_id, k.master_key_id) for k in keks] == [(result.fresh_kek, written)]
        proof = compromise_report(location, kms, compromised_master_keys=[(KEY, "1")], storage=True)
        assert proof.ok, proof.render_text()
