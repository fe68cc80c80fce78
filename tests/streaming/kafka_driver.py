"""A streaming driver for the crash tests, in its own process: Kafka -> encrypted Iceberg table
(``toTable``, exactly once by the checkpoint's offsets and Iceberg's commit of the epoch), under
VerifyEachCommit with a ledger, with the Python KMS either in the driver (``register_kms``) or
served by ``pyiceberg-crypto kms serve``.

``python -m tests.streaming.kafka_driver`` reads a JSON job from standard input (master keys in
hex: stdin, never argv or the environment; ``produce``: events the run writes to the topic first,
so that the test process needs no Spark session of its own), prints ``PROGRESS batch rows`` per micro-batch, then
``RESULT {json}`` once everything available was processed (exit 0), or ``FAILED <reason>``
(exit 1) when the query fails. ``row_delay_ms`` slows each row whose id is ``hold_from_id`` (0) or
more down (a JVM-side sleep) so that a test can kill the driver, or stop the KMS, while that batch
is in flight: the batches before it run at full speed, and the held one lasts many seconds, so
that a test delayed by a loaded machine still finds it in flight.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql.streaming import StreamingQueryListener

from pyiceberg_crypto import config
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.verify import VerifyEachCommit


class Progress(StreamingQueryListener):
    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        print(f"PROGRESS {progress.batchId} {progress.numInputRows}", flush=True)

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


def main() -> int:
    job = json.load(sys.stdin)
    kms_settings = ({"kms_service": job["kms_service"], "kms_token_file": job["kms_token_file"]}
                    if job.get("kms_service") else {"kms_name": job["kms_name"]})
    settings = config.spark_settings(job["catalog"], warehouse=job["warehouse"], metastore_dir=job["metastore_dir"],
                                     kafka=True, **kms_settings)
    builder = config.local_spark_builder("kafka-crash-driver", master="local[2]")
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    registration = None
    if not job.get("kms_service"):
        from pyiceberg_crypto.bridge import register_kms
        from pyiceberg_crypto.kms import InMemoryKms

        keys = {key_id: bytes.fromhex(value) for key_id, value in job["master_keys"].items()}
        registration = register_kms(spark, InMemoryKms(keys), name=job["kms_name"])
    if job.get("produce"):  # the test's events, written by the first run before its stream starts
        from tests.streaming.kafka import produce

        produce(spark, job["bootstrap_servers"], job["topic"], job["produce"])
    table = job["table"]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    properties = config.table_properties(job["key_id"])
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} (id bigint, payload string) USING iceberg "
              f"{config.tblproperties_sql(properties)}")
    # A KMS served to JVMs is the verifier's too, loaded in Python (the verifier unwraps keys itself).
    verifier_kms = KeystoreKms(job["keystore"]) if job.get("kms_service") else None
    listener = VerifyEachCommit(spark, table, state=job["ledger"], on_failure="log", kms=verifier_kms)
    spark.streams.addListener(listener)
    spark.streams.addListener(Progress())

    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", job["bootstrap_servers"])
              .option("subscribe", job["topic"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(job["per_trigger"])).load()
              .selectExpr("from_json(CAST(value AS STRING), 'id bigint, payload string') AS e").select("e.*"))
    if job.get("row_delay_ms"):  # a JVM-side sleep per row; reflect gives "null" (or NULL): every row stays
        delay, held = int(job["row_delay_ms"]), int(job.get("hold_from_id", 0))
        sleep = f"CAST(IF(id >= {held}, {delay}, 0) AS BIGINT)"
        events = events.where(f"coalesce(reflect('java.lang.Thread', 'sleep', {sleep}), '') <> 'keep-all'")
    query = (events.writeStream.option("checkpointLocation", job["checkpoint"])
             .trigger(processingTime="200 milliseconds").toTable(table))
    try:
        query.processAllAvailable()
    except Exception as exc:  # the query failed: say why, in one line
        print(f"FAILED {exception_line(exc)}", flush=True)
        return 1
    query.stop()
    spark.streams.removeListener(listener)
    listener.close()
    spark.sql(f"REFRESH TABLE {table}")
    ids = sorted(row.id for row in spark.table(table).select("id").collect())
    location = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0]
    print("RESULT " + json.dumps({
        "ids": ids,
        "metadata_location": location,
        "reports": [{"ok": r.ok, "mode": r.mode, "snapshots": list(r.snapshot_ids)} for r in listener.reports],
        "failures": len(listener.failures),
    }), flush=True)
    if registration is not None:
        registration.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
