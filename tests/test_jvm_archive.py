"""The tests' class-data sharing archive (tests/jvm_archive.py, ``make jvm-archive``): a Spark driver
started as the tests start theirs maps its classes from it, and a JVM it does not match ignores it
without a word (tests read what JVMs print). Without the archive (pytest run by hand, no ``make``)
they skip, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from tests.jvm_archive import PROJECT_ARCHIVE, use_options
from tests.testkit import DRIVER_JVM_OPTIONS

pytestmark = [pytest.mark.jvm,
              pytest.mark.skipif(not PROJECT_ARCHIVE.is_file(), reason=f"no {PROJECT_ARCHIVE}: run `make jvm-archive`")]


def test_the_drivers_options_name_the_archive():
    assert use_options(PROJECT_ARCHIVE) in DRIVER_JVM_OPTIONS
    assert os.environ["SPARK_SUBMIT_OPTS"] == DRIVER_JVM_OPTIONS  # the session's own driver (tests/conftest.py)


def test_a_spark_driver_maps_its_classes_from_the_archive():
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{DRIVER_JVM_OPTIONS} -Xlog:class+load=info:stdout")
    done = subprocess.run([str(spark_submit), "--version"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [line for line in done.stdout.splitlines() if "org.apache.spark.deploy.SparkSubmit " in line]
    assert loaded and "source: shared objects file (top)" in loaded[0], loaded or done.stdout[-2000:]


def test_a_jvm_it_does_not_match_ignores_it_quietly():
    java = shutil.which("java")
    assert java, "java is not on PATH"
    done = subprocess.run([java, *DRIVER_JVM_OPTIONS.split(), "-version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "cds" not in done.stderr.lower() and "archive" not in done.stderr.lower(), done
