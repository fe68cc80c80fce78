"""Section 10, the whole lake: ``audit_catalog`` (one Spark job for the files of every table) and
``pyiceberg-crypto audit`` (no Spark) vs one ``verify_table`` call per table.

N encrypted tables of F data files each (full: 200 x 10; quick: 4 x 3), written by the shared
session into a catalog on a standalone Hive metastore on loopback (the CLI lists the tables over
its Thrift API). Taking turns in each repeat, after one untimed round:

* ``audit_catalog(spark, catalog, namespaces=[ns])``: the files of all tables in one Spark job
  (``local[2]``; its default, as for ``verify_table``, checks a batch of at most 32 files on the
  driver instead: quick sizes do);
* ``pyiceberg-crypto audit --metastore-uri ... --namespace ns --json`` in this process (the
  command's own code: Thrift listing, the files of all tables in one local batch);
* N calls of ``verify_table(spark, table)`` (reference; each call checks a table of 10 files on the
  driver, its default) and calls with ``driver_max_files=0`` (a Spark job per table) on the first 20 tables.

Every audit is checked: N tables, all OK, N x F data files. tables/s = N / wall seconds (goal:
the Spark-job audit at least 5x the tables/s of the separate calls).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import uuid

from bench.context import KMS_NAME, Context
from bench.harness import Goal, Row, Section, time_interleaved
from bench.workloads import FILES_COLUMNS, FILES_PROPERTIES, insert_files

TITLE = "10. The whole lake: one audit vs one verification per table"
CATALOG = "lake_audit"
#: The Spark-job-per-table reference runs on this many of the tables (tables/s is a rate: a Spark
#: job per table costs ~1-2 s here, 200 of them in each of 8 rounds would take most of an hour).
SPARK_JOB_SAMPLE = 20


def _build(ctx: Context, metastore_uri: str) -> tuple[str, list[str]]:
    from pyiceberg_crypto import config

    sizes = ctx.sizes
    spark = ctx.spark
    for key, value in config.catalog_settings(CATALOG, warehouse=ctx.data_dir / "audit-warehouse",
                                              metastore_uri=metastore_uri, kms_name=KMS_NAME).items():
        spark.conf.set(key, value)
    ns = f"audit_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {CATALOG}.{ns}")
    props = config.tblproperties_sql({**config.table_properties("bench-master"), **FILES_PROPERTIES})
    tables = []
    for i in range(sizes.audit_tables):
        table = f"{CATALOG}.{ns}.t{i:04d}"
        spark.sql(f"CREATE TABLE {table} ({FILES_COLUMNS}) USING iceberg {props}")
        insert_files(ctx, table, sizes.audit_files_per_table)
        tables.append(table)
        if (i + 1) % 25 == 0:
            ctx.log(f"audit: {i + 1} of {sizes.audit_tables} tables written")
    return ns, tables


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.cli.main import main
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.testing.metastore import StandaloneMetastore
    from pyiceberg_crypto.audit import audit_catalog
    from pyiceberg_crypto.verify import verify_table
    from bench import audit_kms

    sizes = ctx.sizes
    n, files = sizes.audit_tables, sizes.audit_files_per_table
    audit_kms.MASTER_KEYS.update(ctx.master_keys)
    kms = InMemoryKms(ctx.master_keys)
    with StandaloneMetastore(ctx.data_dir / "audit-metastore") as metastore:
        ctx.log(f"audit: writing {n} tables of {files} data files (metastore {metastore.uri})")
        ns, tables = _build(ctx, metastore.uri)
        spark = ctx.spark
        notes: dict[str, str] = {}

        def check(doc: dict, what: str) -> None:
            data = sum(t["by_status"].get("OK", 0) for t in doc["tables"])
            if not doc["ok"] or len(doc["tables"]) != n:
                raise RuntimeError(f"{what}: ok={doc['ok']}, {len(doc['tables'])} tables (expected {n})")
            if data < n * (files + 2):  # data files + a manifest list and a manifest each
                raise RuntimeError(f"{what}: {data} files OK, expected at least {n * (files + 2)}")

        def spark_audit():
            report = audit_catalog(spark, CATALOG, namespaces=[ns], kms=kms)
            doc = report.to_dict()
            check(doc, "audit_catalog")
            notes["spark"] = (f"{report.run.get('where')} job of {report.run.get('files_checked')} files; "
                              f"driver plan {report.timings['plan']:.2f} s, files {report.timings['run']:.2f} s")

        def cli_audit():
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(["audit", "--metastore-uri", metastore.uri, "--kms", "bench.audit_kms:kms",
                             "--namespace", ns, "--json"])
            doc = json.loads(out.getvalue())
            check(doc, "pyiceberg-crypto audit")
            if code != 0:
                raise RuntimeError(f"pyiceberg-crypto audit exited {code}")
            notes["cli"] = (f"{doc['run'].get('where')} batch of {doc['run'].get('files_checked')} files; plan "
                            f"{doc['timings']['plan']:.2f} s, files {doc['timings']['run']:.2f} s")

        sample = tables[:SPARK_JOB_SAMPLE]

        def separate(driver_max_files: int | None):
            chosen = tables if driver_max_files is None else sample

            def run_all():
                for table in chosen:
                    options = {} if driver_max_files is None else {"driver_max_files": driver_max_files}
                    report = verify_table(spark, table, kms=kms, **options)
                    if not report.ok:
                        raise RuntimeError(f"verify_table {table}: not OK")
            return run_all

        ctx.log(f"audit: timing (x{sizes.goal_repeats}, taking turns)")
        seconds = time_interleaved({"spark": spark_audit, "cli": cli_audit, "separate": separate(None),
                                    "separate_jobs": separate(0)}, sizes.goal_repeats)
    section = Section(
        TITLE,
        f"{n} encrypted tables of {files} data files each (one INSERT each), in one namespace of a catalog on a "
        "standalone Hive metastore on loopback. Contenders take turns in each of "
        f"{sizes.goal_repeats} repeats after one untimed round: `audit_catalog(spark, catalog, namespaces=[ns])` "
        "(the files of all tables in one Spark job, shared `local[2]` session; a batch of at most 32 files, as at "
        "quick sizes, is checked on the driver: the notes say where); "
        "`pyiceberg-crypto audit --metastore-uri ... --namespace ns --json` run in this process (Thrift listing, "
        "no Spark, the files of all tables in one local batch); and the reference, one `verify_table(spark, table)` "
        f"call per table ({files} files are checked on the driver, its default), also with `driver_max_files=0` "
        f"(a Spark job per table, on the first {SPARK_JOB_SAMPLE} tables: tables/s is a rate). Every audit was checked: all tables OK, every file OK. tables/s = tables / wall "
        "seconds; ms/table in the notes.",
    )

    def note(name: str, extra: str = "") -> str:
        median = statistics.median(seconds[name])
        return f"{median:.3g} s; {1000 * median / n:.1f} ms/table" + (f"; {extra}" if extra else "")

    section.rows.append(Row("audit", "separate", f"{n} x `verify_table` (files on the driver)", "tables/s",
                            [n / s for s in seconds["separate"]], note=note("separate"), short="separate calls"))
    section.rows.append(Row("audit", "separate_jobs", "`verify_table(driver_max_files=0)` per table (a Spark job each)",
                            "tables/s", [len(sample) / s for s in seconds["separate_jobs"]], refs=("separate",),
                            note=f"on the first {len(sample)} tables: {statistics.median(seconds['separate_jobs']):.3g} s, "
                                 f"{1000 * statistics.median(seconds['separate_jobs']) / len(sample):.1f} ms/table"))
    section.rows.append(Row("audit", "spark", "`audit_catalog` (one Spark job for all files)", "tables/s",
                            [n / s for s in seconds["spark"]], refs=("separate", "separate_jobs"),
                            note=note("spark", notes.get("spark", "")), headline=True))
    section.rows.append(Row("audit", "cli", "`pyiceberg-crypto audit` (no Spark)", "tables/s",
                            [n / s for s in seconds["cli"]], refs=("separate",), note=note("cli", notes.get("cli", "")),
                            headline=True))
    why = ("Both do the same work per table on the driver (read the metadata.json, unwrap the KEKs, decrypt the "
           "manifest list and manifest); the audit saves each call's catalog settings, metastore lookup through "
           "the JVM and thread pool, and the Spark job per table when files go to Spark.")
    section.goals.append(Goal(f"`audit_catalog` vs {n} separate `verify_table` calls", "spark", 5.0, ref="separate",
                              why=why))
    section.goals.append(Goal(f"`audit_catalog` vs {n} separate `verify_table` calls with a Spark job each", "spark",
                              5.0, ref="separate_jobs", why=why))
    return section
