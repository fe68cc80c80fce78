"""Section 12, key commands without a JVM: ``pyiceberg-crypto keys where-used`` asking a Hive
metastore over Thrift (``--metastore-uri``, no Spark) vs today's Spark path (``--warehouse``: a
local Spark session started by the command), both as a fresh ``python`` process, as a user runs them.

N encrypted tables (full and quick: 20, ``Sizes.where_used_tables``) of one INSERT each, written by
the shared session into a catalog on a standalone Hive metastore on loopback. Rows: the JVM-free
command (goal: its median under 5 s), the command's Spark path (full sizes only: quick mode starts no
Spark application besides the shared session), and ``where_used_in_catalog`` in the warm shared
session (no start-up at all). Every answer is checked: N tables checked, N uses of the master key.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from bench.context import KMS_NAME, Context
from bench.harness import Goal, Row, Section, not_measured, time_interleaved

TITLE = "12. Key commands without a JVM: `keys where-used`"
CATALOG = "lake_keys"
MASTER = "bench-master"
ROOT = Path(__file__).resolve().parents[1]
#: The KMS for the command: where-used reads versions from the wrapped blobs' headers only, so the
#: fresh process needs no key bytes (bench.audit_kms's empty key map).
KMS = "bench.audit_kms:kms"


def _build(ctx: Context, metastore_uri: str) -> str:
    from pyiceberg_crypto import config

    spark = ctx.spark
    for key, value in config.catalog_settings(CATALOG, warehouse=ctx.data_dir / "keys-warehouse",
                                              metastore_uri=metastore_uri, kms_name=KMS_NAME).items():
        spark.conf.set(key, value)
    ns = f"keys_{uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {CATALOG}.{ns}")
    props = config.tblproperties_sql(config.table_properties(MASTER))
    for i in range(ctx.sizes.where_used_tables):
        table = f"{CATALOG}.{ns}.t{i:03d}"
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg {props}")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    return ns


def _command(argv: list[str], n: int) -> None:
    """``pyiceberg-crypto keys where-used ...`` in a fresh process; checked: n tables, n uses."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "pyiceberg_crypto.cli.main", "keys", "where-used", MASTER,
                           "--kms", KMS, "--catalog", CATALOG, "--json", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"keys where-used exited {done.returncode}: {done.stderr[-2000:]}")
    doc = json.loads(done.stdout)
    if len(doc["checked"]) < n or len(doc["uses"]) < n or doc["unchecked"]:
        raise RuntimeError(f"keys where-used: {len(doc['checked'])} checked, {len(doc['uses'])} uses (expected {n})")


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.keys import where_used_in_catalog
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.testing.metastore import StandaloneMetastore

    n = ctx.sizes.where_used_tables
    kms = InMemoryKms(ctx.master_keys)
    with StandaloneMetastore(ctx.data_dir / "keys-metastore") as metastore:
        ctx.log(f"keys: writing {n} tables (metastore {metastore.uri})")
        ns = _build(ctx, metastore.uri)

        def warm():
            found = where_used_in_catalog(ctx.spark, CATALOG, MASTER, None, kms)
            if len([u for u in found.uses if f".{ns}." in u.table]) != n:
                raise RuntimeError("where_used_in_catalog: not every table found")

        contenders = {"jvm_free": lambda: _command(["--metastore-uri", metastore.uri], n), "warm": warm}
        if not ctx.quick:
            contenders["spark"] = lambda: _command(["--metastore-uri", metastore.uri, "--warehouse",
                                                    str(ctx.data_dir / "keys-warehouse")], n)
        ctx.log(f"keys: timing (x{ctx.sizes.goal_repeats}, taking turns)")
        seconds = time_interleaved(contenders, ctx.sizes.goal_repeats)
    section = Section(
        TITLE,
        f"`pyiceberg-crypto keys where-used {MASTER} --json` over {n} encrypted tables in a catalog on a standalone "
        "Hive metastore on loopback, each run a fresh `python -m pyiceberg_crypto.cli.main` process: with "
        "`--metastore-uri` (the metastore asked over Thrift, no Spark, no JVM) and with `--warehouse` (today's "
        "Spark path: the command starts a local Spark session on the same metastore). Reference for both: "
        "`where_used_in_catalog` in the warm shared session. Contenders take turns; every answer was checked "
        "(all tables checked, each needs the key). Wall seconds.",
    )
    section.rows.append(Row("keys", "warm", "`where_used_in_catalog` (warm shared Spark session)", "s",
                            seconds["warm"], short="warm session"))
    section.rows.append(Row("keys", "jvm_free", "`keys where-used --metastore-uri` (fresh process, no JVM)", "s",
                            seconds["jvm_free"], refs=("warm",), headline=True,
                            note=f"median {statistics.median(seconds['jvm_free']):.2f} s for {n} tables"))
    if "spark" in seconds:
        section.rows.append(Row("keys", "spark", "`keys where-used --warehouse` (fresh process, local Spark)", "s",
                                seconds["spark"], refs=("jvm_free", "warm")))
    else:
        section.rows.append(not_measured("keys", "spark", "`keys where-used --warehouse` (fresh process, local Spark)",
                                         "s", "quick mode starts no Spark application besides the shared session",
                                         refs=("jvm_free", "warm")))
    section.goals.append(Goal(f"`keys where-used` over {n} tables answers in under 5 s without a JVM", "jvm_free",
                              5.0, at_most=True, why="a fresh Python process: interpreter and package imports, "
                                                     "then one Thrift listing and one metadata.json per table"))
    return section
