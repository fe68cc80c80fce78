"""The PySpark application the Trino and AWS-face tests read from (run as its own process: it needs
the AWS bundle and a JVM that trusts the face's CA, which the shared test session has not).

    python tests/trino/spark_writer.py job.json   # prints one line: RESULT {...}

job.json: {"metastore_uri", "warehouse", "keystore", "key_id", "face_endpoint", "truststore",
"region", "moto_endpoint", "moto_key_id", "moto_region" (optional)}. Credentials for the face (and
moto) come from the environment (AWS_ACCESS_KEY_ID ...), as Iceberg's AWS client reads them.

Tables (database ``db`` in one Hive metastore):

- ``orders``: through the Py4J bridge with the keystore Python KMS (raw keystore-wrapped KEKs);
  partitioned by ``region``, two commits.
- ``orders_face``: through Iceberg's own ``AwsKeyManagementClient`` pointed at the AWS face (no
  pyiceberg-crypto jar involved in its key calls; the face's blobs).
- ``orders_plain``: the plaintext twin of ``orders``.
- ``orders_dv``: like ``orders``, then a merge-on-read DELETE (a deletion vector).
- ``orders_stream``: made as the stream how-to makes its tables (format 3, merge-on-read DELETE,
  UPDATE and MERGE), then one MERGE upsert that deletes a row: a deletion vector (Puffin).
- ``orders_trino``: the reader-set profile (``config.table_properties(key, readers=("trino",))``),
  then DELETE, UPDATE and MERGE: copy-on-write, no deletion vector.
- ``orders_converted``: like ``orders_stream`` (a DV), then converted: copy-on-write modes and
  ``rewrite_data_files`` with ``delete-file-threshold=1`` (the DV folded in), then
  ``config.declare_readers(..., ["trino"])``.
- ``orders_moto``: through ``AwsKeyManagementClient`` against moto (AWS KMS itself), when given.
- ``orders_slipped``: encrypted, plus one plaintext Parquet file appended with Iceberg's own API
  (a manifest entry without key metadata); what Trino does with it is asserted by the test.
- ``orders_swapped``: encrypted; the test then puts a plaintext Parquet file's bytes where one of
  its encrypted data files was (the manifest still carries that file's key metadata).
- ``orders_spare``: encrypted, read by Trino only after the KMS service stopped.
- ``<rest_namespace>.orders`` in the REST catalog at ``rest_uri`` (the bridge's encrypting REST
  catalog, keystore KMS), when given.
- ``orders_bao``: through the bridge with OpenBao's Transit (the ``vault`` Python KMS), when
  ``vault_properties`` and ``vault_key_id`` are given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms.keystore import KeystoreKms

ROWS_1 = "(1, 'eu', 10.5), (2, 'us', 20.0), (3, 'eu', 30.25)"
ROWS_2 = "(4, 'ap', 40.0), (5, 'us', 50.5)"
SCHEMA = "(id bigint, region string, amount double)"


def main(job_file: str) -> None:
    job = json.loads(Path(job_file).read_text())
    warehouse, uri = job["warehouse"], job["metastore_uri"]
    settings = config.spark_settings("bridge", warehouse=warehouse, metastore_uri=uri, kms_name="keystore")
    settings.update(config.jar_settings(aws=True))
    aws_client = "org.apache.iceberg.aws.AwsKeyManagementClient"
    settings.update(config.catalog_settings(
        "face", warehouse=warehouse, metastore_uri=uri, kms_impl=aws_client,
        extra_catalog_properties={"kms.endpoint": job["face_endpoint"], "client.region": job["region"]}))
    if job.get("moto_endpoint"):
        settings.update(config.catalog_settings(
            "moto", warehouse=warehouse, metastore_uri=uri, kms_impl=aws_client,
            extra_catalog_properties={"kms.endpoint": job["moto_endpoint"], "client.region": job["moto_region"]}))
    if job.get("vault_properties"):
        settings.update(config.catalog_settings("bao", warehouse=warehouse, metastore_uri=uri, kms_name="vault"))
    if job.get("rest_uri"):  # the same writer through the encrypting REST catalog (the test's REST server)
        settings.update(config.catalog_settings("restcat", warehouse=warehouse, catalog_type="rest",
                                                uri=job["rest_uri"], kms_name="keystore"))
    trust = f"-Djavax.net.ssl.trustStore={job['truststore']} -Djavax.net.ssl.trustStoreType=PKCS12"
    settings["spark.driver.extraJavaOptions"] = (settings.get("spark.driver.extraJavaOptions", "") + " " + trust).strip()
    builder = config.local_spark_builder("trino-tables", master="local[1]")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    registration = register_kms(spark, KeystoreKms(job["keystore"]), name="keystore")
    if job.get("vault_properties"):  # (c): OpenBao's Transit behind the bridge, later behind the face
        from pyiceberg_crypto.kms.loader import load_kms

        register_kms(spark, load_kms("vault", job["vault_properties"]), name="vault")
    encrypted = config.tblproperties_sql(config.table_properties(job["key_id"]))
    plain = "TBLPROPERTIES ('format-version'='3')"
    result: dict = {}

    def create(table: str, props: str, catalog: str = "bridge") -> None:
        spark.sql(f"CREATE TABLE {catalog}.db.{table} {SCHEMA} USING iceberg PARTITIONED BY (region) {props}")
        spark.sql(f"INSERT INTO {catalog}.db.{table} VALUES {ROWS_1}")
        spark.sql(f"INSERT INTO {catalog}.db.{table} VALUES {ROWS_2}")

    spark.sql("CREATE NAMESPACE IF NOT EXISTS bridge.db")
    create("orders", encrypted)
    create("orders_plain", plain)
    create("orders_face", encrypted, catalog="face")
    create("orders_dv", encrypted.replace(")", ", 'write.delete.mode'='merge-on-read')", 1))
    spark.sql("DELETE FROM bridge.db.orders_dv WHERE id = 3")
    # The stream how-to's table settings, and its MERGE upsert (a change feed's delete of id 3).
    stream_props = config.tblproperties_sql(config.table_properties(job["key_id"], extra={
        "write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", "write.merge.mode": "merge-on-read"}))
    changes = "SELECT * FROM VALUES ('D', 3L, 'eu', 30.25D), ('U', 4L, 'ap', 44.0D) AS c(op, id, region, amount)"
    upsert = ("MERGE INTO bridge.db.{t} t USING ({changes}) c ON t.id = c.id WHEN MATCHED AND c.op = 'D' THEN DELETE "
              "WHEN MATCHED THEN UPDATE SET t.amount = c.amount "
              "WHEN NOT MATCHED AND c.op <> 'D' THEN INSERT (id, region, amount) VALUES (c.id, c.region, c.amount)")
    for table in ("orders_stream", "orders_converted"):
        create(table, stream_props)
        spark.sql(upsert.format(t=table, changes=changes))
    result["dvs_before_conversion"] = _dvs(spark, "bridge.db.orders_converted")
    spark.sql("ALTER TABLE bridge.db.orders_converted SET TBLPROPERTIES ('write.delete.mode'='copy-on-write', "
              "'write.update.mode'='copy-on-write', 'write.merge.mode'='copy-on-write')")
    spark.sql("CALL bridge.system.rewrite_data_files(table => 'db.orders_converted', "
              "options => map('delete-file-threshold', '1'))")
    config.declare_readers(spark, "bridge.db.orders_converted", ["spark", "trino"])
    # The reader-set profile, then every row-level change.
    create("orders_trino", config.tblproperties_sql(config.table_properties(job["key_id"], readers=("trino",))))
    spark.sql("DELETE FROM bridge.db.orders_trino WHERE id = 3")
    spark.sql("UPDATE bridge.db.orders_trino SET amount = 44.0 WHERE id = 4")
    spark.sql(upsert.format(t="orders_trino", changes="SELECT * FROM VALUES ('U', 5L, 'us', 55.5D), "
                            "('I', 6L, 'eu', 60.0D) AS c(op, id, region, amount)"))
    for table in ("orders_stream", "orders_converted", "orders_trino"):
        result[f"dvs_{table}"] = _dvs(spark, f"bridge.db.{table}")
    if job.get("moto_endpoint"):
        moto_props = config.tblproperties_sql(config.table_properties(job["moto_key_id"]))
        create("orders_moto", moto_props, catalog="moto")
    if job.get("vault_properties"):
        create("orders_bao", config.tblproperties_sql(config.table_properties(job["vault_key_id"])), catalog="bao")
    if job.get("rest_uri"):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS restcat.{job['rest_namespace']}")
        spark.sql(f"CREATE TABLE restcat.{job['rest_namespace']}.orders {SCHEMA} USING iceberg {encrypted}")
        spark.sql(f"INSERT INTO restcat.{job['rest_namespace']}.orders VALUES {ROWS_1}")
        result["orders_rest"] = {"rows": sorted([r[0], r[1], r[2]] for r in
                                                spark.table(f"restcat.{job['rest_namespace']}.orders").collect())}
    # A plaintext Parquet file slipped into an encrypted table: written by the plaintext twin,
    # then appended to the encrypted table's metadata by Iceberg's own API (no key metadata).
    create("orders_slipped", encrypted)
    create("orders_swapped", encrypted)  # the test swaps one data file's bytes for a plaintext file
    create("orders_spare", encrypted)    # read first after the face stopped
    jvm = spark._jvm
    plain_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, "bridge.db.orders_plain")
    slipped = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, "bridge.db.orders_slipped")
    first_plain = plain_table.currentSnapshot().addedDataFiles(plain_table.io()).iterator().next()
    slipped.newAppend().appendFile(first_plain).commit()
    result["slipped_file"] = str(first_plain.location())

    for table, catalog in (("orders", "bridge"), ("orders_plain", "bridge"), ("orders_face", "face"),
                           ("orders_dv", "bridge"), ("orders_stream", "bridge"), ("orders_converted", "bridge"),
                           ("orders_trino", "bridge"), ("orders_moto", "moto"), ("orders_slipped", "bridge"),
                           ("orders_swapped", "bridge"), ("orders_spare", "bridge"), ("orders_bao", "bao")):
        if (catalog == "moto" and not job.get("moto_endpoint")) or (catalog == "bao" and not job.get("vault_properties")):
            continue
        name = f"{catalog}.db.{table}"
        try:
            rows = sorted([r[0], r[1], r[2]] for r in spark.table(name).collect())
        except Exception as exc:  # the slipped table may not read in Spark either: say so
            rows = "ERROR " + str(exc).splitlines()[0][:500]
        result[table] = {
            "rows": rows,
            "snapshots": sorted(r[0] for r in spark.sql(f"SELECT snapshot_id FROM {name}.snapshots").collect()),
            "files": sorted([r[0], r[1]] for r in spark.sql(f"SELECT file_path, record_count FROM {name}.files")
                            .collect()),
            "metadata": spark.sql(f"SELECT file FROM {name}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1")
            .first()[0],
        }
    result["bridge_calls"] = [registration.stats.wrap, registration.stats.unwrap]
    result["data_magic"] = sorted({p.read_bytes()[:4].decode("latin-1")
                                   for p in Path(warehouse).rglob("*.parquet") if "orders_plain" not in str(p)})
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


def _dvs(spark, table: str) -> int:
    """Deletion vectors (Puffin delete files) in the table's current snapshot."""
    return spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE upper(file_format) = 'PUFFIN'").first()[0]


if __name__ == "__main__":
    main(sys.argv[1])
