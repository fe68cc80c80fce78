"""Section 7, read: the JVM-free reader ``read_table`` / ``scan`` vs Spark ``local[2]`` vs PyArrow.

One encrypted Iceberg table of 2,000,000 rows (quick: 100,000) in 8 data files (one INSERT of 8
Spark tasks, ``write.distribution-mode=none``: one file per task), written by Spark through the
shared ``local[2]`` session (encrypted with the bench's Python KMS), columns ``id`` bigint,
``category`` string (100 values), ``name`` string (64-char hex), ``score`` double, ``ts``
timestamp (section 2's columns); and the same rows in a plaintext Iceberg table of the same layout.

Warm contenders, taking turns in each repeat after an untimed warm-up (this process, warm page cache):

* ``read_table(metadata_json, kms)`` of every column, and of 2 columns (``id``, ``score``);
* ``scan(metadata_json, kms)`` consumed batch by batch (each batch dropped);
* Spark in the warm shared session (JVM start excluded): ``spark.table(t).toArrow()``, the 2
  columns ``.select(...).toArrow()``, and ``.toPandas()`` (Arrow-enabled conversion);
* PyArrow ``pq.read_table(files)`` of the plaintext table's data files (all columns, 2 columns):
  the floor (no decryption, no Iceberg metadata).

Fresh processes (interpreter start and imports included, timed from just before the process is
started to the moment it holds the table in memory; contenders take turns in each repeat after one
untimed run of each): ``python -c`` building a Spark session with the package's builders
(``config.local_spark_builder`` + ``configure_spark_with_encryption(spark_settings(...))``, as
:mod:`bench.context` does), registering the Python KMS and running ``toArrow()``; ``python -c``
running ``read_table`` and ``scan`` (also ``scan(max_workers=1)``, for its peak RSS). The embedded Derby metastore admits one JVM at a time and the
shared session holds the bench's: the fresh Spark processes open a second metastore (its own Derby
directory) in which the table was registered once, untimed, with Iceberg's ``register_table``
procedure on the same metadata.json (Iceberg wires encryption into the Hive catalog only, so a
path-based read would not decrypt). The reader needs no metastore: it is given the metadata.json.

rows/s = rows / s. GB/s = stored bytes of what is read / s: the data files for the all-column
contenders, the selected column chunks (``total_compressed_size`` from each footer) for the
2-column ones; the plaintext table's bytes for PyArrow.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.context import CATALOG, KMS_NAME, Context
from bench.harness import Goal, Row, Section, not_measured, time_interleaved
from bench.workloads import FILES_PROPERTIES, create_table, current_metadata_json
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.formats.parquet.reader import ParquetFileReader, ParquetKeys
from pyiceberg_crypto.formats.parquet.structs import ColumnMetaDataF

TITLE = "7. Read: `read_table` vs Spark (local[2]) vs PyArrow on plaintext"
COLUMNS = "id bigint, category string, name string, score double, ts timestamp"
TWO_COLUMNS = ["id", "score"]
FILES = 8
ROWS_FULL, ROWS_QUICK = 2_000_000, 100_000
ROOT = Path(__file__).resolve().parents[1]
WORKERS = min(8, (os.cpu_count() or 2) + 2)  # the reader's default thread pool (``scan``'s max_workers=None)


def _select(rows: int) -> str:
    return (
        "SELECT id, concat('category-', id % 100), sha2(cast(id AS string), 256), rand(7), "
        f"timestamp_micros(1700000000000000 + id * 1000) FROM range(0, {rows}, 1, {FILES})"
    )


def write_tables(ctx: Context, rows: int) -> tuple[str, str]:
    """The encrypted and the plaintext table (same rows, same layout: ``FILES`` data files each)."""
    tables = []
    for name, encrypted in (("read_enc", True), ("read_plain", False)):
        table = create_table(ctx, name, COLUMNS, encrypted=encrypted, properties=FILES_PROPERTIES)
        ctx.spark.sql(f"INSERT INTO {table} {_select(rows)}")
        tables.append(table)
    return tables[0], tables[1]


def data_files(ctx: Context, table: str) -> list:
    """``(path, size, key_metadata)`` rows of the table's data files; raises unless ``FILES`` of them."""
    files = ctx.spark.sql(f"SELECT file_path, file_size_in_bytes, key_metadata FROM {table}.files").collect()
    if len(files) != FILES:
        raise RuntimeError(f"{table}: expected {FILES} data files, Iceberg wrote {len(files)}")
    return files


