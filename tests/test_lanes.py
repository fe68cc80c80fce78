"""The two lanes and the timeouts hold: tests/conftest.py marks what starts a JVM, gives long tests
their long timeout, and tests/path_without_java.py leaves no JDK tool on the unit lane's PATH."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest
from tests.path_without_java import fill_without_java

ROOT = Path(__file__).resolve().parents[1]


def selected(marker: str, *paths: str) -> set[str]:
    """Node ids pytest selects with ``-m marker`` among ``paths`` (collection only, no JVM)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker, *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode in (0, 5), result.stdout[-2000:] + result.stderr[-2000:]  # 5: none selected
    return {line.split("[")[0] for line in result.stdout.splitlines() if "::" in line}


PATHS = ("tests/formats/test_ags1.py", "tests/serve/test_entry_points.py", "tests/integration/test_kms_executors.py")


@pytest.fixture(scope="module")
def jvm_lane() -> set[str]:
    return selected("jvm", *PATHS)


def test_a_test_using_the_jvm_fixture_is_in_the_jvm_lane_and_vectors_are_not(jvm_lane):
    path = PATHS[0]
    assert f"{path}::test_python_writes_java_reads" in jvm_lane  # uses V, which uses jvm
    assert f"{path}::test_java_writes_python_reads" not in jvm_lane  # the committed vectors


def test_markers_of_subprocess_jvms_put_a_module_in_the_jvm_lane(jvm_lane):
    # apps (a marker), and an explicit jvm mark on a module whose fixture runs a Spark application
    for path in PATHS[1:]:
        module = path.removesuffix(".py").replace("/", ".")
        tests = {name for name in dir(importlib.import_module(module)) if name.startswith("test_")}
        assert tests and {f"{path}::{name}" for name in tests} <= jvm_lane


@pytest.mark.slow
def test_a_slow_test_gets_the_long_timeout(request):
    assert request.node.get_closest_marker("timeout").args == (conftest.LONG_TIMEOUT_SECONDS,)
    assert "jvm" not in {mark.name for mark in request.node.iter_markers()}  # slow alone is no JVM


@pytest.mark.jvm  # (marked only: starts none)
def test_a_jvm_test_gets_ten_minutes(request):
    assert request.node.get_closest_marker("timeout").args == (conftest.JVM_TIMEOUT_SECONDS,)


def test_every_other_test_gets_the_default_timeout(request):
    assert request.node.get_closest_marker("timeout") is None
    assert float(request.config.getini("timeout")) == 300
    assert request.config.getini("timeout_method") == "signal"


def test_the_unit_lane_path_has_no_jdk_tool(tmp_path):
    fake_jdk, tools = tmp_path / "jvm" / "bin", tmp_path / "usr-bin"
    fake_jdk.mkdir(parents=True)
    tools.mkdir()
    for name in ("java", "keytool"):
        (fake_jdk / name).write_text("#!/bin/sh\n")
        (fake_jdk / name).chmod(0o755)
    (tools / "java").symlink_to(fake_jdk / "java")  # like /usr/bin/java -> /usr/lib/jvm/.../java
    (tools / "git-ish").write_text("#!/bin/sh\n")
    (tools / "git-ish").chmod(0o755)
    left_out = fill_without_java(tmp_path / "bin", os.pathsep.join([str(tools), str(fake_jdk)]))
    assert left_out == ["java", "keytool"]
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["git-ish"]
    assert shutil.which("java", path=str(tmp_path / "bin")) is None


def test_local_cluster_applications_run_in_the_cluster_lane():
    """A test module that starts ``local-cluster`` executors (JVMs of their own) is marked
    ``executors`` (or belongs to a lane of its own: apps, newcomer), so that ``make test`` runs it
    beside the namespace clusters rather than in the main lane."""
    modules = [path for path in (ROOT / "tests").rglob("test_*.py")
               if "local-cluster[" in path.read_text() and path != Path(__file__)
               and "cluster" not in path.relative_to(ROOT / "tests").parts[:1]]
    assert modules  # the integration tests have some
    own_lane = selected("executors or apps or newcomer", *(str(p.relative_to(ROOT)) for p in modules))
    for path in modules:
        name = str(path.relative_to(ROOT))
        assert any(node.startswith(name + "::") for node in own_lane), f"{name} starts local-cluster executors: mark it executors"


def test_the_dist_fixture_waits_for_make_tests_background_build_and_says_when_it_failed(tmp_path):
    """``make test`` builds the wheels in the background (PYICEBERG_CRYPTO_TEST_DIST_STATUS): the
    ``dist`` fixture takes them only once the build's status file says it ended well."""
    from tests.testkit import DIST_LOG, awaited_dist

    status = tmp_path / ".make-dist-status"
    with pytest.raises(AssertionError, match=f"waiting for make dist into {tmp_path} to end \\({DIST_LOG}\\)"):
        awaited_dist(tmp_path, status, timeout=0)
    status.write_text("2\n")
    with pytest.raises(AssertionError, match=f"failed \\(exit 2\\); its output is in {DIST_LOG}"):
        awaited_dist(tmp_path, status, timeout=0)
    for name in ("pyiceberg_crypto-1.0-py3-none-any.whl", "pyiceberg_crypto_testing-1.0-py3-none-any.whl",
                 "pyiceberg_crypto-1.0.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    status.write_text("0\n")
    assert awaited_dist(tmp_path, status, timeout=0)["wheel"].name == "pyiceberg_crypto-1.0-py3-none-any.whl"
