"""Fixtures and Hypothesis profiles of the fuzzing harness (tests/fuzz, issue 15 item 5).

Two profiles, chosen by the environment (never loaded globally: other property tests keep theirs):

* ``fuzz-short`` (default, part of ``make test``): derandomized, no example database, a few
  examples per property: the same cases on every run, the directory in well under a minute once
  the table exists.
* ``fuzz`` (``PYICEBERG_CRYPTO_FUZZ=1``, ``make fuzz``): random, a thousand examples per property
  (``PYICEBERG_CRYPTO_FUZZ_EXAMPLES``; the byte property runs four times as many, the schema
  property half), failures remembered in ``.cache/hypothesis`` so a re-run starts from them.
  About 20 minutes on 2 cores.

Bounds per case (:func:`tests.fuzz.harness.bounded`): 10 s wall time and 256 MiB peak traced
allocation (``PYICEBERG_CRYPTO_FUZZ_SECONDS`` / ``PYICEBERG_CRYPTO_FUZZ_MIB``).

One table is written per session by the real Spark + Iceberg 1.12 session (merge-on-read, a
DELETE that writes deletion vectors, three snapshots) and copied once into a scratch directory
(:class:`tests.fuzz.harness.FuzzTable`); no test modifies the table Spark wrote.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from pyiceberg_crypto.verify import verify_metadata
from tests.fuzz.harness import FuzzTable
from tests.verify import kms_factory

REPO = Path(__file__).resolve().parents[2]
LONG_RUN = os.environ.get("PYICEBERG_CRYPTO_FUZZ", "") not in ("", "0")

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
settings.register_profile("fuzz-short", max_examples=20, derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz", max_examples=int(os.environ.get("PYICEBERG_CRYPTO_FUZZ_EXAMPLES", "1000")),
                          derandomize=False,
                          database=DirectoryBasedExampleDatabase(str(REPO / ".cache" / "hypothesis")),
                          **_COMMON)
PROFILE = settings.get_profile("fuzz" if LONG_RUN else "fuzz-short")


def fuzz_settings(weight: float = 1.0) -> settings:
    """The selected profile, with ``weight`` times its number of examples (cheap properties get more)."""
    return settings(PROFILE, max_examples=max(1, int(PROFILE.max_examples * weight)))


MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read",
       "write.merge.mode": "merge-on-read"}


@pytest.fixture(scope="session")
def fuzz_source(spark, kms_registration, master_keys) -> str:
    """The Spark-written table's metadata.json: partitioned, merge-on-read, three snapshots
    (two appends, a DELETE whose deletion vectors share one Puffin file)."""
    from tests.verify.conftest import create_table, metadata_location

    table = create_table(spark, "fuzz", partitioned_by="p", properties=MOR)
    spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, cast(id AS string), cast(id % 2 AS int) "
              "FROM range(0, 20)")
    spark.sql(f"INSERT INTO {table} VALUES (100, 'x', 0), (101, 'y', 1)")
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")
    return metadata_location(spark, table)


@pytest.fixture(scope="session")
def fuzz_table(fuzz_source, master_keys, tmp_path_factory) -> FuzzTable:
    """The scratch copy (re-encrypted, re-chained), checked to verify OK in every snapshot."""
    kms_factory.MASTER_KEYS.clear()
    kms_factory.MASTER_KEYS.update(master_keys)
    table = FuzzTable.build(fuzz_source, master_keys, tmp_path_factory.mktemp("fuzz"))
    report = verify_metadata(table.metadata_location, table.kms(), all_snapshots=True)
    assert report.ok, [(f.path, f.status, f.detail) for f in report.not_ok()] + report.failed_checks()
    return table


@pytest.fixture(scope="package", autouse=True)
def tracing_for_the_fuzz_tests_only():
    """The harness's memory bound keeps tracemalloc on across the fuzz tests; off for the rest of
    the session (it slows every allocation), stopped once here rather than once per case.

    Before it starts: Hypothesis's Unicode tables, built (and cached under ``.hypothesis/``, absent
    in a fresh clone) on the first ``st.text()`` draw, built here. Under tracemalloc that first draw
    took 61 of test_manifest_field_mutations's 66 s; untraced it takes ~2 s."""
    find(st.text(min_size=1), lambda _: True, settings=settings(database=None, max_examples=1))
    yield
    if tracemalloc.is_tracing():
        tracemalloc.stop()
