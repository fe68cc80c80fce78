"""What the key lifecycle tests share: a keystore with one master key, a catalog whose KMS it is,
and an encrypted table in it (the session's one metastore serves every catalog: table names differ);
and the JVM-free commands run as their own process, with no pyspark (:func:`run_cli`)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms import KeystoreKms
from tests.conftest import add_catalog
from tests.testkit import metadata_location


def keystore_table(spark, work: Path, master: str, prefix: str):
    """(keystore path, catalog.db.name, the KMS registration to close) for a new, empty table."""
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    assert main(["keystore", "add", str(keystore), master]) == 0
    suffix = uuid.uuid4().hex[:6]
    catalog, kms_name = f"{prefix}_{suffix}", f"{prefix}-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    add_catalog(spark, catalog, warehouse=work / "wh", kms_name=kms_name)
    table = f"{catalog}.db.t_{suffix}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {config.tblproperties_sql(config.table_properties(master))}")
    return keystore, table, registration


#: The module whose ``main(argv)`` :func:`run_cli` runs: the command line, or the verification job.
CLI, VERIFY_JOB = "pyiceberg_crypto.cli.main", "pyiceberg_crypto.cli.verify_job"


def run_cli(*argv: str, main: str = CLI) -> subprocess.CompletedProcess:
    """``main(argv)`` of module ``main`` (:data:`CLI` or :data:`VERIFY_JOB`) in a fresh Python process
    that must never import pyspark (so never starts a JVM): it fails when pyspark or py4j was imported."""
    code = (f"import sys; from {main} import main; code = main(sys.argv[1:]); "
            "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules, 'pyspark was imported'; "
            "sys.exit(code)")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=180)


def kms_args(keystore: Path) -> list[str]:
    """The command line options of the keystore KMS at ``keystore``."""
    return ["--kms", "keystore", "--kms-property", f"keystore.path={keystore}"]


def metadata_doc(location: str) -> dict:
    return json.loads(Path(location.removeprefix("file:")).read_text())


class InsertDuringWrap(KeystoreKms):
    """The keystore KMS that lets another writer commit while a re-wrap is between read and commit: its
    first ``wrap_key`` INSERTs two rows into ``table`` through ``spark`` first."""

    def __init__(self, path, spark, table):
        super().__init__(path)
        self.spark, self.table, self.inserted = spark, table, False

    def wrap_key(self, key, wrapping_key_id):
        if not self.inserted:
            self.inserted = True
            self.spark.sql(f"INSERT INTO {self.table} VALUES (100), (101)")
        return super().wrap_key(key, wrapping_key_id)


@dataclass
class KeystoreCatalogs:
    """A keystore KMS registered in the session, and a Hive and a REST catalog that use it."""

    keystore: Path
    registration: object
    kms_name: str
    hive: str
    rest: str
    ns: str


def keystore_catalogs(spark, work: Path, keys: tuple[str, ...], *, prefix: str, metastore_uri: str,
                      rest_uri: str) -> KeystoreCatalogs:
    """A keystore with ``keys`` in ``work``, registered as KMS ``<prefix>-<suffix>``; catalogs
    ``<prefix>hive_<suffix>`` (the metastore at ``metastore_uri``) and ``<prefix>rest_<suffix>`` (the
    REST server at ``rest_uri``) using it; ``ns`` a fresh namespace name (not created). Close the
    registration when done."""
    keystore = work / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    for key in keys:
        assert main(["keystore", "add", str(keystore), key]) == 0
    suffix = uuid.uuid4().hex[:6]
    kms_name = f"{prefix}-{suffix}"
    registration = register_kms(spark, KeystoreKms(keystore), name=kms_name)
    hive, rest = f"{prefix}hive_{suffix}", f"{prefix}rest_{suffix}"
    add_catalog(spark, hive, warehouse=work / "wh", kms_name=kms_name, metastore_uri=metastore_uri)
    add_catalog(spark, rest, work / "rest-wh", catalog_type="rest", uri=rest_uri, kms_name=kms_name)
    return KeystoreCatalogs(keystore, registration, kms_name, hive, rest, f"ns_{suffix}")


@contextmanager
def encrypted_lakes(spark, work: Path, *, prefix: str, metastore_uri: str, rest_uri: str,
                    hive_tables: Iterable[tuple[str, str]], rest_tables: Iterable[tuple[str, str]]) -> Iterator[dict]:
    """:func:`keystore_catalogs` with the master keys the tables name, and in a fresh namespace of
    its Hive catalog the tables ``(name, master key)`` of ``hive_tables``, of its REST catalog those
    of ``rest_tables``, each encrypted with the rows 1 and 2. Yields ``{"keystore", "kms"``
    (:func:`kms_args`)``, "ns", "metastore", "rest"}`` (the services' URIs); closes the KMS
    registration after."""
    hive_tables, rest_tables = tuple(hive_tables), tuple(rest_tables)
    keys = tuple(dict.fromkeys(key for _, key in (*hive_tables, *rest_tables)))
    lake = keystore_catalogs(spark, work, keys, prefix=prefix, metastore_uri=metastore_uri, rest_uri=rest_uri)
    try:
        for catalog, tables in ((lake.hive, hive_tables), (lake.rest, rest_tables)):
            spark.sql(f"CREATE NAMESPACE {catalog}.{lake.ns}")
            for name, key in tables:
                table = f"{catalog}.{lake.ns}.{name}"
                properties = config.tblproperties_sql(config.table_properties(key))
                spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {properties}")
                spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        yield {"keystore": lake.keystore, "kms": kms_args(lake.keystore), "ns": lake.ns, "metastore": metastore_uri,
               "rest": rest_uri}
    finally:
        lake.registration.close()
