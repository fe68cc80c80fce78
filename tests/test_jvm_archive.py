"""The tests' class-data sharing archive (tests/jvm_archive.py, ``make jvm-archive``): a Spark driver
started as the tests start theirs maps its classes from it, and a JVM it does not match ignores it
without a word (tests read what JVMs print).

Marked ``apps``: ``make test`` makes the archive in the background while its lanes start, and the
apps lane starts last; there (``PYICEBERG_CRYPTO_TEST_JVM_ARCHIVE=1``) the tests wait for it and
fail, with the archive's log, if it never comes. Run by hand without it, they skip, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from tests.testkit import PROJECT_ARCHIVE, ROOT, SPARK_JVM_OPTIONS, WaitTimeoutError, eventually, use_options

pytestmark = [pytest.mark.apps]

#: ``make test`` sets it: the archive is being made (its log: .cache/jvm-archive.log).
MADE_BY_MAKE = "PYICEBERG_CRYPTO_TEST_JVM_ARCHIVE"


@pytest.fixture(scope="module")
def archive() -> Path:
    if not os.environ.get(MADE_BY_MAKE):
        if not PROJECT_ARCHIVE.is_file():
            pytest.skip(f"no {PROJECT_ARCHIVE}: run `make jvm-archive`")
        return PROJECT_ARCHIVE
    try:
        eventually(PROJECT_ARCHIVE.is_file, timeout=600, interval=2, message="the JVM archive make test makes")
    except WaitTimeoutError:
        log = ROOT / ".cache" / "jvm-archive.log"
        pytest.fail(f"no {PROJECT_ARCHIVE} after 10 minutes; {log}:\n"
                    f"{log.read_text(errors='replace')[-3000:] if log.is_file() else '(none)'}")
    return PROJECT_ARCHIVE


def test_the_drivers_options_name_the_archive():
    assert use_options(PROJECT_ARCHIVE) in SPARK_JVM_OPTIONS


def test_a_spark_driver_maps_its_classes_from_the_archive(archive):
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{SPARK_JVM_OPTIONS} -Xlog:class+load=info:stdout")
    done = subprocess.run([str(spark_submit), "--version"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [line for line in done.stdout.splitlines() if "org.apache.spark.deploy.SparkSubmit " in line]
    assert loaded and "source: shared objects file (top)" in loaded[0], loaded or done.stdout[-2000:]


def test_a_jvm_it_does_not_match_ignores_it_quietly(archive):
    java = shutil.which("java")
    assert java, "java is not on PATH"
    done = subprocess.run([java, *SPARK_JVM_OPTIONS.split(), "-version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "cds" not in done.stderr.lower() and "archive" not in done.stderr.lower(), done


def test_a_jvm_started_before_the_archive_is_made_runs_without_it_quietly(tmp_path):
    java = shutil.which("java")
    assert java, "java is not on PATH"
    options = use_options(tmp_path / "not-yet.jsa").split()
    done = subprocess.run([java, "-XX:+UseSerialGC", *options, "-version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "cds" not in done.stderr.lower() and "archive" not in done.stderr.lower(), done
