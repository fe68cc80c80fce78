"""Spark applications the loopback tests run as separate processes (each its own driver JVM).

``python -m tests.testing.spark_apps SCENARIO`` reads a JSON job from standard input (catalog,
table, metastore URI, S3 endpoint, the test's master keys in hex: stdin, never argv or the
environment, so they appear in no process listing) and prints progress lines and one final
``RESULT {json}`` line. S3 credentials come from the environment the test passes.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.demo.external import run_demo
from tests.testkit import SPARK_JVM_OPTIONS, eventually

KMS_NAME = "test"


def open_session(job: dict, app_name: str):
    settings = config.spark_settings(
        job["catalog"], warehouse=job["warehouse"], metastore_uri=job["metastore_uri"], kms_name=KMS_NAME,
        s3_endpoint=job["s3_endpoint"], s3_region=job["s3_region"], s3_path_style_access=True,
        extra_catalog_properties={"cache-enabled": "false"},  # every read asks the metastore
    )
    builder = (
        config.local_spark_builder(app_name, master="local[1]")
        .config("spark.driver.memory", "768m")
        # Short-lived drivers on tiny tables: C1 only and the serial collector (as for the loopback
        # metastore) cut their run time on a 2-vCPU machine by about a third.
        .config("spark.driver.extraJavaOptions", SPARK_JVM_OPTIONS)
    )
    spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    keys = {key_id: bytes.fromhex(key) for key_id, key in job["master_keys"].items()}
    registration = register_kms(spark, InMemoryKms(keys), name=KMS_NAME)
    return spark, registration


def say(*parts) -> None:
    print(*parts, flush=True)


def short_error(exc: BaseException) -> str:
    """The first Java exception line of a Py4J error (else the Python one), without a stack trace."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    java = [line for line in lines if "Exception: " in line or "Error: " in line]
    return (java[0] if java else f"{type(exc).__name__}: {lines[0] if lines else ''}")[:400]


def create_table(spark, job: dict, columns: str) -> None:
    table = job["table"]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    extra = {"commit.retry.num-retries": "30", "commit.retry.min-wait-ms": "50", "commit.retry.max-wait-ms": "2000"}
    props = config.tblproperties_sql(config.table_properties(job["key_id"], extra=extra))
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg {props}")


def read_back(spark, table: str, verify: bool = True) -> dict:
    """Rows, snapshot count and current metadata file as a fresh catalog load sees them (and the
    whole-table verifier's verdict, unless ``verify`` is False)."""
    rows = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table}").collect())
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
    metadata = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC").first()[0]
    result = {"rows": rows, "snapshots": snapshots, "metadata_json": metadata}
    return {**result, **verify_with_spark(spark, table)} if verify else result


def wait_for_file(path: str, timeout: float = 300) -> None:
    """Until the test creates ``path`` (its signal to go on)."""
    eventually(lambda: os.path.exists(path), timeout, interval=0.05, message=f"{path} to appear")


def round_trip(spark, job: dict, kms) -> dict:
    """The services demo's round trip and verifiers (what the docker client runs), then try to
    change / remove the table's key id."""
    table = job["table"]
    demo = run_demo(spark, kms, table, key_id=job["key_id"])
    demo_result = {
        "demo_ok": demo.ok,
        "demo_problems": [f"{f.kind} {f.path}: {f.status} {f.detail}"
                          for f in demo.in_spark.not_ok() + demo.pure_python.not_ok()][:10],
        "verify_table": report_dict(demo.in_spark),
    }
    refused = {}
    for name, statement in {
        "change": f"ALTER TABLE {table} SET TBLPROPERTIES ('encryption.key-id'='other-key')",
        "remove": f"ALTER TABLE {table} UNSET TBLPROPERTIES ('encryption.key-id')",
    }.items():
        try:
            spark.sql(statement)
            refused[name] = None
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            refused[name] = short_error(exc)
    key_id = spark.sql(f"SHOW TBLPROPERTIES {table} ('encryption.key-id')").first().value
    return {"key_id": key_id, "refused": refused, **demo_result, **read_back(spark, table, verify=False)}


def verify_with_spark(spark, table: str) -> dict:
    """The whole-table verifier: metastore entry, keys and manifests on the driver, files in Spark tasks."""
    from pyiceberg_crypto.verify import verify_table

    return {"verify_table": report_dict(verify_table(spark, table, all_snapshots=True))}


def report_dict(report) -> dict:
    problems = [f"{c.name}: {c.status} {c.detail}" for c in report.failed_checks()]
    problems += [f"{f.kind} {f.path}: {f.status} {f.detail}" for f in report.not_ok()]
    return {"ok": report.ok, "summary": report.summary(), "problems": problems[:10]}


def writer(spark, job: dict, kms) -> dict:
    """Append ``commits`` single-row commits, starting when ``start_file`` appears.

    With ``create`` it creates the table first; with ``read_after`` it waits for that file once
    done, then reads the table back (after every writer has finished)."""
    table, writer_id = job["table"], job["writer"]
    if job.get("create"):
        create_table(spark, job, "writer int, n int")
    # The other writer creates the table (an error: not created yet); loaded and warm: then wait together.
    eventually(lambda: spark.sql(f"SELECT count(*) FROM {table}").collect(), 300, interval=0.5,
               message=f"the other writer to create {table}")
    say("READY")
    wait_for_file(job["start_file"])
    for n in range(job["commits"]):
        spark.sql(f"INSERT INTO {table} VALUES ({writer_id}, {n})")
        say("COMMITTED", n)
    say("DONE")
    result = {"writer": writer_id, "commits": job["commits"]}
    if job.get("read_after"):
        wait_for_file(job["read_after"])
        result.update(read_back(spark, table))
    return result


def loop_writer(spark, job: dict, kms) -> dict:
    """Commit one row at a time until ``stop_file`` appears; a failed commit is recorded, not fatal.
    Then read the table back (in the same application, which outlived the metastore's restart)."""
    table = job["table"]
    create_table(spark, job, "writer int, n int")
    committed, failed = [], []
    n = 0
    while not os.path.exists(job["stop_file"]):
        try:
            spark.sql(f"INSERT INTO {table} VALUES ({job['writer']}, {n})")
            committed.append(n)
            say("COMMITTED", n)
        except Exception as exc:  # noqa: BLE001 - metastore down: record and go on
            failed.append(n)
            say("FAILED", n, short_error(exc))
            time.sleep(0.5)  # not a wait for a condition: the pace of retries while the metastore is down
        n += 1
    return {"committed": committed, "failed": failed, **read_back(spark, table)}


SCENARIOS = {"round_trip": round_trip, "writer": writer, "loop_writer": loop_writer}


def main() -> int:
    scenario = SCENARIOS[sys.argv[1]]
    job = json.loads(sys.stdin.read())
    started = time.monotonic()
    spark, registration = open_session(job, f"loopback-{sys.argv[1]}")
    say(f"TIMING session {time.monotonic() - started:.1f}s")
    try:
        result = scenario(spark, job, registration.kms)
        say(f"TIMING scenario {time.monotonic() - started:.1f}s")
        result["kms_calls"] = {"wrap": registration.stats.wrap, "unwrap": registration.stats.unwrap}
        say("RESULT", json.dumps(result))
        return 0
    except Exception:  # noqa: BLE001 - printed for the test's failure message
        traceback.print_exc()
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
