"""Where the verifier and the lake audit check a batch with Spark: one rule, in verify/runners.py
(a few small files on the driver, the rest in Spark tasks)."""

from __future__ import annotations

from pyiceberg_crypto.audit import lake
from pyiceberg_crypto.verify import runners, spark
from pyiceberg_crypto.verify.checks import FileTask
from pyiceberg_crypto.verify.runners import DEFAULT_DRIVER_MAX_FILES, DRIVER_MAX_BYTES, on_the_driver


def tasks(count: int, size: int | None = 1024) -> list[FileTask]:
    return [FileTask(f"s3://b/t/data/{i}.parquet", "data", "PARQUET", expected_size=size) for i in range(count)]


def test_up_to_the_file_cap_on_the_driver_one_more_in_spark():
    assert on_the_driver(tasks(DEFAULT_DRIVER_MAX_FILES), DEFAULT_DRIVER_MAX_FILES)
    assert not on_the_driver(tasks(DEFAULT_DRIVER_MAX_FILES + 1), DEFAULT_DRIVER_MAX_FILES)
    assert on_the_driver([], 0) and not on_the_driver(tasks(1), 0)  # driver_max_files=0: always Spark


def test_a_few_large_files_go_to_spark():
    assert on_the_driver(tasks(2, DRIVER_MAX_BYTES // 2), 32)
    assert not on_the_driver(tasks(2, DRIVER_MAX_BYTES // 2 + 1), 32)


def test_unknown_sizes_count_as_zero_bytes():
    assert on_the_driver(tasks(3, None), 32)


def test_any_iterable_of_tasks_as_the_audit_passes_them():
    jobs = list(enumerate(tasks(5)))
    assert on_the_driver((task for _, task in jobs), 5) and not on_the_driver((task for _, task in jobs), 4)


def test_verify_and_the_audit_share_the_rule_and_its_default():
    assert spark.on_the_driver is lake.on_the_driver is runners.on_the_driver
    assert spark.DEFAULT_DRIVER_MAX_FILES == lake.DEFAULT_DRIVER_MAX_FILES == DEFAULT_DRIVER_MAX_FILES == 32