def chunk_bytes(path: str, keys: ParquetKeys | None, columns: list[str]) -> int:
    """Stored bytes of the column chunks of ``columns`` in one (encrypted or plain) Parquet file."""
    if keys is None:
        meta = pq.ParquetFile(path).metadata
        return sum(meta.row_group(g).column(c).total_compressed_size for g in range(meta.num_row_groups)
                   for c in range(meta.num_columns) if meta.row_group(g).column(c).path_in_schema in columns)
    with open(path, "rb") as f:
        return sum(info.meta.get(ColumnMetaDataF.TOTAL_COMPRESSED_SIZE)
                   for info in ParquetFileReader(f, keys).column_chunks() if info.path in columns)


# ------------------------------------------------------------------ fresh processes

#: A fresh interpreter reading the table with the package's reader; request on stdin.
READER_CODE = """
import json, sys, time
request = json.loads(sys.stdin.read())
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.read import read_table, scan
kms = InMemoryKms({k: bytes.fromhex(v) for k, v in request["master_keys"].items()})
imported = time.time()
if request["mode"] == "scan":
    rows = sum(batch.num_rows for batch in scan(request["metadata"], kms, max_workers=request.get("max_workers")))
else:
    rows = read_table(request["metadata"], kms).num_rows
done = time.time()
with open("/proc/self/status") as status:  # VmHWM: this process's peak RSS (ru_maxrss would
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))  # include the parent's: fork)
print("RESULT " + json.dumps({"done": done, "rows": rows, "imported": imported, "rss_mib": peak_kib / 1024}), flush=True)
"""

#: A fresh interpreter starting Spark local[2] (package builders, Python KMS) and reading the table
#: with ``toArrow()``; with ``"register"``, it registers the table in its metastore first (untimed setup).
SPARK_CODE = """
import json, os, sys, time
request = json.loads(sys.stdin.read())
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import InMemoryKms
builder = config.local_spark_builder("bench-read-fresh").config("spark.driver.memory", "2g")
settings = config.spark_settings(request["catalog"], warehouse=request["warehouse"],
                                 metastore_dir=request["metastore"], kms_name=request["kms_name"])
spark = config.configure_spark_with_encryption(builder, settings).getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
register_kms(spark, InMemoryKms({k: bytes.fromhex(v) for k, v in request["master_keys"].items()}),
             name=request["kms_name"])
started = time.time()
table = request["table"]
if request.get("register"):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    namespace_table = table.split(".", 1)[1]
    spark.sql(f"CALL {request['catalog']}.system.register_table(table => '{namespace_table}', "
              f"metadata_file => '{request['metadata']}')")
rows = spark.table(table).toArrow().num_rows
done = time.time()
print("RESULT " + json.dumps({"done": done, "rows": rows, "imported": started}), flush=True)
spark.stop()
"""


