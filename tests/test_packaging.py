"""Only runtime code ships at run time: the production jar has no test kit and Java 11 bytecode;
importing any public module of the package loads no test library."""

from __future__ import annotations

import pkgutil
import struct
import subprocess
import sys
import zipfile

import pytest

import pyiceberg_crypto
from pyiceberg_crypto import jars

EXTRA_ONLY_LIBRARIES = ("pytest", "_pytest", "moto", "hypothesis", "testcontainers", "boto3",  # test libraries, and boto3 (the [aws] extra) imported lazily
                        "google.cloud.kms_v1", "azure.keyvault.keys", "azure.identity", "kmip")  # [gcp], [azure], [kmip]: lazily too
#: The one module that is a pytest plugin by nature (behind the [testing] / [test] extras).
PYTEST_ONLY = {"pyiceberg_crypto.testing.pytest_plugin"}


@pytest.mark.jars
def test_production_jar_holds_no_test_kit_and_targets_java_11():
    with zipfile.ZipFile(jars.bridge_jar()) as archive:
        names = archive.namelist()
        classes = [n for n in names if n.endswith(".class")]
        assert classes and not [n for n in names if "testkit" in n]
        assert {n.rsplit("/", 1)[0] for n in classes} == {
            "io/pyicebergcrypto/bridge", "io/pyicebergcrypto/rest",
            "org/apache/iceberg/rest",  # the REST operations subclass a package-private Iceberg class
        }
        ours_in_iceberg = {n.rsplit("/", 1)[1].removesuffix(".class").split("$")[0] for n in classes
                           if n.startswith("org/")}
        assert ours_in_iceberg == {"EncryptingRESTTableOperations", "EncryptingRESTSessionCatalog"}
        for name in classes:
            magic, _minor, major = struct.unpack(">IHH", archive.read(name)[:8])
            assert (magic, major) == (0xCAFEBABE, 55), f"{name}: class file major {major}, want 55 (Java 11)"


@pytest.mark.jars
def test_the_loopback_test_servers_ship_only_in_the_test_kit_jar():
    from pyiceberg_crypto.testing.jars import testing_jar

    with zipfile.ZipFile(testing_jar()) as archive:
        classes = [n for n in archive.namelist() if n.endswith(".class")]
    assert {n.rsplit("/", 1)[0] for n in classes} == {"io/pyicebergcrypto/testing"}
    assert {n.rsplit("/", 1)[1].split("$")[0].removesuffix(".class") for n in classes} >= {
        "LoopbackRestCatalog", "LoopbackMetastore", "LocationOnlyFileSystem"}
    with zipfile.ZipFile(jars.bridge_jar()) as archive:
        assert not [n for n in archive.namelist() if "Loopback" in n or "/testing/" in n]


def test_runtime_modules_import_no_test_library_and_no_extra():
    modules = sorted(
        info.name for info in pkgutil.walk_packages(pyiceberg_crypto.__path__, "pyiceberg_crypto.")
        if info.name not in PYTEST_ONLY and not info.name.endswith("__main__")
    )
    assert "pyiceberg_crypto.verify.spark" in modules and "pyiceberg_crypto.testing.s3" in modules
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in {EXTRA_ONLY_LIBRARIES!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_core_does_not_import_pyarrow():
    """PyArrow is the [read] extra: only the reader (and the CLI command that runs it) import it."""
    modules = sorted(
        info.name for info in pkgutil.walk_packages(pyiceberg_crypto.__path__, "pyiceberg_crypto.")
        if info.name not in PYTEST_ONLY and not info.name.endswith("__main__")
        and not info.name.startswith("pyiceberg_crypto.read")
    )
    assert "pyiceberg_crypto.cli.head_cmd" in modules and "pyiceberg_crypto.verify.pipeline" in modules
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print('pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _build_bridge_module():
    import importlib.util

    from tests.testkit import ROOT

    spec = importlib.util.spec_from_file_location("build_bridge", ROOT / "jars" / "build_bridge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_building_without_java_or_maven_fails_with_a_clear_message(tmp_path):
    from tests.testkit import ROOT

    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run([sys.executable, str(ROOT / "jars" / "build_bridge.py"), "--into", str(tmp_path / "out")],
                            env={"PATH": str(empty)}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "needs mvn and javac on the PATH" in result.stderr and "JDK >= 11" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_javac_versions_are_read_for_the_jdk_check():
    build_bridge = _build_bridge_module()
    assert build_bridge.javac_major_version("javac 17.0.15") == 17
    assert build_bridge.javac_major_version("javac 1.8.0_402") == 8
    assert build_bridge.javac_major_version("javac 11") == 11
    assert build_bridge.javac_major_version("no compiler here") is None


@pytest.mark.parametrize("leaked", ["io/pyicebergcrypto/testkit/JavaMemoryKms.class",
                                    "io/pyicebergcrypto/testing/LoopbackRestCatalog.class"])
def test_a_prebuilt_jar_with_test_kit_classes_is_refused(tmp_path, monkeypatch, leaked):
    build_bridge = _build_bridge_module()
    leaky = tmp_path / "leaky.jar"
    with zipfile.ZipFile(leaky, "w") as archive:
        archive.writestr("io/pyicebergcrypto/bridge/PythonKmsClient.class", b"\xca\xfe\xba\xbe")
        archive.writestr(leaked, b"\xca\xfe\xba\xbe")
    monkeypatch.setenv(build_bridge.PREBUILT_ENV, str(leaky))
    with pytest.raises(build_bridge.BuildError, match=f"must not ship in the production jar \\({leaked}"):
        build_bridge.install(tmp_path / "out")
    assert not (tmp_path / "out" / "pyiceberg-crypto-bridge.jar").exists()
