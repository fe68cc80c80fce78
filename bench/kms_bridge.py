"""Section 3, KMS over Py4J: the cost of a Python KMS as Iceberg's JVM sees it.

* Latency / throughput of ``unwrapKey`` measured inside the driver JVM
  (``io.pyicebergcrypto.testkit.KmsBridgeBench``) from 1 and 8 plain Java threads, through the
  registered ``PythonKmsClient`` (Py4J callback into our ``InMemoryKms``) and, as the reference,
  through the all-Java ``JavaMemoryKms`` (the same AES-GCM key wrap without leaving the JVM).
* The same under KMS latency: a Python KMS that answers after 5 ms (:class:`LatencyKms`, as a
  real KMS a network hop away), where what counts is whether 8 JVM threads overlap their waits;
  and both KMSs served by ``pyiceberg-crypto kms serve`` (a process of its own) instead of the
  driver's Python.
* KMS calls per commit (one INSERT writing N data files) and per table load (``REFRESH TABLE``
  then a full scan), counted by the registration's stats.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

from bench.context import KMS_NAME, MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section
from bench.workloads import FILES_COLUMNS, FILES_PROPERTIES, create_table, insert_files

TITLE = "3. KMS over Py4J: JVM -> Python round trips, KMS calls per commit and per table load"
THREADS = (1, 8)
#: The latency of the slow KMS: what a KMS a network hop away answers in (1-20 ms measured).
LATENCY_SECONDS = 0.005
LATENCY_KMS_NAME = "bench-latency"
ROOT = Path(__file__).resolve().parents[1]


class LatencyKms:
    """A KMS that answers after ``seconds`` (``time.sleep``: the GIL is free meanwhile, as it is
    while a real KMS client waits for its HTTP answer), then delegates to ``kms``."""

    def __init__(self, kms, seconds: float):
        self.kms, self.seconds = kms, seconds

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        time.sleep(self.seconds)
        return self.kms.wrap_key(key, wrapping_key_id)

    def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes:
        time.sleep(self.seconds)
        return self.kms.unwrap_key(wrapped_key, wrapping_key_id)

    def supports_key_generation(self) -> bool:
        return False

    def initialize(self, properties) -> None:
        pass


def bench_kms(properties: Mapping[str, str]):
    """``kms serve --kms bench.kms_bridge:bench_kms``: the keystore ``keystore.path``, answering
    after ``latency.seconds`` (0: at once)."""
    from pyiceberg_crypto.kms.keystore import KeystoreKms

    kms = KeystoreKms(Path(properties["keystore.path"]))
    seconds = float(properties.get("latency.seconds", "0"))
    return LatencyKms(kms, seconds) if seconds > 0 else kms


@contextmanager
def kms_service(ctx: Context, name: str, latency: float, extra_args: tuple[str, ...] = ()):
    """A ``kms serve`` process serving a keystore (with ``latency``; ``extra_args`` to the command,
    e.g. ``--aws-kms-api``); yields its catalog properties. Its directory, keystore (``keys.json``)
    and log (``kms-serve.log``) are ``ctx.data_dir / f"kms-serve-{name}"``."""
    from pyiceberg_crypto import config
    from pyiceberg_crypto.kms.keystore import Keystore

    directory = ctx.data_dir / f"kms-serve-{name}"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    keystore = Keystore(directory / "keys.json")
    if not keystore.path.exists():
        keystore.create()
        keystore.add_key(MASTER_KEY_ID)
    status_file = directory / "status.json"
    status_file.unlink(missing_ok=True)
    args = [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "bench.kms_bridge:bench_kms",
            f"--kms-property=keystore.path={keystore.path}", f"--kms-property=latency.seconds={latency}",
            "--listen", "127.0.0.1:0", "--token-file", str(directory / "kms.token"),
            "--status-file", str(status_file), *extra_args]
    with open(directory / "kms-serve.log", "ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=directory,
                                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        deadline = time.monotonic() + 60
        status: dict = {}
        while not status.get("running"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kms serve did not start: see {directory / 'kms-serve.log'}")
            time.sleep(0.1)
            try:
                status = json.loads(status_file.read_text())
            except (OSError, ValueError):
                status = {}
        yield config.kms_service_properties(status["listen"], directory / "kms.token")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _latencies(ctx: Context) -> list[Row]:
    from pyiceberg_crypto.bridge import register_kms
    from pyiceberg_crypto.kms import InMemoryKms

    jvm = ctx.spark.sparkContext._jvm
    bench = jvm.io.pyicebergcrypto.testkit.KmsBridgeBench
    sizes = ctx.sizes
    master_key = ctx.master_keys[MASTER_KEY_ID]
    calls, warmup = sizes.kms_calls_per_thread, max(100, sizes.kms_calls_per_thread // 10)
    slow_calls = sizes.kms_latency_calls

    def java_map(properties: Mapping[str, str]):
        out = jvm.java.util.HashMap()
        for key, value in properties.items():
            out.put(key, str(value))
        return out

    slow_registration = register_kms(ctx.spark, LatencyKms(InMemoryKms(ctx.master_keys), LATENCY_SECONDS),
                                     name=LATENCY_KMS_NAME)
    # kind -> (how to measure with N threads, calls per configuration, warm-up calls per thread)
    audited_dir = ctx.data_dir / "kms-serve-audited"
    audited_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (audited_dir / "policy.json").write_text(json.dumps(
        {"version": 1, "principals": {"py4j:default": {"grants": [{"keys": [MASTER_KEY_ID], "operations": ["*"]}]}}}))
    for old in audited_dir.glob("audit.jsonl*"):
        old.unlink()
    audited_args = ("--policy", str(audited_dir / "policy.json"), "--audit-log", str(audited_dir / "audit.jsonl"),
                    "--audit-key-file", str(audited_dir / "audit.key"))
    with kms_service(ctx, "memory", 0.0) as fast_service, kms_service(ctx, "latency", LATENCY_SECONDS) as slow_service, \
            kms_service(ctx, "audited", 0.0, audited_args) as audited_service:
        kinds = {
            "py": (lambda t, n, w: bench.python(KMS_NAME, MASTER_KEY_ID, t, n, w), calls, warmup),
            "java": (lambda t, n, w: bench.java(master_key, MASTER_KEY_ID, t, n, w), calls, warmup),
            "py5": (lambda t, n, w: bench.python(LATENCY_KMS_NAME, MASTER_KEY_ID, t, n, w), slow_calls, 5),
            "svc": (lambda t, n, w: bench.client(java_map(fast_service), MASTER_KEY_ID, t, n, w), calls, warmup),
            "svc5": (lambda t, n, w: bench.client(java_map(slow_service), MASTER_KEY_ID, t, n, w), slow_calls, 5),
            "svca": (lambda t, n, w: bench.client(java_map(audited_service), MASTER_KEY_ID, t, n, w), calls, warmup),
        }
        # Every configuration takes its turn in each repeat (1 and 8 threads, each KMS), so that a
        # goal's pair ratio (8 threads over 1) compares repetitions measured side by side.
        results: dict[tuple[str, int], list[list[float]]] = {(kind, t): [] for t in THREADS for kind in kinds}
        try:
            for _ in range(sizes.goal_repeats):
                for threads in THREADS:
                    for kind, (measure, total, warm) in kinds.items():
                        result = list(measure(threads, max(1, total // threads), warm))
                        if result[3]:
                            raise RuntimeError(f"KMS calls failed during the benchmark ({kind}, {threads} threads): "
                                               f"{result[3]:.0f}")
                        results[kind, threads].append(result)
        finally:
            slow_registration.close()
    names = {
        "py": "Python KMS over Py4J",
        "java": "in-JVM `JavaMemoryKms`",
        "py5": "Python KMS over Py4J with 5 ms KMS latency",
        "svc": "`kms serve` (keystore KMS, its own process)",
        "svc5": "`kms serve` with 5 ms KMS latency",
        "svca": "`kms serve` with a policy and the audit trail (keystore KMS)",
    }
    rows: list[Row] = []
    for threads in THREADS:
        label = f"{threads} JVM thread{'s' if threads > 1 else ''}"
        for index, (metric, unit) in enumerate((("p50 latency", "us"), ("p99 latency", "us"), ("throughput", "calls/s"))):
            key = f"{metric}_{threads}"
            for kind, name in names.items():
                samples = [r[index] for r in results[kind, threads]]
                if kind == "java":
                    rows.append(Row("KMS", f"java_{key}", f"{metric}, {name}, {label}", unit, samples,
                                    short="in-JVM KMS"))
                elif kind == "py":
                    rows.append(Row("KMS", f"py_{key}", f"{metric}, {name}, {label}", unit, samples,
                                    refs=(f"java_{key}",), headline=metric != "p99 latency"))
                elif kind == "svca":  # the audit's cost: compared with the same service without it
                    rows.append(Row("KMS", f"{kind}_{key}", f"{metric}, {name}, {label}", unit, samples,
                                    refs=(f"svc_{key}",), short="`kms serve` without",
                                    headline=metric == "throughput" and threads > 1))
                else:  # the latency and service rows: compared with their own 1-thread row
                    scaling = metric == "throughput" and threads > 1
                    rows.append(Row("KMS", f"{kind}_{key}", f"{metric}, {name}, {label}", unit, samples,
                                    refs=(f"{kind}_{metric}_1",) if scaling else (),
                                    short=label if threads == 1 else "", headline=scaling))
    for row in rows:
        if row.headline and row.key.startswith("py5_throughput"):
            ratio = row.median / next(r for r in rows if r.key == "py5_throughput_1").median
            print(f"{row.name}: {row.median:,.0f} calls/s = **{ratio:.2f}x** 1 JVM thread", flush=True)
    return rows


def _call_counts(ctx: Context) -> list[Row]:
    stats = ctx.registration.stats
    spark = ctx.spark
    rows: list[Row] = []
    for files in ctx.sizes.kms_table_files:
        table = create_table(ctx, f"files_{files}", FILES_COLUMNS, properties=FILES_PROPERTIES)
        before = (stats.wrap, stats.unwrap, stats.generate)
        insert_files(ctx, table, files)
        commit = (stats.wrap - before[0], stats.unwrap - before[1], stats.generate - before[2])
        written = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
        spark.sql(f"REFRESH TABLE {table}")
        before = (stats.wrap, stats.unwrap, stats.generate)
        spark.sql(f"SELECT sum(id), count(v) FROM {table}").collect()
        load = (stats.wrap - before[0], stats.unwrap - before[1], stats.generate - before[2])
        for kind, counts in (("commit", commit), ("load", load)):
            first = f"{kind}_{ctx.sizes.kms_table_files[0]}"
            rows.append(Row(
                "KMS", f"{kind}_{files}",
                f"KMS calls per {'commit (one INSERT)' if kind == 'commit' else 'table load + full scan'}, "
                f"{written} data file{'s' if written != 1 else ''}", "calls", [float(sum(counts))],
                refs=() if files == ctx.sizes.kms_table_files[0] else (first,),
                short=f"{files} file{'s' if files > 1 else ''}",
                headline=files == ctx.sizes.kms_table_files[-1],
                note=f"wrap {counts[0]}, unwrap {counts[1]}, generate {counts[2]}"))
        ctx.file_tables[files] = table  # section 5 verifies the same tables
    # commits first, then loads: easier to read
    return sorted(rows, key=lambda r: (not r.key.startswith("commit"),))


def run(ctx: Context) -> Section:
    ctx.log("KMS: latency from JVM threads")
    rows = _latencies(ctx)
    ctx.log("KMS: calls per commit and per load")
    rows += _call_counts(ctx)
    return Section(
        TITLE,
        "Latency and calls/s of `unwrapKey` measured in the driver JVM from plain Java threads "
        f"({ctx.sizes.kms_calls_per_thread:,} timed calls per configuration, split over the threads, after warm-up; "
        f"{ctx.sizes.kms_latency_calls:,} with a KMS that answers after 5 ms (`time.sleep`, as a KMS a network hop "
        "away); the 12 configurations take turns in each of "
        f"{ctx.sizes.goal_repeats} repeats); reference: the all-Java `JavaMemoryKms` (same AES-GCM key wrap, no "
        "Py4J), and for the 5 ms and `kms serve` rows their own 1-thread row. `kms serve`: the service in a process "
        "of its own on loopback, a keystore KMS, the JVM client configured by catalog properties; with a policy and "
        "the audit trail: the same with `--policy` (one grant) and `--audit-log`, against the service without "
        "them. Call counts: the "
        "registration's stats around one INSERT writing N files into a new encrypted table, and around "
        "`REFRESH TABLE` + a full scan; reference: the 1-file table.",
        rows,
        GOALS,
    )


#: Issue 24, item 3; issue 32, item 2 (KMS latency, kms serve).
GOALS = [
    Goal("Python KMS with 5 ms latency, calls/s, 8 JVM threads vs 1", "py5_throughput_8", 6.0,
         ref="py5_throughput_1",
         why="Eight callers must overlap their waits: each JVM thread has its own Py4J connection and Python "
             "thread, and the KMS's wait releases the GIL."),
    Goal("Python KMS (in memory), calls/s, 8 JVM threads vs 1", "py_throughput_8", 0.9, ref="py_throughput_1",
         why="Each JVM connection is served by its own Python thread: on 2 vCPUs eight JVM and eight Python "
             "threads take turns for the cores and the GIL, and every call is a cross-thread wake-up."),
    Goal("`kms serve` with 5 ms latency, calls/s, 8 JVM threads vs 1", "svc5_throughput_8", 6.0,
         ref="svc5_throughput_1", why="As for the registered KMS, across processes."),
    Goal("`kms serve` (keystore KMS), calls/s, 8 JVM threads vs 1", "svc_throughput_8", 0.9,
         ref="svc_throughput_1", why="As for the registered KMS, across processes."),
    Goal("`kms serve` with a policy and the audit trail vs without, calls/s, 8 JVM threads", "svca_throughput_8",
         0.9, ref="svc_throughput_8",
         why="Issue 50: the audit costs at most 10 % of calls/s. Each call checks its grant and appends one "
             "chained JSON line (SHA-256; written by group commit since section 15 was added, no fsync per line)."),
    Goal("p50 latency of the Python KMS, 8 JVM threads", "py_p50 latency_8", 150.0, at_most=True,
         why="The same hand-offs (see above)."),
]