def _fresh(code: str, request: dict, what: str) -> dict:
    """Run ``python -c code`` with ``request`` on stdin; its RESULT plus ``seconds`` (from just
    before the process started to the moment it held the table) and ``setup`` (to imports /
    session done)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start = time.time()
    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(request), cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{what} subprocess failed ({result.returncode}): {result.stderr[-2000:]}")
    answer = json.loads(lines[-1].removeprefix("RESULT "))
    answer["seconds"] = answer["done"] - start
    answer["setup"] = answer["imported"] - start
    return answer


# ------------------------------------------------------------------ the section


def run(ctx: Context) -> Section:
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.read import read_table, scan

    rows = ROWS_QUICK if ctx.quick else ROWS_FULL
    spark = ctx.spark
    ctx.log(f"read: Spark writes {rows:,} rows twice (encrypted, plaintext), {FILES} files each")
    enc_table, plain_table = write_tables(ctx, rows)
    metadata = current_metadata_json(ctx, enc_table)
    enc_files, plain_files = data_files(ctx, enc_table), data_files(ctx, plain_table)
    enc_bytes = sum(f.file_size_in_bytes for f in enc_files)
    plain_bytes = sum(f.file_size_in_bytes for f in plain_files)
    plain_paths = [f.file_path.removeprefix("file:") for f in plain_files]
    enc_cols_bytes = 0
    for f in enc_files:
        key = StandardKeyMetadata.parse(bytes(f.key_metadata))
        enc_cols_bytes += chunk_bytes(f.file_path.removeprefix("file:"),
                                      ParquetKeys(footer_key=key.encryption_key, aad_prefix=key.aad_prefix), TWO_COLUMNS)
    plain_cols_bytes = sum(chunk_bytes(p, None, TWO_COLUMNS) for p in plain_paths)

    kms = InMemoryKms(ctx.master_keys)

    def expect(n: int, what: str) -> None:
        if n != rows:
            raise RuntimeError(f"{what} returned {n} rows, the table has {rows}")

    def scan_batches() -> None:
        expect(sum(batch.num_rows for batch in scan(metadata, kms)), "scan")

    arrow_key = "spark.sql.execution.arrow.pyspark.enabled"
    previous = spark.conf.get(arrow_key, "false")
    spark.conf.set(arrow_key, "true")  # toPandas through Arrow (row by row it would take minutes)
    try:
        ctx.log("read: warm contenders (this process, shared Spark session)")
        warm = time_interleaved({
            "rt_all": lambda: expect(read_table(metadata, kms).num_rows, "read_table"),
            "rt_cols": lambda: expect(read_table(metadata, kms, columns=TWO_COLUMNS).num_rows, "read_table(columns)"),
            "scan": scan_batches,
            "spark_arrow": lambda: expect(spark.table(enc_table).toArrow().num_rows, "toArrow"),
            "spark_cols": lambda: expect(spark.table(enc_table).select(*TWO_COLUMNS).toArrow().num_rows,
                                         "select().toArrow"),
            "spark_pandas": lambda: expect(len(spark.table(enc_table).toPandas()), "toPandas"),
            "arrow_plain": lambda: expect(pq.read_table(plain_paths).num_rows, "pq.read_table"),
            "arrow_plain_cols": lambda: expect(pq.read_table(plain_paths, columns=TWO_COLUMNS).num_rows,
                                               "pq.read_table(columns)"),
        }, ctx.sizes.goal_repeats)
    finally:
        spark.conf.set(arrow_key, previous)

    fresh = _fresh_runs(ctx, enc_table, metadata, rows)

    def rps(seconds: list[float]) -> list[float]:
        return [rows / s for s in seconds]

    def gbps_note(size: int, seconds: list[float], extra: str = "") -> str:
        median = statistics.median(seconds)
        return f"{size / median / 1e9:.3g} GB/s; {median:.2f} s" + (f"; {extra}" if extra else "")

    section = Section(TITLE, (
        f"{rows:,} rows (`{COLUMNS}`, section 2's values) in {FILES} data files, written by Spark "
        f"(`local[2]`, one INSERT of {FILES} tasks); encrypted table {enc_bytes / 2**20:.1f} MiB of data files, "
        f"plaintext twin {plain_bytes / 2**20:.1f} MiB; 2 columns = `{', '.join(TWO_COLUMNS)}` "
        f"({enc_cols_bytes / 2**20:.1f} MiB of encrypted column chunks). Warm rows: this process, warm page "
        "cache, contenders take turns in each repeat; `read_table` / `scan` with their default thread pool "
        f"({WORKERS} workers on this VM); Spark = the shared `local[2]` session (JVM "
        "started, JIT warm), `toPandas` with Arrow enabled. Fresh rows: a new `python -c` process per run, "
        "timed from just before it starts to the table in its memory (interpreter, imports and, for Spark, "
        "JVM + session + metastore start included); Spark's uses a second embedded metastore in which the "
        "same metadata.json was registered (Derby admits one JVM). rows/s = rows / s; the note gives GB/s = "
        "stored bytes read / s (data files; for 2 columns their column chunks; PyArrow: the plaintext "
        "table's) and the median seconds. References: Spark `toArrow` (warm) and Spark in a fresh process."
    ))
    add = section.rows.append
    add(Row("read", "spark_arrow", "Spark `spark.table(t).toArrow()`, warm session", "rows/s",
            rps(warm["spark_arrow"]), note=gbps_note(enc_bytes, warm["spark_arrow"]), short="Spark toArrow"))
    add(Row("read", "spark_pandas", "Spark `.toPandas()` (Arrow), warm session", "rows/s", rps(warm["spark_pandas"]),
            refs=("spark_arrow",), note=gbps_note(enc_bytes, warm["spark_pandas"])))
    add(Row("read", "spark_cols", "Spark `.select(id, score).toArrow()`, warm session", "rows/s",
            rps(warm["spark_cols"]), refs=("spark_arrow",), note=gbps_note(enc_cols_bytes, warm["spark_cols"]),
            short="Spark 2 columns"))
    add(Row("read", "arrow_plain", "PyArrow `pq.read_table(files)`, plaintext table (floor)", "rows/s",
            rps(warm["arrow_plain"]), refs=("spark_arrow",), note=gbps_note(plain_bytes, warm["arrow_plain"]),
            short="PyArrow plaintext"))
    add(Row("read", "arrow_plain_cols", "PyArrow `pq.read_table(files, columns=[id, score])`, plaintext table",
            "rows/s", rps(warm["arrow_plain_cols"]), refs=("spark_cols",),
            note=gbps_note(plain_cols_bytes, warm["arrow_plain_cols"]), short="PyArrow plaintext 2 columns"))
    add(Row("read", "rt_all", "`read_table(metadata_json, kms)`, all columns", "rows/s", rps(warm["rt_all"]),
            refs=("spark_arrow", "arrow_plain"), note=gbps_note(enc_bytes, warm["rt_all"]), headline=True))
    add(Row("read", "rt_cols", "`read_table(..., columns=[id, score])`", "rows/s", rps(warm["rt_cols"]),
            refs=("spark_cols", "arrow_plain_cols"), note=gbps_note(enc_cols_bytes, warm["rt_cols"]), headline=True))
    add(Row("read", "scan", "`scan(metadata_json, kms)`, batch by batch, all columns", "rows/s", rps(warm["scan"]),
            refs=("spark_arrow", "arrow_plain"), note=gbps_note(enc_bytes, warm["scan"])))
    if "spark" in fresh:
        spark_setup = statistics.median(r["setup"] for r in fresh["spark"])
        add(Row("read", "spark_fresh", "fresh process: Spark session + `toArrow()`", "rows/s",
                rps([r["seconds"] for r in fresh["spark"]]), refs=("spark_arrow",),
                note=gbps_note(enc_bytes, [r["seconds"] for r in fresh["spark"]],
                               f"{spark_setup:.1f} s of it to a session with the KMS registered"),
                short="Spark fresh process"))
    else:
        add(not_measured("read", "spark_fresh", "fresh process: Spark session + `toArrow()`", "rows/s",
                         QUICK_SKIP_SPARK, refs=("spark_arrow",), short="Spark fresh process"))
    for key, label in (("rt_fresh", "`read_table`"), ("scan_fresh", "`scan`, batch by batch")):
        runs = fresh[key]
        setup = statistics.median(r["setup"] for r in runs)
        add(Row("read", key, f"fresh process: {label}", "rows/s", rps([r["seconds"] for r in runs]),
                refs=("spark_fresh", "spark_arrow"),
                note=gbps_note(enc_bytes, [r["seconds"] for r in runs], f"{setup:.2f} s of it to imports done"),
                headline=key == "rt_fresh"))
    add(Row("read", "rss_rt", "peak RSS, fresh process, `read_table`", "MiB", [r["rss_mib"] for r in fresh["rt_fresh"]],
            short="`read_table`"))
    add(Row("read", "rss_scan", "peak RSS, fresh process, `scan` (batches dropped)", "MiB",
            [r["rss_mib"] for r in fresh["scan_fresh"]], refs=("rss_rt",),
            note=f"{WORKERS} workers: up to {min(2 * WORKERS, FILES)} of the {FILES} decoded files held"))
    one = [r["seconds"] for r in fresh["scan_fresh_1"]]
    add(Row("read", "rss_scan_1", "peak RSS, fresh process, `scan(..., max_workers=1)` (batches dropped)", "MiB",
            [r["rss_mib"] for r in fresh["scan_fresh_1"]], refs=("rss_rt",),
            note=f"up to 2 decoded files held; {rows / statistics.median(one):,.0f} rows/s, {statistics.median(one):.2f} s"))
    section.goals = [Goal("`read_table` all columns vs PyArrow on the plaintext twin", "rt_all", 0.90, ref="arrow_plain",
                          why="Decryption and authentication of every page (`decrypt_parquet`, about 0.6x raw "
                              "AES-GCM) come on top of PyArrow's decoding, which is the whole of the reference.")]
    return section


#: Why quick mode has no fresh Spark process: the slowest row of the quick run.
QUICK_SKIP_SPARK = ("quick mode leaves it out: a fresh JVM, Spark session and Derby metastore take 20 to 70 s per "
                    "run on 2 vCPUs, and the row needs an untimed setup run first; `make bench` measures it")


def _fresh_runs(ctx: Context, table: str, metadata: str, rows: int) -> dict[str, list[dict]]:
    """Fresh-process runs, contenders taking turns, after one untimed run of each (quick mode: no
    Spark process, see :data:`QUICK_SKIP_SPARK`)."""
    keys = {k: v.hex() for k, v in ctx.master_keys.items()}
    spark_request = {
        "catalog": CATALOG, "warehouse": str(ctx.warehouse), "metastore": str(ctx.data_dir / "read-metastore"),
        "kms_name": KMS_NAME, "master_keys": keys, "table": table, "metadata": metadata,
    }
    contenders = {
        "spark": (SPARK_CODE, spark_request),
        "rt_fresh": (READER_CODE, {"mode": "read_table", "metadata": metadata, "master_keys": keys}),
        "scan_fresh": (READER_CODE, {"mode": "scan", "metadata": metadata, "master_keys": keys}),
        "scan_fresh_1": (READER_CODE, {"mode": "scan", "metadata": metadata, "master_keys": keys, "max_workers": 1}),
    }
    if ctx.quick:
        del contenders["spark"]
        ctx.log(f"read: no fresh Spark process, {QUICK_SKIP_SPARK}")
    ctx.log("read: fresh processes" + ("" if ctx.quick else " (setup: the table registered in a second metastore)"))
    out: dict[str, list[dict]] = {name: [] for name in contenders}
    for repeat in range(-1, ctx.sizes.fresh_repeats):  # -1: the untimed warm-up (and metastore setup)
        for name, (code, request) in contenders.items():
            if repeat < 0 and name == "spark":
                request = {**request, "register": True}
            answer = _fresh(code, request, name)
            if answer["rows"] != rows:
                raise RuntimeError(f"{name}: {answer['rows']} rows, the table has {rows}")
            ctx.log(f"read: fresh {name}: {answer['seconds']:.1f} s")
            if repeat >= 0:
                out[name].append(answer)
    return out
